"""The records a corpus reader produces: entries, rejections, and the checks every layout applies to an entry.

Shared by the line-based layouts (``myxtts.data.corpus``) and the per-clip ones (``myxtts.data.layouts``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from myxtts.errors import InputError

# Reason codes of the corpus readers (prepare adds audio / text / duration reasons).
WRONG_FIELD_COUNT = "wrong_field_count"
NON_UTF8 = "non_utf8"
EMPTY_TEXT = "empty_text"
DUPLICATE_ID = "duplicate_id"
MISSING_FILE = "missing_file"

LJSPEECH_SPEAKER = "ljspeech"


class CorpusError(InputError):
    """A corpus that cannot be read at all: its folder, metadata, list or table file is missing or malformed (a
    problem of one line or clip is a ``Rejection`` instead)."""


@dataclass(frozen=True)
class CorpusEntry:
    """One utterance of the corpus, before any audio is read."""

    id: str
    audio_path: Path
    text: str
    speaker: str
    language: str
    line_number: int  # 1-based line in the metadata / list file
    corpus: int = 0  # position of its corpus in data.corpora (0 for a one-corpus config)


@dataclass(frozen=True)
class Rejection:
    """Why one line or clip was not accepted.

    ``file`` is the file the problem is in: the metadata / list file for line problems, the audio
    file for audio problems. ``line`` is always the line of the metadata / list file.
    """

    file: str
    line: int
    reason: str
    message: str


@dataclass
class CorpusReadResult:
    entries: list[CorpusEntry] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    source: Path | None = None  # the metadata / list file that was read


def accept_entry(entry: CorpusEntry, source: Path, seen: dict[str, int], result: CorpusReadResult) -> None:
    """Append the entry, or a rejection for an empty text, a duplicate id or a missing audio file."""
    where = f"{source}:{entry.line_number}"
    if not entry.id:
        result.rejections.append(Rejection(str(source), entry.line_number, WRONG_FIELD_COUNT,
                                           f"{where}: empty id field."))
    elif not entry.text:
        result.rejections.append(Rejection(str(source), entry.line_number, EMPTY_TEXT,
                                           f"{where}: '{entry.id}' has an empty text."))
    elif entry.id in seen:
        result.rejections.append(Rejection(str(source), entry.line_number, DUPLICATE_ID,
                                           f"{where}: id '{entry.id}' already used on line {seen[entry.id]}; "
                                           "the first occurrence is kept."))
    elif not entry.audio_path.is_file():
        seen[entry.id] = entry.line_number
        result.rejections.append(Rejection(str(entry.audio_path), entry.line_number, MISSING_FILE,
                                           f"{where}: audio file {entry.audio_path} for '{entry.id}' does not exist."))
    else:
        seen[entry.id] = entry.line_number
        result.entries.append(entry)


def decoded_lines(path: Path, result: CorpusReadResult):
    """Yield (line_number, text) for each non-blank line; undecodable lines become rejections."""
    raw = path.read_bytes()
    for line_number, raw_line in enumerate(raw.split(b"\n"), start=1):
        raw_line = raw_line.rstrip(b"\r")
        if line_number == 1 and raw_line.startswith(b"\xef\xbb\xbf"):  # UTF-8 byte order mark
            raw_line = raw_line[3:]
        try:
            line = raw_line.decode("utf-8")
        except UnicodeDecodeError as err:
            result.rejections.append(Rejection(str(path), line_number, NON_UTF8,
                                               f"{path}:{line_number}: not valid UTF-8 at byte {err.start} "
                                               f"({raw_line[err.start:err.start + 4]!r}); re-save the file as UTF-8."))
            continue
        if line.strip():
            yield line_number, line

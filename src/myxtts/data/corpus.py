"""Read a corpus description into entries and rejections; never crash, never drop a line silently.

``vctk`` and ``libritts`` (per-clip text files, as published) live in ``myxtts.data.layouts``.
Two line-based layouts here:

- ``ljspeech``: a folder with ``metadata.csv`` (``id|text|normalized``; the normalized column is used
  when present and non-empty) and ``wavs/<id>.wav``. One speaker.
- ``list``: a list file with ``path|text|speaker[|language]`` lines; paths are relative to the list
  file's folder. The entry id is the relative path as written, extension included (so two speakers
  may both have a ``001.wav``, and ``clip.flac`` and ``clip.ogg`` are two clips); the same path
  twice is a ``duplicate_id`` naming both lines.

Every line that cannot become an entry becomes a ``Rejection`` naming the file, the line number, a
reason code and a message. Lines are decoded one at a time from bytes, so one line with bad bytes
costs that line only.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from myxtts.data.entries import (DUPLICATE_ID, EMPTY_TEXT, LJSPEECH_SPEAKER, MISSING_FILE, NON_UTF8,  # noqa: F401
                                 WRONG_FIELD_COUNT, CorpusEntry, CorpusReadResult, Rejection, accept_entry)
from myxtts.data.layouts import read_libritts, read_vctk

logger = logging.getLogger(__name__)

def read_corpus(path: str | Path, corpus_format: str, language: str = "en") -> CorpusReadResult:
    """Read an ``ljspeech`` folder, a ``list`` file, a ``vctk`` or a ``libritts`` tree. Raises ValueError only if
    ``path`` itself is unusable."""
    path = Path(path)
    if corpus_format == "ljspeech":
        return read_ljspeech(path, language=language)
    if corpus_format == "list":
        return read_list(path, language=language)
    if corpus_format in ("vctk", "libritts"):
        return (read_vctk if corpus_format == "vctk" else read_libritts)(path, language=language)
    raise ValueError(f"Unknown corpus format {corpus_format!r} (data.corpus_format): use 'ljspeech', 'list', "
                     "'vctk' or 'libritts'.")


def _split_fields(file: Path, line_number: int, line: str, counts: tuple[int, int], layout: str,
                  result: CorpusReadResult) -> list[str] | None:
    """The '|'-separated fields of a line, or None after recording a wrong_field_count rejection."""
    fields = line.split("|")
    if len(fields) in counts:
        return fields
    result.rejections.append(Rejection(str(file), line_number, WRONG_FIELD_COUNT,
                                       f"{file}:{line_number}: expected '{layout}' ({counts[0]} or {counts[1]} "
                                       f"fields), got {len(fields)}."))
    return None


def read_ljspeech(folder: Path, language: str = "en") -> CorpusReadResult:
    metadata = folder / "metadata.csv"
    if not metadata.is_file():
        raise ValueError(f"LJSpeech corpus {folder}: metadata.csv not found (data.corpus_path must be the folder "
                         "holding metadata.csv and wavs/).")
    result = CorpusReadResult(source=metadata)
    seen: dict[str, int] = {}
    for line_number, line in _decoded_lines(metadata, result):
        fields = _split_fields(metadata, line_number, line, (2, 3), "id|text|normalized", result)
        if fields is None:
            continue
        utterance_id = fields[0].strip()
        # the normalized column (numbers and abbreviations expanded) when present, else the raw text
        text = fields[2] if len(fields) == 3 and fields[2].strip() else fields[1]
        entry = CorpusEntry(utterance_id, folder / "wavs" / f"{utterance_id}.wav", text.strip(),
                            LJSPEECH_SPEAKER, language, line_number)
        accept_entry(entry, metadata, seen, result)
    return result


def read_list(list_file: Path, language: str = "en") -> CorpusReadResult:
    if not list_file.is_file():
        raise ValueError(f"List corpus {list_file} not found (data.corpus_path must be a 'path|text|speaker"
                         "[|language]' file for data.corpus_format: list).")
    result = CorpusReadResult(source=list_file)
    seen: dict[str, int] = {}
    folder = str(list_file.parent.resolve())
    for line_number, line in _decoded_lines(list_file, result):
        fields = _split_fields(list_file, line_number, line, (3, 4), "path|text|speaker[|language]", result)
        if fields is None:
            continue
        relative = fields[0].strip()
        speaker = fields[2].strip()
        entry_language = fields[3].strip() if len(fields) == 4 and fields[3].strip() else language
        if not relative or not speaker:
            result.rejections.append(Rejection(str(list_file), line_number, WRONG_FIELD_COUNT,
                                               f"{list_file}:{line_number}: the path and speaker fields must not "
                                               "be empty."))
            continue
        # the folder is resolved once; normpath per line (Path.resolve per line touches the file system: slow on big corpora)
        audio_path = Path(os.path.normpath(os.path.join(folder, relative)))
        # the path as written, normalised, with its extension: clip.flac and clip.ogg never collide
        utterance_id = os.path.normpath(relative).replace(os.sep, "/")
        entry = CorpusEntry(utterance_id, audio_path, fields[1].strip(), speaker, entry_language, line_number)
        accept_entry(entry, list_file, seen, result)
    return result


def _decoded_lines(path: Path, result: CorpusReadResult):
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

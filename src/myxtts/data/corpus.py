"""Read a corpus description into entries and rejections; never crash, never drop a line silently.

``vctk`` and ``libritts`` (per-clip text files, as published) live in ``myxtts.data.layouts``. A corpus that
cannot be read at all raises ``CorpusError`` (an ``InputError``: the CLI exits 2 naming the path).
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

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

from myxtts.config.sections import CorpusSource, default_corpus_name
from myxtts.data.entries import (DUPLICATE_ID, EMPTY_TEXT, LJSPEECH_SPEAKER, MISSING_FILE, NON_UTF8,  # noqa: F401
                                 WRONG_FIELD_COUNT, CorpusEntry, CorpusError, CorpusReadResult, Rejection,
                                 accept_entry, decoded_lines)
from myxtts.data.layouts import read_commonvoice, read_librispeech, read_libritts, read_vctk

logger = logging.getLogger(__name__)

FORMATS = ("ljspeech", "list", "vctk", "libritts", "librispeech", "commonvoice")


def read_corpus(path: str | Path, corpus_format: str, language: str = "en", **options: Any) -> CorpusReadResult:
    """Read an ``ljspeech`` folder, a ``list`` file, a ``vctk``, ``libritts`` or ``librispeech`` tree or a
    ``commonvoice`` folder (``options``: its vote thresholds). Raises CorpusError only if ``path`` itself is
    unusable."""
    path = Path(path)
    readers = {"ljspeech": read_ljspeech, "list": read_list, "vctk": read_vctk, "libritts": read_libritts,
               "librispeech": read_librispeech, "commonvoice": read_commonvoice}
    if corpus_format not in readers:
        raise CorpusError(f"Unknown corpus format {corpus_format!r} (data.corpus_format): use "
                         f"{', '.join(repr(f) for f in FORMATS)}.")
    return readers[corpus_format](path, language=language, **options)


def corpus_sources(cfg: Any) -> tuple[CorpusSource, ...]:
    """The corpora of ``cfg`` to read, each with its path absolute and its name and language filled in:
    ``data.corpora``, or the one corpus of ``data.corpus_path`` / ``data.corpus_format`` (name "": its ids and
    speakers are not prefixed)."""
    d = cfg.data
    if not d.corpora:
        return (CorpusSource(str(cfg.corpus_path), d.corpus_format, 1.0, "", d.language),)
    return tuple(dataclasses.replace(c, path=str(cfg.resolve(c.path)), language=c.language or d.language,
                                     name=c.name or default_corpus_name(cfg.resolve(c.path)))
                 for c in d.corpora)


def read_config_corpus(cfg: Any) -> CorpusReadResult:
    """Every corpus of ``cfg`` (``corpus_sources``) in one result. With ``data.corpora`` each entry's id
    becomes ``NAME/id`` and its speaker ``NAME:speaker`` (two corpora never share a speaker or an id) and
    ``entry.corpus`` its corpus' position; a one-corpus config is read as it is."""
    sources = corpus_sources(cfg)
    if len(sources) == 1 and not sources[0].name:
        source = sources[0]
        return read_corpus(source.path, source.format, source.language)
    merged = CorpusReadResult(source=Path(cfg.base_dir))
    for index, source in enumerate(sources):
        options = ({"min_up_votes": source.min_up_votes, "max_down_votes": source.max_down_votes}
                   if source.format == "commonvoice" else {})
        try:
            result = read_corpus(source.path, source.format, source.language, **options)
        except CorpusError as err:  # the reader names data.corpus_path: say which item of data.corpora it is
            raise CorpusError(f"data.corpora[{index}] ({source.name}, format {source.format}): {err}") from None
        merged.entries += [dataclasses.replace(entry, id=f"{source.name}/{entry.id}",
                                               speaker=f"{source.name}:{entry.speaker}", corpus=index)
                           for entry in result.entries]
        merged.rejections += result.rejections
    return merged


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
        raise CorpusError(f"LJSpeech corpus {folder}: metadata.csv not found (data.corpus_path must be the folder "
                         "holding metadata.csv and wavs/).")
    result = CorpusReadResult(source=metadata)
    seen: dict[str, int] = {}
    for line_number, line in decoded_lines(metadata, result):
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
        raise CorpusError(f"List corpus {list_file} not found (data.corpus_path must be a 'path|text|speaker"
                         "[|language]' file for data.corpus_format: list).")
    result = CorpusReadResult(source=list_file)
    seen: dict[str, int] = {}
    folder = str(list_file.parent.resolve())
    for line_number, line in decoded_lines(list_file, result):
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


def pick_reference(entry: CorpusEntry, pool: list[CorpusEntry]) -> CorpusEntry:
    """Another clip of the same speaker (the next in corpus order), else the clip itself."""
    same = [e for e in pool if e.speaker == entry.speaker and e.id != entry.id]
    if not same:
        return entry
    later = [e for e in same if e.line_number > entry.line_number]
    return (later or same)[0]

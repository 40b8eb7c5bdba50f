"""Corpus fingerprints: what makes a prepared cache fresh.

Each clip's fingerprint covers what its cached features and tokens depend on: the audio file's
resolved path, size and modification time (nanoseconds), the transcript, the speaker and the
language. The corpus fingerprint additionally covers the ids in corpus order, their line numbers and
the corpus-level rejections (bad lines), so any edit of the metadata or of an audio file is seen.
``prepare`` keeps the features of clips whose fingerprint is unchanged and processes only the new
or changed ones; a rerun on an unchanged corpus only stats the files (no audio is read).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

from myxtts.data.corpus import CorpusEntry, Rejection


def clip_fingerprint(entry: CorpusEntry) -> str:
    """16 hex digits over (path, size, mtime_ns, text, speaker, language); "missing" parts when unreadable."""
    try:
        status = os.stat(entry.audio_path)
        size, mtime = status.st_size, status.st_mtime_ns
    except OSError:
        size, mtime = -1, -1
    blob = json.dumps([str(entry.audio_path), size, mtime, entry.text, entry.speaker, entry.language])
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def corpus_fingerprint(entries: Iterable[CorpusEntry], fingerprints: dict[str, str],
                       line_rejections: Iterable[Rejection]) -> str:
    """16 hex digits over every entry (id, line, clip fingerprint) and every corpus-level rejection."""
    digest = hashlib.sha256()
    for entry in entries:
        digest.update(json.dumps([entry.id, entry.line_number, fingerprints[entry.id]]).encode("utf-8"))
    for rejection in line_rejections:
        digest.update(json.dumps([rejection.file, rejection.line, rejection.reason, rejection.message]).encode())
    return digest.hexdigest()[:16]


@dataclass
class CorpusDiff:
    """How the corpus differs from what a previous manifest recorded (ids)."""

    unchanged: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def to_process(self) -> set[str]:
        return set(self.added) | set(self.changed)

    def describe(self) -> str:
        return (f"{len(self.added)} added, {len(self.changed)} changed, {len(self.removed)} removed, "
                f"{len(self.unchanged)} unchanged")


def diff_corpus(entries: list[CorpusEntry], fingerprints: dict[str, str],
                previous: dict[str, dict[str, Any]]) -> CorpusDiff:
    """Compare current clip fingerprints with the manifest's ``clips`` table (id -> {"fingerprint", ...})."""
    diff = CorpusDiff()
    for entry in entries:
        old = previous.get(entry.id)
        if old is None:
            diff.added.append(entry.id)
        elif old.get("fingerprint") != fingerprints[entry.id]:
            diff.changed.append(entry.id)
        else:
            diff.unchanged.append(entry.id)
    current = {entry.id for entry in entries}
    diff.removed = [utterance_id for utterance_id in previous if utterance_id not in current]
    return diff

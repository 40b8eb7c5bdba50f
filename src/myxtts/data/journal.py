"""The prepare journal: what a ``prepare`` finished, line by line, so a killed one loses no finished clip.

``prepare`` appends one JSON line per clip once its verdict is final: accepted (after its utterance file
was written and renamed into place, so a journalled file is always whole) or rejected (the reason).
The first line records the feature hash and the F0 tracker's settings (``myxtts.f0.TRACKER``: the track
is in each utterance file) the lines belong to. The next ``prepare`` with the same feature hash and tracker reuses every
journalled clip whose fingerprint is unchanged and whose utterance file is complete
(its size matches its header); anything else (a clip cut off mid-write, a torn last line, a changed clip)
is processed again. Clips an update reuses from the previous cache are journalled too, before any new one,
so the journal alone names every clip a stopped update had settled. A torn last line (a kill mid-write) is
cut off before the next ``prepare`` appends, so it never runs into the next record. The journal is deleted
once the manifest that supersedes it is in place.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from myxtts import f0
from myxtts.cache_files import JOURNAL_FILE
from myxtts.data.cache import audio_file, read_utterance
from myxtts.data.cache_manifest import CacheError


def utterance_file_complete(path: Path) -> bool:
    """True when the utterance file exists, reads, holds exactly the bytes its header announces, and its audio file
    is beside it (written before it, renamed into place whole)."""
    try:
        utterance = read_utterance(path)  # CacheError unless it holds exactly the bytes its header announces
        audio = path.with_name(Path(audio_file(path.name)).name)
        return utterance.mel.shape[0] > 0 and audio.is_file()
    except (OSError, ValueError, CacheError):
        return False


class PrepareJournal:
    """Append-only record of finished clips for one feature hash and F0 tracker (see the module docstring)."""

    def __init__(self, cache_dir: Path, feature_hash: str):
        self.path = Path(cache_dir) / JOURNAL_FILE
        # what the lines belong to
        self.header = {"feature_hash": feature_hash, "pitch_tracker": f0.TRACKER}
        self._handle: TextIO | None = None

    def finished(self) -> dict[str, dict[str, Any]]:
        """utterance id -> its last journal record, when the journal belongs to this feature hash and tracker."""
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return {}
        records: dict[str, dict[str, Any]] = {}
        for number, line in enumerate(lines):
            try:
                record = json.loads(line)
            except ValueError:  # a line torn by the kill
                continue
            if number == 0:
                if record != self.header:
                    return {}
                continue
            if isinstance(record, dict) and "id" in record and "fingerprint" in record:
                records[str(record["id"])] = record
        return records

    def reusable(self, cache_dir: Path, fingerprints: dict[str, str]) -> dict[str, dict[str, Any]]:
        """The finished records still valid: same fingerprint, and (accepted) a complete utterance file."""
        usable = {}
        for utterance_id, record in self.finished().items():
            if fingerprints.get(utterance_id) != record["fingerprint"]:
                continue
            if "rejected" in record or utterance_file_complete(cache_dir / str(record.get("file", ""))):
                usable[utterance_id] = record
        return usable

    def open(self, keep: bool) -> None:
        """Start appending; ``keep=False`` starts a new journal (another feature hash, or none yet). A kept
        journal loses its torn last line first (what follows the last newline)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if keep and self.path.is_file() and not self._cut_torn_tail():
            keep = False  # not even the header line is whole
        if not keep or not self.path.is_file():
            self.path.write_text(json.dumps(self.header) + "\n", encoding="utf-8")
        self._handle = open(self.path, "a", encoding="utf-8")

    def _cut_torn_tail(self) -> bool:
        """Truncate the journal after its last complete line; False when no complete line is left."""
        data = self.path.read_bytes()
        whole = data.rfind(b"\n") + 1
        if whole != len(data):
            with open(self.path, "r+b") as handle:
                handle.truncate(whole)
        return whole > 0

    def settled(self, verdicts: dict[str, Any], rejections: dict[str, Any], fingerprints: dict[str, str]) -> None:
        """Journal verdicts known without processing (clips reused from the previous cache): ``verdicts`` id ->
        object with ``file`` and ``samples``; ``rejections`` id -> (reason, file, detail)."""
        for utterance_id, clip in verdicts.items():
            self.accepted(utterance_id, fingerprints[utterance_id], clip.file, clip.samples)
        for utterance_id, (reason, file, detail) in rejections.items():
            self.rejected(utterance_id, fingerprints[utterance_id], reason, file, detail)

    def accepted(self, utterance_id: str, fingerprint: str, file: str, samples: int) -> None:
        self._append({"id": utterance_id, "fingerprint": fingerprint, "file": file, "samples": samples})

    def rejected(self, utterance_id: str, fingerprint: str, reason: str, file: str, detail: str) -> None:
        self._append({"id": utterance_id, "fingerprint": fingerprint, "rejected": [reason, file, detail]})

    def _append(self, record: dict[str, Any]) -> None:
        if self._handle is None:
            raise RuntimeError("PrepareJournal.open() first")
        # flushed line by line: the kernel keeps what was written whatever happens to this process
        self._handle.write(json.dumps(record) + "\n")
        self._handle.flush()

    def close(self, delete: bool) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        if delete:
            self.path.unlink(missing_ok=True)


def clip_from_file(cache_dir: Path, file: str) -> tuple[list[int], int]:
    """(tokens, frames) of a complete utterance file."""
    utterance = read_utterance(cache_dir / file)
    return np.asarray(utterance.tokens).tolist(), int(utterance.mel.shape[0])

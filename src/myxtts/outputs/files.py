"""File outputs (``evaluate --json``, ``synthesize --out``): their mark is inside them, and a file is replaced only
by the command that wrote it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from myxtts.outputs.markers import OutputRefused

FILE_MARK_KEY = "written_by"  # in a JSON output: "myxtts COMMAND"
MARK_PREFIX = "myxtts "  # a file mark: "myxtts COMMAND" (a JSON report's written_by, a WAV's software tag)
_REPORT_KEYS = {"run", "checkpoint", "clips", "items", "summary"}  # an evaluation report written before its mark


def file_made_by(path: str | Path) -> str | None:
    """The command that wrote the file ``path`` (its mark: a JSON report's ``written_by``, a WAV's software tag),
    or None."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        mark = data.get(FILE_MARK_KEY)
        if isinstance(mark, str) and mark.startswith(MARK_PREFIX):
            return mark[len(MARK_PREFIX):]
        return "evaluate" if _REPORT_KEYS <= set(data) else None
    if path.suffix.lower() == ".wav":
        import soundfile  # loads NumPy, which the rest of myxtts.outputs never needs: a .wav's mark only

        try:
            with soundfile.SoundFile(str(path)) as handle:
                software = handle.software or ""
        except (OSError, RuntimeError, ValueError):
            return None
        if software.startswith(MARK_PREFIX):
            return software[len(MARK_PREFIX):].split(" (", 1)[0]  # libsndfile appends its version
    return None


def check_output_file(path: str | Path, command: str, option: str) -> None:
    """Raise OutputRefused unless ``command`` may write the file ``path`` (given as ``option``): missing, or a file
    it wrote earlier (its mark says so). Never a link, a folder, or any other file (a run's config.yaml, a
    recording)."""
    path = Path(path)
    if path.is_symlink():
        raise OutputRefused(f"{option} {path} is a link ({os.readlink(path)}): myxtts never writes through one. "
                            "Choose another path.")
    if not path.exists():
        return
    if path.is_dir():
        raise OutputRefused(f"{option} {path} is a folder, not a file. Choose a file path.")
    if file_made_by(path) != command:
        raise OutputRefused(f"{option} {path} exists and was not written by `myxtts {command}`: it is never "
                            "overwritten. Choose another path, or move that file away first.")

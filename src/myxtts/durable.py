"""Durable writes for the feature cache, and the stages at which ``prepare`` can be stopped in a test.

A file the manifest names must survive a crash or a power loss whole, so it is written to a temporary name,
flushed to disk (``fsync``), renamed into place, and its directory flushed too (the rename itself is then on
disk). Writing to a temporary name and renaming alone keeps a killed process from leaving half a file; the
fsyncs keep the kernel from reordering the writes so that a later manifest lands before the data it names.

``reached(stage)`` marks the end of each write stage of ``prepare`` (``WRITE_STAGES``, in order). Tests stop
``prepare`` there by setting ``fault_hook`` to a callable that raises at the stage they choose.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable

# In write order; see myxtts.data.prepare. "clip" is reached after each clip's journal line.
WRITE_STAGES = ("reused", "clip", "rejections", "vocabulary", "index", "mel_stats", "manifest", "bucket_plan",
                "journal", "cleanup")

fault_hook: Callable[[str], None] | None = None  # set by tests: called with each stage's name as it is reached


def reached(stage: str) -> None:
    """Called by prepare after each write stage; a no-op unless a test set ``fault_hook``."""
    if stage not in WRITE_STAGES:
        raise ValueError(f"Unknown prepare write stage {stage!r}: use one of {WRITE_STAGES}.")
    if fault_hook is not None:
        fault_hook(stage)


def fsync_file(path: Path) -> None:
    """Flush a written file's data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(directory: Path) -> None:
    """Flush a directory's entries (the renames into it) to disk; a no-op where the system cannot."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a directory; the data files themselves were flushed
    finally:
        os.close(fd)


def replace_durably(tmp: Path, path: Path, sync_directory: bool = True) -> None:
    """Rename the written file ``tmp`` onto ``path`` once its data is on disk (and, by default, the rename too)."""
    fsync_file(tmp)
    os.replace(tmp, path)
    if sync_directory:
        fsync_directory(path.parent)


def write_durably(path: Path, data: bytes | str) -> None:
    """Write ``path`` whole or not at all, durably: temporary name, fsync, rename, fsync of the directory. A link at
    the temporary name is refused (never written through); a link at ``path`` is replaced by the file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o666)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data.encode("utf-8") if isinstance(data, str) else data)
    replace_durably(tmp, path)


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()

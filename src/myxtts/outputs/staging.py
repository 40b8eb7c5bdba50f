"""How a myxtts command writes an output once ``myxtts.outputs.rules`` allows it: whole or not at all.

- A folder (``write_staged``): written into a sibling ``OUT.tmp-XXXX``, marked (``markers.write_marker``), then
  swapped in by rename. An earlier folder at ``OUT`` is renamed aside first and removed only after the swap; a link
  at ``OUT`` (``replace_link``) is removed only once the new folder is complete, and put back if the rename fails. A
  failure removes the staged folder and leaves ``OUT`` as it was; a process killed mid-write leaves its
  ``OUT.tmp-XXXX`` (never a half-written ``OUT``), which can be removed by hand.
- A folder replaced by a command that writes in place (``demo --fresh``): ``set_aside`` renames the old one to a
  sibling ``NAME.old-XXXX``; ``put_back`` restores it when the new one fails, ``discard`` removes it once the new one
  stands.
- A file (``write_file_atomically``): a temporary sibling, flushed to disk, renamed over the path.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable, TypeVar

from myxtts.durable import replace_durably
from myxtts.outputs.markers import write_marker

T = TypeVar("T")


def _usual_mode(path: Path, folder: bool) -> None:
    """mkdtemp / mkstemp make private paths; an output is a file or folder like any other (the umask's mode)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if folder else 0o666) & ~umask)


def write_staged(out: str | Path, command: str, kind: str, write: Callable[[Path], T],
                 replace_link: bool = False) -> T:
    """``write(staging)`` into a new sibling folder, mark it as ``command``'s ``kind``, then swap it in for ``out``
    (see the module docstring). ``out`` must have passed its check in ``myxtts.outputs``. A link at ``out``: its
    target is replaced (the link stays), or with ``replace_link`` the link itself. Returns what ``write`` returns."""
    out_path = Path(out)
    if replace_link and out_path.is_symlink():
        target = out_path.parent.resolve() / out_path.name
    else:
        target = out_path.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{target.name}.tmp-", dir=target.parent))
    _usual_mode(staging, folder=True)
    try:
        result = write(staging)
        write_marker(staging, command, kind)
        _swap_in(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return result


def _swap_in(staging: Path, out: Path) -> None:
    """Rename ``staging`` to ``out``: a link there is removed just before (put back if the rename fails), an earlier
    folder renamed aside (restored if the swap fails) and removed after."""
    if out.is_symlink():
        link = os.readlink(out)
        os.unlink(out)
        try:
            os.rename(staging, out)
        except BaseException:
            if not os.path.lexists(out):
                os.symlink(link, out)
            raise
        return
    if not out.exists():
        os.rename(staging, out)  # fails, touching nothing, if a folder appeared at ``out`` meanwhile
        return
    aside = set_aside(out)
    try:
        os.rename(staging, out)
    except OSError:
        os.rename(aside, out)
        raise
    discard(aside)


def set_aside(folder: str | Path) -> Path:
    """Rename ``folder`` to a new sibling ``NAME.old-XXXX`` and return that path."""
    folder = Path(folder)
    aside = Path(tempfile.mkdtemp(prefix=f"{folder.name}.old-", dir=folder.parent))
    try:
        os.rename(folder, aside)  # a folder renamed onto an empty folder replaces it
    except OSError:
        aside.rmdir()
        raise
    return aside


def put_back(aside: str | Path, folder: str | Path) -> None:
    """Undo ``set_aside``: remove what the failed command wrote at ``folder`` (if anything), rename ``aside`` back."""
    folder = Path(folder)
    if folder.is_symlink() or folder.is_file():
        folder.unlink()
    elif folder.exists():
        shutil.rmtree(folder)
    os.rename(aside, folder)


def discard(aside: str | Path) -> None:
    """Remove a folder ``set_aside`` moved away, once what replaces it stands."""
    shutil.rmtree(aside, ignore_errors=True)


def write_file_atomically(path: str | Path, write: Callable[[BinaryIO], None]) -> Path:
    """``write(handle)`` into a temporary sibling of ``path``, flush it to disk and rename it over ``path``: a
    reader (or a kill) never sees half a file, and a link at ``path`` is replaced, never written through."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
        _usual_mode(tmp, folder=False)
        replace_durably(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path

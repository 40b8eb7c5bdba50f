"""Where ``myxtts export`` and ``myxtts pack`` may write, and how they replace an earlier output.

A folder is recognised by the files myxtts writes into it:

- a prepared cache (``prepare``): ``manifest.json``, ``index.npz``, ``prepare.lock`` or ``prepare-journal.jsonl``;
- a training run (``train``, ``train-vocoder``): ``run.lock`` or ``metrics.jsonl``, or ``config.yaml`` with
  ``checkpoints/`` that is not a packed model;
- a packed model (``pack``): ``config.yaml`` and ``checkpoints/`` with ``model.json``, or with a ``vocoder.json``
  that names its ``source_checkpoint`` (a packed vocoder);
- an export (``export``): ``saved_model.pb`` with ``assets/export.json``.

The rule (``check_output_folder``): the output is never the source run, never contains it, never is, contains or lies
inside any of these folders, except that it may *be* an earlier output of the same command, which only ``--force``
replaces. ``write_staged`` then writes the new output into a sibling ``OUT.tmp-XXXX`` and swaps it in by rename
once it is complete: a failure removes the staged folder and leaves ``OUT`` as it was. A process killed mid-write
leaves its ``OUT.tmp-XXXX`` (never a half-written ``OUT``); it can be removed by hand.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, TypeVar

from myxtts.data.cache import INDEX_FILE, MANIFEST_FILE
from myxtts.data.journal import JOURNAL_FILE
from myxtts.locks import CACHE_WRITE_LOCK
from myxtts.run_dir import RunDir

CACHE = "a prepared cache"
RUN = "a training run"
PACKED_MODEL = "a packed model"
PACKED_VOCODER = "a packed vocoder"
EXPORT = "an export"
PACKED = (PACKED_MODEL, PACKED_VOCODER)

CACHE_MARKERS = (MANIFEST_FILE, INDEX_FILE, CACHE_WRITE_LOCK, JOURNAL_FILE)
RUN_MARKERS = (RunDir.LOCK, RunDir.METRICS)  # written only by a training, never by pack or export
MAX_FOLDERS_SEARCHED = 2000  # a non-empty --out is searched this far for a run or cache inside it

T = TypeVar("T")


class OutputFolderError(ValueError):
    """An output folder that export or pack must not write: it would destroy something it did not make."""


def folder_kind(folder: Path) -> str | None:
    """What myxtts made ``folder`` as (one of the constants above), or None for any other folder or a missing one."""
    if not folder.is_dir():
        return None
    if any((folder / marker).exists() for marker in CACHE_MARKERS):
        return CACHE
    if any((folder / marker).exists() for marker in RUN_MARKERS):
        return RUN
    if (folder / "saved_model.pb").is_file() and (folder / "assets" / "export.json").is_file():
        return EXPORT
    run = RunDir(folder)
    if run.config.is_file() and run.checkpoints.is_dir():
        if run.model_record.is_file():
            return PACKED_MODEL
        if "source_checkpoint" in _json_keys(run.vocoder_record):  # pack_vocoder's record; a run's has none
            return PACKED_VOCODER
        return RUN
    return None


def _json_keys(path: Path) -> set[str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return set(data) if isinstance(data, dict) else set()


def check_output_folder(out: str | Path, source: str | Path, replaceable: tuple[str, ...], force: bool,
                        command: str) -> None:
    """Raise OutputFolderError unless ``command`` may write ``out`` from the run ``source``: a new or empty folder,
    or (``force``) a folder of a ``replaceable`` kind holding nothing else of myxtts. Nothing is changed here."""
    out_path, source_path = Path(out), Path(source)
    out_abs, source_abs = out_path.resolve(), source_path.resolve()
    advice = "Choose a new folder for --out (e.g. exported/NAME or pretrained/NAME)."
    if out_abs == source_abs:
        raise OutputFolderError(f"--out {out_path} is the run given to --run ({source_path}): `myxtts {command}` "
                                f"never writes over its source. {advice}")
    if source_abs.is_relative_to(out_abs):
        raise OutputFolderError(f"--out {out_path} contains the run given to --run ({source_path}): `myxtts "
                                f"{command}` never replaces a folder holding its source. {advice}")
    if out_abs.is_relative_to(source_abs):
        raise OutputFolderError(f"--out {out_path} lies inside the run given to --run ({source_path}): `myxtts "
                                f"{command}` writes nothing into a run. {advice}")
    for parent in out_abs.parents:
        kind = folder_kind(parent)
        if kind is not None:
            raise OutputFolderError(f"--out {out_path} lies inside {kind}, {parent}: `myxtts {command}` writes "
                                    f"nothing into it. {advice}")
    if not out_abs.exists():
        return
    if not out_abs.is_dir():
        raise OutputFolderError(f"--out {out_path} is a file, not a folder. {advice}")
    kind = folder_kind(out_abs)
    if kind is not None and kind not in replaceable:
        raise OutputFolderError(f"--out {out_path} is {kind}: `myxtts {command}` replaces only "
                                f"{' or '.join(replaceable)} it wrote, even with --force. {advice}")
    if not any(out_abs.iterdir()):
        return  # an empty folder: written like a new one
    # a packed model's own vocoder (``RUN/vocoder``) is part of it, replaced with it
    own_vocoder = out_abs / RunDir.OWN_VOCODER if kind == PACKED_MODEL else None
    inside, searched_all = _myxtts_folder_inside(out_abs, skip=own_vocoder)
    if inside is not None:
        raise OutputFolderError(f"--out {out_path} contains {inside[1]}, {inside[0]}: `myxtts {command}` never "
                                f"replaces a folder holding one, even with --force. {advice}")
    if kind is None:
        raise OutputFolderError(f"{out_path} exists and is not empty, and it is not {' or '.join(replaceable)} "
                                f"myxtts wrote: --force replaces only those. Remove it yourself or choose "
                                "another --out.")
    if not searched_all:
        raise OutputFolderError(f"--out {out_path} holds more than {MAX_FOLDERS_SEARCHED} folders: not {kind} as "
                                f"myxtts writes it. Remove it yourself or choose another --out.")
    if not force:
        raise OutputFolderError(f"{out_path} already holds {kind}; pass --force to replace it (the old one is "
                                "removed only once the new one is complete) or choose another --out.")


def _myxtts_folder_inside(folder: Path, skip: Path | None = None) -> tuple[tuple[Path, str] | None, bool]:
    """(the first run, cache, packed model or export strictly below ``folder``, and its kind) or None; and whether
    the search covered every folder (it stops after MAX_FOLDERS_SEARCHED; symbolic links are not followed). The
    packed vocoder at ``skip`` (a packed model's own) is passed over and not searched."""
    seen = 0
    for root, dirs, _ in os.walk(folder):
        dirs.sort()
        if skip is not None and Path(root) / skip.name == skip and skip.name in dirs \
                and folder_kind(skip) == PACKED_VOCODER:
            dirs.remove(skip.name)
        for name in list(dirs):
            seen += 1
            if seen > MAX_FOLDERS_SEARCHED:
                return None, False
            kind = folder_kind(Path(root) / name)
            if kind is not None:
                return (Path(root) / name, kind), True
    return None, True


def write_staged(out: str | Path, write: Callable[[Path], T]) -> T:
    """``write(staging)`` into a new sibling folder ``OUT.tmp-XXXX``, then swap it in for ``out`` by rename (the old
    ``out``, if any, is renamed aside and removed only after the swap). On any failure the staged folder is removed
    and ``out`` is left as it was. ``out`` must have passed ``check_output_folder``. Returns what ``write`` returns."""
    out_abs = Path(out).resolve()  # a symbolic link's target is replaced, the link stays
    out_abs.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{out_abs.name}.tmp-", dir=out_abs.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)  # mkdtemp makes it private; the output is a folder like any other
    try:
        result = write(staging)
        _swap_in(staging, out_abs)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return result


def _swap_in(staging: Path, out: Path) -> None:
    """Rename ``staging`` to ``out``; an existing ``out`` is first renamed aside (restored if the swap fails)."""
    if not out.exists():
        os.rename(staging, out)  # fails, touching nothing, if a folder appeared at ``out`` meanwhile
        return
    aside = Path(tempfile.mkdtemp(prefix=f"{out.name}.old-", dir=out.parent))
    try:
        os.rename(out, aside)  # a folder renamed onto an empty folder replaces it
    except OSError:
        aside.rmdir()
        raise
    try:
        os.rename(staging, out)
    except OSError:
        os.rename(aside, out)
        raise
    shutil.rmtree(aside, ignore_errors=True)

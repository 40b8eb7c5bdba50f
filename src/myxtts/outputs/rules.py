"""The rule, for each command that writes a folder or a file (see ``myxtts.outputs``): each check raises
``OutputRefused`` naming what would be destroyed and what to do, and changes nothing."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable, NoReturn

from myxtts.locks import CACHE_READ_LOCK, CACHE_WRITE_LOCK, READERS_DIR
from myxtts.outputs.markers import (CACHE, CORPUS, LAYOUTS, OWN_VOCODER, PACKED_VOCODER, RUN, RUN_LAYOUT,
                                    TRAINING_RUNS, Maker, OutputRefused, folder_kind, made_by, read_marker,
                                    unknown_files)
from myxtts.run_dir import RunDir

_LOCK_LEFTOVERS = (CACHE_WRITE_LOCK, CACHE_READ_LOCK)  # left by a lock taken on a folder before it held anything
MAX_FOLDERS_SEARCHED = 2000  # an unmarked non-empty folder is searched this far for a run or cache inside it
NAMED = 5  # files named in a refusal, at most


def _listed(names: list[str]) -> str:
    return ", ".join(names[:NAMED]) + (f" and {len(names) - NAMED} more" if len(names) > NAMED else "")


def _entries(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def _myxtts_folder_inside(folder: Path) -> tuple[tuple[Path, str] | None, bool]:
    """(the first folder myxtts made strictly below ``folder``, and its kind) or None; and whether the search covered
    every folder (it stops after MAX_FOLDERS_SEARCHED; links are not followed)."""
    seen = 0
    for root, dirs, _ in os.walk(folder):
        dirs.sort()
        for name in list(dirs):
            seen += 1
            if seen > MAX_FOLDERS_SEARCHED:
                return None, False
            kind = folder_kind(Path(root) / name)
            if kind is not None:
                return (Path(root) / name, kind), True
    return None, True


def _refuse_unmarked(path: Path, label: str, command: str, wanted: str, advice: str) -> NoReturn:
    """Refuse a non-empty folder nothing of myxtts made, saying what myxtts folder it holds, or what it holds."""
    inside, searched_all = _myxtts_folder_inside(path)
    if inside is not None:
        raise OutputRefused(f"{label} {path} contains {inside[1]}, {inside[0]}: `myxtts {command}` never replaces "
                            f"a folder holding one, even with --force. {advice}")
    raise OutputRefused(f"{label} {path} exists and is not empty ({_listed(_entries(path))}), and it is not {wanted} "
                        f"`myxtts {command}` made{'' if searched_all else ' (too many folders to search)'}: "
                        f"nothing in it is replaced. {advice}")


def check_output_folder(out: str | Path, source: str | Path, command: str, kind: str, force: bool) -> None:
    """Raise OutputRefused unless ``command`` (``pack`` or ``export``) may write ``out`` from the run ``source`` as
    ``kind``: a new or empty folder, or (``force``) an earlier ``kind`` of ``command`` holding only its layout's
    files. Never the source, a folder holding it or inside it, nor inside anything myxtts made. Changes nothing."""
    out_path, source_path = Path(out), Path(source)
    out_abs, source_abs = out_path.resolve(), source_path.resolve()
    advice = "Choose a new folder for --out (e.g. exported/NAME or pretrained/NAME)."
    if out_abs == source_abs:
        raise OutputRefused(f"--out {out_path} is the run given to --run ({source_path}): `myxtts {command}` "
                            f"never writes over its source. {advice}")
    if source_abs.is_relative_to(out_abs):
        raise OutputRefused(f"--out {out_path} contains the run given to --run ({source_path}): `myxtts "
                            f"{command}` never replaces a folder holding its source. {advice}")
    if out_abs.is_relative_to(source_abs):
        raise OutputRefused(f"--out {out_path} lies inside the run given to --run ({source_path}): `myxtts "
                            f"{command}` writes nothing into a run. {advice}")
    for parent in out_abs.parents:
        seen = folder_kind(parent)
        if seen is not None:
            raise OutputRefused(f"--out {out_path} lies inside {seen}, {parent}: `myxtts {command}` writes "
                                f"nothing into it. {advice}")
    if not out_abs.exists():
        if out_path.is_symlink():
            raise OutputRefused(f"--out {out_path} is a link to nothing ({os.readlink(out_path)}). {advice}")
        return
    if not out_abs.is_dir():
        raise OutputRefused(f"--out {out_path} is a file, not a folder. {advice}")
    if not any(out_abs.iterdir()):
        return  # an empty folder: written like a new one
    maker = made_by(out_abs)
    if maker is None:
        _refuse_unmarked(out_path, "--out", command, kind, advice)
    if maker != Maker(command, kind):
        pairing = " (an acoustic run's pack never replaces a packed vocoder, nor a vocoder run's a packed model)" \
            if command == "pack" else ""
        raise OutputRefused(f"--out {out_path} is {maker.describe()}: `myxtts {command}` replaces only {kind} it "
                            f"made itself{pairing}, even with --force. {advice}")
    unknown = unknown_files(out_abs, LAYOUTS[kind])
    if unknown:
        raise OutputRefused(f"--out {out_path} is an earlier {kind.split(' ', 1)[1]} of `myxtts {command}`, but it "
                            f"also holds files `myxtts {command}` did not write: {_listed(unknown)}. They are never "
                            "deleted: move them out of it (or remove them), then run again, or choose another --out.")
    if not force:
        raise OutputRefused(f"{out_path} already holds {kind}; pass --force to replace it (the old one is removed "
                            "only once the new one is complete) or choose another --out.")


def check_own_vocoder_slot(slot: str | Path, source: str | Path) -> None:
    """Raise OutputRefused unless the vocoder ``source`` may be installed at ``slot`` (a run's ``RUN/vocoder``):
    missing, empty, a link (replaced itself, never the folder it names), or an earlier own vocoder holding only a
    packed vocoder's files. Never a training run of any kind, nor the vocoder being installed."""
    slot, source = Path(slot), Path(source)
    if slot.is_symlink() or not slot.exists():
        return
    advice = (f"Move it elsewhere (e.g. runs/NAME-vocoder) and install from there: `myxtts train-vocoder "
              f"--acoustic-run RUN --workdir runs/NAME-vocoder` trains outside the run and installs its generator "
              f"at {slot}.")
    if not slot.is_dir():
        raise OutputRefused(f"{slot} is a file, not a run's own vocoder: it is never replaced. {advice}")
    if slot.resolve() == source.resolve() or source.resolve().is_relative_to(slot.resolve()):
        raise OutputRefused(f"{slot} is (or holds) the vocoder being installed, {source}: installing a run's own "
                            f"vocoder never replaces its source. {advice}")
    if not any(slot.iterdir()):
        return
    maker = made_by(slot)
    if maker is None:
        _refuse_unmarked(slot, "the run's own vocoder", "train-vocoder --acoustic-run", PACKED_VOCODER, advice)
    if maker.kind in TRAINING_RUNS:
        raise OutputRefused(f"{slot} is {maker.describe()}: installing a run's own vocoder never replaces a "
                            f"training run (its optimizer, discriminators, metrics and --resume would be lost). "
                            f"{advice}")
    if maker != Maker(OWN_VOCODER, PACKED_VOCODER):
        raise OutputRefused(f"{slot} is {maker.describe()}, not an own vocoder installed there: it is never "
                            f"replaced. {advice}")
    unknown = unknown_files(slot, LAYOUTS[PACKED_VOCODER])
    if unknown:
        raise OutputRefused(f"{slot}, the run's own vocoder, also holds files no install wrote: {_listed(unknown)}. "
                            "They are never deleted: move them out of it (or remove them), then install again.")


def check_workdir(workdir: str | Path, command: str, kind: str, own_only: bool = False) -> bool:
    """Raise OutputRefused unless ``command`` may train in ``workdir``: new, empty, or a training run of ``kind``
    (``own_only``: one ``command`` made itself). Returns True when the folder is new or empty (the trainer then
    marks it as its own)."""
    path = Path(workdir)
    advice = "Choose a new or empty --workdir (e.g. runs/NAME)."
    if not path.exists():
        if path.is_symlink():
            raise OutputRefused(f"--workdir {path} is a link to nothing ({os.readlink(path)}). {advice}")
        return True
    if not path.is_dir():
        raise OutputRefused(f"--workdir {path} is a file, not a run directory. {advice}")
    if not any(path.iterdir()):
        return True
    maker = made_by(path)
    if maker is None:
        raise OutputRefused(f"--workdir {path} exists, is not empty and is not a training run (it holds "
                            f"{_listed(_entries(path))}): `myxtts {command}` would write its config.yaml, "
                            f"vocab.json, corpus.json and checkpoints over what is there. {advice}")
    if maker.kind not in TRAINING_RUNS:
        raise OutputRefused(f"--workdir {path} is {maker.describe()}: a training never writes into it. {advice}")
    marked = read_marker(path) is not None  # a run written before markers may be of either kind: not judged
    if (marked and maker.kind != kind) or (own_only and maker.command != command):
        raise OutputRefused(f"--workdir {path} is {maker.describe()}: `myxtts {command}` continues only "
                            f"{kind} {'it made itself' if own_only else 'of its own kind'}. {advice}")
    return False


def check_outside_acoustic_run(workdir: str | Path, acoustic_run: str | Path) -> None:
    """Raise OutputRefused when a vocoder's ``workdir`` is the acoustic run, its ``RUN/vocoder`` or inside it: the
    trained generator is installed at ``RUN/vocoder``, which would replace (or sit beside) the training run."""
    work, run = Path(workdir).resolve(), Path(acoustic_run).resolve()
    if work == run or work.is_relative_to(run):
        where = "its own vocoder's folder" if work == run / RunDir.OWN_VOCODER else "inside it"
        raise OutputRefused(f"--workdir {workdir} is {where} of the acoustic run given to --acoustic-run "
                            f"({acoustic_run}): its generator is installed as {Path(acoustic_run) / RunDir.OWN_VOCODER}"
                            " once trained, which would replace the training run (its optimizer, discriminators, "
                            "metrics and --resume). Train elsewhere, e.g. --workdir runs/NAME-vocoder; nothing was "
                            "written.")


def check_replaceable_run(run_dir: str | Path, command: str) -> None:
    """Raise OutputRefused unless ``run_dir`` is a training run ``command`` made itself holding only a run's files:
    what ``demo --fresh`` may replace."""
    path = Path(run_dir)
    maker = made_by(path)
    advice = "Remove it yourself or choose another --workdir."
    if maker != Maker(command, RUN):
        what = maker.describe() if maker is not None else f"not a run `myxtts {command}` made"
        raise OutputRefused(f"--workdir {path} is {what}: `myxtts {command} --fresh` replaces only its own run. "
                            f"{advice}")
    unknown = unknown_files(path, RUN_LAYOUT)
    if unknown:
        raise OutputRefused(f"--workdir {path} is the run of an earlier `myxtts {command}`, but it also holds files "
                            f"it did not write: {_listed(unknown)}. They are never deleted: move them out of it, "
                            f"then run again. {advice}")


def check_cache_dir(cache_dir: str | Path) -> None:
    """Raise OutputRefused unless ``prepare`` may write ``cache_dir``: new, empty (but for lock files) or a cache it
    made. A folder of other files (a corpus prepared into itself, a dataset's ``manifest.json`` or ``shards/``) is
    refused, naming a few of them."""
    path = Path(cache_dir)
    advice = "Set data.cache_dir to a new or empty folder (e.g. cache/NAME); nothing was written."
    if not path.exists():
        return
    if not path.is_dir():
        raise OutputRefused(f"data.cache_dir {path} is a file, not a folder. {advice}")
    maker = made_by(path)
    if maker == Maker("prepare", CACHE):
        return
    if maker is not None:
        raise OutputRefused(f"data.cache_dir {path} is {maker.describe()}: `myxtts prepare` writes only into a cache "
                            f"it made. {advice}")
    others = [name for name in _entries(path) if name not in _LOCK_LEFTOVERS
              and not (name == READERS_DIR and _holds_only_reader_records(path / name))]
    if others:
        raise OutputRefused(f"data.cache_dir {path} is not empty and is not a myxtts cache (it holds "
                            f"{_listed(others)}): `myxtts prepare` would write its utterances/, manifest.json and "
                            f"index files among them. {advice}")


def _holds_only_reader_records(folder: Path) -> bool:
    return folder.is_dir() and all(re.fullmatch(r".+-\d+\.json", name) for name in _entries(folder))


def check_corpus_folder(out: str | Path, command: str, earlier: Callable[[Path], bool] | None = None) -> bool:
    """Raise OutputRefused unless ``command`` may write the corpus folder ``out``: new, empty, or its own earlier
    output (its marker, or ``earlier(out)`` for one written before markers). Returns True when it is new or
    empty."""
    path = Path(out)
    if not path.exists():
        return True
    if not path.is_dir():
        raise OutputRefused(f"--out {path} is a file; name a new folder.")
    if not any(path.iterdir()):
        return True
    maker = made_by(path)
    if maker == Maker(command, CORPUS) or (maker is None and earlier is not None and earlier(path)):
        return False
    what = maker.describe() if maker is not None else f"not a corpus `myxtts {command}` wrote"
    raise OutputRefused(f"--out {path} holds files this command did not write ({_listed(_entries(path))}; it is "
                        f"{what}): nothing in it is overwritten. Name a new or empty folder.")

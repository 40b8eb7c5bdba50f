"""What made a folder (``.myxtts.json``, or the records myxtts writes), and which files an output of each kind
holds: the facts ``myxtts.outputs.rules`` judges by."""

from __future__ import annotations

import fnmatch
import json
import os
from dataclasses import dataclass
from pathlib import Path

from myxtts import __version__
from myxtts.cache_files import JOURNAL_FILE, MANIFEST_FILE
from myxtts.durable import write_durably
from myxtts.errors import InputError
from myxtts.run_dir import RunDir

MARKER = ".myxtts.json"

CACHE = "a prepared cache"
RUN = "a training run"
VOCODER_RUN = "a vocoder training run"
PACKED_MODEL = "a packed model"
PACKED_VOCODER = "a packed vocoder"
EXPORT = "an export"
LITERT_EXPORT = "a LiteRT export"
CORPUS = "a corpus"
TRAINING_RUNS = (RUN, VOCODER_RUN)
KINDS = (CACHE, RUN, VOCODER_RUN, PACKED_MODEL, PACKED_VOCODER, EXPORT, LITERT_EXPORT, CORPUS)

# the writer of a run's own vocoder (RUN/vocoder): train-vocoder --acoustic-run, demo --vocoder, a warm start, pack
OWN_VOCODER = "own-vocoder"
WRITERS = {OWN_VOCODER: "the install of a run's own vocoder (train-vocoder --acoustic-run, demo --vocoder, a warm "
                        "start, pack)"}

_CHECKPOINT_FILES = tuple(f"{RunDir.CHECKPOINTS}/{name}" for name in ("checkpoint", "ckpt-*.index",
                                                                       "ckpt-*.data-*-of-*"))
_VOCODER_FILES = (RunDir.CONFIG, RunDir.VOCODER_RECORD, *_CHECKPOINT_FILES)
# every file a writer puts in an output of these kinds (fnmatch patterns, relative paths; ``*`` crosses folders)
LAYOUTS = {
    PACKED_VOCODER: (MARKER, *_VOCODER_FILES),
    PACKED_MODEL: (MARKER, RunDir.CONFIG, RunDir.VOCAB, RunDir.MEL_STATS, RunDir.CORPUS, RunDir.INIT_FROM,
                   RunDir.MODEL_RECORD, *_CHECKPOINT_FILES, RunDir.OWN_VOCODER,
                   *(f"{RunDir.OWN_VOCODER}/{pattern}" for pattern in (MARKER, *_VOCODER_FILES))),
    EXPORT: (MARKER, "saved_model.pb", "fingerprint.pb", "variables/variables.index",
             "variables/variables.data-*-of-*", "assets/vocab.json", "assets/mel_stats.json", "assets/export.json"),
    LITERT_EXPORT: (MARKER, "model.tflite", "litert.json", RunDir.VOCAB, RunDir.MEL_STATS, RunDir.CONFIG),
}
_RUN_FILES = (RunDir.CONFIG, RunDir.VOCAB, RunDir.MEL_STATS, RunDir.CORPUS, RunDir.INIT_FROM, RunDir.LOCK,
              RunDir.METRICS, RunDir.RETRACES, RunDir.LISTENING_RECORD, RunDir.DEMO_WAV, MARKER)
# a training run's files: its records (and their temporary names), and whatever lies in its own folders
RUN_LAYOUT = (*_RUN_FILES, *(f"{name}.tmp" for name in _RUN_FILES), RunDir.OWN_VOCODER,
              *(f"{folder}/*" for folder in (RunDir.CHECKPOINTS, RunDir.TENSORBOARD, RunDir.LISTENING,
                                             RunDir.OWN_VOCODER, "worker-*-scratch")))


class OutputRefused(InputError):
    """A path a command must not write: it would destroy something that command did not make."""


@dataclass(frozen=True)
class Maker:
    """What made a folder: a command (``myxtts COMMAND``, or ``OWN_VOCODER``) and one of ``KINDS``."""

    command: str
    kind: str

    def describe(self) -> str:
        return f"{self.kind} made by {describe_writer(self.command)}"


def describe_writer(command: str) -> str:
    """How a refusal names a writer: ``myxtts COMMAND`` in backticks, or ``WRITERS``' words for one that is no
    command of its own."""
    return WRITERS.get(command, f"`myxtts {command}`")


def write_marker(folder: str | Path, command: str, kind: str) -> None:
    """Mark ``folder`` as made by ``command`` as ``kind`` (durably: it decides what may ever replace the folder)."""
    if kind not in KINDS:
        raise ValueError(f"Unknown output kind {kind!r}: use one of {KINDS}.")
    write_durably(Path(folder) / MARKER, json.dumps({"command": command, "kind": kind, "myxtts": __version__},
                                                    indent=1))


def read_marker(folder: str | Path) -> Maker | None:
    """The maker ``folder``'s marker names; None without a readable one (a link is never read as one)."""
    path = Path(folder) / MARKER
    if path.is_symlink() or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("kind") not in KINDS or not isinstance(data.get("command"), str):
        return None
    return Maker(data["command"], data["kind"])


def made_by(folder: str | Path) -> Maker | None:
    """Who made ``folder``: its marker, else (a folder written before markers) what its records say; None for any
    other folder or a missing one."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    marker = read_marker(folder)
    if marker is not None:
        return marker
    kind = _recorded_kind(folder)
    if kind is None:
        return None
    if kind == PACKED_VOCODER and folder.name == RunDir.OWN_VOCODER and \
            folder_kind(folder.parent) in (RUN, PACKED_MODEL):
        return Maker(OWN_VOCODER, kind)
    if kind == RUN and RunDir(folder).demo_wav.is_file():  # only the demo writes demo.wav
        return Maker("demo", kind)
    command = {CACHE: "prepare", RUN: "train", VOCODER_RUN: "train-vocoder", PACKED_MODEL: "pack",
               PACKED_VOCODER: "pack", EXPORT: "export", LITERT_EXPORT: "export"}[kind]
    return Maker(command, kind)


def folder_kind(folder: str | Path) -> str | None:
    """What myxtts made ``folder`` as (one of ``KINDS``), or None for any other folder or a missing one."""
    maker = made_by(folder)
    return None if maker is None else maker.kind


def _recorded_kind(folder: Path) -> str | None:
    """The kind the records myxtts writes into a folder say, for folders without a marker."""
    if not folder.is_dir():
        return None
    if _is_cache_record(folder):
        return CACHE
    run = RunDir(folder)
    vocoder_keys = _json_keys(run.vocoder_record)
    if run.path.joinpath(RunDir.LOCK).exists() or run.metrics.exists():  # written only by a training
        return VOCODER_RUN if vocoder_keys else RUN
    if (folder / "saved_model.pb").is_file() and (folder / "assets" / "export.json").is_file():
        return EXPORT
    if run.config.is_file() and run.checkpoints.is_dir():
        if run.model_record.is_file():
            return PACKED_MODEL
        if "source_checkpoint" in vocoder_keys:  # pack's record; a run's has none
            return PACKED_VOCODER
        return VOCODER_RUN if vocoder_keys else RUN
    return None


def _is_cache_record(folder: Path) -> bool:
    """A myxtts manifest, or the journal of a first prepare stopped before its manifest (not any ``manifest.json``)."""
    manifest = folder / MANIFEST_FILE
    if {"format_version", "feature_hash"} <= _json_keys(manifest):
        return True
    try:
        with open(folder / JOURNAL_FILE, encoding="utf-8") as handle:
            header = json.loads(handle.readline())
    except (OSError, ValueError):
        return False
    return isinstance(header, dict) and "feature_hash" in header


def _json_keys(path: Path) -> set[str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return set(data) if isinstance(data, dict) else set()


def unknown_files(folder: str | Path, layout: tuple[str, ...]) -> list[str]:
    """The files (and links) under ``folder`` that ``layout`` does not name, as relative paths; links are not
    followed, empty folders are not counted."""
    folder = Path(folder)
    found = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        links = [name for name in dirs if (Path(root) / name).is_symlink()]
        dirs[:] = [name for name in dirs if name not in links]
        for name in sorted(files + links):
            relative = (Path(root) / name).relative_to(folder).as_posix()
            if not any(fnmatch.fnmatchcase(relative, pattern) for pattern in layout):
                found.append(relative)
    return found

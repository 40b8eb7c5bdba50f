"""A run directory: the one place that names its files and reads them.

``myxtts train`` and ``myxtts train-vocoder`` write a run; ``myxtts pack`` writes a packed model in the same layout
(weights only); synthesis, ``serve``, ``export``, ``evaluate`` and a warm start (``--init-from``) read one. Layout::

    RUN/config.yaml        the resolved config (``myxtts.config.save_config``): how to build the model
    RUN/vocab.json         the symbol table the text embedding is indexed by (else the config's cache's)
    RUN/mel_stats.json     per-bin mel mean / std the model's mels are normalised with: synthesis normalises the
                           reference and denormalises the output with them
    RUN/corpus.json        what it was trained on (languages, speakers, clips, hours): a warm start checks it
    RUN/init_from.json     the warm start it began from, if any (a resumed run never reads the source again)
    RUN/checkpoints/       ``tf.train.CheckpointManager`` files (``ckpt-N.index`` / ``.data-*``, ``checkpoint``);
                           the model under the key ``model`` (a vocoder: ``generator``, ``discriminators``)
    RUN/run.lock           held by the one process writing the run (``myxtts.locks``)
    RUN/metrics.jsonl      one JSON record per logged step, validation and listening pass
    RUN/retraces.jsonl     every trace the retrace monitor saw, and why
    RUN/tensorboard/       summaries, one folder per split
    RUN/listening/         the demo's listening outputs (alignment plots); RUN/listening.json what it heard
    RUN/demo.wav           the demo's sentence
    RUN/model.json         a packed acoustic model's record (``pack``: step, minutes, parameters, bytes)
    RUN/vocoder.json       a vocoder's family, sizes and the audio settings it reads
    RUN/acoustic-mels/     a vocoder fine-tune's teacher-forced mels of an acoustic run
    RUN/vocoder/           an acoustic run's (or packed model's) own vocoder: a packed vocoder that synthesis,
                           ``serve``, ``export`` and ``evaluate`` use when no ``--vocoder`` is given
                           (``myxtts.vocoder.packing``)
    RUN/.myxtts.json       what made the folder (``train``, ``train-vocoder``, ``demo``, ``pack``) and as what:
                           what may ever replace it (``myxtts.outputs``)

The records are written whole or not at all (``write_json``, ``config.save_config``: temporary name, fsync, rename).

Reading a run: ``RunDir(path)`` for the paths and ``latest_checkpoint`` here; its vocabulary and mel statistics
(the run's, else its cache's) in ``myxtts.data.run_features``; ``myxtts.model.restore`` builds and restores the model.
Training and synthesis both read runs through these modules, so neither imports the other. This module imports only
``myxtts.durable`` and ``myxtts.errors``: ``myxtts.locks`` and ``myxtts.outputs``, below ``myxtts.data``, name a run's
files through it (docs/architecture.md, Layers).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from myxtts.durable import write_durably
from myxtts.errors import InputError


class RunError(InputError):
    """A run directory, checkpoint or vocabulary that cannot be used."""


class RunDir:
    """The paths of one run directory (see the module docstring for what each holds)."""

    CONFIG = "config.yaml"
    VOCAB = "vocab.json"
    MEL_STATS = "mel_stats.json"
    CORPUS = "corpus.json"
    INIT_FROM = "init_from.json"
    CHECKPOINTS = "checkpoints"
    LOCK = "run.lock"
    METRICS = "metrics.jsonl"
    RETRACES = "retraces.jsonl"
    TENSORBOARD = "tensorboard"
    LISTENING = "listening"
    LISTENING_RECORD = "listening.json"
    DEMO_WAV = "demo.wav"
    MODEL_RECORD = "model.json"
    VOCODER_RECORD = "vocoder.json"
    ACOUSTIC_MELS = "acoustic-mels"
    OWN_VOCODER = "vocoder"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    @property
    def config(self) -> Path:
        return self.path / self.CONFIG

    @property
    def vocab(self) -> Path:
        return self.path / self.VOCAB

    @property
    def mel_stats(self) -> Path:
        return self.path / self.MEL_STATS

    @property
    def corpus(self) -> Path:
        return self.path / self.CORPUS

    @property
    def init_from(self) -> Path:
        return self.path / self.INIT_FROM

    @property
    def checkpoints(self) -> Path:
        return self.path / self.CHECKPOINTS

    @property
    def metrics(self) -> Path:
        return self.path / self.METRICS

    @property
    def retraces(self) -> Path:
        return self.path / self.RETRACES

    @property
    def tensorboard(self) -> Path:
        return self.path / self.TENSORBOARD

    @property
    def listening(self) -> Path:
        return self.path / self.LISTENING

    @property
    def listening_record(self) -> Path:
        return self.path / self.LISTENING_RECORD

    @property
    def demo_wav(self) -> Path:
        return self.path / self.DEMO_WAV

    @property
    def model_record(self) -> Path:
        return self.path / self.MODEL_RECORD

    @property
    def vocoder_record(self) -> Path:
        return self.path / self.VOCODER_RECORD

    @property
    def acoustic_mels(self) -> Path:
        return self.path / self.ACOUSTIC_MELS

    @property
    def own_vocoder(self) -> Path:
        return self.path / self.OWN_VOCODER

    def has_checkpoint(self) -> bool:
        return self.checkpoints.is_dir() and any(self.checkpoints.iterdir())

    def checkpoint_bytes(self) -> int:
        return sum(path.stat().st_size for path in self.checkpoints.iterdir())

    def write_json(self, path: Path, record: dict[str, Any]) -> Path:
        """One of the run's JSON records (``corpus``, ``init_from``, ``model_record``, ``vocoder_record``), whole or
        not at all (temporary name, fsync, rename): a kill mid-write leaves the previous record, never half of one."""
        write_durably(path, json.dumps(record, indent=1, ensure_ascii=False))
        return path

    def latest_checkpoint(self) -> str:
        """Prefix of the newest checkpoint (``RUN/checkpoints``, or checkpoint files in the run directory itself)."""
        import tensorflow as tf  # only here: the CLI and the output checks read runs without TensorFlow

        if not self.path.is_dir():
            raise RunError(f"Run directory not found: {self.path}")
        for folder in (self.checkpoints, self.path):
            if folder.is_dir():
                prefix = tf.train.latest_checkpoint(str(folder))
                if prefix:
                    return prefix
        raise RunError(f"No checkpoint in {self.checkpoints} (nor {self.path}); train first "
                       "(`myxtts train --config ... --workdir ...`) or pass --checkpoint.")


def latest_checkpoint(run_dir: str | Path) -> str:
    """Prefix of the newest checkpoint of a run (``RunDir.latest_checkpoint``)."""
    return RunDir(run_dir).latest_checkpoint()


def checkpoint_step(checkpoint: str | Path) -> int | None:
    """The step a checkpoint prefix names (``.../ckpt-N`` -> N), None when it names none."""
    number = str(checkpoint).rsplit("-", 1)[-1]
    return int(number) if number.isdigit() else None


def relative_config_paths(config_path: Path) -> None:
    """The config's paths inside the current folder (a repository) made relative to the config's own folder, so a
    packed model works from any clone."""
    raw = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    here = Path.cwd().resolve()
    if not config_path.parent.resolve().is_relative_to(here):
        return
    for section, key in (("data", "corpus_path"), ("data", "cache_dir"), ("training", "init_from")):
        value = raw.get(section, {}).get(key)
        if value and Path(value).is_absolute() and Path(value).resolve().is_relative_to(here):
            raw[section][key] = os.path.relpath(Path(value).resolve(), config_path.parent.resolve())
    for corpus in (raw.get("data") or {}).get("corpora") or []:
        value = corpus.get("path")
        if value and Path(value).is_absolute() and Path(value).resolve().is_relative_to(here):
            corpus["path"] = os.path.relpath(Path(value).resolve(), config_path.parent.resolve())
    write_durably(config_path, yaml.safe_dump(raw, sort_keys=False))

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

Reading a run: ``RunDir(path)`` for the paths, ``latest_checkpoint``, ``find_vocabulary`` and the mel-statistics
readers below; ``myxtts.model.restore`` builds and restores the model. Training and synthesis both read runs through
this module, so neither imports the other.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from myxtts.config import Config
from myxtts.data.mel_stats import MelStats, MelStatsError
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
        from myxtts.durable import write_durably

        write_durably(path, json.dumps(record, indent=1, ensure_ascii=False))
        return path

    def latest_checkpoint(self) -> str:
        """Prefix of the newest checkpoint (``RUN/checkpoints``, or checkpoint files in the run directory itself)."""
        import tensorflow as tf

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


def find_vocabulary(cfg: Config, *folders: Path) -> Any:
    """The vocabulary saved with the run (or the config's cache); else the one the text config implies."""
    from myxtts.data.cache import VOCAB_FILE as CACHE_VOCAB_FILE
    from myxtts.text import Vocabulary

    for path in [RunDir(folder).vocab for folder in folders] + [cfg.cache_dir / CACHE_VOCAB_FILE]:
        if path.is_file():
            try:
                return Vocabulary.load(path, cfg.text)
            except (ValueError, OSError) as err:
                raise RunError(f"Cannot load the vocabulary {path}: {err}") from None
    # the symbol set is fixed in code per text config, so this is the same table prepare saved
    return Vocabulary.for_config(cfg.text)


def load_run_mel_stats(run_dir: str | Path, cfg: Config | None = None) -> MelStats:
    """The mel statistics of a run (``RUN/mel_stats.json``, written by the trainer); RunError naming the file when it
    is missing or does not fit ``cfg.audio.n_mels``."""
    path = RunDir(run_dir).mel_stats
    try:
        stats = MelStats.load(path)
    except MelStatsError as err:
        raise RunError(f"{err} The run's mel statistics (the normalisation its model was trained with, written "
                       f"by `myxtts train` next to vocab.json) are needed to synthesize; runs trained before mels "
                       "were normalised must be retrained.") from None
    check_n_mels(stats, cfg, path)
    return stats


def find_mel_stats(cfg: Config, *folders: Path) -> MelStats:
    """``mel_stats.json`` of the first folder holding one (a checkpoint's folder, its run), else the statistics of
    the config's prepared cache; RunError naming every place looked at."""
    from myxtts.data.cache import CacheError, manifest_mel_stats, read_manifest

    for folder in folders:
        if RunDir(folder).mel_stats.is_file():
            return load_run_mel_stats(folder, cfg)
    manifest = read_manifest(cfg.cache_dir)
    try:
        if manifest is not None:
            stats = manifest_mel_stats(cfg.cache_dir, manifest)
            check_n_mels(stats, cfg, cfg.cache_dir / "manifest.json")
            return stats
    except CacheError:
        pass
    looked = [f"{RunDir(folder).mel_stats} missing" for folder in folders]
    looked.append(f"no usable 'mel_stats' in {cfg.cache_dir / 'manifest.json'}")
    raise RunError(f"No mel statistics found ({'; '.join(looked)}): they are the normalisation the model was "
                   "trained with. Use the run directory (--run), or run `myxtts prepare` for the config's corpus.")


def check_n_mels(stats: MelStats, cfg: Config | None, source: Path) -> None:
    if cfg is not None and stats.n_mels != cfg.audio.n_mels:
        raise RunError(f"{source}: mel statistics of {stats.n_mels} bins, but audio.n_mels is {cfg.audio.n_mels}.")


def relative_config_paths(config_path: Path) -> None:
    """The config's paths inside the current folder (a repository) made relative to the config's own folder, so a
    packed model works from any clone."""
    import os

    import yaml

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
    from myxtts.durable import write_durably

    write_durably(config_path, yaml.safe_dump(raw, sort_keys=False))

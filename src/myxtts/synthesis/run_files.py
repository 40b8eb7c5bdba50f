"""Restore (config, model, vocabulary, mel statistics) from a run directory or a checkpoint + config, and write
one (``save_run``, ``pack_run``). The run directory's layout: ``myxtts.run_dir``; its vocabulary and mel statistics:
``myxtts.data.run_features``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import tensorflow as tf

from myxtts.config import Config, load_config, save_config
from myxtts.data.mel_stats import MelStats
from myxtts.data.run_features import check_n_mels, find_mel_stats, find_vocabulary, load_run_mel_stats
from myxtts.model import TTSModel
from myxtts.model.restore import restore_model
from myxtts.outputs import OWN_VOCODER, PACKED_MODEL, PACKED_VOCODER, check_output_folder, write_marker, write_staged
from myxtts.run_dir import RunDir, RunError, checkpoint_step, latest_checkpoint, relative_config_paths
from myxtts.text import Vocabulary
from myxtts.vocoder.neural import GRIFFIN_LIM, choose_vocoder
from myxtts.vocoder.packing import check_vocoder_for, write_vocoder_pack

__all__ = ["RunError", "latest_checkpoint", "load_model_from_checkpoint", "load_model_from_run", "pack_run",
           "relative_config_paths", "save_run"]


def load_model_from_checkpoint(checkpoint: str | Path, config: str | Path,
                               vocabulary: str | Path | None = None) -> tuple[Config, TTSModel, Vocabulary]:
    cfg = load_config(config)
    checkpoint_path = Path(checkpoint)
    folders = [checkpoint_path if checkpoint_path.is_dir() else checkpoint_path.parent]
    folders.append(folders[0].parent)
    vocab = Vocabulary.load(vocabulary, cfg.text) if vocabulary else find_vocabulary(cfg, *folders)
    return cfg, restore_model(cfg, vocab, checkpoint), vocab


def load_model_from_run(run_dir: str | Path, config: str | Path | None = None, checkpoint: str | None = None
                        ) -> tuple[Config, TTSModel, Vocabulary]:
    """(config, model with the newest checkpoint's weights, vocabulary) of a training run; ``checkpoint``: a prefix
    the caller resolved (``latest_checkpoint``) to restore instead, so what it records names the weights loaded."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunError(f"Run directory not found: {run_dir}")
    config_path = Path(config) if config else RunDir(run_dir).config
    if not config_path.is_file():
        raise RunError(f"No config in the run directory: {config_path} is missing; pass --config.")
    cfg = load_config(config_path)
    vocab = find_vocabulary(cfg, run_dir)
    return cfg, restore_model(cfg, vocab, checkpoint or latest_checkpoint(run_dir)), vocab


def save_run(run_dir: str | Path, cfg: Config, model: TTSModel, vocabulary: Vocabulary,
             mel_stats: MelStats | None = None, step: int = 0) -> str:
    """Write a run directory in the trainer's layout (config, vocabulary, mel statistics, one checkpoint); returns
    its prefix. ``mel_stats``: default the config's prepared cache's (RunError without a cache).

    Used by tests and benchmarks to synthesize from a freshly built model without training.
    """
    run_dir = Path(run_dir)
    if mel_stats is None:
        mel_stats = find_mel_stats(cfg)
    check_n_mels(mel_stats, cfg, Path("mel_stats"))
    run_dir.mkdir(parents=True, exist_ok=True)
    run = RunDir(run_dir)
    save_config(cfg, run.config)
    vocabulary.save(run.vocab)
    mel_stats.save(run.mel_stats)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(run.checkpoints),
                                         max_to_keep=1)
    return manager.save(checkpoint_number=step)


def _portable(path: Path) -> str:
    """A path inside the current folder (a repository) relative to it, so a shipped record names no machine."""
    resolved = path.resolve()
    return os.path.relpath(resolved, Path.cwd()) if resolved.is_relative_to(Path.cwd().resolve()) else str(resolved)


def pack_run(run_dir: str | Path, out_dir: str | Path, force: bool = False,
             vocoder: str | Path | None = None) -> dict:
    """A run as a model to ship (``myxtts pack``): config, vocabulary, mel statistics, the corpus summary and the
    newest checkpoint's model weights only (no optimizer state: a third of the size), in the run-directory layout,
    so ``synthesize --run OUT`` and ``train --init-from OUT`` take it. Writes and returns ``OUT/model.json``.

    ``out_dir`` must be new, empty or (``force``) an earlier packed model of ``pack`` holding only a pack's files;
    never the run, a packed vocoder, a cache, nor a folder that holds or lies inside one
    (``outputs.check_output_folder``); the pack is written beside it and swapped in only once complete, so a failure
    leaves ``out_dir`` as it was.

    ``vocoder``: the packed model's own vocoder (``OUT/vocoder``): a vocoder directory, ``griffin-lim`` for none, or
    None for the run's own if it has one (``vocoder.neural.choose_vocoder``)."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    check_output_folder(out_dir, run_dir, "pack", PACKED_MODEL, force)
    own_vocoder = choose_vocoder(vocoder, run_dir)
    own_vocoder = None if own_vocoder == GRIFFIN_LIM else own_vocoder
    checkpoint = latest_checkpoint(run_dir)  # resolved once: the weights, step and minutes all come from this prefix
    try:
        trained_seconds = float(tf.train.load_variable(checkpoint, "trained_seconds/.ATTRIBUTES/VARIABLE_VALUE"))
    except (tf.errors.NotFoundError, ValueError):
        trained_seconds = None
    cfg, model, vocabulary = load_model_from_run(run_dir, checkpoint=checkpoint)
    mel_stats = load_run_mel_stats(run_dir, cfg)
    step = checkpoint_step(checkpoint) or 0
    if own_vocoder is not None:
        check_vocoder_for(own_vocoder, cfg, f"the run {run_dir}")  # refused before anything is written

    def write(staging: Path) -> dict:
        prefix = save_run(staging, cfg, model, vocabulary, mel_stats, step=step)
        source, packed = RunDir(run_dir), RunDir(staging)
        relative_config_paths(packed.config)  # a sibling of out_dir: the same relative paths
        if source.corpus.is_file():  # what a warm start from the packed model reads
            shutil.copyfile(source.corpus, packed.corpus)
        if source.init_from.is_file():  # where the run started, its paths relative to the repository (no machine)
            started = json.loads(source.init_from.read_text(encoding="utf-8"))
            for key in ("source", "checkpoint", "source_config", "vocoder"):
                if isinstance(started.get(key), str) and Path(started[key]).is_absolute():
                    started[key] = _portable(Path(started[key]))
            packed.write_json(packed.init_from, started)
        record = {"source_run": _portable(run_dir), "source_checkpoint": _portable(Path(checkpoint)),
                  "checkpoint": Path(prefix).name,
                  "step": step, "training_minutes": None if trained_seconds is None else trained_seconds / 60.0,
                  "parameters": int(sum(int(np.prod(v.shape)) for v in model.trainable_weights)),
                  "decoder": cfg.model.decoder, "preset": cfg.model.preset,
                  "bytes": packed.checkpoint_bytes(), "vocoder": None}
        if own_vocoder is not None:
            vocoder_record = write_vocoder_pack(own_vocoder, packed.own_vocoder)
            write_marker(packed.own_vocoder, OWN_VOCODER, PACKED_VOCODER)  # an install may replace it later
            record["vocoder"] = {"source": _portable(Path(own_vocoder)), "family": vocoder_record["family"],
                                 "step": vocoder_record["step"], "bytes": vocoder_record["bytes"]}
        packed.write_json(packed.model_record, record)
        return record

    return write_staged(out_dir, "pack", PACKED_MODEL, write)

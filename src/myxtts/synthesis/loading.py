"""Restore (config, model, vocabulary, mel statistics) from a training run directory or a checkpoint + config.

Run directory layout written by ``myxtts.training`` (what this module relies on)::

    RUN_DIR/config.yaml       the resolved config (myxtts.config.save_config)
    RUN_DIR/vocab.json        the Vocabulary (else the one of the config's cache_dir)
    RUN_DIR/mel_stats.json    per-bin mel mean / std the model's mels are normalised with (required: synthesis
                              normalises the reference mel and denormalises the output with them)
    RUN_DIR/checkpoints/      tf.train.CheckpointManager files (ckpt-N.index / .data-*, `checkpoint`)

The checkpoint holds the model under the key ``model`` (``tf.train.Checkpoint(model=model, ...)``);
everything else in it (optimizer, step counters) is ignored here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf

from myxtts.config import Config, load_config
from myxtts.data.mel_stats import MEL_STATS_FILE, MelStats, MelStatsError
from myxtts.model import TTSModel, build_model
from myxtts.text import Vocabulary

CONFIG_FILE = "config.yaml"
VOCAB_FILE = "vocab.json"
CHECKPOINT_DIR = "checkpoints"


class RunError(ValueError):
    """A run directory, checkpoint or vocabulary that cannot be used."""


def latest_checkpoint(run_dir: str | Path) -> str:
    """Prefix of the newest checkpoint of a run (``RUN_DIR/checkpoints`` or the run directory itself)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunError(f"Run directory not found: {run_dir}")
    for folder in (run_dir / CHECKPOINT_DIR, run_dir):
        if folder.is_dir():
            prefix = tf.train.latest_checkpoint(str(folder))
            if prefix:
                return prefix
    raise RunError(f"No checkpoint in {run_dir / CHECKPOINT_DIR} (nor {run_dir}); train first "
                   "(`myxtts train --config ... --run-dir ...`) or pass --checkpoint.")


def checkpoint_step(checkpoint: str | Path) -> int | None:
    """The step a checkpoint prefix names (``.../ckpt-N`` -> N), None when it names none."""
    number = str(checkpoint).rsplit("-", 1)[-1]
    return int(number) if number.isdigit() else None


def find_vocabulary(cfg: Config, *folders: Path) -> Vocabulary:
    """The vocabulary saved with the run (or the config's cache); else the one the text config implies."""
    for path in [folder / VOCAB_FILE for folder in folders] + [cfg.cache_dir / VOCAB_FILE]:
        if path.is_file():
            try:
                return Vocabulary.load(path, cfg.text)
            except (ValueError, OSError) as err:
                raise RunError(f"Cannot load the vocabulary {path}: {err}") from None
    # the symbol set is fixed in code per text config, so this is the same table prepare saved
    return Vocabulary.for_config(cfg.text)


def load_run_mel_stats(run_dir: str | Path, cfg: Config | None = None) -> MelStats:
    """The mel statistics of a run (``RUN_DIR/mel_stats.json``, written by the trainer); RunError naming the file
    when it is missing or does not fit ``cfg.audio.n_mels``."""
    path = Path(run_dir) / MEL_STATS_FILE
    try:
        stats = MelStats.load(path)
    except MelStatsError as err:
        raise RunError(f"{err} The run's mel statistics (the normalisation its model was trained with, written "
                       f"by `myxtts train` next to vocab.json) are needed to synthesize; runs trained before mels "
                       "were normalised must be retrained.") from None
    _check_n_mels(stats, cfg, path)
    return stats


def find_mel_stats(cfg: Config, *folders: Path) -> MelStats:
    """``mel_stats.json`` of the first folder holding one (a checkpoint's folder, its run), else the statistics of
    the config's prepared cache; RunError naming every place looked at."""
    from myxtts.data.cache import CacheError, manifest_mel_stats, read_manifest

    for folder in folders:
        if (Path(folder) / MEL_STATS_FILE).is_file():
            return load_run_mel_stats(folder, cfg)
    manifest = read_manifest(cfg.cache_dir)
    try:
        if manifest is not None:
            stats = manifest_mel_stats(cfg.cache_dir, manifest)
            _check_n_mels(stats, cfg, cfg.cache_dir / "manifest.json")
            return stats
    except CacheError:
        pass
    looked = [f"{Path(folder) / MEL_STATS_FILE} missing" for folder in folders]
    looked.append(f"no usable 'mel_stats' in {cfg.cache_dir / 'manifest.json'}")
    raise RunError(f"No mel statistics found ({'; '.join(looked)}): they are the normalisation the model was "
                   "trained with. Use the run directory (--run), or run `myxtts prepare` for the config's corpus.")


def _check_n_mels(stats: MelStats, cfg: Config | None, source: Path) -> None:
    if cfg is not None and stats.n_mels != cfg.audio.n_mels:
        raise RunError(f"{source}: mel statistics of {stats.n_mels} bins, but audio.n_mels is {cfg.audio.n_mels}.")


# a checkpoint of the first autoregressive design (free cross-attention over the text, a stop token, no aligner)
EARLIER_DESIGN = "earlier-design"


def checkpoint_decoder_type(checkpoint: str | Path) -> str | None:
    """The decoder a checkpoint's model holds: "parallel", "autoregressive" (an aligner, and a decoder with or
    without a prenet) or ``EARLIER_DESIGN`` (a decoder and no aligner); None: unreadable. Read from the
    checkpoint's object graph: the model's variables are saved under the optimizer's names."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    try:
        graph = trackable_object_graph_pb2.TrackableObjectGraph()
        graph.ParseFromString(tf.train.load_checkpoint(str(checkpoint)).get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
        model = next(child.node_id for child in graph.nodes[0].children if child.local_name == "model")
    except (tf.errors.OpError, ValueError, StopIteration):
        return None
    children = {child.local_name: child.node_id for child in graph.nodes[model].children}
    if "decoder" not in children:
        return None
    if "aligner" not in children:
        return EARLIER_DESIGN
    decoder_parts = {child.local_name for child in graph.nodes[children["decoder"]].children}
    return "autoregressive" if "prenet" in decoder_parts else "parallel"


def decoder_mismatch(checkpoint: str, held: str | None, wanted: str) -> str | None:
    """Why a checkpoint of decoder ``held`` cannot serve a config of decoder ``wanted`` (None: it can)."""
    if held == EARLIER_DESIGN:
        return (f"{checkpoint} holds a model of an earlier myxtts design (an autoregressive decoder attending "
                "freely over the text, with a stop token), which this version no longer builds; train a new run "
                "(both decoders now read the text through learned durations).")
    if held is not None and held != wanted:
        return (f"{checkpoint} holds a model of the {held} decoder, but the config says 'model.decoder: {wanted}'; "
                f"use the run's own config.yaml (or set model.decoder: {held}).")
    return None


def restore_model(cfg: Config, vocabulary: Vocabulary, checkpoint: str | Path) -> TTSModel:
    """Build the model for ``cfg`` and load the weights of ``checkpoint`` (a prefix or a folder)."""
    checkpoint = str(checkpoint)
    if Path(checkpoint).is_dir():
        prefix = tf.train.latest_checkpoint(checkpoint)
        if not prefix:
            raise RunError(f"No checkpoint in folder {checkpoint}.")
        checkpoint = prefix
    if not Path(checkpoint + ".index").is_file():
        raise RunError(f"Checkpoint not found: {checkpoint} (expected {checkpoint}.index); pass a prefix like "
                       "RUN_DIR/checkpoints/ckpt-3 or the folder holding it.")
    problem = decoder_mismatch(f"Checkpoint {checkpoint}", checkpoint_decoder_type(checkpoint), cfg.model.decoder)
    if problem:
        raise RunError(problem)
    model = build_model(cfg, len(vocabulary))
    status = tf.train.Checkpoint(model=model).restore(checkpoint).expect_partial()
    try:
        status.assert_existing_objects_matched()
    except AssertionError as err:
        raise RunError(f"Checkpoint {checkpoint} does not match the model of this config (model.* keys or "
                       f"vocabulary size differ?): {str(err)[:300]}") from None
    return model


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
    config_path = Path(config) if config else run_dir / CONFIG_FILE
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
    from myxtts.config import save_config

    run_dir = Path(run_dir)
    if mel_stats is None:
        mel_stats = find_mel_stats(cfg)
    _check_n_mels(mel_stats, cfg, Path("mel_stats"))
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir / CONFIG_FILE)
    vocabulary.save(run_dir / VOCAB_FILE)
    mel_stats.save(run_dir / MEL_STATS_FILE)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(run_dir / CHECKPOINT_DIR),
                                         max_to_keep=1)
    return manager.save(checkpoint_number=step)


def _relative_paths(config_path: Path) -> None:
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
    config_path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")


def _portable(path: Path) -> str:
    """A path inside the current folder (a repository) relative to it, so a shipped record names no machine."""
    import os

    resolved = path.resolve()
    return os.path.relpath(resolved, Path.cwd()) if resolved.is_relative_to(Path.cwd().resolve()) else str(resolved)


def pack_run(run_dir: str | Path, out_dir: str | Path, force: bool = False) -> dict:
    """A run as a model to ship (``myxtts pack``): config, vocabulary, mel statistics, the corpus summary and the
    newest checkpoint's model weights only (no optimizer state: a third of the size), in the run-directory layout,
    so ``synthesize --run OUT`` and ``train --init-from OUT`` take it. Writes and returns ``OUT/model.json``.

    ``out_dir`` must be new, empty or (``force``) an earlier packed model, never the run, a cache, nor a folder that
    holds or lies inside one (``output_folder.check_output_folder``); the pack is written beside it and swapped in
    only once complete, so a failure leaves ``out_dir`` as it was."""
    import json
    import shutil

    from myxtts.synthesis.output_folder import PACKED, check_output_folder, write_staged

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    check_output_folder(out_dir, run_dir, PACKED, force, "pack")
    checkpoint = latest_checkpoint(run_dir)  # resolved once: the weights, step and minutes all come from this prefix
    try:
        trained_seconds = float(tf.train.load_variable(checkpoint, "trained_seconds/.ATTRIBUTES/VARIABLE_VALUE"))
    except (tf.errors.NotFoundError, ValueError):
        trained_seconds = None
    cfg, model, vocabulary = load_model_from_run(run_dir, checkpoint=checkpoint)
    mel_stats = load_run_mel_stats(run_dir, cfg)
    step = checkpoint_step(checkpoint) or 0

    def write(staging: Path) -> dict:
        prefix = save_run(staging, cfg, model, vocabulary, mel_stats, step=step)
        _relative_paths(staging / CONFIG_FILE)  # a sibling of out_dir: the same relative paths
        for extra in ("corpus.json", "init_from.json"):  # data.cache.CORPUS_FILE, training.warm_start.INIT_FROM_FILE
            if (run_dir / extra).is_file():
                shutil.copyfile(run_dir / extra, staging / extra)
        record = {"source_run": _portable(run_dir), "source_checkpoint": _portable(Path(checkpoint)),
                  "checkpoint": Path(prefix).name,
                  "step": step, "training_minutes": None if trained_seconds is None else trained_seconds / 60.0,
                  "parameters": int(sum(int(np.prod(v.shape)) for v in model.trainable_weights)),
                  "decoder": cfg.model.decoder, "preset": cfg.model.preset,
                  "bytes": sum(p.stat().st_size for p in (staging / CHECKPOINT_DIR).iterdir())}
        (staging / "model.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
        return record

    return write_staged(out_dir, write)

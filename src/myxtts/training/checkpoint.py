"""Checkpoints: model, optimizer, step counters and the data iterator in one tf.train.CheckpointManager.

Atomicity: CheckpointManager writes the new checkpoint's files first and only then rewrites the
small ``checkpoint`` state file that names the latest one, so a crash mid-save leaves the previous
checkpoint named and loadable. ``restore_latest`` additionally falls back to older checkpoints if
the newest is unreadable (e.g. half-written by a killed process on a filesystem without atomic rename).

``check_resumable`` refuses to resume a checkpoint this config's model cannot restore into (another decoder, pitch
conditioning switched on or off, the mel discriminator newly on, a weight average switched on or off), raising
``WorkdirError``; ``check_data_resumable`` refuses data settings that change the batches the checkpointed iterator
was reading.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import tensorflow as tf

from myxtts.config import ConfigError, load_config
from myxtts.errors import ExpectedError, InputError
from myxtts.model.restore import (checkpoint_decoder_type, checkpoint_has_adaptive_norm, checkpoint_has_pitch,
                                  checkpoint_has_pitch_level, checkpoint_has_reference_attention, decoder_mismatch)
from myxtts.model.weight_average import checkpoint_has_average

logger = logging.getLogger(__name__)


class CheckpointError(ExpectedError, RuntimeError):
    pass


class WorkdirError(InputError):
    """A run directory that cannot take this run: checkpoints without --resume, or another model's checkpoints."""


def check_resumable(directory: Path, latest: str, cfg: Any, adversarial: bool, workdir: Path) -> None:
    """Refuse to resume ``latest`` (a checkpoint in ``directory``) with a config whose model it cannot restore into:
    another decoder, pitch conditioning or the speaker-adaptive norms switched on or off, or the mel discriminator on
    (``adversarial``) where the run trained without one."""
    problem = decoder_mismatch(f"{directory} (checkpoint {latest})", checkpoint_decoder_type(latest), cfg.model.decoder)
    if problem:
        raise WorkdirError(f"{problem} Or choose another --workdir.")
    optional_modules = (  # (what the checkpoint holds, the config key, their name in a message, its modules)
        (checkpoint_has_pitch(latest), "pitch_conditioning", "pitch conditioning", "the pitch modules"),
        (checkpoint_has_adaptive_norm(latest), "speaker_adaptive_norm", "speaker-adaptive norms", "the norms"),
        (checkpoint_has_pitch_level(latest), "pitch_level", "the pitch level predictor", "the predictor"),
        (checkpoint_has_reference_attention(latest), "reference_tokens", "the reference attention", "the attention"))
    for held, key, named, modules in optional_modules:
        value = getattr(cfg.model, key)
        wanted = bool(value)  # reference_tokens: a count, its variables the same for any count
        if held is not None and held != wanted:
            raise WorkdirError(
                f"{directory} (checkpoint {latest}) was trained {'with' if held else 'without'} {named}, but this "
                f"config sets 'model.{key}: {str(value).lower()}'. Resume with the run's config.yaml, or start a new "
                f"run from this one with --init-from {workdir} (a warm start adds or drops {modules}).")
    names = [name for name, _ in tf.train.list_variables(latest)]
    has_average = checkpoint_has_average(latest)
    if has_average != (cfg.training.ema_decay > 0):
        raise WorkdirError(
            f"{directory} (checkpoint {latest}) was trained {'with' if has_average else 'without'} a weight average, "
            f"but this config sets 'training.ema_decay: {cfg.training.ema_decay}'. Resume with the run's config.yaml, "
            f"or start a new run from this one with --init-from {workdir}.")
    if adversarial and not any(name.startswith("mel_discriminator/") for name in names):
        raise WorkdirError(
            f"{directory} (checkpoint {latest}) was trained without the mel discriminator, but this config sets "
            "'model.mel_adversarial_weight' or 'model.mel_feature_matching_weight' > 0. Resume with both at 0 (the "
            f"run's config.yaml), or start a new run from this one with --init-from {workdir} (its weights, a fresh "
            "discriminator).")


# data keys a resume may change: where the files are and how fast they are read, not which batches come in which
# order (another machine, a moved cache); so may each of `data.corpora`'s paths
DATA_KEYS_FREE_ON_RESUME = frozenset({"corpus_path", "cache_dir", "num_workers", "prefetch_buffer_size",
                                      "prefetch_to_gpu", "service_address"})


# the vocoder's keys that shape its training segments, beside the data section's
VOCODER_SEGMENT_KEYS = ("segment_samples", "batch_size", "recorded_mel_share")


def check_data_resumable(saved_config: Path, cfg: Any, directory: Path, latest: str, workdir: Path,
                         vocoder_keys: tuple[str, ...] = ()) -> None:
    """Refuse to resume ``latest`` with data settings other than the run's own (``saved_config``, its config.yaml)
    outside ``DATA_KEYS_FREE_ON_RESUME``, or other values of ``vocoder_keys``. The checkpoint holds the data iterator's
    position in the run's own input pipeline; another pipeline cannot continue it: TensorFlow fails at the restore or
    at the first batch (a batch with a component more or fewer, or of another shape), or the restored iterator yields
    batch shapes this config never compiled."""
    if not saved_config.is_file():
        return
    try:
        saved = load_config(saved_config).to_dict()
    except ConfigError as err:  # written by another version of myxtts: nothing to compare against
        logger.warning("Cannot read %s to compare its data settings with this config's: %s", saved_config, err)
        return
    wanted = cfg.to_dict()
    for settings in (saved, wanted):  # a corpus of several may move too: its other keys say what it holds
        settings["data"]["corpora"] = [{k: v for k, v in corpus.items() if k != "path"}
                                       for corpus in settings["data"].get("corpora") or []]
    compared = [("data", key) for key in wanted["data"] if key not in DATA_KEYS_FREE_ON_RESUME]
    compared += [("vocoder", key) for key in vocoder_keys]
    changed = [f"{section}.{key}: {saved[section][key]!r} -> {wanted[section][key]!r}" for section, key in compared
               if key in saved[section] and saved[section][key] != wanted[section][key]]
    if changed:
        raise WorkdirError(
            f"{directory} (checkpoint {latest}) holds the position of its run's data iterator, but this config changes "
            f"the batches it was reading ({'; '.join(changed)}): a resume cannot continue it. Resume with the run's "
            f"values ({saved_config}), or start a new run from this one with --init-from {workdir} (its weights, a "
            "fresh optimizer and data order).")


class Checkpoints:
    def __init__(self, directory: Path, keep: int, **objects: Any):
        self.directory = Path(directory)
        self.checkpoint = tf.train.Checkpoint(**objects)
        self.manager = tf.train.CheckpointManager(self.checkpoint, str(self.directory), max_to_keep=keep)

    @property
    def latest(self) -> str | None:
        return self.manager.latest_checkpoint

    def save(self, step: int) -> str:
        return self.manager.save(checkpoint_number=step)

    def restore_latest(self) -> str | None:
        """Restore the newest readable checkpoint (newest first); None when there is none."""
        candidates = list(reversed(self.manager.checkpoints))
        if not candidates:
            return None
        errors = []
        for path in candidates:
            try:
                self.checkpoint.restore(path).assert_existing_objects_matched()
                if path != candidates[0]:
                    logger.warning("Checkpoint %s was unreadable; resumed from the older %s.", candidates[0], path)
                return path
            except (tf.errors.OpError, ValueError, AssertionError, IndexError) as err:  # IndexError: truncated data
                errors.append(f"{path}: {type(err).__name__}: {str(err).splitlines()[0]}")
        raise CheckpointError(f"No readable checkpoint in {self.directory}:\n  " + "\n  ".join(errors))

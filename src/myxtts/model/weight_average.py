"""An exponential moving average of the model's weights (``training.ema_decay``; Polyak averaging).

A run trained against a wall-clock budget (``training.max_minutes``) cannot know its last step, so it cannot anneal
its learning rate to zero there; the average of the recent weights removes most of the step-to-step noise that a
constant rate leaves in the last iterate, at the cost of one multiply-add per weight per update.

In a checkpoint the average sits beside the model under the key ``weight_average``: one variable per trainable model
weight, keyed by the weight's path (``TTSModel`` variable paths are unique). Training and resuming read the model's own
weights (``model``); everything that loads a trained model to use it (``restore_model``: synthesis, ``serve``,
``export``, ``evaluate``, ``pack``, a warm start, a vocoder fine-tune's teacher-forced mels) reads the average over
them, so a checkpoint made with ``ema_decay`` speaks through its averaged weights everywhere without being asked.
Validation and listening while training hear the training weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tensorflow as tf

from myxtts.run_dir import RunError

CHECKPOINT_KEY = "weight_average"


def _key(path: str) -> str:
    """A checkpoint-safe dict key for a variable path ("/" would read as nesting)."""
    return path.replace("/", ":")


class _ByPath(tf.Module):
    """Variables keyed by their model weight's path: what the checkpoint records under ``weight_average``."""

    def __init__(self, variables: dict[str, Any]):
        super().__init__(name=CHECKPOINT_KEY)
        self.by_path = variables


class WeightAverage:
    """The average of ``variables`` (a model's trainable weights), updated by ``update()`` inside a compiled step.

    Create it in the strategy's scope (its variables mirror the weights'); ``reset()`` starts it at the weights
    (a fresh or warm-started run; a resumed run restores it from its checkpoint instead)."""

    def __init__(self, variables: list, decay: float):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"training.ema_decay must be in (0, 1) for a weight average, got {decay}.")
        paths = [variable.path for variable in variables]
        if len(set(paths)) != len(paths):
            raise ValueError("The model's weights do not have unique paths; a weight average cannot key them.")
        self.decay = decay
        self.weights = list(variables)
        self.averages = [tf.Variable(tf.convert_to_tensor(variable), trainable=False,
                                     name=f"average_{index}") for index, variable in enumerate(variables)]
        self.trackable = _ByPath({_key(path): average for path, average in zip(paths, self.averages)})

    def reset(self) -> None:
        for average, weight in zip(self.averages, self.weights):
            average.assign(tf.convert_to_tensor(weight))

    def update(self) -> None:
        """average <- decay * average + (1 - decay) * weight, for every weight (after an applied update)."""
        for average, weight in zip(self.averages, self.weights):
            average.assign(self.decay * average + (1.0 - self.decay) * tf.cast(tf.convert_to_tensor(weight),
                                                                               average.dtype))


def _saved_keys(checkpoint: str | Path) -> set[str]:
    """The weight keys of a checkpoint's average (empty: it has none)."""
    prefix = f"{CHECKPOINT_KEY}/by_path/"
    return {name[len(prefix):].split("/", 1)[0] for name, _ in tf.train.list_variables(str(checkpoint))
            if name.startswith(prefix)}


def checkpoint_has_average(checkpoint: str | Path) -> bool:
    """Whether a checkpoint (a prefix) holds a weight average."""
    return bool(_saved_keys(checkpoint))


def load_average_into(model: Any, checkpoint: str | Path) -> int:
    """Overwrite ``model``'s weights with the checkpoint's average of them, where it has one; returns how many weights
    it held (0: no average, the model keeps the weights it has). Weights the average does not hold (a module frozen
    while training, which kept its weights) stay as restored from ``model``. An average holding a weight this model
    does not have is a RunError: half-averaged weights are never used silently."""
    saved = _saved_keys(checkpoint)
    if not saved:
        return 0
    held = {_key(variable.path): variable for variable in model.variables if _key(variable.path) in saved}
    if len(held) != len(saved):
        missing = sorted(saved - set(held))
        raise RunError(f"Checkpoint {checkpoint} holds a weight average (training.ema_decay) of {len(saved)} weights, "
                       f"{len(missing)} of which this config's model does not have (e.g. "
                       f"{missing[0].replace(':', '/')}); load it with the run's own config.yaml.")
    status = tf.train.Checkpoint(**{CHECKPOINT_KEY: _ByPath(held)}).restore(str(checkpoint)).expect_partial()
    status.assert_existing_objects_matched()
    return len(held)

"""The optimizer: AdamW with one fused kernel per variable, on a linear warm-up then cosine / noam / constant
learning-rate schedule (never below min lr)."""

from __future__ import annotations

import math
from typing import Any

import keras
import tensorflow as tf

from myxtts.config import Config, TrainingConfig


@keras.saving.register_keras_serializable(package="myxtts")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """lr(step): ``learning_rate * step / warmup`` during warm-up, then

    - cosine: from learning_rate down to min_learning_rate at max_steps;
    - noam: ``learning_rate * sqrt(warmup / step)`` (inverse square root);
    - constant: learning_rate.

    ``step`` is the optimizer's update count (``optimizer.iterations``), starting at 0; the first
    update uses step 1 so warm-up never applies a zero learning rate.
    """

    def __init__(self, learning_rate: float, warmup_steps: int, max_steps: int, decay: str,
                 min_learning_rate: float):
        self.learning_rate, self.warmup_steps, self.max_steps = learning_rate, warmup_steps, max_steps
        self.decay, self.min_learning_rate = decay, min_learning_rate

    @classmethod
    def from_training_config(cls, t: TrainingConfig) -> "WarmupDecay":
        return cls(t.learning_rate, t.warmup_steps, t.max_steps, t.decay, t.min_learning_rate)

    def __call__(self, step):
        step = tf.cast(step, tf.float32) + 1.0
        peak = tf.constant(self.learning_rate, tf.float32)
        warmup = float(max(self.warmup_steps, 1))
        warm = peak * tf.minimum(1.0, step / warmup) if self.warmup_steps > 0 else peak
        after = tf.maximum(step - self.warmup_steps, 0.0)
        if self.decay == "cosine":
            span = float(max(self.max_steps - self.warmup_steps, 1))
            progress = tf.minimum(after / span, 1.0)
            decayed = self.min_learning_rate + (self.learning_rate - self.min_learning_rate) * 0.5 * (
                1.0 + tf.cos(math.pi * progress))
        elif self.decay == "noam":
            decayed = peak * tf.sqrt(warmup / tf.maximum(step, warmup))
        else:
            decayed = peak
        lr = tf.where(step <= self.warmup_steps, warm, decayed)
        return tf.maximum(lr, self.min_learning_rate)

    def get_config(self) -> dict:
        return {"learning_rate": self.learning_rate, "warmup_steps": self.warmup_steps,
                "max_steps": self.max_steps, "decay": self.decay, "min_learning_rate": self.min_learning_rate}


@keras.saving.register_keras_serializable(package="myxtts")
class FusedAdamW(keras.optimizers.Adam):
    """Keras' AdamW update (decoupled weight decay, then Adam) with TF's fused ``ResourceApplyAdam`` kernel.

    The arithmetic is Keras' ``AdamW`` (same slots, same formula: ``var -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m /
    (sqrt(v) + eps)`` after ``var -= var * weight_decay * lr``), but each variable costs a few graph ops instead
    of ~25, and the schedule is evaluated once per update instead of once per variable (Keras' weight decay
    reads ``self.learning_rate`` for each variable). A compiled train step therefore traces its update much
    faster, a large share of a small model's warm-up.
    """

    def __init__(self, learning_rate: Any, weight_decay: float, **kwargs: Any) -> None:
        kwargs.pop("amsgrad", None)  # get_config's; the fused kernel has no AMSGrad variant
        super().__init__(learning_rate=learning_rate, weight_decay=None, amsgrad=False, **kwargs)
        self.decoupled_weight_decay = float(weight_decay)

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        dtype = variable.dtype
        lr = tf.cast(learning_rate, dtype)
        if self.decoupled_weight_decay and self._use_weight_decay(variable):
            variable.assign_sub(variable * tf.cast(self.decoupled_weight_decay, dtype) * lr)
        step = tf.cast(self.iterations + 1, dtype)
        index = self._get_variable_index(variable)
        momentum, velocity = self._momentums[index], self._velocities[index]
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=momentum.value.handle, v=velocity.value.handle,
            beta1_power=tf.pow(tf.cast(self.beta_1, dtype), step), beta2_power=tf.pow(tf.cast(self.beta_2, dtype), step),
            lr=lr, beta1=tf.cast(self.beta_1, dtype), beta2=tf.cast(self.beta_2, dtype),
            epsilon=tf.cast(self.epsilon, dtype), grad=tf.cast(gradient, dtype), use_locking=False)

    def get_config(self) -> dict:
        return {**super().get_config(), "weight_decay": self.decoupled_weight_decay}


def make_optimizer(cfg: Config) -> keras.optimizers.Optimizer:
    """AdamW on the warm-up/decay schedule; float16 wraps it in Keras' dynamic LossScaleOptimizer.

    Create it inside ``strategy.scope()``. Clipping is done by the compiled step (global norm over the
    all-reduced, accumulated gradients), not by the optimizer.
    """
    t = cfg.training
    optimizer = FusedAdamW(learning_rate=WarmupDecay.from_training_config(t), weight_decay=t.weight_decay,
                           beta_1=0.9, beta_2=0.98, epsilon=1e-9, name="adamw")
    if t.mixed_precision == "float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer

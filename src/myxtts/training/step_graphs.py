"""What one compiled train / validate step computes in its graph, over the state it changes (``StepGraphs``: the
model's and the mel discriminator's optimizers, counters, accumulators, the weights' average); ``training.steps``
compiles these bodies per batch shape and dispatches each batch to its shape's function.

One training call = one micro-batch. Inside the graph it:

1. runs forward + backward on every replica (each takes its static slice of the global batch,
   see ``distribute.replica_slice``), unscales float16 gradients (divides by the loss scale the
   loss was multiplied by: exact, since the scale is a power of two) and all-reduces them (SUM).
   Every replica's loss is a sum over its real frames / tokens divided by the real counts of the
   *global* batch (``model.losses.loss_normalizers``: the whole batch's counts, or with gradient
   accumulation the counts of every micro-batch of the cycle, passed in by ``train_cycle``), so the
   summed gradients equal one big batch's exactly, whatever the buckets' lengths;
2. with ``gradient_accumulation_steps`` N > 1 adds them into non-trainable accumulator variables;
3. on the N-th micro-step (or every step when N == 1) computes the global gradient norm and applies
   the clipped gradients inside a ``tf.cond`` only if the loss and the norm are finite; otherwise the
   update is skipped in the graph and ``nonfinite_in_a_row`` counts it (the Python loop stops after
   ``training.max_nonfinite_steps``). The update does not depend on the batch's shape: it is one tf.function
   (``apply_function``) that every bucket's step calls, so its optimizer ops are traced once, not once per bucket;
4. float16: updates the Keras ``LossScaleOptimizer``'s dynamic scale (halve on overflow, double
   after its growth interval of good steps), using its own variables so it checkpoints with it.

With a mel discriminator (``model.mel_adversarial_weight`` / ``model.mel_feature_matching_weight`` > 0) the same step
also computes its loss and gradients (model/mel_discriminator.py); they follow the model's gradients through steps 1-3
(accumulated, all-reduced, checked for finiteness, clipped by their own norm) and its own optimizer applies them.

The ``tf.cond`` that applies runs in cross-replica context with ``strategy.run`` inside (a branch in
a replica context may not synchronise replicas). Keras' optimizer all-reduces (SUM) the gradients it
is given in a replica context; ours are already reduced, so each replica hands it ``grads / replicas``.
"""

from __future__ import annotations

from typing import Any, Callable

import keras
import tensorflow as tf

from myxtts.config import Config
from myxtts.model import TTSModel, compute_losses, loss_normalizers
from myxtts.model.losses import scored_frame_mask
from myxtts.model.mel_discriminator import ADVERSARIAL_LOSS_KEYS, MelDiscriminator, adversarial_losses
from myxtts.model.weight_average import CHECKPOINT_KEY as AVERAGE_KEY, WeightAverage
from myxtts.training.distribute import replica_slice
from myxtts.training.schedule import make_optimizer

SUM = tf.distribute.ReduceOp.SUM
LOSS_KEYS = ("total", "mel_l1_before", "mel_l1_after", "mel_l2", "mel_delta", "forward_sum", "duration", "binarization",
             "real_frames")


class StepGraphs:
    """The state the acoustic steps change and the graph bodies of one step (``TrainingSteps`` compiles them)."""

    def __init__(self, model: TTSModel, optimizer: keras.optimizers.Optimizer, cfg: Config,
                 strategy: tf.distribute.Strategy,
                 discriminator_optimizer: keras.optimizers.Optimizer | None = None):
        """``discriminator_optimizer``: the mel discriminator's (with ``model.mel_adversarial_weight`` or
        ``model.mel_feature_matching_weight`` > 0); None: one like the model's (``training.*``)."""
        self.model, self.optimizer, self.cfg, self.strategy = model, optimizer, cfg, strategy
        t = cfg.training
        self.accumulation = t.gradient_accumulation_steps
        self.steps_per_execution = t.steps_per_execution  # K > 1: each train call is a graph loop of K steps
        self.float16 = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        self.replicas = strategy.num_replicas_in_sync
        m = cfg.model
        self.adversarial = m.mel_adversarial_weight > 0 or m.mel_feature_matching_weight > 0
        self.loss_keys = (*LOSS_KEYS, *(("pitch",) if m.pitch_conditioning else ()),
                          *(("pitch_level",) if m.pitch_level else ()),
                          *(ADVERSARIAL_LOSS_KEYS if self.adversarial else ()))
        self.model_variables = model.trainable_variables
        with strategy.scope():
            # the mel discriminator (model/mel_discriminator.py) and its optimizer, trained in the same step; its
            # variables follow the model's in every gradient list (accumulated, all-reduced and checked together)
            self.discriminator, self.discriminator_optimizer = None, None
            if self.adversarial:
                self.discriminator = MelDiscriminator(m.mel_discriminator_channels or MelDiscriminator.DEFAULT_CHANNELS,
                                                      name="mel_discriminator")
                self.discriminator.build((None, None, cfg.audio.n_mels))
                self.discriminator_optimizer = discriminator_optimizer or make_optimizer(cfg)
                self.discriminator_optimizer.build(self.discriminator.trainable_variables)
            self.variables = [*self.model_variables, *(self.discriminator.trainable_variables
                                                       if self.adversarial else [])]
            # optimizer slots now, so no compiled step creates variables (that would trace twice)
            optimizer.build(self.model_variables)
            self.micro_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="micro_step")
            self.nonfinite_in_a_row = tf.Variable(0, dtype=tf.int64, trainable=False, name="nonfinite_in_a_row")
            self.nonfinite_total = tf.Variable(0, dtype=tf.int64, trainable=False, name="nonfinite_total")
            self.accumulators = [tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False,
                                             name=f"accumulator_{i}") for i, v in enumerate(self.variables)] \
                if self.accumulation > 1 else []
            # training.ema_decay > 0: the weights' average, updated after each applied update (model/weight_average.py)
            self.weight_average = WeightAverage(self.model_variables, t.ema_decay) if t.ema_decay > 0 else None
            # the cycle's losses so far (each micro-batch adds its share of the global batch's loss)
            self.loss_accumulators = {key: tf.Variable(0.0, trainable=False, name=f"loss_accumulator_{key}")
                                      for key in self.loss_keys} if self.accumulation > 1 else {}
        # XLA with several replicas: jit_compile on the whole step would place every replica's variables in one
        # XLA cluster ("tf.Variable on a different device"), so each replica's forward + backward is compiled
        # instead (as Keras does) and the all-reduce and the update stay outside XLA
        self._compiled_local_gradients = tf.function(self._local_gradients, jit_compile=True, autograph=False) \
            if t.enable_xla_compilation and self.replicas > 1 and t.enable_graph_mode else None
        # the update does not depend on the batch's shape: one tf.function (traced once, at the first bucket's trace)
        # that every bucket's train step calls, rather than the optimizer's ops traced again into each of them
        self.apply_function: Callable = self._apply_graph if not t.enable_graph_mode else tf.function(
            self._apply_graph, autograph=False, reduce_retracing=False,
            input_signature=[[tf.TensorSpec(v.shape, tf.float32) for v in self.variables], tf.TensorSpec([], tf.bool)])

    # ---- state that must be checkpointed (and put back after the warm-up) ---------------------------
    def checkpoint_objects(self) -> dict[str, Any]:
        objects = {"micro_step": self.micro_step, "nonfinite_in_a_row": self.nonfinite_in_a_row,
                   "nonfinite_total": self.nonfinite_total}
        objects.update({f"loss_accumulator_{k}": v for k, v in self.loss_accumulators.items()})
        objects.update({f"accumulator_{i}": a for i, a in enumerate(self.accumulators)})
        if self.adversarial:
            objects.update(mel_discriminator=self.discriminator,
                           mel_discriminator_optimizer=self.discriminator_optimizer)
        if self.weight_average is not None:
            objects[AVERAGE_KEY] = self.weight_average.trackable
        return objects

    @property
    def update_step(self) -> int:
        """Optimizer updates applied so far (the trainer's step)."""
        return int(self.optimizer.iterations.numpy())

    def state_variables(self) -> list:
        """Every variable a compiled step can change, each once: model, optimizer, counters, accumulators."""
        candidates = [*self.model.variables, *self.optimizer.variables, self.micro_step, self.nonfinite_in_a_row,
                      self.nonfinite_total, *self.loss_accumulators.values(), *self.accumulators]
        if self.adversarial:
            candidates += [*self.discriminator.variables, *self.discriminator_optimizer.variables]
        if self.weight_average is not None:
            candidates += self.weight_average.averages
        return list({id(variable): variable for variable in candidates}.values())  # first occurrence order

    # ---- graph bodies -----------------------------------------------------------------------------
    def _dropout_seed(self) -> tf.Tensor:
        base = tf.constant([self.cfg.training.seed, 0], tf.int64)
        seed = tf.random.experimental.stateless_fold_in(base, self.micro_step)
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        return tf.random.experimental.stateless_fold_in(seed, tf.cast(replica, tf.int64))

    def batch_normalizers(self, batch: dict) -> dict[str, tf.Tensor]:
        """This batch's real counts (``loss_normalizers``): what its losses are divided by without accumulation."""
        return loss_normalizers(batch, int(batch["mel"].shape[-1]))

    def _local_gradients(self, local: dict, normalizers: dict, seed: tf.Tensor) -> tuple[dict, list[tf.Tensor]]:
        """Forward + backward on this replica's rows: (losses, float32 gradients), before any all-reduce."""
        with tf.GradientTape(persistent=self.adversarial) as tape:
            outputs = self.model(local, training=True, seed=seed)
            # this replica's sums / the global batch's counts: summed over replicas and micro-batches
            losses = compute_losses(local, outputs, self.cfg, normalizers, step=self.optimizer.iterations)
            if self.adversarial:
                m = self.cfg.model
                frames = tf.maximum(normalizers["scored_mel_elements"] / float(self.cfg.audio.n_mels), 1.0)
                scored = scored_frame_mask(local, tf.shape(local["mel"])[1])  # [batch, frames]
                losses.update(adversarial_losses(self.discriminator, local["mel"], outputs["mel_after"], scored,
                                                 frames))
                losses["total"] = losses["total"] + m.mel_adversarial_weight * losses["mel_adversarial"] \
                    + m.mel_feature_matching_weight * losses["mel_feature_matching"]
            loss = losses["total"]
            scaled = self.optimizer.scale_loss(loss) if self.float16 else loss
        grads = tape.gradient(scaled, self.model_variables)
        if self.adversarial:  # the discriminator's loss against its own variables only
            grads += tape.gradient(losses["mel_discriminator"], self.discriminator.trainable_variables)
            del tape
        grads = [tf.convert_to_tensor(g, dtype_hint=tf.float32) for g in grads]  # IndexedSlices -> dense
        if self.float16:
            scale = tf.cast(self.optimizer.dynamic_scale, tf.float32)
            grads = [tf.cast(g, tf.float32) / scale for g in grads]
        return losses, grads

    def _replica_gradients(self, batch: dict, normalizers: dict) -> dict:
        local = replica_slice(batch, self.replicas)
        compute = self._compiled_local_gradients or self._local_gradients
        losses, grads = compute(local, normalizers, self._dropout_seed())
        if self.replicas > 1:
            grads = tf.distribute.get_replica_context().all_reduce(SUM, grads)
        report = dict(losses)  # shares of the global loss: the SUM over replicas is the global batch's loss
        report["real_frames"] = tf.cast(tf.reduce_sum(local["mel_lengths"]), tf.float32)
        return {"losses": report, "grads": grads}

    def _replica_apply(self, grads: list[tf.Tensor]) -> None:
        if self.replicas > 1:
            grads = [g / float(self.replicas) for g in grads]  # Keras sums them across replicas again
        optimizer = self.optimizer.inner_optimizer if self.float16 else self.optimizer
        count = len(self.model_variables)
        optimizer.apply(grads[:count], self.model_variables)
        if self.adversarial:
            self.discriminator_optimizer.apply(grads[count:], self.discriminator.trainable_variables)

    def _apply_graph(self, grads: list[tf.Tensor], apply_now: tf.Tensor) -> tf.Tensor:
        """The optimizer updates if ``apply_now`` (a ``tf.cond`` in cross-replica context); whether they ran."""
        def apply() -> tf.Tensor:
            self.strategy.run(self._replica_apply, args=(grads,))
            if self.weight_average is not None:  # after the update (automatic control dependencies keep the order)
                self.weight_average.update()
            return tf.constant(True)

        return tf.cond(apply_now, apply, lambda: tf.constant(False))

    def _update_loss_scale(self, boundary: tf.Tensor, applied: tf.Tensor) -> None:
        """Keras LossScaleOptimizer policy on its own variables: /2 on overflow, x2 after growth steps."""
        scale, counter = self.optimizer.dynamic_scale, self.optimizer.step_counter
        overflow = tf.logical_and(boundary, tf.logical_not(applied))
        grow = tf.logical_and(applied, tf.equal(counter, self.optimizer.dynamic_growth_steps - 1))
        scale.assign(tf.where(overflow, scale * 0.5, tf.where(grow, scale * 2.0, scale)))
        counter.assign(tf.where(boundary, tf.where(applied & ~grow, counter + 1, tf.zeros_like(counter)), counter))

    def train_graph(self, batch: dict, normalizers: dict | None = None) -> dict:
        """One micro-batch. ``normalizers``: the global batch's real counts (required with gradient
        accumulation, where the global batch spans several calls); None: this batch's own counts."""
        if normalizers is None:
            normalizers = self.batch_normalizers(batch)
        per_replica = self.strategy.run(self._replica_gradients, args=(batch, normalizers))
        losses = {k: self.strategy.reduce(SUM, v, axis=None) for k, v in per_replica["losses"].items()}
        # identical on every replica after the all-reduce: take the first
        grads = [self.strategy.experimental_local_results(g)[0] for g in per_replica["grads"]]
        if self.accumulation > 1:
            for accumulator, grad in zip(self.accumulators, grads):
                accumulator.assign_add(grad)
            for key, accumulator in self.loss_accumulators.items():
                accumulator.assign_add(losses[key])
            # what is reported is the cycle's loss so far: at the boundary, the global batch's loss
            losses.update({key: accumulator.read_value() for key, accumulator in self.loss_accumulators.items()})
            grads = [accumulator.read_value() for accumulator in self.accumulators]
            boundary = tf.equal((self.micro_step + 1) % self.accumulation, 0)
            loss_finite = tf.math.is_finite(losses["total"])
        else:
            boundary = tf.constant(True)
            loss_finite = tf.math.is_finite(losses["total"])
        # the model's gradient norm (reported, clipped); the discriminator's gradients are clipped by their own
        count = len(self.model_variables)
        grad_norm = tf.linalg.global_norm(grads[:count])  # inf/nan iff some gradient is
        finite = tf.logical_and(loss_finite, tf.math.is_finite(grad_norm))
        discriminator_norm = tf.linalg.global_norm(grads[count:]) if self.adversarial else None
        if self.adversarial:
            finite = tf.logical_and(finite, tf.math.is_finite(discriminator_norm))
        apply_now = tf.logical_and(boundary, finite)
        clip = self.cfg.training.gradient_clip_norm
        if clip > 0:
            model_grads, _ = tf.clip_by_global_norm(grads[:count], clip, use_norm=grad_norm)
            discriminator_grads = tf.clip_by_global_norm(grads[count:], clip, use_norm=discriminator_norm)[0] \
                if self.adversarial else []
            grads = [*model_grads, *discriminator_grads]

        applied = self.apply_function(grads, apply_now)
        skipped = tf.logical_and(boundary, tf.logical_not(finite))
        self.nonfinite_in_a_row.assign(tf.where(skipped, self.nonfinite_in_a_row + 1,
                                                tf.where(boundary, tf.zeros_like(self.nonfinite_in_a_row),
                                                         self.nonfinite_in_a_row)))
        self.nonfinite_total.assign_add(tf.cast(skipped, tf.int64))
        if self.float16:
            self._update_loss_scale(boundary, applied)
        if self.accumulation > 1:
            def reset() -> tf.Tensor:
                for accumulator in [*self.accumulators, *self.loss_accumulators.values()]:
                    accumulator.assign(tf.zeros_like(accumulator))
                return tf.constant(True)
            tf.cond(boundary, reset, lambda: tf.constant(False))
        self.micro_step.assign_add(1)
        learning_rate = self.optimizer.learning_rate
        return {**losses, "grad_norm": grad_norm, "applied": applied, "boundary": boundary,
                "nonfinite_in_a_row": self.nonfinite_in_a_row.read_value(),
                "learning_rate": tf.cast(learning_rate, tf.float32)}

    def train_block(self, block: dict) -> dict:
        """K optimizer steps (``training.steps_per_execution``) on a block of K batches of one bucket
        ``{key: [K, batch, ...]}``, in one graph: a ``tf.while_loop`` over ``train_graph``, so Python
        dispatches once per K steps. Metrics are reduced in the graph: losses and the gradient norm are
        means over the K steps, ``real_frames`` and ``applied`` (updates applied) are sums."""
        steps = self.steps_per_execution
        keys = (*self.loss_keys, "grad_norm")

        def body(index, totals, applied):
            batch = {key: value[index] for key, value in block.items()}  # [batch, ...], static shapes
            out = self.train_graph(batch)
            totals = {key: totals[key] + tf.cast(out[key], tf.float32) for key in keys}
            return index + 1, totals, applied + tf.cast(out["applied"], tf.int32)

        zeros = {key: tf.constant(0.0) for key in keys}
        _, totals, applied = tf.while_loop(lambda index, *_: index < steps, body,
                                           (tf.constant(0), zeros, tf.constant(0)))
        out = {key: value if key == "real_frames" else value / float(steps) for key, value in totals.items()}
        out.update(applied=applied, boundary=tf.constant(True),
                   nonfinite_in_a_row=self.nonfinite_in_a_row.read_value(),
                   learning_rate=tf.cast(self.optimizer.learning_rate, tf.float32))
        return out

    def _replica_validate(self, batch: dict, normalizers: dict) -> dict:
        local = replica_slice(batch, self.replicas)
        outputs = self.model(local, training=False)  # teacher-forced on the true decoder inputs
        losses = compute_losses(local, outputs, self.cfg, normalizers, step=self.optimizer.iterations)
        losses["real_frames"] = tf.cast(tf.reduce_sum(local["mel_lengths"]), tf.float32)
        return losses

    def validate_graph(self, batch: dict) -> dict:
        per_replica = self.strategy.run(self._replica_validate, args=(batch, self.batch_normalizers(batch)))
        return {k: self.strategy.reduce(SUM, v, axis=None) for k, v in per_replica.items()}

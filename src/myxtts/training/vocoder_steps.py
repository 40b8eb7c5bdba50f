"""The vocoder's two compiled steps (``training.vocoder_trainer`` traces each once, with the segments' signature).

- ``reconstruction_step``: the generator alone on the reconstruction losses (mel L1, multi-resolution STFT);
- ``adversarial_step``: the discriminators and the generator on the hinge losses, feature matching and the
  reconstruction losses, in the order ``vocoder.discriminator_update`` names:
  ``alternating`` (HiFi-GAN, Vocos): the discriminators step on the generated audio, then the generator steps
  against the updated discriminators (two discriminator passes per step);
  ``simultaneous``: both gradients from one discriminator pass (half the discriminator cost, a weaker signal: the
  generator always answers a discriminator one step behind).
A non-finite loss or gradient skips the step's updates in the graph and is counted (``nonfinite_in_a_row``).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from myxtts.mel import MelFrontend
from myxtts.training.schedule import FusedAdamW, WarmupDecay
from myxtts.vocoder import losses as vocoder_losses


class GanSteps:
    """The optimizers, the NaN-guard counters and the two step functions of one vocoder GAN."""

    def __init__(self, cfg: Any, generator: Any, discriminators: Any) -> None:
        t, v = cfg.training, cfg.vocoder
        self.cfg, self.generator, self.discriminators = cfg, generator, discriminators
        self.frontend = MelFrontend(cfg.audio)
        self.generator_optimizer = FusedAdamW(WarmupDecay.from_training_config(t), weight_decay=t.weight_decay,
                                              beta_1=0.8, beta_2=0.99, epsilon=1e-8, name="generator_adamw")
        self.discriminator_optimizer = FusedAdamW(v.discriminator_learning_rate, weight_decay=t.weight_decay,
                                                  beta_1=0.8, beta_2=0.99, epsilon=1e-8, name="discriminator_adamw")
        self.generator_optimizer.build(generator.trainable_variables)
        self.discriminator_optimizer.build(discriminators.trainable_variables)
        self.nonfinite_in_a_row = tf.Variable(0, dtype=tf.int64, trainable=False, name="nonfinite_in_a_row")
        self.nonfinite_total = tf.Variable(0, dtype=tf.int64, trainable=False, name="nonfinite_total")

    def checkpoint_objects(self) -> dict[str, Any]:
        return {"generator": self.generator, "discriminators": self.discriminators,
                "generator_optimizer": self.generator_optimizer,
                "discriminator_optimizer": self.discriminator_optimizer,
                "nonfinite_in_a_row": self.nonfinite_in_a_row, "nonfinite_total": self.nonfinite_total}

    def state(self) -> list[tf.Variable]:
        """Every variable a step changes (the warm-up puts them back after running each step once)."""
        return [*self.generator.variables, *self.discriminators.variables, *self.generator_optimizer.variables,
                *self.discriminator_optimizer.variables, self.nonfinite_in_a_row, self.nonfinite_total]

    def _reconstruction(self, generated: tf.Tensor, audio: tf.Tensor) -> dict[str, tf.Tensor]:
        v = self.cfg.vocoder
        mel = vocoder_losses.mel_l1(self.frontend, generated, audio)
        stft = vocoder_losses.multi_resolution_stft(generated, audio)
        return {"mel_l1": mel, "stft": stft, "reconstruction": v.mel_loss_weight * mel + v.stft_loss_weight * stft}

    def _apply(self, optimizer: Any, grads: list, variables: list, finite: tf.Tensor) -> None:
        clip = self.cfg.training.gradient_clip_norm
        if clip > 0:
            grads, _ = tf.clip_by_global_norm(grads, clip)

        def apply() -> tf.Tensor:
            optimizer.apply_gradients(zip(grads, variables))
            return tf.constant(True)

        tf.cond(finite, apply, lambda: tf.constant(False))

    def _count(self, finite: tf.Tensor) -> dict[str, tf.Tensor]:
        self.nonfinite_in_a_row.assign(tf.where(finite, tf.zeros_like(self.nonfinite_in_a_row),
                                                self.nonfinite_in_a_row + 1))
        self.nonfinite_total.assign_add(tf.cast(tf.logical_not(finite), tf.int64))
        return {"nonfinite_in_a_row": self.nonfinite_in_a_row.read_value()}

    def reconstruction_step(self, batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        variables = self.generator.trainable_variables
        with tf.GradientTape() as tape:
            generated = self.generator(batch["mel"], training=True)  # [batch, segment_samples]
            losses = self._reconstruction(generated, batch["audio"])
        grads = tape.gradient(losses["reconstruction"], variables)
        finite = tf.logical_and(tf.math.is_finite(losses["reconstruction"]),
                                tf.math.is_finite(tf.linalg.global_norm(grads)))
        self._apply(self.generator_optimizer, grads, variables, finite)
        zero = tf.constant(0.0)
        return {**losses, "total": losses["reconstruction"], "discriminator": zero, "adversarial": zero,
                "feature_matching": zero, **self._count(finite)}

    def adversarial_step(self, batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        if self.cfg.vocoder.discriminator_update == "alternating":
            return self._alternating_step(batch)
        return self._simultaneous_step(batch)

    def _generator_total(self, generated: tf.Tensor, audio: tf.Tensor, real_outputs: list,
                         fake_outputs: list) -> dict[str, tf.Tensor]:
        v = self.cfg.vocoder
        losses = self._reconstruction(generated, audio)
        adversarial = vocoder_losses.generator_hinge(fake_outputs)
        feature_matching = vocoder_losses.feature_matching(real_outputs, fake_outputs)
        total = (losses["reconstruction"] + v.adversarial_loss_weight * adversarial
                 + v.feature_loss_weight * feature_matching)
        return {**losses, "total": total, "adversarial": adversarial, "feature_matching": feature_matching}

    @staticmethod
    def _finite(loss: tf.Tensor, grads: list) -> tf.Tensor:
        return tf.logical_and(tf.math.is_finite(loss), tf.math.is_finite(tf.linalg.global_norm(grads)))

    def _alternating_step(self, batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        generator_variables = self.generator.trainable_variables
        discriminator_variables = self.discriminators.trainable_variables
        with tf.GradientTape() as generator_tape:
            generated = self.generator(batch["mel"], training=True)  # [batch, segment_samples]
            with generator_tape.stop_recording():
                # 1. the discriminators learn to tell this batch's generated audio from the real
                with tf.GradientTape() as discriminator_tape:
                    discriminator_loss = vocoder_losses.discriminator_hinge(
                        self.discriminators(batch["audio"], training=True),
                        self.discriminators(tf.stop_gradient(generated), training=True))
                discriminator_grads = discriminator_tape.gradient(discriminator_loss, discriminator_variables)
                discriminator_finite = self._finite(discriminator_loss, discriminator_grads)
                self._apply(self.discriminator_optimizer, discriminator_grads, discriminator_variables,
                            discriminator_finite)
                # the real audio's feature maps are targets only: no gradient through them
                real_outputs = self.discriminators(batch["audio"], training=True)
            # 2. the generator answers the updated discriminators
            fake_outputs = self.discriminators(generated, training=True)
            losses = self._generator_total(generated, batch["audio"], real_outputs, fake_outputs)
        generator_grads = generator_tape.gradient(losses["total"], generator_variables)
        generator_finite = self._finite(losses["total"], generator_grads)
        self._apply(self.generator_optimizer, generator_grads, generator_variables, generator_finite)
        return {**losses, "discriminator": discriminator_loss,
                **self._count(tf.logical_and(discriminator_finite, generator_finite))}

    def _simultaneous_step(self, batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        generator_variables = self.generator.trainable_variables
        discriminator_variables = self.discriminators.trainable_variables
        with tf.GradientTape(persistent=True) as tape:
            generated = self.generator(batch["mel"], training=True)  # [batch, segment_samples]
            real_outputs = self.discriminators(batch["audio"], training=True)
            fake_outputs = self.discriminators(generated, training=True)
            discriminator_loss = vocoder_losses.discriminator_hinge(real_outputs, fake_outputs)
            losses = self._generator_total(generated, batch["audio"], real_outputs, fake_outputs)
        generator_grads = tape.gradient(losses["total"], generator_variables)
        discriminator_grads = tape.gradient(discriminator_loss, discriminator_variables)
        del tape
        finite = tf.logical_and(self._finite(losses["total"], generator_grads),
                                self._finite(discriminator_loss, discriminator_grads))
        self._apply(self.discriminator_optimizer, discriminator_grads, discriminator_variables, finite)
        self._apply(self.generator_optimizer, generator_grads, generator_variables, finite)
        return {**losses, "discriminator": discriminator_loss, **self._count(finite)}

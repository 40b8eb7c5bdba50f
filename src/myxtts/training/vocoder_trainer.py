"""The vocoder trainer (``myxtts train-vocoder``): a GAN in named stages: config, data, model, checkpoint, compile, loop.

Every batch is one static shape (fixed-length segments, ``myxtts.data.vocoder_segments``), so each of the two steps
is one compiled graph, traced and run once at warm-up (weights restored after) and never again:
- ``reconstruction_step``: the generator alone on the reconstruction losses (mel L1, multi-resolution STFT), for the
  first ``vocoder.adversarial_start_step`` steps (a GAN vocoder learns faster when it starts from a generator that
  already reconstructs, and this step costs a fraction of an adversarial one);
- ``adversarial_step``: the discriminators and the generator updated together from one forward pass of each
  discriminator on the real and the generated audio (hinge losses, feature matching, the reconstruction losses).
  Both gradients are taken from the same discriminator weights: on a CPU the discriminators are most of the step's
  cost, and this halves their passes against alternating updates.
A non-finite loss or gradient skips both updates in the graph and is counted (``training.max_nonfinite_steps``).

Vocoder run directory::

    WORKDIR/config.yaml   resolved config        WORKDIR/vocoder.json  family, sizes, audio front-end (see neural.py)
    WORKDIR/checkpoints/  generator, discriminators, both optimizers, counters, the data iterator
    WORKDIR/metrics.jsonl, WORKDIR/tensorboard/{train,validation}/, WORKDIR/retraces.jsonl, WORKDIR/run.lock
    WORKDIR/acoustic-mels/  with --acoustic-run: that model's teacher-forced mels (source.json names its checkpoint)
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any, Callable

import keras
import numpy as np
import tensorflow as tf

from myxtts.config import Config, TrainingConfig, save_config
from myxtts.diagnostics.tf_warning import expected_traces
from myxtts.locks import lock_cache_for_reading, lock_run_directory
from myxtts.training.checkpoint import Checkpoints
from myxtts.training.interrupt import StopOnSignals
from myxtts.training.monitor import MetricsLog, StepTimer, TraceAccounting
from myxtts.training.schedule import FusedAdamW, WarmupDecay
from myxtts.training.stages import StagedRun

logger = logging.getLogger(__name__)

# training keys only the acoustic trainer reads: set in a vocoder config, they would do nothing
ACOUSTIC_ONLY_TRAINING_KEYS = ("gradient_accumulation_steps", "steps_per_execution", "mixed_precision",
                               "enable_xla_compilation", "listen_sentences", "distribution", "init_mel_stats",
                               "freeze")


ACOUSTIC_MELS_DIR = "acoustic-mels"  # an acoustic run's teacher-forced mels, in the cache's utterance layout


class VocoderTrainingError(ValueError):
    """A vocoder run cannot start or go on (bad keys, a run directory in the way, non-finite steps)."""


def check_vocoder_keys(cfg: Config) -> None:
    defaults = TrainingConfig()
    for key in ACOUSTIC_ONLY_TRAINING_KEYS:
        if getattr(cfg.training, key) != getattr(defaults, key):
            raise VocoderTrainingError(f"Config key 'training.{key}' ({getattr(cfg.training, key)!r}) does nothing in "
                                       "train-vocoder (it configures the acoustic trainer); remove it.")


class VocoderTrainer(StagedRun):
    def __init__(self, cfg: Config, workdir: str | Path, resume: bool = False, *, init_from: str | Path | None = None,
                 acoustic_run: str | Path | None = None, progress: bool = True, echo: Callable[[str], None] = print,
                 stop_on_signals: bool = False) -> None:
        """``init_from``: a vocoder (run or packed) whose generator (and discriminators, when it has them) start
        this run; ``acoustic_run``: train on that acoustic model's teacher-forced mels of the cache's clips
        (``vocoder.acoustic_mels``) instead of the recordings' mels."""
        self.cfg, self.workdir, self.resume = cfg, Path(workdir), resume
        self.init_from, self.acoustic_run, self.mel_dir = init_from, acoustic_run, None
        self.progress, self.echo, self.stop_on_signals = progress, echo, stop_on_signals
        self.locks: list[Any] = []

    # ---- stages ------------------------------------------------------------------------------------
    def stage_config(self) -> None:
        check_vocoder_keys(self.cfg)
        t = self.cfg.training
        if t.deterministic:
            tf.config.experimental.enable_op_determinism()
        keras.utils.set_random_seed(t.seed)
        tf.config.run_functions_eagerly(t.enable_eager_debug)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.locks.append(lock_run_directory(self.workdir))
        save_config(self.cfg, self.workdir / "config.yaml")

    def stage_data(self) -> None:
        from myxtts.data.vocoder_segments import VocoderSegments, validation_clips

        self.locks.append(lock_cache_for_reading(self.cfg.cache_dir, self.echo))
        if self.acoustic_run is not None:
            from myxtts.vocoder.acoustic_mels import write_acoustic_mels

            self.mel_dir = write_acoustic_mels(self.cfg, self.acoustic_run, self.workdir / ACOUSTIC_MELS_DIR,
                                               self.progress, self.echo)
        self.segments = VocoderSegments(self.cfg, "train", mel_dir=self.mel_dir)
        self.signature = self.segments.signature()
        self.validation = validation_clips(self.cfg, mel_dir=self.mel_dir)
        self.iterator = iter(self.segments.dataset())
        self.echo(f"vocoder data: {len(self.segments)} train clips ({len(self.segments.skipped)} shorter than one "
                  f"segment, skipped), segments of {self.segments.segment_samples} samples, batch "
                  f"{self.segments.batch_size}; {len(self.validation)} validation clips")

    def stage_model(self) -> None:
        from myxtts.audio import MelFrontend
        from myxtts.vocoder.discriminators import build_discriminators
        from myxtts.vocoder.generators import build_generator

        t, v = self.cfg.training, self.cfg.vocoder
        self.frontend = MelFrontend(self.cfg.audio)
        self.generator = build_generator(self.cfg)
        self.discriminators = build_discriminators(self.cfg)
        stats = self.segments.cache.mel_stats
        self.generator.set_mel_statistics(stats.mean, stats.std)  # a warm start keeps its source's (stage_checkpoint)
        self.generator_optimizer = FusedAdamW(WarmupDecay.from_training_config(t), weight_decay=t.weight_decay,
                                              beta_1=0.8, beta_2=0.99, epsilon=1e-8, name="generator_adamw")
        self.discriminator_optimizer = FusedAdamW(v.discriminator_learning_rate, weight_decay=t.weight_decay,
                                                  beta_1=0.8, beta_2=0.99, epsilon=1e-8, name="discriminator_adamw")
        self.generator_optimizer.build(self.generator.trainable_variables)
        self.discriminator_optimizer.build(self.discriminators.trainable_variables)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.nonfinite_in_a_row = tf.Variable(0, dtype=tf.int64, trainable=False, name="nonfinite_in_a_row")
        self.nonfinite_total = tf.Variable(0, dtype=tf.int64, trainable=False, name="nonfinite_total")
        self.parameters = {"generator": int(self.generator.count_params()),
                           "discriminators": int(self.discriminators.count_params())}

    def stage_checkpoint(self) -> None:
        from myxtts.vocoder.neural import restore_generator, write_vocoder_json

        directory = self.workdir / "checkpoints"
        self.trained_seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="trained_seconds")
        self.checkpoints = Checkpoints(
            directory, self.cfg.training.keep_checkpoints, generator=self.generator,
            discriminators=self.discriminators, generator_optimizer=self.generator_optimizer,
            discriminator_optimizer=self.discriminator_optimizer, step=self.step, iterator=self.iterator,
            trained_seconds=self.trained_seconds, nonfinite_in_a_row=self.nonfinite_in_a_row,
            nonfinite_total=self.nonfinite_total)
        if self.checkpoints.latest and not self.resume:
            raise VocoderTrainingError(f"{directory} already holds checkpoints ({self.checkpoints.latest}); pass "
                                       "--resume to continue that run or choose another --workdir.")
        self.restored_from = self.checkpoints.restore_latest() if self.resume else None
        self.init_source = None
        if self.init_from is not None and self.restored_from is None:
            self.init_source = restore_generator(self.init_from, self.cfg, self.generator, self.discriminators)
            self.echo(f"vocoder warm start: generator{' and discriminators' if self.init_source['discriminators'] else ''}"
                      f" from {self.init_source['checkpoint']}")
        write_vocoder_json(self.workdir, self.cfg, self.generator, trained_on=str(self.cfg.cache_dir))

    def stage_compile(self) -> None:
        t = self.cfg.training
        self.traces = TraceAccounting(t.strict_retracing, self.workdir / "retraces.jsonl")
        signature = [self.signature]
        compiled = {name: tf.function(getattr(self, name), input_signature=signature, autograph=False,
                                      reduce_retracing=False) for name in ("reconstruction_step", "adversarial_step")}
        self.functions = {name: self.traces.watch(function, name) if t.enable_graph_mode else function.python_function
                          for name, function in compiled.items()}
        self.generate = self.traces.watch(tf.function(
            lambda mel: self.generator(mel, training=False),
            input_signature=[tf.TensorSpec([1, None, self.cfg.audio.n_mels], tf.float32)], autograph=False),
            "generate")
        started = time.perf_counter()
        with expected_traces():
            self.warmup = self._warm_up()
        self.warmup_total = time.perf_counter() - started
        self.traces.end_warmup()
        self.echo(f"warm-up: traced and ran {len(self.warmup)} functions in {self.warmup_total:.1f} s "
                  f"(generator {self.parameters['generator']:,} parameters, discriminators "
                  f"{self.parameters['discriminators']:,}; state restored)")

    def stage_loop(self) -> dict[str, Any]:
        t, v = self.cfg.training, self.cfg.vocoder
        metrics = MetricsLog(self.workdir)
        timer = StepTimer()
        start_step = step = int(self.step.numpy())
        budget = t.max_minutes * 60.0 if t.max_minutes > 0 else math.inf
        trained_before = float(self.trained_seconds.numpy())
        stopped, first, last, validation = "max_steps", None, None, None
        from tqdm import tqdm
        bar = tqdm(total=t.max_steps, initial=step, disable=not self.progress, unit="step", dynamic_ncols=True)
        interrupt = StopOnSignals(enabled=self.stop_on_signals)
        interrupt.install()
        loop_started = time.perf_counter()
        if trained_before >= budget:
            stopped = "max_minutes"
        try:
            while step < t.max_steps and stopped == "max_steps":
                batch = timer.next_batch(self.iterator)
                name = "adversarial_step" if step >= v.adversarial_start_step else "reconstruction_step"
                out = self.functions[name](batch)
                step += 1
                if step == start_step + 1 or step % t.log_every == 0 or step == t.max_steps:
                    record = {key: float(value) for key, value in out.items()}
                    elapsed = time.perf_counter() - loop_started
                    record.update(step=step, phase=name.split("_")[0], input_wait_share=timer.input_wait_share(elapsed),
                                  steps_per_second=(step - start_step) / max(elapsed, 1e-9),
                                  traces_after_warmup=self.traces.retraces_after_warmup())
                    metrics.write(record)
                    first = record["total"] if first is None else first
                    last = record["total"]
                    bar.set_postfix(mel=f"{record['mel_l1']:.3f}", phase=record["phase"])
                    if int(out["nonfinite_in_a_row"]) >= t.max_nonfinite_steps:
                        raise VocoderTrainingError(
                            f"Stopped at step {step}: {int(out['nonfinite_in_a_row'])} steps in a row had a "
                            f"non-finite loss or gradient (skipped; training.max_nonfinite_steps = "
                            f"{t.max_nonfinite_steps}). Last checkpoint: {self.checkpoints.latest or 'none'}. Lower "
                            "training.learning_rate or vocoder.discriminator_learning_rate.")
                bar.update(1)
                if trained_before + time.perf_counter() - loop_started >= budget and step < t.max_steps:
                    stopped = "max_minutes"
                if interrupt.requested and step < t.max_steps:
                    stopped = "interrupted"
                final = step == t.max_steps or stopped != "max_steps"
                if (step % t.validate_every == 0 or final) and stopped != "interrupted":
                    begin = time.perf_counter()
                    validation = self._validate(step, metrics, audio=bool(t.summary_every) and (
                        step % t.summary_every == 0 or final))
                    loop_started += time.perf_counter() - begin  # not training time
                if step % t.checkpoint_every == 0 or final:
                    self.trained_seconds.assign(trained_before + time.perf_counter() - loop_started)
                    self.step.assign(step)
                    self.checkpoints.save(step)
        finally:
            interrupt.restore()
            bar.close()
            metrics.close()
            self.traces.close()
        elapsed = time.perf_counter() - loop_started
        if stopped == "max_minutes":
            self.echo(f"training.max_minutes ({t.max_minutes:g}) reached at step {step}: checkpoint saved; --resume "
                      "continues with the budget's remainder")
        self.summary = {
            "steps": step, "steps_this_run": step - start_step, "stopped": stopped,
            "interrupted_by": interrupt.requested, "parameters": self.parameters,
            "nonfinite_total": int(self.nonfinite_total.numpy()), "warmup_seconds": self.warmup_total,
            "traces": self.traces.counts(), "retraces_after_warmup": self.traces.retraces_after_warmup(),
            "retrace_explanations": self.traces.explanations(), "loss_first": first, "loss_last": last,
            "validation_mel_l1": validation, "steps_per_second": (step - start_step) / max(elapsed, 1e-9),
            "input_wait_share": timer.input_wait_share(elapsed), "seconds": elapsed,
            "trained_minutes": float(self.trained_seconds.numpy()) / 60.0, "skipped_short_clips": len(self.segments.skipped),
            "resumed_from": self.restored_from, "run_dir": str(self.workdir), "checkpoint": self.checkpoints.latest,
        }
        self.echo(format_vocoder_summary(self.summary))
        return self.summary

    # ---- the compiled steps ---------------------------------------------------------------------------
    def _reconstruction(self, generated: tf.Tensor, audio: tf.Tensor) -> dict[str, tf.Tensor]:
        from myxtts.vocoder import losses

        v = self.cfg.vocoder
        mel = losses.mel_l1(self.frontend, generated, audio)
        stft = losses.multi_resolution_stft(generated, audio)
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
        from myxtts.vocoder import losses as gan

        v = self.cfg.vocoder
        generator_variables = self.generator.trainable_variables
        discriminator_variables = self.discriminators.trainable_variables
        with tf.GradientTape(persistent=True) as tape:
            generated = self.generator(batch["mel"], training=True)  # [batch, segment_samples]
            real_outputs = self.discriminators(batch["audio"], training=True)
            fake_outputs = self.discriminators(generated, training=True)
            discriminator_loss = gan.discriminator_hinge(real_outputs, fake_outputs)
            losses = self._reconstruction(generated, batch["audio"])
            adversarial = gan.generator_hinge(fake_outputs)
            feature_matching = gan.feature_matching(real_outputs, fake_outputs)
            total = (losses["reconstruction"] + v.adversarial_loss_weight * adversarial
                     + v.feature_loss_weight * feature_matching)
        generator_grads = tape.gradient(total, generator_variables)
        discriminator_grads = tape.gradient(discriminator_loss, discriminator_variables)
        del tape
        finite = tf.reduce_all(tf.stack([
            tf.math.is_finite(total), tf.math.is_finite(discriminator_loss),
            tf.math.is_finite(tf.linalg.global_norm(generator_grads)),
            tf.math.is_finite(tf.linalg.global_norm(discriminator_grads))]))
        self._apply(self.discriminator_optimizer, discriminator_grads, discriminator_variables, finite)
        self._apply(self.generator_optimizer, generator_grads, generator_variables, finite)
        return {**losses, "total": total, "discriminator": discriminator_loss, "adversarial": adversarial,
                "feature_matching": feature_matching, **self._count(finite)}

    # ---- helpers -------------------------------------------------------------------------------------
    def _state(self) -> list[tf.Variable]:
        return [*self.generator.variables, *self.discriminators.variables, *self.generator_optimizer.variables,
                *self.discriminator_optimizer.variables, self.nonfinite_in_a_row, self.nonfinite_total]

    def _warm_up(self) -> dict[str, float]:
        """Trace and run every step once on a batch of zeros, then put every variable back as it was."""
        saved = [variable.numpy() for variable in self._state()]
        zeros = {key: tf.zeros(spec.shape, spec.dtype) for key, spec in self.signature.items()}
        zeros["mel"] = zeros["mel"] + tf.constant(np.log(self.cfg.audio.log_floor), tf.float32)  # silence
        timings = {}
        for name in ("reconstruction_step", "adversarial_step"):
            begin = time.perf_counter()
            tf.nest.map_structure(lambda tensor: tensor.numpy(), self.functions[name](zeros))
            timings[name] = time.perf_counter() - begin
        if self.validation:
            begin = time.perf_counter()
            self.generate(tf.constant(self.validation[0]["mel"][None])).numpy()
            timings["generate"] = time.perf_counter() - begin
        for variable, value in zip(self._state(), saved):
            variable.assign(value)
        return timings

    def _validate(self, step: int, metrics: MetricsLog, audio: bool) -> float | None:
        """Resynthesise the fixed validation clips whole: mel L1 against the recordings; their audio to TensorBoard."""
        if not self.validation:
            return None
        errors = []
        writer = metrics.writer("validation") if audio else None
        for index, clip in enumerate(self.validation):
            generated = self.generate(tf.constant(clip["mel"][None]))[0]  # [(frames - 1) * hop]
            real = tf.constant(clip["audio"])
            errors.append(float(tf.reduce_mean(tf.abs(self.frontend(generated) - self.frontend(real)))))
            if writer is not None:
                with writer.as_default(step=step):
                    tf.summary.audio(f"resynthesis/{index}_{clip['id']}", tf.reshape(generated, [1, -1, 1]),
                                     self.cfg.audio.sample_rate)
        value = float(np.mean(errors))
        metrics.write({"step": step, "mel_l1": value}, split="validation")
        return value


def format_vocoder_summary(summary: dict[str, Any]) -> str:
    lines = ["Vocoder training summary",
             f"  steps: {summary['steps']} ({summary['steps_this_run']} this run, {summary['steps_per_second']:.2f} "
             f"steps/s; skipped non-finite: {summary['nonfinite_total']})",
             f"  parameters: generator {summary['parameters']['generator']:,}, discriminators "
             f"{summary['parameters']['discriminators']:,}",
             f"  warm-up: {summary['warmup_seconds']:.1f} s; retraces after warm-up: {summary['retraces_after_warmup']}",
             f"  input wait: {100 * summary['input_wait_share']:.1f}% of step time; trained "
             f"{summary['trained_minutes']:.1f} min in all"]
    if summary["stopped"] != "max_steps":
        lines.append(f"  stopped: {summary['stopped']} at step {summary['steps']}")
    if summary["loss_first"] is not None:
        lines.append(f"  loss: {summary['loss_first']:.4f} -> {summary['loss_last']:.4f}")
    if summary["validation_mel_l1"] is not None:
        lines.append(f"  validation resynthesis mel L1: {summary['validation_mel_l1']:.4f}")
    if summary["skipped_short_clips"]:
        lines.append(f"  clips shorter than one segment (skipped): {summary['skipped_short_clips']}")
    lines.append(f"  run dir: {summary['run_dir']}")
    return "\n".join(lines)


def train_vocoder(cfg: Config, workdir: str | Path, resume: bool = False, **options: Any) -> dict[str, Any]:
    """Train a vocoder; return (and print) the summary. See ``VocoderTrainer`` for the options."""
    return VocoderTrainer(cfg, workdir, resume, **options).run()



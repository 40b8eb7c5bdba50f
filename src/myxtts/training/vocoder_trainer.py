"""The vocoder trainer (``myxtts train-vocoder``): a GAN in named stages (config, data, model, checkpoint, compile,
loop).

Every batch is one static shape (fixed-length segments, ``myxtts.data.vocoder_segments``), so each of the two steps
(``training.vocoder_steps``: the generator alone for the first ``vocoder.adversarial_start_step`` steps, then the
adversarial step) is one compiled graph, traced and run once at warm-up (weights restored after) and never again.
A GAN vocoder learns faster when it starts from a generator that already reconstructs, and the reconstruction step
costs a fraction of an adversarial one. ``training.max_nonfinite_steps`` non-finite steps in a row stop the run.

The run directory (``myxtts.run_dir``) holds, besides the acoustic trainer's files, ``vocoder.json`` (family, sizes,
the audio settings it reads) and, with ``--acoustic-run``, ``acoustic-mels/`` (that model's teacher-forced mels;
``source.json`` names its checkpoint); its checkpoints hold generator, discriminators, both optimizers, counters and
the data iterator.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Callable

import keras
import numpy as np
import tensorflow as tf

from myxtts.config import Config, TrainingConfig, save_config
from myxtts.data.vocoder_segments import VocoderSegments, validation_clips
from myxtts.diagnostics.tf_warning import expected_traces
from myxtts.errors import InputError
from myxtts.locks import DirectoryBusyError, lock_cache_for_reading, lock_run_directory
from myxtts.outputs import (VOCODER_RUN, OutputRefused, check_outside_acoustic_run, check_workdir, read_marker,
                            write_marker)
from myxtts.run_dir import RunDir
from myxtts.training.acoustic_mels import write_acoustic_mels
from myxtts.training.checkpoint import Checkpoints
from myxtts.training.interrupt import StopOnSignals
from myxtts.training.loop import LoopActions, LoopState, run_loop, save_checkpoint
from myxtts.training.reporting import MetricsLog, TraceAccounting
from myxtts.training.stages import StagedRun, StopReason
from myxtts.training.vocoder_steps import GanSteps
from myxtts.vocoder.discriminators import build_discriminators
from myxtts.vocoder.generators import build_generator
from myxtts.vocoder.neural import VocoderError, check_same_generator, restore_generator, write_vocoder_json
from myxtts.vocoder.packing import install_own_vocoder

logger = logging.getLogger(__name__)

# training keys only the acoustic trainer reads: set in a vocoder config, they would do nothing
ACOUSTIC_ONLY_TRAINING_KEYS = ("gradient_accumulation_steps", "steps_per_execution", "enable_xla_compilation",
                               "listen_sentences", "distribution", "init_mel_stats", "freeze")


class VocoderTrainingError(InputError):
    """A vocoder run cannot start or go on (bad keys, a run directory in the way, non-finite steps)."""


def check_vocoder_keys(cfg: Config) -> None:
    defaults = TrainingConfig()
    for key in ACOUSTIC_ONLY_TRAINING_KEYS:
        if getattr(cfg.training, key) != getattr(defaults, key):
            raise VocoderTrainingError(f"Config key 'training.{key}' ({getattr(cfg.training, key)!r}) does nothing in "
                                       "train-vocoder (it configures the acoustic trainer); remove it.")
    if cfg.training.mixed_precision == "float16":  # bfloat16 needs no loss scaling; float16 would
        raise VocoderTrainingError("Config key 'training.mixed_precision' is 'float16', which train-vocoder does not "
                                   "support (it would need loss scaling in both GAN updates); use 'bfloat16' (the "
                                   "discriminators compute in bfloat16) or 'float32'.")


class VocoderTrainer(StagedRun):
    def __init__(self, cfg: Config, workdir: str | Path, resume: bool = False, *, init_from: str | Path | None = None,
                 acoustic_run: str | Path | None = None, progress: bool = True, echo: Callable[[str], None] = print,
                 stop_on_signals: bool = False) -> None:
        """``init_from``: a vocoder (run or packed) whose generator (and discriminators, when it has them) start
        this run; ``acoustic_run``: train on that acoustic model's teacher-forced mels of the cache's clips
        (``training.acoustic_mels``) instead of the recordings' mels."""
        self.cfg, self.workdir, self.resume = cfg, Path(workdir), resume
        self.init_from, self.acoustic_run, self.mel_dir = init_from, acoustic_run, None
        self.progress, self.echo, self.stop_on_signals = progress, echo, stop_on_signals
        self.locks: list[Any] = []

    # ---- stages ------------------------------------------------------------------------------------
    def stage_config(self) -> None:
        check_vocoder_keys(self.cfg)
        if self.acoustic_run is not None:  # RUN/vocoder is where the trained generator is installed
            check_outside_acoustic_run(self.workdir, self.acoustic_run)
        new = check_workdir(self.workdir, "train-vocoder", VOCODER_RUN)  # refused before any write
        t = self.cfg.training
        if t.deterministic:
            tf.config.experimental.enable_op_determinism()
        keras.utils.set_random_seed(t.seed)
        tf.config.run_functions_eagerly(t.enable_eager_debug)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.locks.append(lock_run_directory(self.workdir))
        if new and read_marker(self.workdir) is None:
            write_marker(self.workdir, "train-vocoder", VOCODER_RUN)
        # refused here, before --acoustic-run's mels or the config are written over the run's own
        latest = tf.train.latest_checkpoint(str(RunDir(self.workdir).checkpoints))
        if latest and not self.resume:
            raise VocoderTrainingError(f"{RunDir(self.workdir).checkpoints} already holds checkpoints ({latest}); "
                                       "pass --resume to continue that run or choose another --workdir.")
        record_path = RunDir(self.workdir).vocoder_record
        if latest and record_path.is_file():  # a resume continues the run's own generator, not one built otherwise
            try:
                check_same_generator(self.workdir, json.loads(record_path.read_text(encoding="utf-8")), self.cfg,
                                     "A resume continues the run's generator: set these keys back to the run's "
                                     "(its config.yaml).")
            except VocoderError as err:
                raise VocoderTrainingError(str(err)) from None

    def stage_data(self) -> None:
        self.locks.append(lock_cache_for_reading(self.cfg.cache_dir, self.echo))
        if self.acoustic_run is not None:
            self.mel_dir = write_acoustic_mels(self.cfg, self.acoustic_run, RunDir(self.workdir).acoustic_mels,
                                               self.progress, self.echo)
        self.segments = VocoderSegments(self.cfg, "train", mel_dir=self.mel_dir)
        self.signature = self.segments.signature()
        self.validation = validation_clips(self.cfg, mel_dir=self.mel_dir)
        self.iterator = iter(self.segments.dataset())
        self.echo(f"vocoder data: {len(self.segments)} train clips ({len(self.segments.skipped)} shorter than one "
                  f"segment, skipped), segments of {self.segments.segment_samples} samples, batch "
                  f"{self.segments.batch_size}; {len(self.validation)} validation clips")

    def stage_model(self) -> None:
        self.generator = build_generator(self.cfg)
        self.discriminators = build_discriminators(self.cfg)
        stats = self.segments.cache.mel_stats
        self.generator.set_mel_statistics(stats.mean, stats.std)  # a warm start keeps its source's (stage_checkpoint)
        self.steps = GanSteps(self.cfg, self.generator, self.discriminators)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.parameters = {"generator": int(self.generator.count_params()),
                           "discriminators": int(self.discriminators.count_params())}

    def stage_checkpoint(self) -> None:
        directory = RunDir(self.workdir).checkpoints
        self.trained_seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="trained_seconds")
        self.checkpoints = Checkpoints(
            directory, self.cfg.training.keep_checkpoints, step=self.step, iterator=self.iterator,
            trained_seconds=self.trained_seconds, **self.steps.checkpoint_objects())
        self.restored_from = self.checkpoints.restore_latest() if self.resume else None
        self.init_source = None
        if self.init_from is not None and self.restored_from is None:
            self.init_source = restore_generator(self.init_from, self.cfg, self.generator, self.discriminators)
            with_discriminators = " and discriminators" if self.init_source["discriminators"] else ""
            self.echo(f"vocoder warm start: generator{with_discriminators}"
                      f" from {self.init_source['checkpoint']}")
        save_config(self.cfg, RunDir(self.workdir).config)  # the run directory has accepted this config
        write_vocoder_json(self.workdir, self.cfg, self.generator, trained_on=str(self.cfg.cache_dir),
                           init_from=self.init_source["checkpoint"] if self.init_source else None,
                           acoustic_run=str(Path(self.acoustic_run).resolve()) if self.acoustic_run else None)

    def stage_compile(self) -> None:
        t = self.cfg.training
        self.traces = TraceAccounting(t.strict_retracing, RunDir(self.workdir).retraces)
        signature = [self.signature]
        compiled = {name: tf.function(getattr(self.steps, name), input_signature=signature, autograph=False,
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
        t = self.cfg.training
        loop = LoopState.begin(t, int(self.step.numpy()), self.trained_seconds, self.workdir, progress=self.progress)
        interrupt = StopOnSignals(enabled=self.stop_on_signals)
        actions = LoopActions(train_call=self._train_call, log=self._log, checkpoint=self._checkpoint,
                              periodic=self._validate_periodically)
        try:
            run_loop(loop, actions, interrupt, log_every=t.log_every, checkpoint_every=t.checkpoint_every,
                     echo=self.echo)
        finally:
            self.traces.close()
        self.summary = self._summary(loop, interrupt)
        self.echo(format_vocoder_summary(self.summary))
        return self.summary

    # ---- the loop's step and periodic actions -----------------------------------------------------------
    def _phase(self, step: int) -> str:
        """The generator alone for the first vocoder.adversarial_start_step steps, then the GAN."""
        return "adversarial" if step >= self.cfg.vocoder.adversarial_start_step else "reconstruction"

    def _train_call(self, loop: LoopState) -> dict[str, tf.Tensor]:
        out = self.functions[f"{self._phase(loop.step)}_step"](loop.timer.next_batch(self.iterator))
        loop.step += 1
        return out

    def _log(self, out: dict[str, tf.Tensor], loop: LoopState) -> None:
        """metrics.jsonl + TensorBoard + the progress bar; the NaN guard's counter is read here (a host read)."""
        t = self.cfg.training
        phase = self._phase(loop.step - 1)  # the step just run
        record = {key: float(value) for key, value in out.items()}
        elapsed = loop.clock.elapsed()
        record.update(step=loop.step, phase=phase, input_wait_share=loop.timer.input_wait_share(elapsed),
                      steps_per_second=(loop.step - loop.start_step) / max(elapsed, 1e-9),
                      traces_after_warmup=self.traces.retraces_after_warmup())
        loop.metrics.write(record)
        loop.first_loss = record["total"] if loop.first_loss is None else loop.first_loss
        loop.last_loss = record["total"]
        loop.bar.set_postfix(mel=f"{record['mel_l1']:.3f}", phase=phase)
        if record["nonfinite_in_a_row"] >= t.max_nonfinite_steps:
            raise VocoderTrainingError(
                f"Stopped at step {loop.step}: {int(record['nonfinite_in_a_row'])} steps in a row had a non-finite "
                f"loss or gradient (skipped; training.max_nonfinite_steps = {t.max_nonfinite_steps}). Last "
                f"checkpoint: {self.checkpoints.latest or 'none'}. Lower training.learning_rate or "
                "vocoder.discriminator_learning_rate.")

    def _validate_periodically(self, loop: LoopState) -> None:
        """Every validate_every steps and at the last: resynthesis of the validation clips (their audio every
        summary_every steps and at the last)."""
        t = self.cfg.training
        if loop.crossed(t.validate_every) or loop.final:
            with loop.clock.paused():  # validation is not training time
                loop.validation_loss = self._validate(loop.step, loop.metrics, audio=bool(t.summary_every) and (
                    loop.crossed(t.summary_every) or loop.final))

    def _checkpoint(self, loop: LoopState) -> None:
        self.step.assign(loop.step)
        save_checkpoint(loop, self.checkpoints, self.trained_seconds)

    def _summary(self, loop: LoopState, interrupt: StopOnSignals) -> dict[str, Any]:
        elapsed = loop.clock.elapsed()
        return {
            "steps": loop.step, "steps_this_run": loop.step - loop.start_step,
            "stopped": (loop.stopped or StopReason.MAX_STEPS).value,
            "interrupted_by": interrupt.requested, "parameters": self.parameters,
            "nonfinite_total": int(self.steps.nonfinite_total.numpy()), "warmup_seconds": self.warmup_total,
            "traces": self.traces.counts(), "retraces_after_warmup": self.traces.retraces_after_warmup(),
            "retrace_explanations": self.traces.explanations(), "loss_first": loop.first_loss,
            "loss_last": loop.last_loss, "validation_mel_l1": loop.validation_loss,
            "steps_per_second": (loop.step - loop.start_step) / max(elapsed, 1e-9),
            "input_wait_share": loop.timer.input_wait_share(elapsed), "seconds": elapsed,
            "trained_minutes": float(self.trained_seconds.numpy()) / 60.0,
            "skipped_short_clips": len(self.segments.skipped), "resumed_from": self.restored_from,
            "run_dir": str(self.workdir), "checkpoint": self.checkpoints.latest}

    # ---- helpers -------------------------------------------------------------------------------------
    def _warm_up(self) -> dict[str, float]:
        """Trace and run every step once on a batch of zeros, then put every variable back as it was."""
        saved = [variable.numpy() for variable in self.steps.state()]
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
        for variable, value in zip(self.steps.state(), saved):
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
            errors.append(float(tf.reduce_mean(tf.abs(self.steps.frontend(generated) - self.steps.frontend(real)))))
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
             f"  warm-up: {summary['warmup_seconds']:.1f} s; "
             f"retraces after warm-up: {summary['retraces_after_warmup']}",
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
    """Train a vocoder; return (and print) the summary. See ``VocoderTrainer`` for the options. Given an
    ``acoustic_run``, a training that ends by its steps or minutes (not by a signal) makes the vocoder that run's
    own (``RUN/vocoder``, ``vocoder.packing``): what synthesis of the run uses when no vocoder is named."""
    trainer = VocoderTrainer(cfg, workdir, resume, **options)
    summary = trainer.run()
    summary["installed_in"] = None
    if trainer.acoustic_run is None or summary["interrupted_by"]:
        return summary
    try:
        record = install_own_vocoder(workdir, trainer.acoustic_run)
    except DirectoryBusyError as err:  # the vocoder is trained and kept: only its installation waits
        trainer.echo(f"warning: not installed as {trainer.acoustic_run}'s own vocoder ({err}). Pass --vocoder "
                     f"{workdir} to synthesize, or run this command again with --resume once it is free.")
        return summary
    except OutputRefused as err:  # what is at RUN/vocoder is not an own vocoder: it stays, and so does this run
        trainer.echo(f"warning: not installed as {trainer.acoustic_run}'s own vocoder: {err} The trained vocoder is "
                     f"{workdir}; pass --vocoder {workdir} to synthesize meanwhile.")
        return summary
    summary["installed_in"] = str(RunDir(trainer.acoustic_run).own_vocoder)
    trainer.echo(f"installed step {record['step']} as {trainer.acoustic_run}'s own vocoder "
                 f"({summary['installed_in']}): synthesize, serve, export and evaluate --run {trainer.acoustic_run} "
                 "use it unless given another --vocoder")
    return summary



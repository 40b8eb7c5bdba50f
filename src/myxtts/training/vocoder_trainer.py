"""The vocoder trainer (``myxtts train-vocoder``): a GAN in named stages (config, data, model, checkpoint, compile,
loop). Each stage returns what the stages after it need (``VocoderData``, ``BuiltVocoder``, ``RestoredVocoder``,
``CompiledVocoder``), so ``VocoderTrainer.run`` reads top to bottom; the loop is the shared skeleton
(training/loop.py) with the vocoder's step and periodic actions (training/vocoder_loop.py).

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

import dataclasses
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
from myxtts.locks import DirectoryBusyError, lock_cache_for_reading, lock_run_directory
from myxtts.outputs import (VOCODER_RUN, OutputRefused, check_outside_acoustic_run, check_workdir, read_marker,
                            write_marker)
from myxtts.run_dir import RunDir
from myxtts.training.checkpoint import VOCODER_SEGMENT_KEYS, Checkpoints, check_data_resumable
from myxtts.training.interrupt import StopOnSignals
from myxtts.training.loop import LoopState, run_loop
from myxtts.training.reporting import TraceAccounting
from myxtts.training.stages import StagedRun, StopReason
from myxtts.training.vocoder_loop import GanActions, VocoderTrainingError
from myxtts.training.vocoder_steps import GanSteps
from myxtts.vocoder.discriminators import build_discriminators
from myxtts.vocoder.generators import build_generator
from myxtts.vocoder.neural import VocoderError, check_same_generator, restore_generator, write_vocoder_json
from myxtts.vocoder.packing import install_own_vocoder

logger = logging.getLogger(__name__)

# training keys only the acoustic trainer reads: set in a vocoder config, they would do nothing
ACOUSTIC_ONLY_TRAINING_KEYS = ("gradient_accumulation_steps", "steps_per_execution", "enable_xla_compilation",
                               "listen_sentences", "distribution", "init_mel_stats", "freeze")
# the two compiled steps (training.vocoder_steps), each traced once; the loop runs "<phase>_step" (vocoder_loop.py)
STEP_NAMES = ("reconstruction_step", "adversarial_step")


def check_vocoder_keys(cfg: Config) -> None:
    defaults = TrainingConfig()
    for key in ACOUSTIC_ONLY_TRAINING_KEYS:
        if getattr(cfg.training, key) != getattr(defaults, key):
            raise VocoderTrainingError(f"Config key 'training.{key}' ({getattr(cfg.training, key)!r}) does nothing in "
                                       "train-vocoder (it configures the acoustic trainer); remove it.")
    if cfg.data.voice_warp:  # the vocoder learns the clips' own audio: a warped mel would not match it
        raise VocoderTrainingError(f"Config key 'data.voice_warp' ({cfg.data.voice_warp}) does nothing in "
                                   "train-vocoder (it warps the acoustic model's training mels); remove it.")
    if cfg.data.self_reference_share:  # the vocoder reads no reference
        raise VocoderTrainingError(f"Config key 'data.self_reference_share' ({cfg.data.self_reference_share}) does "
                                   "nothing in train-vocoder (it chooses the acoustic model's references); remove it.")
    if cfg.training.mixed_precision == "float16":  # bfloat16 needs no loss scaling; float16 would
        raise VocoderTrainingError("Config key 'training.mixed_precision' is 'float16', which train-vocoder does not "
                                   "support (it would need loss scaling in both GAN updates); use 'bfloat16' (the "
                                   "discriminators compute in bfloat16) or 'float32'.")


# ---- what each stage returns: what the stages after it need ---------------------------------------
@dataclasses.dataclass(frozen=True)
class VocoderData:
    """``stage_data``: the training segments, their batch signature, the validation clips, the data iterator."""

    segments: VocoderSegments
    signature: dict[str, tf.TensorSpec]  # {"mel" [batch, frames, n_mels], "audio" [batch, samples]}: both steps'
    validation: list[dict[str, Any]]  # whole clips ({"id", "mel", "audio"}) resynthesised at each validation
    iterator: Any  # checkpointed with the model (its position and shuffle state)


@dataclasses.dataclass(frozen=True)
class BuiltVocoder:
    """``stage_model``: the generator, the discriminators, their optimizers' and steps' owner, the step counter."""

    generator: keras.Model
    discriminators: keras.Model
    steps: GanSteps
    step: tf.Variable  # [] int64 optimizer steps done: checkpointed
    parameters: dict[str, int]  # "generator" / "discriminators" -> parameter count


@dataclasses.dataclass(frozen=True)
class RestoredVocoder:
    """``stage_checkpoint``: the checkpoints, the training time so far, where the weights came from."""

    checkpoints: Checkpoints
    trained_seconds: tf.Variable  # checkpointed: training.max_minutes counts every run a resume continues
    restored_from: str | None  # the checkpoint a resume continues
    init_source: dict[str, Any] | None  # the warm start's record (a new run started from another vocoder)


@dataclasses.dataclass(frozen=True)
class CompiledVocoder:
    """``stage_compile``: the trace accounting, the compiled steps and generator, the warm-up's timings."""

    traces: TraceAccounting
    functions: dict[str, Callable[[dict], dict[str, tf.Tensor]]]  # "<phase>_step" -> compiled (or eager) step
    generate: Callable[[tf.Tensor], tf.Tensor]  # [1, frames, n_mels] log mel -> [1, (frames - 1) * hop] audio
    warmup: dict[str, float]  # seconds per function traced and run at warm-up
    warmup_total: float


class VocoderTrainer(StagedRun):
    """``run()`` reads top to bottom: each stage takes what the stages before it returned."""

    def __init__(self, cfg: Config, workdir: str | Path, resume: bool = False, *, init_from: str | Path | None = None,
                 acoustic_run: str | Path | None = None, write_acoustic_mels: Callable[..., Path] | None = None,
                 progress: bool = True, echo: Callable[[str], None] = print, stop_on_signals: bool = False) -> None:
        """``init_from``: a vocoder (run or packed) whose generator (and discriminators, when it has them) start
        this run; ``acoustic_run``: train on that acoustic model's teacher-forced mels of the cache's clips instead
        of the recordings' mels, written by ``write_acoustic_mels(cfg, acoustic_run, out_dir, progress, echo)``
        (``myxtts.synthesis.acoustic_mels``; the command gives it)."""
        self.cfg, self.workdir, self.resume = cfg, Path(workdir), resume
        self.init_from, self.acoustic_run, self.write_acoustic_mels = init_from, acoustic_run, write_acoustic_mels
        self.progress, self.echo, self.stop_on_signals = progress, echo, stop_on_signals
        self.locks: list[Any] = []  # released by run(), however it ends

    def run(self) -> dict[str, Any]:
        try:
            self.stage_config()
            data = self.stage_data()
            built = self.stage_model(data)
            restored = self.stage_checkpoint(data, built)
            compiled = self.stage_compile(data, built)
            return self.stage_loop(data, built, restored, compiled)
        finally:
            self.release_locks()

    # ---- stages ------------------------------------------------------------------------------------
    def stage_config(self) -> None:
        """The checks, the seeds and the run directory's lock: nothing the stages after it take."""
        check_vocoder_keys(self.cfg)
        if self.acoustic_run is not None:  # RUN/vocoder is where the trained generator is installed
            check_outside_acoustic_run(self.workdir, self.acoustic_run)
            if self.write_acoustic_mels is None:
                raise VocoderTrainingError("Training on an acoustic run's mels needs what writes them: pass "
                                           "write_acoustic_mels=myxtts.synthesis.acoustic_mels.write_acoustic_mels.")
        elif self.cfg.vocoder.recorded_mel_share > 0:
            raise VocoderTrainingError(
                f"vocoder.recorded_mel_share is {self.cfg.vocoder.recorded_mel_share}, but without --acoustic-run every "
                "segment reads the recordings' mels already: pass --acoustic-run RUN to mix that model's mels in, or "
                "remove the key.")
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

    def stage_data(self) -> VocoderData:
        # held while training: prepare cannot rewrite the cache under it
        self.locks.append(lock_cache_for_reading(self.cfg.cache_dir, self.echo))
        mel_dir = None  # None: the recordings' mels of the cache
        if self.acoustic_run is not None:
            mel_dir = self.write_acoustic_mels(self.cfg, self.acoustic_run, RunDir(self.workdir).acoustic_mels,
                                          self.progress, self.echo)
        segments = VocoderSegments(self.cfg, "train", mel_dir=mel_dir)
        data = VocoderData(segments=segments, signature=segments.signature(),
                           validation=validation_clips(self.cfg, mel_dir=mel_dir), iterator=iter(segments.dataset()))
        mels = "the recordings'" if mel_dir is None else (
            f"{self.acoustic_run}'s teacher-forced" + (f", the recordings' on {segments.recorded_share:.0%} of the "
                                                       "segments" if segments.recorded_share else ""))
        self.echo(f"vocoder data: {len(segments)} train clips ({len(segments.skipped)} shorter than one "
                  f"segment, skipped), segments of {segments.segment_samples} samples, batch "
                  f"{segments.batch_size}, mels: {mels}; {len(data.validation)} validation clips")
        return data

    def stage_model(self, data: VocoderData) -> BuiltVocoder:
        generator = build_generator(self.cfg)
        discriminators = build_discriminators(self.cfg)
        stats = data.segments.cache.mel_stats
        generator.set_mel_statistics(stats.mean, stats.std)  # a warm start keeps its source's (stage_checkpoint)
        return BuiltVocoder(generator=generator, discriminators=discriminators,
                            steps=GanSteps(self.cfg, generator, discriminators),
                            step=tf.Variable(0, dtype=tf.int64, trainable=False, name="step"),
                            parameters={"generator": int(generator.count_params()),
                                        "discriminators": int(discriminators.count_params())})

    def stage_checkpoint(self, data: VocoderData, built: BuiltVocoder) -> RestoredVocoder:
        # checkpointed, so training.max_minutes counts the training time of every run a resume continues
        trained_seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="trained_seconds")
        checkpoints = Checkpoints(
            RunDir(self.workdir).checkpoints, self.cfg.training.keep_checkpoints, step=built.step,
            iterator=data.iterator, trained_seconds=trained_seconds, **built.steps.checkpoint_objects())
        if self.resume and checkpoints.latest:  # before the restore: TensorFlow's own error would not say why
            check_data_resumable(RunDir(self.workdir).config, self.cfg, checkpoints.directory, checkpoints.latest,
                                 self.workdir, vocoder_keys=VOCODER_SEGMENT_KEYS)
        restored_from = checkpoints.restore_latest() if self.resume else None
        init_source = None
        if self.init_from is not None and restored_from is None:  # a resumed run has its own weights
            init_source = restore_generator(self.init_from, self.cfg, built.generator, built.discriminators)
            with_discriminators = " and discriminators" if init_source["discriminators"] else ""
            self.echo(f"vocoder warm start: generator{with_discriminators}"
                      f" from {init_source['checkpoint']}")
        save_config(self.cfg, RunDir(self.workdir).config)  # the run directory has accepted this config
        write_vocoder_json(self.workdir, self.cfg, built.generator, trained_on=str(self.cfg.cache_dir),
                           init_from=init_source["checkpoint"] if init_source else None,
                           acoustic_run=str(Path(self.acoustic_run).resolve()) if self.acoustic_run else None)
        return RestoredVocoder(checkpoints=checkpoints, trained_seconds=trained_seconds, restored_from=restored_from,
                               init_source=init_source)

    def stage_compile(self, data: VocoderData, built: BuiltVocoder) -> CompiledVocoder:
        t = self.cfg.training
        traces = TraceAccounting(t.strict_retracing, RunDir(self.workdir).retraces)
        signature = [data.signature]
        compiled = {name: tf.function(getattr(built.steps, name), input_signature=signature, autograph=False,
                                      reduce_retracing=False) for name in STEP_NAMES}
        functions = {name: traces.watch(function, name) if t.enable_graph_mode else function.python_function
                     for name, function in compiled.items()}
        generate = traces.watch(tf.function(
            lambda mel: built.generator(mel, training=False),
            input_signature=[tf.TensorSpec([1, None, self.cfg.audio.n_mels], tf.float32)], autograph=False),
            "generate")
        started = time.perf_counter()
        with expected_traces():
            warmup = self._warm_up(data, built, functions, generate)
        warmup_total = time.perf_counter() - started
        traces.end_warmup()
        self.echo(f"warm-up: traced and ran {len(warmup)} functions in {warmup_total:.1f} s "
                  f"(generator {built.parameters['generator']:,} parameters, discriminators "
                  f"{built.parameters['discriminators']:,}; state restored)")
        return CompiledVocoder(traces=traces, functions=functions, generate=generate, warmup=warmup,
                               warmup_total=warmup_total)

    def stage_loop(self, data: VocoderData, built: BuiltVocoder, restored: RestoredVocoder,
                   compiled: CompiledVocoder) -> dict[str, Any]:
        t = self.cfg.training
        loop = LoopState.begin(t, int(built.step.numpy()), restored.trained_seconds, self.workdir,
                               progress=self.progress)
        interrupt = StopOnSignals(enabled=self.stop_on_signals)
        actions = GanActions(cfg=self.cfg, steps=built.steps, functions=compiled.functions,
                             generate=compiled.generate, iterator=data.iterator, validation=data.validation,
                             step=built.step, checkpoints=restored.checkpoints,
                             trained_seconds=restored.trained_seconds, traces=compiled.traces)
        try:
            run_loop(loop, actions.actions(), interrupt, log_every=t.log_every, checkpoint_every=t.checkpoint_every,
                     echo=self.echo)
        finally:
            compiled.traces.close()
        summary = self._summary(loop, interrupt, data, built, restored, compiled)
        self.echo(format_vocoder_summary(summary))
        return summary

    # ---- helpers -------------------------------------------------------------------------------------
    def _warm_up(self, data: VocoderData, built: BuiltVocoder, functions: dict[str, Callable],
                 generate: Callable[[tf.Tensor], tf.Tensor]) -> dict[str, float]:
        """Trace and run every step once on a batch of zeros, then put every variable back as it was."""
        saved = [variable.numpy() for variable in built.steps.state()]
        zeros = {key: tf.zeros(spec.shape, spec.dtype) for key, spec in data.signature.items()}
        zeros["mel"] = zeros["mel"] + tf.constant(np.log(self.cfg.audio.log_floor), tf.float32)  # silence
        timings = {}
        for name in STEP_NAMES:
            begin = time.perf_counter()
            tf.nest.map_structure(lambda tensor: tensor.numpy(), functions[name](zeros))
            timings[name] = time.perf_counter() - begin
        if data.validation:
            begin = time.perf_counter()
            generate(tf.constant(data.validation[0]["mel"][None])).numpy()
            timings["generate"] = time.perf_counter() - begin
        for variable, value in zip(built.steps.state(), saved):
            variable.assign(value)
        return timings

    def _summary(self, loop: LoopState, interrupt: StopOnSignals, data: VocoderData, built: BuiltVocoder,
                 restored: RestoredVocoder, compiled: CompiledVocoder) -> dict[str, Any]:
        traces, elapsed = compiled.traces, loop.clock.elapsed()
        return {
            "steps": loop.step, "steps_this_run": loop.step - loop.start_step,
            "stopped": (loop.stopped or StopReason.MAX_STEPS).value,
            "interrupted_by": interrupt.requested, "parameters": built.parameters,
            "nonfinite_total": int(built.steps.nonfinite_total.numpy()), "warmup_seconds": compiled.warmup_total,
            "traces": traces.counts(), "retraces_after_warmup": traces.retraces_after_warmup(),
            "retrace_explanations": traces.explanations(), "loss_first": loop.first_loss,
            "loss_last": loop.last_loss, "validation_mel_l1": loop.validation_loss,
            "steps_per_second": (loop.step - loop.start_step) / max(elapsed, 1e-9),
            "input_wait_share": loop.timer.input_wait_share(elapsed), "seconds": elapsed,
            "trained_minutes": float(restored.trained_seconds.numpy()) / 60.0,
            "skipped_short_clips": len(data.segments.skipped), "resumed_from": restored.restored_from,
            "run_dir": str(self.workdir), "checkpoint": restored.checkpoints.latest}


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


__all__ = ["VocoderTrainer", "VocoderTrainingError", "check_vocoder_keys", "format_vocoder_summary",
           "train_vocoder"]

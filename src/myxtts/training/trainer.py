"""The trainer: ``run(cfg, workdir, resume)`` in named stages: config, data, model, checkpoint, compile, loop.

Promises: every step is a compiled graph with a static input_signature, one per batch shape of the
pipeline, all traced and run once at warm-up (weights and counters restored exactly); a trace afterwards
is a bug (``training.strict_retracing`` raises with the explainer's explanation); nothing on the hot
path but ``next(iterator)`` and the compiled call.

The run directory it writes (config, vocabulary, mel statistics, corpus summary, warm-start record,
checkpoints with the model, optimizer, counters and data iterator, metrics, summaries, retraces, the lock):
``myxtts.run_dir``, the one place that names its files. The workdir must be new, empty or a training run
(``outputs.check_workdir``, before anything is written); a new one is marked as ``train``'s. The records are written
whole or not at all (temporary name, fsync, rename), so a kill mid-write never leaves a run that does not load.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable

import keras
import numpy as np
import tensorflow as tf

from myxtts.cache_files import VOCAB_FILE
from myxtts.config import Config, save_config
from myxtts.data.cache import corpus_summary
from myxtts.data.pipeline import InputPipeline
from myxtts.diagnostics.tf_warning import expected_traces
from myxtts.durable import write_durably
from myxtts.errors import ExpectedError
from myxtts.locks import lock_cache_for_reading, lock_run_directory
from myxtts.model import build_model, count_parameters
from myxtts.outputs import RUN, check_workdir, read_marker, write_marker
from myxtts.run_dir import RunDir
from myxtts.text import Vocabulary
from myxtts.training.checkpoint import Checkpoints, WorkdirError, check_resumable
from myxtts.training.device_feed import DeviceFeed, default_device
from myxtts.training.distribute import check_divisible, is_chief, make_strategy
from myxtts.training.interrupt import StopOnSignals
from myxtts.training.listener import Listener
from myxtts.training.loop_state import LoopState, check_block_alignment
from myxtts.training.reporting import MetricsLog, StepTimer, TraceAccounting, format_summary
from myxtts.training.schedule import make_optimizer
from myxtts.training.stages import StagedRun, StopReason, TrainingClock, progress_bar
from myxtts.training.shape_keys import shape_key
from myxtts.training.steps import TrainingSteps
from myxtts.training.warm_start import freeze_modules, warm_start, warm_start_mel_stats
from myxtts.vocoder import GriffinLim

logger = logging.getLogger(__name__)


class NonFiniteLossError(ExpectedError, RuntimeError):
    """Training stopped after training.max_nonfinite_steps non-finite steps in a row."""


class Trainer(StagedRun):
    def __init__(self, cfg: Config, workdir: str | Path, resume: bool = False, *, progress: bool = True,
                 echo: Callable[[str], None] = print,
                 batch_filter: Callable[[int, dict], dict] | None = None, feed_device: str | None = "auto",
                 stop_on_signals: bool = False):
        """``batch_filter(step, batch)`` rewrites each training batch (tests inject faults); keep None.
        ``stop_on_signals``: Ctrl-C / SIGTERM end the loop at a checkpoint (training/interrupt.py; the commands).
        ``feed_device``: where batches are copied one step ahead ("auto": the GPU when data.prefetch_to_gpu
        and one exists; None: nowhere; tests pass a CPU device to run the device-feed path)."""
        self.cfg, self.workdir, self.resume = cfg, Path(workdir), resume
        self.progress, self.echo, self.batch_filter = progress, echo, batch_filter
        self.locks: list[Any] = []  # released by run(), however it ends
        self.stop_on_signals = stop_on_signals
        self.feed_device = feed_device  # resolved in _start_loop: listing devices here would start TF's context
        # before the strategy exists (MultiWorkerMirroredStrategy must configure collectives first)

    # ---- stages ------------------------------------------------------------------------------------
    def stage_config(self) -> None:
        new = check_workdir(self.workdir, "train", RUN)  # a folder of other files is refused before any write
        t = self.cfg.training
        if t.deterministic:
            tf.config.experimental.enable_op_determinism()
        keras.utils.set_random_seed(t.seed)
        tf.config.run_functions_eagerly(t.enable_eager_debug)
        self.strategy = make_strategy(self.cfg)
        self.chief = is_chief(self.strategy)
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.chief:  # one writer per run directory: a second `train` fails here, before touching anything
            self.locks.append(lock_run_directory(self.workdir))
            if new and read_marker(self.workdir) is None:
                write_marker(self.workdir, "train", RUN)

    def stage_data(self) -> None:
        # held while training: prepare cannot rewrite the cache under it (and a rebuild in progress is waited for)
        self.locks.append(lock_cache_for_reading(self.cfg.cache_dir, self.echo))
        replicas = self.strategy.num_replicas_in_sync  # bucket batches: replicas x a per-replica frame budget
        # a warm start keeps its source's normalisation (training.init_mel_stats); None: the corpus' own
        mel_stats = warm_start_mel_stats(self.cfg, self.workdir, self.resume)
        self.train_pipeline = InputPipeline(self.cfg, "train", replicas=replicas, mel_stats=mel_stats)
        self.signatures = self.train_pipeline.signatures()
        # only fixed padding can still fail (data.batch_size)
        check_divisible(self.train_pipeline.batch_signatures(), replicas)
        self.validation_pipeline = InputPipeline(self.cfg, "validation", replicas=replicas, mel_stats=mel_stats) \
            if self.cfg.data.validation_size else None
        vocab_path = self.cfg.cache_dir / VOCAB_FILE
        self.vocabulary = Vocabulary.load(vocab_path)
        self.mel_stats = self.train_pipeline.mel_stats  # batches are normalised; synthesis denormalises with these
        self.languages = self.train_pipeline.source.manifest["languages"]
        self.vocab_path = vocab_path  # copied into the run once it has accepted this config (stage_checkpoint)
        # the iterator is checkpointed with the model (its position and shuffle state)
        self.iterator = iter(self.train_pipeline.dataset(repeat=True))

    def stage_model(self) -> None:
        with self.strategy.scope():
            self.model = build_model(self.cfg, len(self.vocabulary.symbols))
            # before the optimizer is built: it only ever sees the trainable variables
            self.frozen = freeze_modules(self.model, self.cfg.training.freeze)
            self.optimizer = make_optimizer(self.cfg)
            self.steps = TrainingSteps(self.model, self.optimizer, self.cfg, self.strategy)
        self.parameters = count_parameters(self.model)

    def stage_checkpoint(self) -> None:
        directory = RunDir(self.workdir).checkpoints
        if not self.chief:  # other workers save too (collectives) but into a scratch folder
            directory = self.workdir / f"worker-{self.strategy.cluster_resolver.task_id}-scratch"
        # a tf.data service iterator cannot be saved: with data.service_address a resume restarts the stream
        data_state = {"iterator": self.iterator} if self.train_pipeline.checkpointable else {}
        # checkpointed, so training.max_minutes counts the training time of every run a resume continues
        self.trained_seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="trained_seconds")
        self.checkpoints = Checkpoints(directory, self.cfg.training.keep_checkpoints, model=self.model,
                                       optimizer=self.optimizer, trained_seconds=self.trained_seconds, **data_state,
                                       **self.steps.checkpoint_objects())
        self.restored_from = None
        if self.checkpoints.latest and not self.resume:
            raise WorkdirError(f"{directory} already holds checkpoints ({self.checkpoints.latest}); pass --resume to "
                               "continue that run or choose another --workdir.")
        if self.resume and self.checkpoints.latest:
            check_resumable(directory, self.checkpoints.latest, self.cfg, self.steps.adversarial, self.workdir)
        if self.resume:
            self.restored_from = self.checkpoints.restore_latest()
        self.init_from = None
        if self.cfg.init_from is not None and self.restored_from is None:  # a resumed run has its own weights
            self.init_from = warm_start(self.cfg, self.model, self.vocabulary, self.languages, self.workdir,
                                        self.echo, record=self.chief)
        if self.steps.weight_average is not None and self.restored_from is None:
            self.steps.weight_average.reset()  # the average starts at the weights the run starts from
        # only once the run directory has accepted this config: a refused resume or start keeps the run's own files
        if self.chief:
            run = RunDir(self.workdir)
            save_config(self.cfg, run.config)
            write_durably(run.vocab, self.vocab_path.read_bytes())
            self.mel_stats.save(run.mel_stats)
            run.write_json(run.corpus, corpus_summary(self.train_pipeline.source.manifest))  # read by a warm start

    def stage_compile(self) -> None:
        t = self.cfg.training
        self.traces = TraceAccounting(t.strict_retracing, RunDir(self.workdir).retraces if self.chief else None)
        # a validate step for each bucket the validation split fills (none without one): no other shape reaches it
        validated = self.validation_pipeline.buckets_in_use() if self.validation_pipeline else []
        self.steps.build(self.signatures, self.traces.watch, validated)
        self.summary_batch, self.summary_function = None, None
        if t.summary_every and self.chief and t.distribution == "none":
            self.summary_batch = self._first_batch()
            spec = {k: tf.TensorSpec(v.shape, v.dtype) for k, v in self.summary_batch.items()}
            function = tf.function(lambda batch: self.model(batch, training=False), input_signature=[spec],
                                   autograph=False)
            self.summary_function = self.traces.watch(function, "summary_forward") if t.enable_graph_mode else \
                function.python_function
        self.listener = Listener.create(self.cfg, self.model, self.vocabulary, self.mel_stats,
                                        self.validation_pipeline, self.chief, self.echo)
        started = time.perf_counter()
        if self._nothing_to_train():  # a resume at max_steps or past its time budget: no step runs, none is traced
            self.warmup, self.warmup_total = {}, 0.0
            self.traces.end_warmup()
            return
        # every step function traced AND run once (state restored), so no bucket's first real step pays
        # TF's graph optimisation; the calls go through the monitor, which counts these traces as warm-up
        # one tf.function per bucket wraps the same method, so TF's generic "N out of the last M calls
        # triggered retracing" warning fires on these expected first traces; the monitor keeps them all
        with expected_traces():
            self.warmup = self.steps.warm_up()
            if self.listener is not None:  # free-running synthesis of the validation sentences: traced here only
                self.warmup["listening"] = self.listener.warm_up(self.traces.watch)
        if self.summary_function is not None and t.enable_graph_mode:
            begin = time.perf_counter()
            outputs = self.summary_function(self.summary_batch)  # forward only: changes no variable
            tf.nest.map_structure(lambda tensor: tensor.numpy(), outputs)
            self.warmup["summary_forward"] = time.perf_counter() - begin
        self.warmup_total = time.perf_counter() - started
        self.traces.end_warmup()
        self.echo(f"warm-up: traced and ran {len(self.warmup)} functions in {self.warmup_total:.1f} s "
                  f"({self.parameters:,} parameters, {len(self.signatures)} batch shapes; state restored)")

    def stage_loop(self) -> dict[str, Any]:
        t = self.cfg.training
        loop = self._start_loop()
        # Ctrl-C / SIGTERM: end of this step, checkpoint, stop (one worker of several cannot stop alone)
        self.interrupt = StopOnSignals(enabled=self.stop_on_signals and t.distribution != "multi_worker")
        self.interrupt.install()
        try:
            while loop.step < t.max_steps and loop.stopped is None:
                out = self._train_call(loop)  # dispatched; nothing below waits for it but the host reads
                # host reads (which wait for the device) only at log / checkpoint points: the NaN guard skips bad
                # updates inside the graph, so reading its counter there loses nothing
                if loop.at_log_point(t.log_every):
                    self._log(out, loop)
                self._guard_nonfinite(out, loop)
                loop.bar.update(loop.per_call)
                loop.stopped = loop.stop_reason(self.interrupt.requested)
                if loop.stopped is not StopReason.INTERRUPTED:
                    self._validate_and_listen(loop)
                    self._summarise(loop)
                if self.interrupt.requested and loop.step < t.max_steps:  # also a signal during validation / listening
                    loop.stopped = StopReason.INTERRUPTED
                if loop.crossed(t.checkpoint_every) or loop.final:
                    self._checkpoint(loop)
                if loop.stopped is not None:
                    self._say_why_stopped(loop)
                elif loop.step < t.max_steps:
                    loop.feed.refill()  # the next batch goes to the device while this step runs
        except NonFiniteLossError:
            loop.stopped = StopReason.NONFINITE
            raise
        finally:
            self.interrupt.restore()
            loop.bar.close()
            loop.metrics.close()
            self.summary = self._summary(loop)
            self.traces.close()
        self.echo(format_summary(self.summary))
        return self.summary

    # ---- the loop's steps and periodic actions -----------------------------------------------------
    def _start_loop(self) -> LoopState:
        """The loop's state at the step the counters were restored to; a spent time budget stops it at once."""
        t = self.cfg.training
        start_step = int(self.steps.micro_step.numpy()) // t.gradient_accumulation_steps
        check_block_alignment(start_step, t.max_steps, t.steps_per_execution)
        device = self.feed_device
        if device == "auto":  # one device: copy ahead to the GPU; a strategy places each replica's slice itself
            device = default_device(self.cfg.data.prefetch_to_gpu) if t.distribution == "none" else None
        timer = StepTimer()
        loop = LoopState(start_step=start_step, max_steps=t.max_steps, per_call=t.steps_per_execution,
                         clock=TrainingClock(float(self.trained_seconds.numpy()), t.max_minutes),
                         feed=DeviceFeed(self.iterator, device, fetch=timer.next_batch), timer=timer,
                         metrics=MetricsLog(self.workdir, enabled=self.chief),
                         bar=progress_bar(t.max_steps, start_step, self.progress and self.chief))
        if loop.clock.spent_before():  # a resume whose budget is already spent trains nothing
            loop.stopped = StopReason.MAX_MINUTES
            self.echo(f"training.max_minutes ({t.max_minutes:g}) already spent at step {start_step}; raise it to go on")
        return loop

    def _train_call(self, loop: LoopState) -> dict[str, tf.Tensor]:
        """Feed one compiled call (gradient_accumulation_steps batches or blocks) and dispatch it."""
        loop.call_started = time.perf_counter()
        batches = []
        for _ in range(self.cfg.training.gradient_accumulation_steps):
            batch = loop.feed.take()
            batches.append(self.batch_filter(loop.step, batch) if self.batch_filter is not None else batch)
        out = self.steps.train_cycle(batches)
        loop.frames = loop.frames + out["real_frames"]
        loop.step += loop.per_call
        return out

    def _log(self, out: dict[str, tf.Tensor], loop: LoopState) -> None:
        """A metrics.jsonl record (and TensorBoard scalars) of the last call; the progress bar's loss."""
        record = {key: float(value) for key, value in out.items()}
        elapsed = loop.clock.elapsed()
        record.update(step=loop.step, step_time=(time.perf_counter() - loop.call_started) / loop.per_call,
                      input_wait_share=loop.timer.input_wait_share(elapsed),
                      mel_frames_per_second=float(loop.frames) / max(elapsed, 1e-9),
                      traces_after_warmup=self.traces.retraces_after_warmup())
        loop.metrics.write(record)
        loop.first_loss = record["total"] if loop.first_loss is None else loop.first_loss
        loop.last_loss = record["total"]
        loop.bar.set_postfix(loss=f"{loop.last_loss:.3f}", frames_s=f"{record['mel_frames_per_second']:.0f}")

    def _guard_nonfinite(self, out: dict[str, tf.Tensor], loop: LoopState) -> None:
        """Raise after training.max_nonfinite_steps non-finite steps in a row (read at log / checkpoint points)."""
        t = self.cfg.training
        read_now = loop.at_log_point(t.log_every) or loop.crossed(t.checkpoint_every)
        in_a_row = int(out["nonfinite_in_a_row"]) if read_now else 0
        if in_a_row >= t.max_nonfinite_steps:
            raise NonFiniteLossError(
                f"Stopped at step {loop.step}: {in_a_row} steps in a row had a non-finite loss or gradient "
                f"(training.max_nonfinite_steps = {t.max_nonfinite_steps}); those updates were skipped. The last good "
                f"checkpoint is {self.checkpoints.latest or 'none (no checkpoint saved yet)'}. Lower "
                "training.learning_rate, keep training.gradient_clip_norm > 0, or check the data "
                "(`myxtts prepare` rejects non-finite audio).")

    def _validate_and_listen(self, loop: LoopState) -> None:
        """Every validate_every steps and at the last: the validation losses, then the listening sentences."""
        if self.validation_pipeline is None or not (loop.crossed(self.cfg.training.validate_every) or loop.final):
            return
        loop.validation_loss = self._validate(loop.step, loop.metrics)
        if self.listener is not None:
            with loop.clock.paused():  # free-running synthesis: not training time (max_minutes, frames/s)
                self.listener(loop.step, loop.metrics)

    def _summarise(self, loop: LoopState) -> None:
        """Every summary_every steps: mel / alignment images and an audio sample to TensorBoard."""
        if self.summary_function is not None and loop.crossed(self.cfg.training.summary_every):
            self._write_summaries(loop.step, loop.metrics)

    def _checkpoint(self, loop: LoopState) -> None:
        """Every checkpoint_every steps, at the last and when stopping early; with the training time so far."""
        self.trained_seconds.assign(loop.clock.trained_seconds())
        self.checkpoints.save(loop.step)  # the feed holds no batch here: the iterator position is exact

    def _say_why_stopped(self, loop: LoopState) -> None:
        """Early stops say why and how to go on."""
        t = self.cfg.training
        if loop.stopped is StopReason.MAX_MINUTES:
            self.echo(f"training.max_minutes ({t.max_minutes:g}) reached at step {loop.step}: checkpoint saved; "
                      "--resume continues with the budget's remainder (raise max_minutes to go on)")
        elif loop.stopped is StopReason.INTERRUPTED:
            exactly = "exactly" if self.train_pipeline.checkpointable else \
                "(the tf.data service's iterator is not checkpointed)"
            self.echo(f"{self.interrupt.requested} at step {loop.step}: the step finished and a checkpoint was "
                      f"saved; a resume continues from it {exactly}")

    # ---- helpers -----------------------------------------------------------------------------------
    def _nothing_to_train(self) -> bool:
        t = self.cfg.training
        at_end = int(self.steps.micro_step.numpy()) // t.gradient_accumulation_steps >= t.max_steps
        return at_end or TrainingClock(float(self.trained_seconds.numpy()), t.max_minutes).spent_before()

    def _first_batch(self) -> dict:
        pipeline = self.validation_pipeline or self.train_pipeline
        batch = next(iter(pipeline.dataset(repeat=False)))
        if pipeline.steps_per_execution > 1:  # a block [K, batch, ...]: its first batch
            batch = {k: v[0] for k, v in batch.items()}
        return {k: v[:1] for k, v in batch.items()}  # one utterance for the images / audio

    def _validate(self, step: int, metrics: MetricsLog) -> float:
        totals: dict[str, float] = {}
        batches = 0
        for batch in self.validation_pipeline.dataset(repeat=False):
            for key, value in self.steps.validate(batch).items():
                totals[key] = totals.get(key, 0.0) + float(value)
            batches += 1
        record = {k: v / max(batches, 1) for k, v in totals.items() if k != "real_frames"}
        metrics.write({"step": step, **record}, split="validation")
        return record["total"]

    def _write_summaries(self, step: int, metrics: MetricsLog) -> None:
        outputs = self.summary_function(self.summary_batch)
        frames = int(self.summary_batch["mel_lengths"][0])
        steps = -(-frames // self.cfg.model.reduction_factor)
        tokens = int(self.summary_batch["token_lengths"][0])
        mel = self.mel_stats.denormalize(outputs["mel_after"][0, :frames].numpy())  # the real log mel
        if not hasattr(self, "_vocoder"):
            self._vocoder = GriffinLim(self.cfg.audio)
        audio = np.asarray(self._vocoder(mel))
        metrics.images_and_audio(step, mel, self.mel_stats.denormalize(self.summary_batch["mel"][0, :frames].numpy()),
                                 outputs["alignments"][0, :steps, :tokens].numpy(), audio, self.cfg.audio.sample_rate)

    def warmup_seconds_of(self, name: str) -> float:
        """Warm-up seconds of the function the trace accounting calls ``name`` (a step's under its shape alone)."""
        return self.warmup.get(self.steps.warmup_names.get(name, name), 0.0)

    def _summary(self, loop: LoopState) -> dict[str, Any]:
        counts = self.traces.counts()
        traces = {name: {"traces": counts.get(name, 0), "warmup_seconds": self.warmup_seconds_of(name)}
                  for name in counts}
        done, elapsed = loop.step - loop.start_step, loop.clock.elapsed()
        return {
            "steps": loop.step, "steps_this_run": done, "updates": self.steps.update_step,
            "nonfinite_total": int(self.steps.nonfinite_total.numpy()),
            "stopped": (loop.stopped or StopReason.MAX_STEPS).value,  # None also after an exception other than NaN's
            "interrupted_by": self.interrupt.requested,  # also set when the signal came at the last step
            "parameters": self.parameters, "batch_shapes": len(self.signatures),
            "replicas": self.strategy.num_replicas_in_sync, "traces": traces,
            "warmup_traces": sum(self.traces.warmup_counts.values()), "warmup_seconds": self.warmup_total,
            "retraces_after_warmup": self.traces.retraces_after_warmup(),
            "retrace_explanations": self.traces.explanations(),
            "loss_first": loop.first_loss, "loss_last": loop.last_loss, "validation_loss": loop.validation_loss,
            "mel_frames_per_second": float(loop.frames) / max(elapsed, 1e-9),
            "steps_per_second": done / max(elapsed, 1e-9),
            "input_wait_share": loop.timer.input_wait_share(elapsed),
            "input_wait_share_raw": loop.timer.raw_input_wait_share(elapsed),
            "input_wait_note": loop.timer.correction_note, "seconds": elapsed,
            "resumed_from": self.restored_from, "run_dir": str(self.workdir),
            "init_from": self.init_from["checkpoint"] if self.init_from else None, "frozen_variables": len(self.frozen),
            "checkpoint": self.checkpoints.latest, "weight_average_decay": self.cfg.training.ema_decay,
        }


def run(cfg: Config, workdir: str | Path, resume: bool = False, **options: Any) -> dict[str, Any]:
    """Train; return (and print) the training summary dict. See ``Trainer`` for options."""
    return Trainer(cfg, workdir, resume, **options).run()


__all__ = ["NonFiniteLossError", "StopReason", "Trainer", "WorkdirError", "format_summary", "run", "shape_key"]

"""The trainer: ``run(cfg, workdir, resume)`` in named stages: config, data, model, checkpoint, compile, loop. Each
stage returns what the stages after it need (``RunSetup``, ``TrainingData``, ``BuiltModel``, ``RestoredState``,
``CompiledRun``), so ``Trainer.run`` reads top to bottom; the loop is the shared skeleton (training/loop.py) with the
acoustic step and periodic actions (training/acoustic_loop.py).

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

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any, Callable

import keras
import tensorflow as tf

from myxtts.cache_files import VOCAB_FILE
from myxtts.config import Config, save_config
from myxtts.data.cache_manifest import corpus_summary
from myxtts.data.pipeline import InputPipeline
from myxtts.diagnostics.tf_warning import expected_traces
from myxtts.durable import write_durably
from myxtts.locks import lock_cache_for_reading, lock_run_directory
from myxtts.model import build_model, count_parameters
from myxtts.outputs import RUN, check_workdir, read_marker, write_marker
from myxtts.run_dir import RunDir
from myxtts.text import Vocabulary
from myxtts.training.acoustic_loop import (AcousticActions, AcousticLoopState, NonFiniteLossError,
                                           check_block_alignment, first_utterance)
from myxtts.training.checkpoint import Checkpoints, WorkdirError, check_data_resumable, check_resumable
from myxtts.training.device_feed import DeviceFeed, default_device
from myxtts.training.distribute import check_divisible, is_chief, make_strategy
from myxtts.training.interrupt import StopOnSignals
from myxtts.training.listener import Listener
from myxtts.training.loop import run_loop
from myxtts.training.reporting import StepTimer, TraceAccounting, format_summary
from myxtts.training.schedule import make_optimizer
from myxtts.training.stages import StagedRun, StopReason, TrainingClock
from myxtts.training.shape_keys import shape_key
from myxtts.training.steps import TrainingSteps
from myxtts.training.warm_start import freeze_modules, warm_start, warm_start_mel_stats

logger = logging.getLogger(__name__)


# ---- what each stage returns: what the stages after it need ---------------------------------------
@dataclasses.dataclass(frozen=True)
class RunSetup:
    """``stage_config``: the distribution strategy; whether this process is the chief (the one writer)."""

    strategy: tf.distribute.Strategy
    chief: bool


@dataclasses.dataclass(frozen=True)
class TrainingData:
    """``stage_data``: the pipelines, the data iterator (checkpointed with the model) and what the text and mel
    normalisation need."""

    train_pipeline: InputPipeline
    validation_pipeline: InputPipeline | None  # None: data.validation_size 0
    signatures: list  # one batch signature per bucket: the compiled steps' input signatures
    vocabulary: Vocabulary
    vocab_path: Path  # copied into the run once it has accepted this config (stage_checkpoint)
    mel_stats: Any  # MelStats: batches are normalised; synthesis denormalises with these
    languages: list
    iterator: Any


@dataclasses.dataclass(frozen=True)
class BuiltModel:
    """``stage_model``: the model, its optimizer and compiled-step owner."""

    model: keras.Model
    frozen: list  # the variables training.freeze holds fixed
    steps: TrainingSteps
    parameters: int


@dataclasses.dataclass(frozen=True)
class RestoredState:
    """``stage_checkpoint``: the checkpoints, the training time so far, where the weights came from."""

    checkpoints: Checkpoints
    trained_seconds: tf.Variable  # checkpointed: training.max_minutes counts every run a resume continues
    restored_from: str | None  # the checkpoint a resume continues
    init_from: dict | None  # the warm start's record (a new run started from another's weights)


@dataclasses.dataclass(frozen=True)
class CompiledRun:
    """``stage_compile``: the trace accounting, the summaries' forward pass, the listener, the warm-up's timings."""

    traces: TraceAccounting
    summary_function: Callable[[dict], dict] | None  # None: no summaries (summary_every 0, not chief, distributed)
    summary_batch: dict | None
    listener: Listener | None
    warmup: dict[str, float]  # seconds per function traced and run at warm-up
    warmup_total: float
    warmup_names: dict[str, str]  # trace-accounting name of a compiled step -> its warm-up key

    def warmup_seconds_of(self, name: str) -> float:
        """Warm-up seconds of the function the trace accounting calls ``name`` (a step's under its shape alone)."""
        return self.warmup.get(self.warmup_names.get(name, name), 0.0)


class Trainer(StagedRun):
    """``run()`` reads top to bottom: each stage takes what the stages before it returned."""

    def __init__(self, cfg: Config, workdir: str | Path, resume: bool = False, *, progress: bool = True,
                 echo: Callable[[str], None] = print,
                 batch_filter: Callable[[int, dict], dict] | None = None, feed_device: str | None = "auto",
                 stop_on_signals: bool = False, listen_with: Callable[..., Any] | None = None):
        """``batch_filter(step, batch)`` rewrites each training batch (tests inject faults); keep None.
        ``listen_with``: what builds the listener's synthesiser (``myxtts.synthesis.Synthesizer``; training.
        listen_sentences); None: no listening, said once.
        ``stop_on_signals``: Ctrl-C / SIGTERM end the loop at a checkpoint (training/interrupt.py; the commands).
        ``feed_device``: where batches are copied one step ahead ("auto": the GPU when data.prefetch_to_gpu
        and one exists; None: nowhere; tests pass a CPU device to run the device-feed path)."""
        self.cfg, self.workdir, self.resume = cfg, Path(workdir), resume
        self.progress, self.echo, self.batch_filter = progress, echo, batch_filter
        self.locks: list[Any] = []  # released by run(), however it ends
        self.stop_on_signals, self.listen_with = stop_on_signals, listen_with
        self.feed_device = feed_device  # resolved in stage_loop: listing devices here would start TF's context
        # before the strategy exists (MultiWorkerMirroredStrategy must configure collectives first)
        # kept by run() for a look after it (tests, explain-retracing); the stages pass them to each other
        self.data: TrainingData | None = None
        self.compiled: CompiledRun | None = None
        self.summary: dict[str, Any] | None = None

    def run(self) -> dict[str, Any]:
        try:
            setup = self.stage_config()
            self.data = data = self.stage_data(setup)
            built = self.stage_model(setup, data)
            restored = self.stage_checkpoint(setup, data, built)
            self.compiled = compiled = self.stage_compile(setup, data, built, restored)
            return self.stage_loop(setup, data, built, restored, compiled)
        finally:
            self.release_locks()

    # ---- what a finished (or failed) run leaves to look at ---------------------------------------
    @property
    def traces(self) -> TraceAccounting | None:
        return self.compiled.traces if self.compiled else None

    @property
    def listener(self) -> Listener | None:
        return self.compiled.listener if self.compiled else None

    @property
    def warmup(self) -> dict[str, float]:
        return self.compiled.warmup if self.compiled else {}

    @property
    def warmup_total(self) -> float:
        return self.compiled.warmup_total if self.compiled else 0.0

    @property
    def validation_pipeline(self) -> InputPipeline | None:
        return self.data.validation_pipeline if self.data else None

    def warmup_seconds_of(self, name: str) -> float:
        """Warm-up seconds of the function the trace accounting calls ``name`` (a step's under its shape alone)."""
        return self.compiled.warmup_seconds_of(name) if self.compiled else 0.0

    # ---- stages ------------------------------------------------------------------------------------
    def stage_config(self) -> RunSetup:
        new = check_workdir(self.workdir, "train", RUN)  # a folder of other files is refused before any write
        t = self.cfg.training
        if t.deterministic:
            tf.config.experimental.enable_op_determinism()
        keras.utils.set_random_seed(t.seed)
        tf.config.run_functions_eagerly(t.enable_eager_debug)
        strategy = make_strategy(self.cfg)
        chief = is_chief(strategy)
        self.workdir.mkdir(parents=True, exist_ok=True)
        if chief:  # one writer per run directory: a second `train` fails here, before touching anything
            self.locks.append(lock_run_directory(self.workdir))
            if new and read_marker(self.workdir) is None:
                write_marker(self.workdir, "train", RUN)
        return RunSetup(strategy, chief)

    def stage_data(self, setup: RunSetup) -> TrainingData:
        # held while training: prepare cannot rewrite the cache under it (and a rebuild in progress is waited for)
        self.locks.append(lock_cache_for_reading(self.cfg.cache_dir, self.echo))
        replicas = setup.strategy.num_replicas_in_sync  # bucket batches: replicas x a per-replica frame budget
        # a warm start keeps its source's normalisation (training.init_mel_stats); None: the corpus' own
        mel_stats = warm_start_mel_stats(self.cfg, self.workdir, self.resume)
        train_pipeline = InputPipeline(self.cfg, "train", replicas=replicas, mel_stats=mel_stats)
        signatures = train_pipeline.signatures()
        # only fixed padding can still fail (data.batch_size)
        check_divisible(train_pipeline.batch_signatures(), replicas)
        validation_pipeline = InputPipeline(self.cfg, "validation", replicas=replicas, mel_stats=mel_stats) \
            if self.cfg.data.validation_size else None
        vocab_path = self.cfg.cache_dir / VOCAB_FILE
        return TrainingData(train_pipeline=train_pipeline, validation_pipeline=validation_pipeline,
                            signatures=signatures, vocabulary=Vocabulary.load(vocab_path), vocab_path=vocab_path,
                            mel_stats=train_pipeline.mel_stats, languages=train_pipeline.source.manifest["languages"],
                            # the iterator is checkpointed with the model (its position and shuffle state)
                            iterator=iter(train_pipeline.dataset(repeat=True)))

    def stage_model(self, setup: RunSetup, data: TrainingData) -> BuiltModel:
        with setup.strategy.scope():
            model = build_model(self.cfg, len(data.vocabulary.symbols))
            # before the optimizer is built: it only ever sees the trainable variables
            frozen = freeze_modules(model, self.cfg.training.freeze)
            steps = TrainingSteps(model, make_optimizer(self.cfg), self.cfg, setup.strategy)
        return BuiltModel(model=model, frozen=frozen, steps=steps, parameters=count_parameters(model))

    def stage_checkpoint(self, setup: RunSetup, data: TrainingData, built: BuiltModel) -> RestoredState:
        directory = RunDir(self.workdir).checkpoints
        if not setup.chief:  # other workers save too (collectives) but into a scratch folder
            directory = self.workdir / f"worker-{setup.strategy.cluster_resolver.task_id}-scratch"
        # a tf.data service iterator cannot be saved: with data.service_address a resume restarts the stream
        data_state = {"iterator": data.iterator} if data.train_pipeline.checkpointable else {}
        # checkpointed, so training.max_minutes counts the training time of every run a resume continues
        trained_seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="trained_seconds")
        checkpoints = Checkpoints(directory, self.cfg.training.keep_checkpoints, model=built.model,
                                  optimizer=built.steps.optimizer, trained_seconds=trained_seconds, **data_state,
                                  **built.steps.checkpoint_objects())
        restored_from = None
        if checkpoints.latest and not self.resume:
            raise WorkdirError(f"{directory} already holds checkpoints ({checkpoints.latest}); pass --resume to "
                               "continue that run or choose another --workdir.")
        if self.resume and checkpoints.latest:
            check_resumable(directory, checkpoints.latest, self.cfg, built.steps.adversarial, self.workdir)
            if data_state:  # a tf.data service stream restarts on a resume: nothing to continue
                check_data_resumable(RunDir(self.workdir).config, self.cfg, directory, checkpoints.latest,
                                     self.workdir)
        if self.resume:
            restored_from = checkpoints.restore_latest()
        init_from = None
        if self.cfg.init_from is not None and restored_from is None:  # a resumed run has its own weights
            init_from = warm_start(self.cfg, built.model, data.vocabulary, data.languages, self.workdir, self.echo,
                                   record=setup.chief)
        if built.steps.weight_average is not None and restored_from is None:
            built.steps.weight_average.reset()  # the average starts at the weights the run starts from
        # only once the run directory has accepted this config: a refused resume or start keeps the run's own files
        if setup.chief:
            run = RunDir(self.workdir)
            save_config(self.cfg, run.config)
            write_durably(run.vocab, data.vocab_path.read_bytes())
            data.mel_stats.save(run.mel_stats)
            run.write_json(run.corpus, corpus_summary(data.train_pipeline.source.manifest))  # read by a warm start
        return RestoredState(checkpoints=checkpoints, trained_seconds=trained_seconds, restored_from=restored_from,
                             init_from=init_from)

    def stage_compile(self, setup: RunSetup, data: TrainingData, built: BuiltModel,
                      restored: RestoredState) -> CompiledRun:
        t = self.cfg.training
        traces = TraceAccounting(t.strict_retracing, RunDir(self.workdir).retraces if setup.chief else None)
        try:
            return self._compile(setup, data, built, restored, traces)
        except BaseException:  # the loop closes it; a failure before the loop would leak it
            traces.close()
            raise

    def _compile(self, setup: RunSetup, data: TrainingData, built: BuiltModel, restored: RestoredState,
                 traces: TraceAccounting) -> CompiledRun:
        t, steps = self.cfg.training, built.steps
        # a validate step for each bucket the validation split fills (none without one): no other shape reaches it
        validated = data.validation_pipeline.buckets_in_use() if data.validation_pipeline else []
        steps.build(data.signatures, traces.watch, validated)
        summary_batch, summary_function = None, None
        if t.summary_every and setup.chief and t.distribution == "none":
            summary_batch = first_utterance(data.validation_pipeline or data.train_pipeline)
            spec = {k: tf.TensorSpec(v.shape, v.dtype) for k, v in summary_batch.items()}
            function = tf.function(lambda batch: built.model(batch, training=False), input_signature=[spec],
                                   autograph=False)
            summary_function = traces.watch(function, "summary_forward") if t.enable_graph_mode else \
                function.python_function
        listener = Listener.create(self.cfg, built.model, data.vocabulary, data.mel_stats, data.validation_pipeline,
                                   setup.chief, self.listen_with, self.echo)
        compiled = CompiledRun(traces=traces, summary_function=summary_function, summary_batch=summary_batch,
                               listener=listener, warmup={}, warmup_total=0.0,
                               warmup_names=steps.warmup_names)
        started = time.perf_counter()
        if self._nothing_to_train(built, restored):  # a resume at max_steps or past its time budget: nothing traced
            traces.end_warmup()
            return compiled
        # every step function traced AND run once (state restored), so no bucket's first real step pays
        # TF's graph optimisation; the calls go through the monitor, which counts these traces as warm-up
        # one tf.function per bucket wraps the same method, so TF's generic "N out of the last M calls
        # triggered retracing" warning fires on these expected first traces; the monitor keeps them all
        with expected_traces():
            warmup = steps.warm_up()
            if listener is not None:  # free-running synthesis of the validation sentences: traced here only
                warmup["listening"] = listener.warm_up(traces.watch)
        if summary_function is not None and t.enable_graph_mode:
            begin = time.perf_counter()
            outputs = summary_function(summary_batch)  # forward only: changes no variable
            tf.nest.map_structure(lambda tensor: tensor.numpy(), outputs)
            warmup["summary_forward"] = time.perf_counter() - begin
        warmup_total = time.perf_counter() - started
        traces.end_warmup()
        self.echo(f"warm-up: traced and ran {len(warmup)} functions in {warmup_total:.1f} s "
                  f"({built.parameters:,} parameters, {len(data.signatures)} batch shapes; state restored)")
        return dataclasses.replace(compiled, warmup=warmup, warmup_total=warmup_total)

    def stage_loop(self, setup: RunSetup, data: TrainingData, built: BuiltModel, restored: RestoredState,
                   compiled: CompiledRun) -> dict[str, Any]:
        t = self.cfg.training
        loop = self._start_loop(setup, data, built, restored)
        # Ctrl-C / SIGTERM: end of this step, checkpoint, stop (one worker of several cannot stop alone)
        interrupt = StopOnSignals(enabled=self.stop_on_signals and t.distribution != "multi_worker")
        actions = AcousticActions(
            cfg=self.cfg, steps=built.steps, checkpoints=restored.checkpoints, trained_seconds=restored.trained_seconds,
            traces=compiled.traces, validation_pipeline=data.validation_pipeline, listener=compiled.listener,
            mel_stats=data.mel_stats, summary_function=compiled.summary_function,
            summary_batch=compiled.summary_batch, batch_filter=self.batch_filter)
        try:
            run_loop(loop, actions.actions(), interrupt, log_every=t.log_every, checkpoint_every=t.checkpoint_every,
                     echo=self.echo, iterator_checkpointed=data.train_pipeline.checkpointable)
        except NonFiniteLossError:
            loop.stopped = StopReason.NONFINITE
            raise
        finally:
            self.summary = self._summary(loop, interrupt, setup, data, built, restored, compiled)
            compiled.traces.close()
        self.echo(format_summary(self.summary))
        return self.summary

    # ---- helpers -----------------------------------------------------------------------------------
    def _start_loop(self, setup: RunSetup, data: TrainingData, built: BuiltModel, restored: RestoredState) -> AcousticLoopState:
        """The loop's state at the step the counters were restored to."""
        t = self.cfg.training
        start_step = int(built.steps.micro_step.numpy()) // t.gradient_accumulation_steps
        check_block_alignment(start_step, t.max_steps, t.steps_per_execution)
        device = self.feed_device
        if device == "auto":  # one device: copy ahead to the GPU; a strategy places each replica's slice itself
            device = default_device(self.cfg.data.prefetch_to_gpu) if t.distribution == "none" else None
        timer = StepTimer()
        return AcousticLoopState.begin(t, start_step, restored.trained_seconds, self.workdir, progress=self.progress,
                                       chief=setup.chief, per_call=t.steps_per_execution, timer=timer,
                                       feed=DeviceFeed(data.iterator, device, fetch=timer.next_batch))

    def _nothing_to_train(self, built: BuiltModel, restored: RestoredState) -> bool:
        t = self.cfg.training
        at_end = int(built.steps.micro_step.numpy()) // t.gradient_accumulation_steps >= t.max_steps
        return at_end or TrainingClock(float(restored.trained_seconds.numpy()), t.max_minutes).spent_before()

    def _summary(self, loop: AcousticLoopState, interrupt: StopOnSignals, setup: RunSetup, data: TrainingData,
                 built: BuiltModel, restored: RestoredState, compiled: CompiledRun) -> dict[str, Any]:
        traces, steps = compiled.traces, built.steps
        counts = traces.counts()
        functions = {name: {"traces": counts.get(name, 0), "warmup_seconds": compiled.warmup_seconds_of(name)}
                     for name in counts}
        done, elapsed = loop.step - loop.start_step, loop.clock.elapsed()
        return {
            "steps": loop.step, "steps_this_run": done, "updates": steps.update_step,
            "nonfinite_total": int(steps.nonfinite_total.numpy()),
            "stopped": (loop.stopped or StopReason.MAX_STEPS).value,  # None also after an exception other than NaN's
            "interrupted_by": interrupt.requested,  # also set when the signal came at the last step
            "parameters": built.parameters, "batch_shapes": len(data.signatures),
            "replicas": setup.strategy.num_replicas_in_sync, "traces": functions,
            "warmup_traces": sum(traces.warmup_counts.values()), "warmup_seconds": compiled.warmup_total,
            "retraces_after_warmup": traces.retraces_after_warmup(),
            "retrace_explanations": traces.explanations(),
            "loss_first": loop.first_loss, "loss_last": loop.last_loss, "validation_loss": loop.validation_loss,
            "mel_frames_per_second": float(loop.frames) / max(elapsed, 1e-9),
            "steps_per_second": done / max(elapsed, 1e-9),
            "input_wait_share": loop.timer.input_wait_share(elapsed),
            "input_wait_share_raw": loop.timer.raw_input_wait_share(elapsed),
            "input_wait_note": loop.timer.correction_note, "seconds": elapsed,
            "resumed_from": restored.restored_from, "run_dir": str(self.workdir),
            "init_from": restored.init_from["checkpoint"] if restored.init_from else None,
            "frozen_variables": len(built.frozen), "checkpoint": restored.checkpoints.latest,
            "weight_average_decay": self.cfg.training.ema_decay,
        }


def run(cfg: Config, workdir: str | Path, resume: bool = False, **options: Any) -> dict[str, Any]:
    """Train; return (and print) the training summary dict. See ``Trainer`` for options."""
    return Trainer(cfg, workdir, resume, **options).run()


__all__ = ["NonFiniteLossError", "StopReason", "Trainer", "WorkdirError", "format_summary", "run", "shape_key"]

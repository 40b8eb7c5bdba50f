"""The trainer: ``run(cfg, workdir, resume)`` in named stages: config, data, model, checkpoint, compile, loop.

Promises: every step is a compiled graph with a static input_signature, one per batch shape of the
pipeline, all traced and run once at warm-up (weights and counters restored exactly); a trace afterwards
is a bug (``training.strict_retracing`` raises with the explainer's explanation); nothing on the hot
path but ``next(iterator)`` and the compiled call.

Run directory (what ``myxtts.synthesis`` relies on)::

    WORKDIR/config.yaml  resolved config     WORKDIR/vocab.json   vocabulary of the cache
    WORKDIR/mel_stats.json  per-bin mel mean / std the model's mels are normalised with (the cache's; a warm
                         start's source's, training.init_mel_stats)
    WORKDIR/checkpoints/ model, optimizer, counters, data iterator
    WORKDIR/metrics.jsonl, WORKDIR/tensorboard/{train,validation,listening}/, WORKDIR/retraces.jsonl
    WORKDIR/corpus.json  languages, speakers, utterances per split of the training corpus
    WORKDIR/init_from.json  a warm start's source checkpoint, its step, the symbols it lacked, the frozen modules
    WORKDIR/run.lock     held by the process training into it (its pid, host, start): one writer at a time
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import keras
import numpy as np
import tensorflow as tf

from myxtts.config import Config, save_config
from myxtts.diagnostics.tf_warning import expected_traces
from myxtts.locks import lock_cache_for_reading, lock_run_directory
from myxtts.training.checkpoint import Checkpoints
from myxtts.training.device_feed import DeviceFeed, default_device
from myxtts.training.distribute import check_divisible, is_chief, make_strategy
from myxtts.training.interrupt import StopOnSignals
from myxtts.training.listening import Listener
from myxtts.training.monitor import MetricsLog, StepTimer, TraceAccounting, format_summary
from myxtts.training.schedule import make_optimizer
from myxtts.training.stages import StagedRun
from myxtts.training.steps import TrainingSteps, shape_key
from myxtts.training.warm_start import freeze_modules, warm_start, warm_start_mel_stats

logger = logging.getLogger(__name__)


class NonFiniteLossError(RuntimeError):
    """Training stopped after training.max_nonfinite_steps non-finite steps in a row."""


class WorkdirError(ValueError):
    pass


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
        self.feed_device = feed_device  # resolved in stage_loop: listing devices here would start TF's context
        # before the strategy exists (MultiWorkerMirroredStrategy must configure collectives first)

    # ---- stages ------------------------------------------------------------------------------------
    def stage_config(self) -> None:
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
            save_config(self.cfg, self.workdir / "config.yaml")

    def stage_data(self) -> None:
        from myxtts.data.cache import CORPUS_FILE, VOCAB_FILE, corpus_summary
        from myxtts.data.mel_stats import MEL_STATS_FILE
        from myxtts.data.pipeline import InputPipeline
        from myxtts.text import Vocabulary

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
        if self.chief:
            shutil.copyfile(vocab_path, self.workdir / "vocab.json")
            self.mel_stats.save(self.workdir / MEL_STATS_FILE)
            corpus = corpus_summary(self.train_pipeline.source.manifest)  # read by a warm start from this run
            (self.workdir / CORPUS_FILE).write_text(json.dumps(corpus, indent=1, ensure_ascii=False), encoding="utf-8")
        # the iterator is checkpointed with the model (its position and shuffle state)
        self.iterator = iter(self.train_pipeline.dataset(repeat=True))

    def stage_model(self) -> None:
        from myxtts.model import build_model, count_parameters

        with self.strategy.scope():
            self.model = build_model(self.cfg, len(self.vocabulary.symbols))
            # before the optimizer is built: it only ever sees the trainable variables
            self.frozen = freeze_modules(self.model, self.cfg.training.freeze)
            self.optimizer = make_optimizer(self.cfg)
            self.steps = TrainingSteps(self.model, self.optimizer, self.cfg, self.strategy)
        self.parameters = count_parameters(self.model)

    def stage_checkpoint(self) -> None:
        directory = self.workdir / "checkpoints"
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
            from myxtts.synthesis.loading import checkpoint_decoder_type, decoder_mismatch

            problem = decoder_mismatch(f"{directory} (checkpoint {self.checkpoints.latest})",
                                       checkpoint_decoder_type(self.checkpoints.latest), self.cfg.model.decoder)
            if problem:
                raise WorkdirError(f"{problem} Or choose another --workdir.")
        if self.resume:
            self.restored_from = self.checkpoints.restore_latest()
        self.init_from = None
        if self.cfg.init_from is not None and self.restored_from is None:  # a resumed run has its own weights
            self.init_from = warm_start(self.cfg, self.model, self.vocabulary, self.languages, self.workdir,
                                        self.echo, record=self.chief)

    def stage_compile(self) -> None:
        t = self.cfg.training
        self.traces = TraceAccounting(t.strict_retracing, self.workdir / "retraces.jsonl" if self.chief else None)
        self.steps.build(self.signatures, self.traces.watch)
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
        metrics = MetricsLog(self.workdir, enabled=self.chief)
        timer = StepTimer()
        device = self.feed_device
        if device == "auto":  # one device: copy ahead to the GPU; a strategy places each replica's slice itself
            device = default_device(self.cfg.data.prefetch_to_gpu) if t.distribution == "none" else None
        feed = DeviceFeed(self.iterator, device, fetch=timer.next_batch)
        start_step = int(self.steps.micro_step.numpy()) // t.gradient_accumulation_steps
        check_block_alignment(start_step, t.max_steps, t.steps_per_execution)
        step, first_loss, last_loss, loop_started = start_step, None, None, time.perf_counter()
        frames = tf.constant(0.0)  # real mel frames trained on: summed on the device, read at log points only
        bar = _progress_bar(t.max_steps, start_step, self.progress and self.chief)
        stopped = "max_steps"
        validation_loss = None
        budget = t.max_minutes * 60.0 if t.max_minutes > 0 else math.inf  # seconds of training, resumes included
        trained_before = float(self.trained_seconds.numpy())
        per_call = t.steps_per_execution  # optimizer steps per compiled call (a block of K batches)

        def crossed(every: int) -> bool:  # did the last call pass a multiple of `every`?
            return step // every > (step - per_call) // every

        if trained_before >= budget:  # a resume whose budget is already spent trains nothing
            stopped = "max_minutes"
            self.echo(f"training.max_minutes ({t.max_minutes:g}) already spent at step {step}; raise it to go on")
        # Ctrl-C / SIGTERM: end of this step, checkpoint, stop (one worker of several cannot stop alone)
        self.interrupt = StopOnSignals(enabled=self.stop_on_signals and t.distribution != "multi_worker")
        self.interrupt.install()
        try:
            while step < t.max_steps and stopped == "max_steps":
                step_started = time.perf_counter()
                batches = []
                for _ in range(t.gradient_accumulation_steps):
                    batch = feed.take()
                    batches.append(self.batch_filter(step, batch) if self.batch_filter is not None else batch)
                out = self.steps.train_cycle(batches)  # dispatched; nothing below waits for it but log points
                frames = frames + out["real_frames"]
                step += per_call
                # host reads (which wait for the device) only at log / checkpoint points: the NaN guard skips
                # bad updates inside the graph, so reading its counter there loses nothing
                first = step == start_step + per_call
                read_now = first or crossed(t.log_every) or step == t.max_steps or crossed(t.checkpoint_every)
                if first or crossed(t.log_every) or step == t.max_steps:
                    record = {k: float(v) for k, v in out.items()}
                    elapsed = time.perf_counter() - loop_started
                    record.update(step=step, step_time=(time.perf_counter() - step_started) / per_call,
                                  input_wait_share=timer.input_wait_share(elapsed),
                                  mel_frames_per_second=float(frames) / max(elapsed, 1e-9),
                                  traces_after_warmup=self.traces.retraces_after_warmup())
                    metrics.write(record)
                    first_loss = record["total"] if first_loss is None else first_loss
                    last_loss = record["total"]
                    bar.set_postfix(loss=f"{last_loss:.3f}", frames_s=f"{record['mel_frames_per_second']:.0f}")
                nonfinite_in_a_row = int(out["nonfinite_in_a_row"]) if read_now else 0
                if nonfinite_in_a_row >= t.max_nonfinite_steps:
                    raise NonFiniteLossError(
                        f"Stopped at step {step}: {nonfinite_in_a_row} steps in a row had a non-finite loss or "
                        f"gradient (training.max_nonfinite_steps = {t.max_nonfinite_steps}); those updates were "
                        f"skipped. The last good checkpoint is "
                        f"{self.checkpoints.latest or 'none (no checkpoint saved yet)'}. Lower "
                        "training.learning_rate, keep training.gradient_clip_norm > 0, or check the data "
                        "(`myxtts prepare` rejects non-finite audio).")
                bar.update(per_call)
                out_of_time = trained_before + time.perf_counter() - loop_started >= budget
                if out_of_time and step < t.max_steps:
                    stopped = "max_minutes"
                if self.interrupt.requested and step < t.max_steps:
                    stopped = "interrupted"
                last = step == t.max_steps or stopped != "max_steps"
                validate = crossed(t.validate_every) or last
                if self.validation_pipeline is not None and validate and stopped != "interrupted":
                    validation_loss = self._validate(step, metrics)
                    if self.listener is not None:  # free-running synthesis: not training time (max_minutes, frames/s)
                        begin = time.perf_counter()
                        self.listener(step, metrics)
                        loop_started += time.perf_counter() - begin
                if self.summary_function is not None and crossed(t.summary_every) and stopped != "interrupted":
                    self._write_summaries(step, metrics)
                if self.interrupt.requested and step < t.max_steps:  # also a signal during validation / listening
                    stopped = "interrupted"
                if crossed(t.checkpoint_every) or last or stopped == "interrupted":
                    self.trained_seconds.assign(trained_before + time.perf_counter() - loop_started)
                    self.checkpoints.save(step)  # the feed holds no batch here: the iterator position is exact
                if stopped == "max_minutes":
                    self.echo(f"training.max_minutes ({t.max_minutes:g}) reached at step {step}: checkpoint saved; "
                              "--resume continues with the budget's remainder (raise max_minutes to go on)")
                    break
                if stopped == "interrupted":
                    exactly = "exactly" if self.train_pipeline.checkpointable else \
                        "(the tf.data service's iterator is not checkpointed)"
                    self.echo(f"{self.interrupt.requested} at step {step}: the step finished and a checkpoint was "
                              f"saved; a resume continues from it {exactly}")
                    break
                if step < t.max_steps:
                    feed.refill()  # the next batch goes to the device while this step runs
        except NonFiniteLossError:
            stopped = "nonfinite"
            raise
        finally:
            self.interrupt.restore()
            bar.close()
            metrics.close()
            elapsed = time.perf_counter() - loop_started
            self.summary = self._summary(step, start_step, first_loss, last_loss, float(frames), elapsed, timer,
                                         validation_loss, stopped)
            self.traces.close()
        self.echo(format_summary(self.summary))
        return self.summary

    # ---- helpers -----------------------------------------------------------------------------------
    def _nothing_to_train(self) -> bool:
        t = self.cfg.training
        at_end = int(self.steps.micro_step.numpy()) // t.gradient_accumulation_steps >= t.max_steps
        return at_end or (t.max_minutes > 0 and float(self.trained_seconds.numpy()) >= t.max_minutes * 60.0)

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
        audio = None
        try:
            from myxtts.vocoder import GriffinLim
            if not hasattr(self, "_vocoder"):
                self._vocoder = GriffinLim(self.cfg.audio)
            audio = np.asarray(self._vocoder(mel))
        except ImportError:  # vocoder not available: images only
            pass
        metrics.images_and_audio(step, mel, self.mel_stats.denormalize(self.summary_batch["mel"][0, :frames].numpy()),
                                 outputs["alignments"][0, :steps, :tokens].numpy(), audio, self.cfg.audio.sample_rate)

    def _summary(self, step, start_step, first_loss, last_loss, frames, elapsed, timer, validation_loss,
                 stopped) -> dict[str, Any]:
        counts = self.traces.counts()
        traces = {name: {"traces": counts.get(name, 0), "warmup_seconds": self.warmup.get(warmup_key(name), 0.0)}
                  for name in counts}
        done = step - start_step
        return {
            "steps": step, "steps_this_run": done, "updates": self.steps.update_step,
            "nonfinite_total": int(self.steps.nonfinite_total.numpy()), "stopped": stopped,
            "interrupted_by": self.interrupt.requested,  # also set when the signal came at the last step
            "parameters": self.parameters, "batch_shapes": len(self.signatures),
            "replicas": self.strategy.num_replicas_in_sync,
            "traces": traces, "warmup_traces": sum(self.traces.warmup_counts.values()),
            "warmup_seconds": self.warmup_total,
            "retraces_after_warmup": self.traces.retraces_after_warmup(),
            "retrace_explanations": self.traces.explanations(),
            "loss_first": first_loss, "loss_last": last_loss, "validation_loss": validation_loss,
            "mel_frames_per_second": frames / max(elapsed, 1e-9), "steps_per_second": done / max(elapsed, 1e-9),
            "input_wait_share": timer.input_wait_share(elapsed),
            "input_wait_share_raw": timer.raw_input_wait_share(elapsed), "input_wait_note": timer.correction_note,
            "seconds": elapsed,
            "resumed_from": self.restored_from, "run_dir": str(self.workdir),
            "init_from": self.init_from["checkpoint"] if self.init_from else None, "frozen_variables": len(self.frozen),
            "checkpoint": self.checkpoints.latest,
        }


def check_block_alignment(start_step: int, max_steps: int, steps_per_execution: int) -> None:
    """Every compiled call runs ``steps_per_execution`` steps: a run resumed at a step that does not leave a whole
    number of calls before ``training.max_steps`` would overshoot it (and miss its final checkpoint)."""
    if (max_steps - start_step) % steps_per_execution:
        raise ValueError(f"Resuming at step {start_step}: training.max_steps ({max_steps}) - {start_step} is not a "
                         f"multiple of training.steps_per_execution ({steps_per_execution}), so the run would end "
                         "past max_steps. Set max_steps to a step that is, or resume with the steps_per_execution "
                         "the run was saved with.")


def warmup_key(name: str) -> str:
    """Trace-accounting name -> warm-up timing key (steps.warm_up uses the shape description)."""
    if name.startswith(("train_", "validate_step[")) and "[" in name:
        kind, rest = name.split("[", 1)  # "train_4_steps[...]" (steps_per_execution) warms up as a train_step
        kind = "validate_step" if kind == "validate_step" else "train_step"
        return f"{kind}[{rest.split(': ', 1)[-1]}"
    return name


def _progress_bar(total: int, initial: int, enabled: bool):
    from tqdm import tqdm
    return tqdm(total=total, initial=initial, disable=not enabled, unit="step", dynamic_ncols=True)


def run(cfg: Config, workdir: str | Path, resume: bool = False, **options: Any) -> dict[str, Any]:
    """Train; return (and print) the training summary dict. See ``Trainer`` for options."""
    return Trainer(cfg, workdir, resume, **options).run()


__all__ = ["NonFiniteLossError", "Trainer", "WorkdirError", "format_summary", "run", "shape_key"]

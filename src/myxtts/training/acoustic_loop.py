"""What the acoustic trainer (``Trainer.stage_loop``) supplies to the loop skeleton (training/loop.py): its loop state
(the skeleton's with the input feed and the mel frames), its step (one compiled call) and its periodic actions
(metrics, the non-finite guard, validation, listening, TensorBoard summaries, checkpoints); and the check that a
resume's calls end at max_steps."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from myxtts.config import Config
from myxtts.errors import ExpectedError, InputError
from myxtts.training.checkpoint import Checkpoints
from myxtts.training.device_feed import DeviceFeed
from myxtts.training.listener import Listener
from myxtts.training.loop import LoopActions, LoopState, save_checkpoint
from myxtts.training.reporting import MetricsLog, TraceAccounting
from myxtts.training.steps import TrainingSteps
from myxtts.vocoder import GriffinLim


class NonFiniteLossError(ExpectedError, RuntimeError):
    """Training stopped after training.max_nonfinite_steps non-finite steps in a row."""


def check_block_alignment(start_step: int, max_steps: int, steps_per_execution: int) -> None:
    """Every compiled call runs ``steps_per_execution`` steps: a run resumed at a step that does not leave a whole
    number of calls before ``training.max_steps`` would overshoot it (and miss its final checkpoint)."""
    if (max_steps - start_step) % steps_per_execution:
        raise InputError(f"Resuming at step {start_step}: training.max_steps ({max_steps}) - {start_step} is not a "
                         f"multiple of training.steps_per_execution ({steps_per_execution}), so the run would end "
                         "past max_steps. Set max_steps to a step that is, or resume with the steps_per_execution "
                         "the run was saved with.")


@dataclasses.dataclass(kw_only=True)
class AcousticLoopState(LoopState):
    """``per_call``: optimizer steps per compiled call (a block of training.steps_per_execution batches)."""

    feed: DeviceFeed  # the batches, copied to the device one call ahead
    # [] real mel frames trained on: summed on the device, read at log points only
    frames: tf.Tensor = dataclasses.field(default_factory=lambda: tf.constant(0.0))
    call_started: float = 0.0  # when the last compiled call began taking its batches


@dataclasses.dataclass
class AcousticActions:
    """The acoustic step and periodic actions, over what the trainer's stages made (``actions()``: for run_loop)."""

    cfg: Config
    steps: TrainingSteps
    checkpoints: Checkpoints
    trained_seconds: tf.Variable  # checkpointed: training.max_minutes counts every run a resume continues
    traces: TraceAccounting
    validation_pipeline: Any  # InputPipeline | None
    listener: Listener | None
    mel_stats: Any  # MelStats: summaries denormalise with these
    summary_function: Callable[[dict], dict] | None  # the forward pass of summary_batch (None: no summaries)
    summary_batch: dict | None
    batch_filter: Callable[[int, dict], dict] | None = None  # tests rewrite batches (fault injection)
    griffin_lim: GriffinLim | None = None  # the summaries' vocoder, made at the first summary

    def actions(self) -> LoopActions:
        return LoopActions(train_call=self.train_call, log=self.log, checkpoint=self.checkpoint,
                           guard=self.guard_nonfinite, periodic=self.validate_listen_and_summarise,
                           next_call=lambda loop: loop.feed.refill())  # the next batch to the device as this runs

    def train_call(self, loop: AcousticLoopState) -> dict[str, tf.Tensor]:
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

    def log(self, out: dict[str, tf.Tensor], loop: AcousticLoopState) -> None:
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

    def guard_nonfinite(self, out: dict[str, tf.Tensor], loop: AcousticLoopState) -> None:
        """Raise after training.max_nonfinite_steps non-finite steps in a row. Read at log / checkpoint points only
        (a host read waits for the device): the guard skips bad updates inside the graph, so waiting loses nothing."""
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

    def validate_listen_and_summarise(self, loop: AcousticLoopState) -> None:
        """Every validate_every steps and at the last: the validation losses, then the listening sentences; every
        summary_every steps: mel / alignment images and an audio sample to TensorBoard."""
        t = self.cfg.training
        if self.validation_pipeline is not None and (loop.crossed(t.validate_every) or loop.final):
            loop.validation_loss = self.validate(loop.step, loop.metrics)
            if self.listener is not None:
                with loop.clock.paused():  # free-running synthesis: not training time (max_minutes, frames/s)
                    self.listener(loop.step, loop.metrics)
        if self.summary_function is not None and loop.crossed(t.summary_every):
            self.write_summaries(loop.step, loop.metrics)

    def checkpoint(self, loop: AcousticLoopState) -> None:
        """Every checkpoint_every steps, at the last and when stopping early (the feed holds no batch here)."""
        save_checkpoint(loop, self.checkpoints, self.trained_seconds)

    def validate(self, step: int, metrics: MetricsLog) -> float:
        """The validation split's mean losses, written to metrics.jsonl; their total."""
        totals: dict[str, float] = {}
        batches = 0
        for batch in self.validation_pipeline.dataset(repeat=False):
            for key, value in self.steps.validate(batch).items():
                totals[key] = totals.get(key, 0.0) + float(value)
            batches += 1
        record = {k: v / max(batches, 1) for k, v in totals.items() if k != "real_frames"}
        metrics.write({"step": step, **record}, split="validation")
        return record["total"]

    def write_summaries(self, step: int, metrics: MetricsLog) -> None:
        """The summary utterance's predicted and real mel, its alignment and its audio (Griffin-Lim) to TensorBoard."""
        outputs = self.summary_function(self.summary_batch)
        frames = int(self.summary_batch["mel_lengths"][0])
        steps = -(-frames // self.cfg.model.reduction_factor)
        tokens = int(self.summary_batch["token_lengths"][0])
        mel = self.mel_stats.denormalize(outputs["mel_after"][0, :frames].numpy())  # the real log mel
        if self.griffin_lim is None:
            self.griffin_lim = GriffinLim(self.cfg.audio)
        audio = np.asarray(self.griffin_lim(mel))
        metrics.images_and_audio(step, mel, self.mel_stats.denormalize(self.summary_batch["mel"][0, :frames].numpy()),
                                 outputs["alignments"][0, :steps, :tokens].numpy(), audio, self.cfg.audio.sample_rate)


def first_utterance(pipeline: Any) -> dict:
    """The first utterance of a pipeline's first batch (a batch of one): what the summaries draw."""
    batch = next(iter(pipeline.dataset(repeat=False)))
    if pipeline.steps_per_execution > 1:  # a block [K, batch, ...]: its first batch
        batch = {k: v[0] for k, v in batch.items()}
    return {k: v[:1] for k, v in batch.items()}

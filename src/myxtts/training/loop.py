"""The one training loop skeleton both trainers run (``run_loop``): a step function, then the periodic actions, with
the interrupt (Ctrl-C / SIGTERM: finish the step, checkpoint, stop), the clock (``training.max_minutes`` summed over
the runs a resume continues), the progress bar, and checkpoints every ``training.checkpoint_every`` steps and at the
end. The trainers supply what differs as ``LoopActions``: the acoustic ``Trainer`` (training/trainer.py) and the
``VocoderTrainer`` (training/vocoder_trainer.py).

One idiom for every periodic action: ``LoopState.crossed(n)``, true when the last call passed a multiple of ``n``, so
an action is neither skipped nor repeated when a call advances several steps (``training.steps_per_execution``) or a
resume starts mid-interval.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import tensorflow as tf

from myxtts.config import TrainingConfig
from myxtts.training.checkpoint import Checkpoints
from myxtts.training.interrupt import StopOnSignals
from myxtts.training.reporting import MetricsLog, StepTimer
from myxtts.training.stages import StopReason, TrainingClock, progress_bar


@dataclasses.dataclass(kw_only=True)
class LoopState:
    """The training loop's running state: where it is, the figures it reports, why it stopped (None: running).
    A trainer with more to carry (the acoustic input feed) subclasses it."""

    start_step: int
    max_steps: int
    per_call: int = 1  # optimizer steps per call of the step function
    clock: TrainingClock  # training seconds (pauses excluded) against training.max_minutes, over resumes
    metrics: MetricsLog
    bar: Any  # the progress bar (tqdm)
    timer: StepTimer = dataclasses.field(default_factory=StepTimer)
    step: int = dataclasses.field(init=False)  # optimizer steps done, this run's and the runs' it resumes
    first_loss: float | None = None
    last_loss: float | None = None
    validation_loss: float | None = None
    stopped: StopReason | None = None

    def __post_init__(self) -> None:
        self.step = self.start_step

    @classmethod
    def begin(cls, training: TrainingConfig, start_step: int, trained_seconds: tf.Variable, workdir: Path, *,
              progress: bool, chief: bool = True, **fields: Any) -> "LoopState":
        """The state at ``start_step``, its clock continuing the checkpointed ``trained_seconds``; ``chief``: this
        process writes metrics and shows the bar (the other workers of a multi-worker run do not)."""
        return cls(start_step=start_step, max_steps=training.max_steps,
                   clock=TrainingClock(float(trained_seconds.numpy()), training.max_minutes),
                   metrics=MetricsLog(workdir, enabled=chief),
                   bar=progress_bar(training.max_steps, start_step, progress and chief), **fields)

    def crossed(self, every: int) -> bool:
        """Did the last call pass a multiple of ``every``? (0: never)"""
        return every > 0 and self.step // every > (self.step - self.per_call) // every

    def at_log_point(self, log_every: int) -> bool:
        """The first call, a call that passed a multiple of ``log_every``, or the one reaching max_steps."""
        return self.first or self.crossed(log_every) or self.step == self.max_steps

    def stop_reason(self, signal_name: str | None) -> StopReason | None:
        """Why to stop after this call (None: go on; at max_steps the loop ends by itself). ``signal_name``: the
        Ctrl-C / SIGTERM received, if any, which outranks the time budget."""
        if self.step >= self.max_steps:
            return None
        if signal_name is not None:
            return StopReason.INTERRUPTED
        return StopReason.MAX_MINUTES if self.clock.out_of_time() else None

    @property
    def first(self) -> bool:
        """The first call of this run."""
        return self.step == self.start_step + self.per_call

    @property
    def final(self) -> bool:
        """The last call of this run: max_steps reached or stopping early."""
        return self.step == self.max_steps or self.stopped is not None


def _nothing(*_: Any) -> None:
    """An action a trainer does not need."""


@dataclasses.dataclass
class LoopActions:
    """What a trainer supplies to ``run_loop``; each takes the ``LoopState`` (``out``: what ``train_call`` returned)."""

    train_call: Callable[[LoopState], dict[str, tf.Tensor]]  # dispatch one call; advance ``loop.step``
    log: Callable[[dict[str, tf.Tensor], LoopState], None]  # at log points: metrics.jsonl, the bar's figures
    checkpoint: Callable[[LoopState], None]  # every checkpoint_every steps, at the last and when stopping early
    # after every call (the acoustic non-finite guard, which reads at log and checkpoint points)
    guard: Callable[[dict[str, tf.Tensor], LoopState], None] = _nothing
    periodic: Callable[[LoopState], None] = _nothing  # validation, listening, summaries: not after an interrupt
    next_call: Callable[[LoopState], None] = _nothing  # before the next call (the acoustic feed's copy ahead)


def run_loop(loop: LoopState, actions: LoopActions, interrupt: StopOnSignals, *, log_every: int,
             checkpoint_every: int, echo: Callable[[str], None], iterator_checkpointed: bool = True) -> None:
    """Train from ``loop.step`` to ``loop.max_steps`` or an early stop (``loop.stopped`` says which); the bar and the
    metrics log are closed however it ends. ``iterator_checkpointed``: a resume continues the data exactly (false for
    a tf.data service stream), said when a signal stops the run."""
    if loop.clock.spent_before():  # a resume whose budget is already spent trains nothing
        loop.stopped = StopReason.MAX_MINUTES
        echo(f"training.max_minutes ({loop.clock.max_minutes:g}) already spent at step {loop.step}; raise it to "
             "go on")
    interrupt.install()
    try:
        while loop.step < loop.max_steps and loop.stopped is None:
            out = actions.train_call(loop)  # dispatched; nothing below waits for it but the host reads
            if loop.at_log_point(log_every):
                actions.log(out, loop)
            actions.guard(out, loop)
            loop.bar.update(loop.per_call)
            loop.stopped = loop.stop_reason(interrupt.requested)
            if loop.stopped is not StopReason.INTERRUPTED:
                actions.periodic(loop)
            if interrupt.requested and loop.step < loop.max_steps:  # also a signal during the periodic actions
                loop.stopped = StopReason.INTERRUPTED
            if loop.crossed(checkpoint_every) or loop.final:
                actions.checkpoint(loop)
            if loop.stopped is not None:
                _say_why_stopped(loop, interrupt, echo, iterator_checkpointed)
            elif loop.step < loop.max_steps:
                actions.next_call(loop)
    finally:
        interrupt.restore()
        loop.bar.close()
        loop.metrics.close()


def save_checkpoint(loop: LoopState, checkpoints: Checkpoints, trained_seconds: tf.Variable) -> None:
    """Save at ``loop.step`` with the training time so far (what the next resume's clock continues). The step
    function has consumed its batches: the iterator position is exact."""
    trained_seconds.assign(loop.clock.trained_seconds())
    checkpoints.save(loop.step)


def _say_why_stopped(loop: LoopState, interrupt: StopOnSignals, echo: Callable[[str], None],
                     iterator_checkpointed: bool) -> None:
    """Early stops say why and how to go on."""
    if loop.stopped is StopReason.MAX_MINUTES:
        echo(f"training.max_minutes ({loop.clock.max_minutes:g}) reached at step {loop.step}: checkpoint saved; "
             "--resume continues with the budget's remainder (raise max_minutes to go on)")
    elif loop.stopped is StopReason.INTERRUPTED:
        exactly = "exactly" if iterator_checkpointed else "(the tf.data service's iterator is not checkpointed)"
        echo(f"{interrupt.requested} at step {loop.step}: the step finished and a checkpoint was saved; a resume "
             f"continues from it {exactly}")

"""The acoustic trainer's loop state (``Trainer.stage_loop``): the step it is at, its clock and input feed, the
figures its summary reports, and why it stopped."""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

from myxtts.errors import InputError
from myxtts.training.device_feed import DeviceFeed
from myxtts.training.reporting import MetricsLog, StepTimer
from myxtts.training.stages import StopReason, TrainingClock


def check_block_alignment(start_step: int, max_steps: int, steps_per_execution: int) -> None:
    """Every compiled call runs ``steps_per_execution`` steps: a run resumed at a step that does not leave a whole
    number of calls before ``training.max_steps`` would overshoot it (and miss its final checkpoint)."""
    if (max_steps - start_step) % steps_per_execution:
        raise InputError(f"Resuming at step {start_step}: training.max_steps ({max_steps}) - {start_step} is not a "
                         f"multiple of training.steps_per_execution ({steps_per_execution}), so the run would end "
                         "past max_steps. Set max_steps to a step that is, or resume with the steps_per_execution "
                         "the run was saved with.")


@dataclasses.dataclass
class LoopState:
    """The training loop's running state: where it is, the figures it reports, why it stopped (None: running)."""

    start_step: int
    max_steps: int
    per_call: int  # optimizer steps per compiled call (a block of training.steps_per_execution batches)
    clock: TrainingClock
    feed: DeviceFeed
    timer: StepTimer
    metrics: MetricsLog
    bar: Any  # the progress bar (tqdm)
    step: int = dataclasses.field(init=False)  # optimizer steps done, this run's and the runs' it resumes
    # [] real mel frames trained on: summed on the device, read at log points only
    frames: tf.Tensor = dataclasses.field(default_factory=lambda: tf.constant(0.0))
    call_started: float = 0.0  # when the last compiled call began taking its batches
    first_loss: float | None = None
    last_loss: float | None = None
    validation_loss: float | None = None
    stopped: StopReason | None = None

    def __post_init__(self) -> None:
        self.step = self.start_step

    def crossed(self, every: int) -> bool:
        """Did the last call pass a multiple of ``every``?"""
        return self.step // every > (self.step - self.per_call) // every

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

"""What every trainer shares: the stages run top to bottom (config, data, model, checkpoint, compile, loop), the
locks taken on the way released however the run ends, why a loop stopped, its training clock and progress bar."""

from __future__ import annotations

import contextlib
import enum
import math
import time
from typing import Any, Iterator

from tqdm import tqdm


class StagedRun:
    """What both trainers share around their stages: subclasses append the locks they take to ``self.locks``, and
    their own ``run()`` (config, data, model, checkpoint, compile, loop, each stage taking what the ones before it
    returned) calls ``release_locks`` however it ends."""

    locks: list[Any]

    def release_locks(self) -> None:
        """The run directory's and the cache's locks (the kernel drops them too if the process dies)."""
        for lock in self.locks:
            lock.release()
        self.locks.clear()


class StopReason(enum.Enum):
    """Why a training loop ended; the value is the summary's ``stopped`` (printed, and stored in benchmark JSON)."""

    MAX_STEPS = "max_steps"  # training.max_steps reached (also: the loop left by an exception other than below)
    MAX_MINUTES = "max_minutes"  # training.max_minutes spent, over every run a resume continues
    INTERRUPTED = "interrupted"  # Ctrl-C / SIGTERM: the step finished and a checkpoint was saved
    NONFINITE = "nonfinite"  # training.max_nonfinite_steps non-finite steps in a row (the trainer raises)


class TrainingClock:
    """Training seconds of this run, pauses excluded, against a budget counted over every run a resume continues."""

    def __init__(self, trained_before: float, max_minutes: float) -> None:
        self.trained_before = trained_before  # seconds trained by the runs this one resumes (checkpointed)
        self.max_minutes = max_minutes  # as configured, for the messages
        self.budget = max_minutes * 60.0 if max_minutes > 0 else math.inf  # training.max_minutes; 0: no limit
        self.started = time.perf_counter()

    def elapsed(self) -> float:
        """Seconds of this run's training (pauses excluded)."""
        return time.perf_counter() - self.started

    def trained_seconds(self) -> float:
        """Seconds of training in all: what the checkpoint keeps for the next resume."""
        return self.trained_before + self.elapsed()

    def spent_before(self) -> bool:
        """The budget was used up by the runs this one resumes: nothing is left to train."""
        return self.trained_before >= self.budget

    def out_of_time(self) -> bool:
        return self.trained_seconds() >= self.budget

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent inside does not count as training (free-running synthesis, for instance)."""
        begin = time.perf_counter()
        try:
            yield
        finally:
            self.started += time.perf_counter() - begin


def progress_bar(total: int, initial: int, enabled: bool) -> Any:
    """A tqdm bar of optimizer steps (disabled: every call a no-op)."""
    return tqdm(total=total, initial=initial, disable=not enabled, unit="step", dynamic_ncols=True)

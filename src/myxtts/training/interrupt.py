"""Ctrl-C (SIGINT) or SIGTERM during training: the step running finishes, a checkpoint is saved, training stops.

A killed run loses every step since its last checkpoint (``training.checkpoint_every``); a signal asks instead, and
the trainer answers at the end of the step, where the input feed holds no batch, so the checkpoint's iterator
position is exact and ``--resume`` continues as if nothing happened. A second signal gets the previous handler at
once (Python's KeyboardInterrupt for Ctrl-C, the default termination for SIGTERM): a stuck run can still be
stopped. Handlers can only be installed from the main thread; elsewhere (and for multi-worker runs, where one
worker stopping alone would leave the others waiting in a collective) nothing is installed.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopOnSignals:
    """``install()`` before the loop, ``restore()`` after it; ``requested`` names the signal once one came."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.requested: str | None = None  # "SIGINT" / "SIGTERM"
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if not self.enabled:
            return
        for number in SIGNALS:
            previous = signal.signal(number, self._handle)
            self._previous[number] = signal.SIG_DFL if previous is None else previous  # None: set outside Python

    def restore(self) -> None:
        for number, previous in self._previous.items():
            signal.signal(number, previous)
        self._previous.clear()

    def _handle(self, number: int, frame: Any) -> None:
        self.requested = signal.Signals(number).name
        self.restore()  # a second signal acts at once



def exit_code(signal_name: str) -> int:
    """The shell's status for a process stopped by this signal (130 for SIGINT, 143 for SIGTERM): a script that
    runs ``myxtts train && myxtts synthesize`` does not go on with a model whose training was stopped."""
    return 128 + signal.Signals[signal_name].value

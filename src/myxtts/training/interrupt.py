"""Ctrl-C (SIGINT) or SIGTERM during `myxtts train` / `myxtts demo`: the step running finishes, a checkpoint is saved
at it, training stops, and the command then dies by that same signal (the shell sees 130 / 143).

A killed run loses every step since its last checkpoint (``training.checkpoint_every``); a signal asks instead, and
the trainer answers at the end of the step, where the input feed holds no batch, so the checkpoint's iterator
position is exact and ``--resume`` continues as if nothing happened. The handler says so on stderr at once. A
second signal of the same kind more than ``repeat_window`` seconds later gets the previous handler (Python's
KeyboardInterrupt for Ctrl-C, termination for SIGTERM): a stuck run can still be stopped; a copy of the same signal
delivered twice at once (a terminal and a wrapper both forwarding it) is not a second request.

Only the commands opt in (``Trainer(stop_on_signals=True)``): a script, benchmark or test that calls
``training.run`` keeps Python's own Ctrl-C. Handlers are installed from the main thread only, never for multi-worker
runs (one worker stopping alone would leave the others waiting in a collective), and a signal the parent process
set to be ignored (a background job's SIGINT) stays ignored.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
NOTICE = (b"\nmyxtts: stopping after this step and saving a checkpoint (send the signal again to stop at once, "
          b"losing the steps since the last checkpoint)\n")


class StopOnSignals:
    """``install()`` before the loop, ``restore()`` after it; ``requested`` names the signal once one came."""

    def __init__(self, enabled: bool = True, repeat_window: float = 1.0):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.repeat_window = repeat_window  # seconds in which the same signal again is a duplicate, not a request
        self.requested: str | None = None  # "SIGINT" / "SIGTERM"
        self._received_at = 0.0
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if not self.enabled:
            return
        for number in SIGNALS:
            if signal.getsignal(number) is signal.SIG_IGN:
                continue
            previous = signal.signal(number, self._handle)
            self._previous[number] = signal.SIG_DFL if previous is None else previous  # None: set outside Python

    def restore(self) -> None:
        for number, previous in self._previous.items():
            signal.signal(number, previous)
        self._previous.clear()

    def _handle(self, number: int, frame: Any) -> None:
        name = signal.Signals(number).name
        if self.requested is None:
            self.requested, self._received_at = name, time.monotonic()
            os.write(2, NOTICE)  # async-signal-safe (the progress bar owns sys.stderr)
            return
        if name == self.requested and time.monotonic() - self._received_at < self.repeat_window:
            return  # the same signal delivered twice at once
        previous = self._previous.get(number, signal.SIG_DFL)
        self.restore()
        if callable(previous):
            previous(number, frame)  # e.g. KeyboardInterrupt raised here
        else:
            signal.raise_signal(number)  # SIG_DFL: terminate as if no handler had been installed


def die_by(signal_name: str) -> None:
    """End the process by this signal with its default action after the work is saved: the parent shell sees the
    death by signal (status 130 / 143), so a script's `train && synthesize` or loop does not go on."""
    number = signal.Signals[signal_name]
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(number, signal.SIG_DFL)
    signal.raise_signal(number)
    sys.exit(128 + number.value)  # not reached where the default action terminates

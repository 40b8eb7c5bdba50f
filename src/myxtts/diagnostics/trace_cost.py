"""What a trace costs: time spent tracing (building the graph) and, for `jit_compile` functions, an
estimate of the XLA compile time.

Tracing time is measured exactly by timing TF's `tracing_compilation._create_concrete_function`
(private, TF 2.16-2.21, guarded: without it the wall time of the call that traced is used and
`available()` says why). Nested traces are counted once, in the outermost one, per thread.

XLA compiles inside the first run of a new concrete shape, in C++: its cost is estimated as the wall
time of that call minus its tracing time minus the function's typical steady call (median of the last
calls that did not compile); before any steady call is known the estimate includes one run.
"""

from __future__ import annotations

import functools
import statistics
import threading
import time
from typing import Any

_LOCAL = threading.local()  # .depth: nesting of tracing calls; .seconds: outermost tracing time so far
_STATE = {"installed": False, "note": ""}
_LOCK = threading.Lock()
STEADY_SAMPLES = 16  # steady call times kept per jit function for the compile estimate


def install() -> None:
    """Wrap TF's concrete-function creation once (idempotent; only a tracing call pays the timer)."""
    with _LOCK:
        if _STATE["installed"] or _STATE["note"]:
            return
        try:
            from tensorflow.python.eager.polymorphic_function import tracing_compilation  # private: may be missing
        except ImportError as err:
            _STATE["note"] = f"tracing time not separable on this TF ({err}); the traced call's wall time is used"
            return
        original = getattr(tracing_compilation, "_create_concrete_function", None)
        if original is None:
            _STATE["note"] = ("tracing_compilation._create_concrete_function is missing on this TF; the traced "
                              "call's wall time is used")
            return

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(_LOCAL, "depth", 0)
            _LOCAL.depth = depth + 1
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                _LOCAL.depth = depth
                if depth == 0:  # nested traces are part of the outer one
                    _LOCAL.seconds = getattr(_LOCAL, "seconds", 0.0) + time.perf_counter() - started

        tracing_compilation._create_concrete_function = timed
        _STATE["installed"] = True


def available() -> tuple[bool, str]:
    return bool(_STATE["installed"]), str(_STATE["note"])


def mark() -> float:
    """This thread's tracing seconds so far; the difference of two marks is the tracing in between."""
    return getattr(_LOCAL, "seconds", 0.0)


def tracing_seconds(start_mark: float, call_seconds: float) -> float:
    """Tracing time since `start_mark`, or the whole call when the hook is not installed."""
    if not _STATE["installed"]:
        return call_seconds
    return min(max(mark() - start_mark, 0.0), call_seconds)


def compile_estimate(call_seconds: float, traced_seconds: float, steady: list[float]) -> float:
    """XLA compile time of a call that compiled: its time beyond tracing and a typical run."""
    typical = statistics.median(steady) if steady else 0.0
    return max(call_seconds - traced_seconds - typical, 0.0)

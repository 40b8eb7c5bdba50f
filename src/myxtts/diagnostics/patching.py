"""`explain_retracing()`: monitor every `tf.function` called inside a `with` block.

While active it replaces `Function.__call__` (class
`tensorflow.python.eager.polymorphic_function.polymorphic_function.Function`, TF 2.16-2.21) with a
wrapper that routes eager calls through the innermost active RetraceMonitor.  The original is restored
on exit, also when the block raises.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from pathlib import Path
from typing import Any, Iterator

import tensorflow as tf

from myxtts.diagnostics.retrace_monitor import RetraceMonitor

_SUPPORTED = ((2, 16), (2, 21))  # versions whose Function class was checked; newer ones are tried
_STATE_LOCK = threading.Lock()
_ACTIVE: list[RetraceMonitor] = []
_ORIGINAL_CALL: Any = None


def _function_class() -> type:
    """The tf.function class (private module path, stable across TF 2.16-2.21)."""
    try:
        from tensorflow.python.eager.polymorphic_function import polymorphic_function  # private: may be missing
    except ImportError as err:
        raise RuntimeError(
            f"explain_retracing cannot patch tf.function on TensorFlow {tf.__version__}: the module "
            "tensorflow.python.eager.polymorphic_function.polymorphic_function is missing (checked on TF "
            "2.16-2.21). Use RetraceMonitor().watch(fn) on each function instead; it only needs the public "
            "experimental_get_tracing_count().") from err
    function_class = getattr(polymorphic_function, "Function", None)
    if function_class is None or not callable(getattr(function_class, "experimental_get_tracing_count", None)):
        raise RuntimeError(
            f"explain_retracing: TensorFlow {tf.__version__} has no Function.experimental_get_tracing_count; "
            "use RetraceMonitor().watch(fn) on each function instead.")
    return function_class


def function_class() -> type:
    """The class of every `tf.function` object (RuntimeError naming the fallback when TF moved it)."""
    return _function_class()


def tf_version_supported() -> bool:
    major_minor = tuple(int(part) for part in tf.__version__.split(".")[:2])
    return _SUPPORTED[0] <= major_minor


def _patched_call(self: Any, *args: Any, **kwargs: Any) -> Any:
    monitor = _ACTIVE[-1] if _ACTIVE else None
    if monitor is None:
        return _ORIGINAL_CALL(self, *args, **kwargs)
    # the original __call__ does the work, so the monitor's call does not come back here
    return monitor.call(self, args, kwargs, invoke=functools.partial(_ORIGINAL_CALL, self))


def _install() -> None:
    global _ORIGINAL_CALL
    function_class = _function_class()
    if _ORIGINAL_CALL is None:
        _ORIGINAL_CALL = function_class.__call__
        function_class.__call__ = _patched_call


def _uninstall() -> None:
    global _ORIGINAL_CALL
    if _ORIGINAL_CALL is not None:
        _function_class().__call__ = _ORIGINAL_CALL
        _ORIGINAL_CALL = None


@contextlib.contextmanager
def explain_retracing(strict: bool = False, json_path: str | Path | None = None,
                      monitor: RetraceMonitor | None = None) -> Iterator[RetraceMonitor]:
    """Explain every trace of every tf.function called in the block; yields the RetraceMonitor.

    Every retrace is unexpected here (there is no warm-up), except the second trace TF makes when a
    function creates variables on its first call.
    """
    monitor = monitor or RetraceMonitor(strict=strict, json_path=json_path, warmup=False)
    with _STATE_LOCK:
        _install()
        _ACTIVE.append(monitor)
    try:
        yield monitor
    finally:
        with _STATE_LOCK:
            _ACTIVE.remove(monitor)
            if not _ACTIVE:
                _uninstall()
        monitor.close()

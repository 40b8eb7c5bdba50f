"""Silence TensorFlow's generic "N out of the last M calls ... triggered tf.function retracing" warning
where it is known to be wrong.

TF keys that warning by the Python code object, so a warm-up that traces one compiled function per
bucket shape (each a *first* trace of its own tf.function, all wrapping the same method) trips it.
The explainer still records every one of those traces as `first_trace`; only the misleading log line
is dropped, and only inside the `with` block.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator

_TF_LOGGER = "tensorflow"
_MESSAGE = "triggered tf.function retracing"


class _DropFrequentTracingWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return _MESSAGE not in record.getMessage()


@contextlib.contextmanager
def expected_traces() -> Iterator[None]:
    """Inside the block, TF's frequent-tracing warning is not logged (the traces are expected)."""
    logger = logging.getLogger(_TF_LOGGER)
    drop = _DropFrequentTracingWarning()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def first_trace_expected(function: Any):
    """``expected_traces()`` around the first call of a ``tf.function`` (its one trace, when one function per bucket
    wraps the same method, is the design), a no-op afterwards, so a later retrace still warns."""
    return expected_traces() if function.experimental_get_tracing_count() == 0 else contextlib.nullcontext()

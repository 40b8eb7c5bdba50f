"""TF's generic frequent-tracing warning is dropped only inside `expected_traces()`."""

from __future__ import annotations

import logging

import tensorflow as tf

from myxtts.diagnostics.tf_warning import expected_traces


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def per_shape_functions_called(body, count: int) -> None:
    """One tf.function per shape around the same Python function: TF's warning fires on the 5th
    (keyed by the code object, at most twice per code object, so each call site passes its own body)."""
    for size in range(1, count + 1):
        function = tf.function(body, input_signature=[tf.TensorSpec([size], tf.float32)])
        function(tf.ones([size]))


def test_warning_is_dropped_inside_and_kept_outside() -> None:
    logger = logging.getLogger("tensorflow")
    handler = Collect()
    logger.addHandler(handler)
    try:
        with expected_traces():
            per_shape_functions_called(lambda x: x * 2.0, 6)
        inside = list(handler.messages)
        per_shape_functions_called(lambda x: x * 3.0, 6)
    finally:
        logger.removeHandler(handler)
    assert not any("triggered tf.function retracing" in message for message in inside)
    assert any("triggered tf.function retracing" in message for message in handler.messages)

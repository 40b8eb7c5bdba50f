"""What each retrace cost: tracing seconds on every event, XLA compile seconds for jit_compile, and the
summary ranked by time lost. Costs are built from Python sleeps that run only at trace time, so the
ranking rests on a >= 10x difference, not on a timing race."""

from __future__ import annotations

import json
import time

import numpy as np
import tensorflow as tf

from myxtts.diagnostics import JSON_FIELDS, RetraceMonitor, trace_cost

_SLOW_TRACE_SECONDS = 0.5  # a Python sleep in the body runs once per trace, never per call; 3 x 0.5 s lost
# against the quick function's 2 traces of a one-op graph (~5-30 ms each, ~0.1 s on loaded cores): >= 10x


def test_every_event_carries_its_tracing_time_and_the_summary_ranks_by_time_lost(tmp_path):
    monitor = RetraceMonitor(json_path=tmp_path / "traces.jsonl")

    @tf.function
    def slow_to_trace(x):
        time.sleep(_SLOW_TRACE_SECONDS)
        return x * 2

    @tf.function
    def quick_to_trace(x):
        return x + 1

    slow = monitor.watch(slow_to_trace, name="slow_to_trace")
    quick = monitor.watch(quick_to_trace, name="quick_to_trace")
    for length in (2, 3, 4):  # two retraces of the slow one
        slow(tf.zeros([length]))
    for length in (2, 3):  # one retrace of the quick one
        quick(tf.zeros([length]))
    assert trace_cost.available()[0], trace_cost.available()[1]
    retraces = [event for event in monitor.events if event.function == "slow_to_trace"]
    assert [event.cause for event in retraces] == ["shape", "shape"]
    for event in retraces + monitor.first_traces:
        assert event.tracing_seconds is not None and event.compile_seconds is None  # no jit_compile
        assert event.tracing_seconds <= event.seconds
    assert all(event.tracing_seconds >= _SLOW_TRACE_SECONDS for event in retraces)
    assert "s tracing)" in retraces[0].describe()
    summary = monitor.summary()
    assert [row["function"] for row in summary["functions"]] == ["slow_to_trace", "quick_to_trace"]
    assert summary["functions"][0]["lost_seconds"] >= 2 * _SLOW_TRACE_SECONDS
    assert summary["total_lost_seconds"] >= summary["functions"][0]["lost_seconds"]
    assert "lost s" in monitor.format_summary() and "s lost to retraces" in monitor.format_summary()
    monitor.close()
    lines = [json.loads(line) for line in (tmp_path / "traces.jsonl").read_text().splitlines()]
    assert all(tuple(line) == JSON_FIELDS for line in lines)
    assert all(isinstance(line["tracing_seconds"], float) for line in lines)


def test_jit_compile_recompiles_carry_a_compile_estimate():
    monitor = RetraceMonitor()

    @tf.function(jit_compile=True, input_signature=[tf.TensorSpec([None], tf.float32)])
    def compiled(x):
        return tf.reduce_sum(tf.tanh(x) * 3.0)

    step = monitor.watch(compiled, name="compiled")
    for length in (4, 4, 4, 5, 5, 6):
        step(tf.constant(np.ones([length], np.float32)))
    recompiles = [event for event in monitor.events if event.cause == "xla_recompile"]
    assert len(recompiles) == 2
    for event in recompiles:
        assert event.tracing_seconds == 0.0 and event.compile_seconds is not None and event.compile_seconds >= 0.0
        assert "XLA compile" in event.describe()
    first = monitor.first_traces[0]
    assert first.compile_seconds is not None  # jit: the first trace's compile estimate too
    row = monitor.summary()["functions"][0]
    assert row["xla_compiles"] == 3 and row["compile_seconds"] is not None

"""Overhead of the retrace explainer when nothing retraces, on a ~1 ms training-like step.

Prints JSON: the machine, the step time unwrapped (baseline), through RetraceMonitor.watch and under
explain_retracing, and the ratios against the baseline measured in the same run (target: < 1.05).

    .venv/bin/python benchmarks/explainer_overhead.py [--calls 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from myxtts.diagnostics import RetraceMonitor, explain_retracing  # noqa: E402
from myxtts.machine import machine  # noqa: E402


def make_step(size: int) -> tf.types.experimental.PolymorphicFunction:
    weights = tf.Variable(tf.random.normal([size, size]) * 0.01)

    @tf.function(input_signature=[{"mel": tf.TensorSpec([16, size], tf.float32),
                                   "lengths": tf.TensorSpec([16], tf.int32)}, tf.TensorSpec([], tf.float32)])
    def step(batch, learning_rate):
        with tf.GradientTape() as tape:
            hidden = tf.tanh(tf.matmul(batch["mel"], weights))  # [16, size]
            loss = tf.reduce_mean(tf.square(hidden))
        weights.assign_sub(learning_rate * tape.gradient(loss, weights))
        return loss

    return step


def time_calls(call, batch, learning_rate, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        call(batch, learning_rate)
    return (time.perf_counter() - started) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--size", type=int, default=384, help="matrix size (tune for a ~1 ms step)")
    args = parser.parse_args()

    step = make_step(args.size)
    batch = {"mel": tf.random.normal([16, args.size]), "lengths": tf.ones([16], tf.int32)}
    learning_rate = tf.constant(1e-3)
    step(batch, learning_rate)
    monitor = RetraceMonitor()
    watched = monitor.watch(step, name="step")
    watched(batch, learning_rate)
    monitor.end_warmup()

    results: dict[str, list[float]] = {"baseline": [], "watch": [], "explain_retracing": []}
    for _ in range(args.repeats):  # interleaved so drift on a shared machine hits every variant alike
        results["baseline"].append(time_calls(step, batch, learning_rate, args.calls))
        results["watch"].append(time_calls(watched, batch, learning_rate, args.calls))
        with explain_retracing():
            results["explain_retracing"].append(time_calls(step, batch, learning_rate, args.calls))
    # the minimum over many short interleaved blocks is the least noisy estimate on a shared machine
    best = {name: min(values) for name, values in results.items()}
    medians = {name: statistics.median(values) for name, values in results.items()}
    report = {
        "benchmark": "explainer_overhead",
        "machine": {**machine(), "tensorflow": tf.__version__},
        "calls": args.calls, "repeats": args.repeats, "matrix_size": args.size,
        "step_ms_min": {name: round(value * 1e3, 4) for name, value in best.items()},
        "step_ms_median": {name: round(value * 1e3, 4) for name, value in medians.items()},
        "ratio_vs_baseline": {name: round(value / best["baseline"], 4) for name, value in best.items()
                              if name != "baseline"},
        "ratio_vs_baseline_median": {name: round(value / medians["baseline"], 4) for name, value in medians.items()
                                     if name != "baseline"},
        "retraces_seen": len(monitor.events),
        "target_ratio": 1.05,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

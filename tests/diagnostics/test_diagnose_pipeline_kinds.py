"""The six pipeline kinds of issue 11, each diagnosed twice; both runs must name the same bottleneck.

Every pipeline is built so the rates that decide its class differ by >= 10x (a Python sleep of 4 ms per
element in batches of 4 = ~60 batches/s against a ~900 steps/s consumer; a cached pipeline at thousands
of batches/s against a 100 steps/s consumer), so the classification holds while other processes keep
both cores busy. Consumers sleep (like a device step, they release the GIL). No timing is asserted.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import tensorflow as tf

from myxtts.diagnostics.pipeline_probe import diagnose_dataset

_FAST_CONSUMER_SECONDS = 0.001  # ~900 steps/s: >= 10x above every slow pipeline below
_SLOW_CONSUMER_SECONDS = 0.01  # ~100 steps/s: >= 10x below every fast pipeline below
_PYTHON_SECONDS = 0.004  # per element; x4 per batch = 16 ms -> ~60 batches/s


def _sleeping_consumer(seconds: float):
    def consume(_batch):
        time.sleep(seconds)

    return consume


def _python_feature(value):
    time.sleep(_PYTHON_SECONDS)
    return value


def _generator():
    for index in range(1 << 20):
        time.sleep(_PYTHON_SECONDS)
        yield np.float32(index)


_WEIGHTS = tf.random.stateless_uniform([128, 128], seed=[1, 2])


def _heavy(x):
    value = tf.fill([128, 128], tf.cast(x, tf.float32) * 1e-6)
    for _ in range(60):  # ~4 ms of matmuls per element: a batch of 4 is ~60x slower than the consumer
        value = tf.tanh(tf.matmul(value, _WEIGHTS))
    return tf.reduce_sum(value)


def _heavy_stateful(x):
    return _heavy(x) + tf.random.uniform([])  # stateful: TF's map_parallelization rewrite leaves it sequential


def _cheap(x):
    return tf.cast(x, tf.float32) * 2.0


def _pipeline(kind: str):
    source = tf.data.Dataset.range(1 << 40)
    if kind == "py_function":
        return (source.map(lambda x: tf.numpy_function(_python_feature, [x], tf.int64)).batch(4)
                .prefetch(tf.data.AUTOTUNE), _FAST_CONSUMER_SECONDS)
    if kind == "sequential_map":
        return source.map(_heavy_stateful).batch(4).prefetch(tf.data.AUTOTUNE), _FAST_CONSUMER_SECONDS
    if kind == "generator_source":
        generator = tf.data.Dataset.from_generator(_generator, output_signature=tf.TensorSpec([], tf.float32))
        return generator.batch(4).prefetch(tf.data.AUTOTUNE), _FAST_CONSUMER_SECONDS
    if kind == "missing_prefetch":
        return source.map(_cheap, num_parallel_calls=tf.data.AUTOTUNE).batch(4), _SLOW_CONSUMER_SECONDS
    if kind == "slow_stage":  # a heavy map that is already parallel
        return (source.map(_heavy, num_parallel_calls=tf.data.AUTOTUNE).batch(4).prefetch(tf.data.AUTOTUNE),
                _FAST_CONSUMER_SECONDS)
    if kind == "healthy":  # cached, parallel map, final prefetch
        return (tf.data.Dataset.range(64).map(_cheap, num_parallel_calls=tf.data.AUTOTUNE).cache().repeat()
                .batch(4).prefetch(tf.data.AUTOTUNE), _SLOW_CONSUMER_SECONDS)
    raise ValueError(kind)


def _diagnose(kind: str):
    dataset, seconds = _pipeline(kind)
    return diagnose_dataset(dataset, consumer=_sleeping_consumer(seconds), steps=12)


@pytest.mark.parametrize("kind", ["py_function", "sequential_map", "generator_source", "slow_stage"])
def test_a_stage_slower_than_the_consumer_is_blamed_with_its_kind_first(kind):
    reports = [_diagnose(kind), _diagnose(kind)]  # two runs: both must agree
    for report in reports:
        assert report.bottleneck == kind, report.format()
        assert report.recommendations[0].kind == kind, report.format()
        # the share is a lower bound (noise removed); starved >= 10x it is never "not input-bound"
        assert report.input_bound_band in ("moderately input-bound", "highly input-bound"), report.format()
        blamed = [timing for timing in report.stage_timings if timing.blamed]
        assert len(blamed) == 1 and report.slowest_stage == blamed[0].stage
        expected_stage = {"py_function": "Map", "sequential_map": "Map", "generator_source": "FlatMap",
                          "slow_stage": "ParallelMap"}[kind]
        assert blamed[0].stage.startswith(expected_stage + "["), report.format()
        assert report.stage_timings[0].blamed is False  # never the Range / id source
    assert reports[0].slowest_stage == reports[1].slowest_stage


def test_missing_prefetch_is_the_finding_and_its_effect_is_measured():
    for report in (_diagnose("missing_prefetch"), _diagnose("missing_prefetch")):
        assert report.bottleneck == "missing_prefetch", report.format()
        assert report.slowest_stage is None and not report.final_prefetch
        first = report.recommendations[0]
        assert first.kind == "missing_prefetch" and "steps/s with .prefetch(AUTOTUNE)" in first.effect
        assert "measured:" in report.format()


def test_healthy_cached_prefetched_pipeline_is_not_input_bound_with_nothing_to_fix():
    for report in (_diagnose("healthy"), _diagnose("healthy")):
        assert report.bottleneck == "healthy", report.format()
        assert report.input_bound_band == "not input-bound", report.format()
        assert report.recommendations == [] and report.slowest_stage is None
        assert "nothing to fix" in report.format()
        assert report.iterator_call_ms is not None and report.raw_input_bound_share >= report.input_bound_share


def test_structural_finding_ranks_above_tuning_advice_whatever_the_gains():
    """A py_function map above a sequential map: kinds decide the order, never a (noisy) gain."""
    dataset = (tf.data.Dataset.range(1 << 40).map(lambda x: tf.numpy_function(_python_feature, [x], tf.int64))
               .map(_cheap).batch(4))
    report = diagnose_dataset(dataset, consumer=_sleeping_consumer(_FAST_CONSUMER_SECONDS), steps=8)
    kinds = [item.kind for item in report.recommendations]
    assert kinds[0] == "py_function", report.format()
    assert "missing_prefetch" in kinds and kinds.index("missing_prefetch") < kinds.index("hint")
    assert any("without num_parallel_calls" in item.problem for item in report.recommendations)

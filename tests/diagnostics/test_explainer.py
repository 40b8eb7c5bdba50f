"""Retrace explainer: one scenario per cause, asserting cause, path, before and after."""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest
import tensorflow as tf

from myxtts.diagnostics import JSON_FIELDS, RetraceError, RetraceMonitor, explain_retracing


def _only(monitor, cause):
    events = [event for event in monitor.events if event.cause == cause]
    assert events, f"no {cause} event in {[(e.cause, e.path) for e in monitor.events]}"
    return events


def test_varying_batch_size_names_batch_dim_and_drop_remainder():
    @tf.function
    def step(batch):
        return tf.reduce_sum(batch["audio"]["mel"])

    monitor = RetraceMonitor(warmup=False)
    watched = monitor.watch(step)
    dataset = tf.data.Dataset.from_tensor_slices({"audio": {"mel": tf.zeros([10, 6, 4])}}).batch(4)
    for batch in dataset:  # 4, 4, 2: the last partial batch traces again
        watched(batch)
    (event,) = monitor.events
    assert event.cause == "shape" and event.path == "batch['audio']['mel']"
    assert event.before["shape"] == [4, 6, 4] and event.after["shape"] == [2, 6, 4]
    assert event.trace == 2
    assert "drop_remainder=True" in event.suggestion
    assert "tf.TensorSpec([None, 6, 4], tf.float32)" in event.suggestion  # None only on the varying dim


def test_varying_sequence_length_gives_signature_with_none_on_time_only():
    @tf.function
    def step(tokens, mel):
        return tf.reduce_sum(tf.cast(tokens, tf.float32)) + tf.reduce_sum(mel)

    with explain_retracing() as monitor:
        step(tf.zeros([2, 10], tf.int32), tf.zeros([2, 40, 8]))
        step(tf.zeros([2, 10], tf.int32), tf.zeros([2, 48, 8]))
    (event,) = monitor.events
    assert (event.cause, event.path) == ("shape", "mel")
    assert event.before["shape"] == [2, 40, 8] and event.after["shape"] == [2, 48, 8]
    assert ("input_signature=[tf.TensorSpec([2, 10], tf.int32), tf.TensorSpec([2, None, 8], tf.float32)]"
            in event.suggestion)


def test_rank_change():
    @tf.function
    def step(x):
        return tf.reduce_sum(x)

    with explain_retracing() as monitor:
        step(tf.zeros([3, 4]))
        step(tf.zeros([3, 4, 1]))
    (event,) = monitor.events
    assert (event.cause, event.path, event.before["shape"], event.after["shape"]) == ("rank", "x", [3, 4], [3, 4, 1])


def test_float32_vs_float64_numpy():
    @tf.function
    def step(features):
        return tf.reduce_sum(features)

    with explain_retracing() as monitor:
        step(np.ones([2, 3], np.float32))
        step(np.random.default_rng(0).random((2, 3)))  # float64 by default
    (event,) = monitor.events
    assert (event.cause, event.path) == ("dtype", "features")
    assert (event.before["dtype"], event.after["dtype"]) == ("float32", "float64")
    assert "tf.cast(features, tf.float32)" in event.suggestion


def test_python_scalar_argument():
    @tf.function
    def step(x, learning_rate):
        return x * learning_rate

    with explain_retracing() as monitor:
        step(tf.ones([2]), 0.1)
        step(tf.ones([2]), 0.1)  # equal value: no retrace
        step(tf.ones([2]), 0.05)
    (event,) = monitor.events
    assert (event.cause, event.path, event.before["value"], event.after["value"]) == (
        "python_value", "learning_rate", 0.1, 0.05)
    assert "tf.constant(0.05, tf.float32)" in event.suggestion


def test_python_control_flow_flag_including_default():
    @tf.function
    def step(x, training=True):
        return x * 2 if training else x

    with explain_retracing() as monitor:
        step(tf.ones([2]))
        step(tf.ones([2]), training=True)  # the default: same trace
        step(tf.ones([2]), training=False)
    (event,) = monitor.events
    assert (event.cause, event.path, event.before["value"], event.after["value"]) == (
        "python_value", "training", True, False)
    assert "flag" in event.suggestion and "tf.cond" in event.suggestion


def test_new_object_instances():
    class Options:
        scale = 2.0

    @tf.function
    def step(x, options):
        return x * options.scale

    kept = Options()
    with explain_retracing() as monitor:
        step(tf.ones([2]), kept)
        step(tf.ones([2]), kept)  # same instance: no retrace
        step(tf.ones([2]), Options())
    (event,) = monitor.events
    assert (event.cause, event.path) == ("new_object", "options")
    assert event.before["type"] == event.after["type"] == "Options"
    assert event.before["identity"] != event.after["identity"]
    assert "__tf_tracing_type__" in event.suggestion


def test_frozen_dataclass_equal_by_value_but_freed():
    @dataclasses.dataclass(frozen=True)
    class Settings:
        scale: float = 2.0

    @tf.function
    def step(x, settings):
        return x * settings.scale

    with explain_retracing() as monitor:
        step(tf.ones([2]), Settings())
        step(tf.ones([2]), Settings())  # equal, but the first instance is gone: TF retraces
    (event,) = monitor.events
    assert (event.cause, event.path) == ("new_object", "settings")
    assert "freed" in event.after["note"]


def test_unhashable_dataclass_reported_then_reraised():
    @dataclasses.dataclass
    class Batch:
        size: int = 2

    @tf.function
    def step(x, meta):
        return x

    with explain_retracing() as monitor:
        with pytest.raises(TypeError):
            step(tf.ones([2]), Batch())
    (event,) = monitor.events
    assert (event.cause, event.path, event.before, event.after["type"]) == ("unhashable", "meta", None, "Batch")
    assert "frozen=True" in event.suggestion


def test_structure_dict_keys_and_list_length():
    @tf.function
    def step(batch, parts):
        return tf.add_n(list(batch.values())) + tf.add_n(parts)

    with explain_retracing() as monitor:
        step({"a": tf.ones([2])}, [tf.ones([2])])
        step({"a": tf.ones([2]), "b": tf.ones([2])}, [tf.ones([2])])
        step({"a": tf.ones([2]), "b": tf.ones([2])}, [tf.ones([2]), tf.ones([2])])
    keys, length = monitor.events
    assert (keys.cause, keys.path, keys.before["keys"], keys.after["keys"]) == ("structure", "batch", ["'a'"],
                                                                                 ["'a'", "'b'"])
    assert (length.cause, length.path, length.before["length"], length.after["length"]) == ("structure", "parts", 1, 2)
    assert "tf.stack" in length.suggestion


def test_new_function_wrapped_in_loop_and_bound_method_of_new_instance():
    def loss(x):
        return tf.reduce_sum(x)

    class Model(tf.Module):
        @tf.function
        def step(self, x):
            return x + 1

    with explain_retracing() as monitor:
        for _ in range(2):
            tf.function(loss)(tf.ones([2]))
        first, second = Model(), Model()
        first.step(tf.ones([2]))
        second.step(tf.ones([2]))
    wrapped, method = _only(monitor, "new_function")
    assert wrapped.function.endswith("loss") and wrapped.path is None and "outside the loop" in wrapped.suggestion
    assert method.path == "self" and method.before["type"] == method.after["type"] == "Model"
    assert method.before["identity"] != method.after["identity"]


def test_variable_shape_and_aliasing():
    @tf.function
    def step(a, b):
        return tf.reduce_sum(a) + tf.reduce_sum(b)

    first, second = tf.Variable(1.0), tf.Variable(2.0)
    with explain_retracing() as monitor:
        step(first, second)
        step(second, first)  # same pattern (two distinct scalars): no retrace
        step(first, first)  # aliasing changed
        step(tf.Variable([1.0, 2.0]), second)
    aliasing, shape = monitor.events
    assert aliasing.cause == "variable" and aliasing.after["aliasing"] == [["a", "a"], ["b", "a"]] or \
        aliasing.after["aliasing"] == [("a", "a"), ("b", "a")]
    assert (shape.cause, shape.path, shape.before["shape"], shape.after["shape"]) == ("variable", "a", [], [2])


def test_context_strategy_change():
    @tf.function
    def step(x):
        return x + 1

    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with explain_retracing() as monitor:
        step(tf.ones([2]))
        with tf.device("/CPU:0"):
            step(tf.ones([2]))  # an eager device scope does not retrace: no event
        with strategy.scope():
            step(tf.ones([2]))
    (event,) = monitor.events
    assert (event.cause, event.path) == ("context", "strategy")
    assert event.before == {"strategy": None} and event.after["strategy"].startswith("OneDeviceStrategy")


def test_variable_creation_second_trace_is_expected_even_in_strict_mode():
    class Layer(tf.Module):
        def __init__(self):
            self.weight = None

        @tf.function
        def __call__(self, x):
            if self.weight is None:
                self.weight = tf.Variable(tf.ones([3]))
            return x * self.weight

    layer = Layer()
    with explain_retracing(strict=True) as monitor:
        layer(tf.ones([3]))
        layer(tf.ones([3]))
    (event,) = monitor.events
    assert (event.cause, event.trace, event.unexpected) == ("variable_creation", 2, False)


def test_xla_recompile_without_retrace():
    @tf.function(jit_compile=True, input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def step(x):
        return tf.reduce_sum(x * 2)

    with explain_retracing() as monitor:
        step(tf.ones([2, 4]))
        step(tf.ones([2, 4]))
        step(tf.ones([3, 4]))
    assert step.experimental_get_tracing_count() == 1
    (event,) = monitor.events
    assert (event.cause, event.path, event.before["shape"], event.after["shape"]) == ("xla_recompile", "x", [2, 4],
                                                                                      [3, 4])


def test_no_false_event_for_python_random_inside_function():
    @tf.function
    def step(x):
        return x + random.random()  # baked in at trace time

    with explain_retracing() as monitor:
        for _ in range(5):
            step(tf.ones([2]))
    assert monitor.events == [] and monitor.summary()["total_traces"] == 1


def test_monitor_api_warmup_strict_passthrough_and_json(tmp_path):
    @tf.function
    def step(x):
        return x * 2

    path = tmp_path / "events.jsonl"
    monitor = RetraceMonitor(strict=True, json_path=path)
    watched = monitor.watch(step, name="train_step[bucket 3]")
    watched(tf.ones([2]))
    watched(tf.ones([3]))  # warm-up: a second bucket shape is expected
    monitor.end_warmup()
    watched(tf.ones([3]))
    with pytest.raises(RetraceError) as raised:
        watched(tf.ones([5]))
    assert raised.value.event.cause == "shape" and "train_step[bucket 3]" in str(raised.value)
    assert watched.experimental_get_tracing_count() == 3
    assert watched.get_concrete_function(tf.TensorSpec([2], tf.float32)) is not None
    monitor.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(tuple(line) == JSON_FIELDS for line in lines)
    assert [line["cause"] for line in lines] == ["first_trace", "shape", "shape"]
    assert [e.unexpected for e in monitor.events] == [False, True]
    summary = monitor.summary()
    assert summary["functions"][0]["traces"] == 3 and summary["unexpected"] == 1
    assert "train_step[bucket 3]" in monitor.format_summary()
    assert json.loads(monitor.events[0].to_json())["function"] == "train_step[bucket 3]"


def test_watch_rejects_a_plain_function():
    with pytest.raises(TypeError, match="tf.function"):
        RetraceMonitor().watch(lambda x: x)


def test_one_function_per_bucket_signature_is_not_new_function():
    def step(x):
        return tf.reduce_sum(x)

    monitor = RetraceMonitor()
    buckets = {size: monitor.watch(tf.function(step, input_signature=[tf.TensorSpec([size], tf.float32)]),
                                   name=f"step[bucket {size}]") for size in (2, 3)}
    buckets[2](tf.ones([2]))
    buckets[3](tf.ones([3]))
    monitor.end_warmup()
    buckets[2](tf.ones([2]))
    assert monitor.events == [] and len(monitor.first_traces) == 2

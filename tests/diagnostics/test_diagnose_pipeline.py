"""diagnose_dataset on synthetic tf.data pipelines: rates, input-bound band, blame, graph scan, fixes."""

from __future__ import annotations

import time

import numpy as np
import pytest
import tensorflow as tf

from myxtts.diagnostics.dataset_graph import graph_facts, has_final_prefetch, stage_name, stages
from myxtts.diagnostics.pipeline_probe import band, diagnose_dataset, target_from_flops


def _slow_python(value):
    time.sleep(0.003)  # a Python feature extractor: holds the GIL
    return value


def _py_pipeline():
    return (tf.data.Dataset.range(10_000)
            .map(lambda x: tf.numpy_function(_slow_python, [x], tf.int64))
            .map(lambda x: tf.cast(x, tf.float32))
            .batch(4))


@tf.function
def _fast_step(batch):
    return tf.reduce_sum(batch)


def test_graph_scan_finds_py_function_generator_sequential_map_and_missing_prefetch():
    facts = graph_facts(_py_pipeline())
    assert facts.available and any(item.startswith("PyFunc") for item in facts.py_functions)
    assert facts.sequential_maps == 2 and facts.parallel_maps == 0
    generator = tf.data.Dataset.from_generator(lambda: iter(range(5)), output_signature=tf.TensorSpec([], tf.int64))
    assert graph_facts(generator).generator_sources == 1
    clean = tf.data.Dataset.range(8).map(lambda x: x + 1, num_parallel_calls=2).batch(2).prefetch(1)
    clean_facts = graph_facts(clean)
    assert clean_facts.py_functions == [] and clean_facts.sequential_maps == 0 and clean_facts.parallel_maps == 1
    assert has_final_prefetch(clean) and not has_final_prefetch(_py_pipeline())
    assert [stage_name(s) for s in stages(clean)][0].startswith("Range")


def test_python_bound_pipeline_is_highly_input_bound_and_blames_the_py_map():
    report = diagnose_dataset(_py_pipeline(), consumer=_fast_step, steps=12)
    assert report.input_bound_band == "highly input-bound" and report.bottleneck == "py_function", report.format()
    assert report.slowest_stage is not None and report.slowest_stage.startswith("Map["), report.format()
    assert report.stage_timings[0].stage.startswith("Range") and not report.stage_timings[0].blamed
    problems = " ".join(r.problem for r in report.recommendations)
    assert "Python functions" in problems and "prefetch" in problems and "without num_parallel_calls" in problems
    assert report.recommendations[0].kind == "py_function"
    prefetch = next(r for r in report.recommendations if r.kind == "missing_prefetch")
    assert "steps/s with .prefetch(AUTOTUNE)" in prefetch.effect  # always measured, significant or not
    assert "input-bound share" in report.format()


def test_in_memory_pipeline_is_not_input_bound_for_a_slow_consumer():
    data = tf.data.Dataset.from_tensor_slices(np.ones([64, 32], np.float32)).batch(8).repeat().prefetch(2)

    def slow_step(batch):  # a 10 ms device step (sleeps like an accelerator wait): >= 10x the input's cost
        time.sleep(0.01)
        return batch

    report = diagnose_dataset(data, consumer=slow_step, steps=16)
    assert report.final_prefetch and report.py_functions == [] and report.generator_sources == 0
    assert report.input_bound_band == "not input-bound", report.format()
    assert all(not r.problem.startswith("the pipeline does not end") for r in report.recommendations)


def test_target_rate_without_consumer_answers_would_it_feed_a_fast_device():
    target = target_from_flops(model_flops_per_step=2e12, device_peak_flops=989e12, utilization=0.4)
    assert target == pytest.approx(197.8)
    report = diagnose_dataset(_py_pipeline(), steps=8, target_steps_per_second=target)
    assert report.feeds_target is False and report.consumer_steps_per_second == target
    assert any("below the target consumer" in r.problem for r in report.recommendations)


def test_bands_and_validation():
    assert band(0.01) == "not input-bound" and band(0.1) == "moderately input-bound" and band(0.5) == "highly input-bound"
    with pytest.raises(ValueError, match="steps"):
        diagnose_dataset(tf.data.Dataset.range(3), steps=2)
    with pytest.raises(ValueError, match="no batches"):
        diagnose_dataset(tf.data.Dataset.range(0), steps=8)
    with pytest.raises(ValueError):
        target_from_flops(0, 1e12)


def test_graph_scan_reads_no_data_and_finds_python_inside_nested_functions(monkeypatch):
    """The scan never serialises the dataset (a cached corpus would be copied into the GraphDef)."""
    from tensorflow.python.data.ops import dataset_ops

    def refuse(*_args, **_kwargs):
        raise AssertionError("the graph scan must not serialise the dataset")

    monkeypatch.setattr(dataset_ops.DatasetV2, "_as_serialized_graph", refuse)
    corpus = np.zeros([2_000, 5_000], np.float32)  # 40 MB held by the source: never copied by the scan

    @tf.function
    def feature(x):
        return tf.py_function(lambda value: value, [x], tf.float32)

    nested = (tf.data.Dataset.from_tensor_slices(corpus).cache()
              .map(lambda x: tf.cond(x[0] > 0, lambda: feature(x[0]), lambda: x[0]), num_parallel_calls=2)
              .batch(4).prefetch(1))
    facts = graph_facts(nested)
    assert facts.available and facts.note == ""
    assert any(item.startswith("EagerPyFunc in function") for item in facts.py_functions), facts.py_functions
    assert facts.parallel_maps == 1 and facts.sequential_maps == 0
    assert [stage.name for stage in facts.stages] == ["TensorSlice", "Cache", "ParallelMap", "Batch", "Prefetch"]


def test_a_stage_that_cannot_be_scanned_is_reported_not_dropped(monkeypatch):
    from myxtts.diagnostics import dataset_graph

    original = dataset_graph.scan_stage

    def broken(dataset, depth):
        if dataset_graph.stage_name(dataset) == "Map":
            raise RuntimeError("private attribute moved")
        return original(dataset, depth)

    monkeypatch.setattr(dataset_graph, "scan_stage", broken)
    facts = graph_facts(_py_pipeline())
    assert "could not scan: stage Map: RuntimeError: private attribute moved" in facts.note
    report_notes = diagnose_dataset(tf.data.Dataset.range(1 << 20).batch(4).prefetch(1), steps=8).notes
    assert report_notes == []  # nothing to report when every stage was read


def test_without_consumer_or_target_no_stage_is_blamed_but_python_still_ranks_first():
    report = diagnose_dataset(_py_pipeline(), steps=8)
    assert report.slowest_stage is None and report.input_bound_share is None
    assert report.bottleneck == "missing_prefetch"  # _py_pipeline ends in batch(4)
    assert report.recommendations[0].kind == "py_function", report.format()  # its stage drops throughput x100s
    with_prefetch = diagnose_dataset(_py_pipeline().prefetch(2), steps=8)
    assert with_prefetch.bottleneck == "no_reference" and "no stage is blamed" in with_prefetch.format()


def test_stage_chain_follows_the_data_through_enumerate_not_its_counter():
    """enumerate() is zip((range, self)): the chain must time the map behind it (the data path), as in
    InputPipeline, where the parse map sits behind an enumerate."""
    dataset = tf.data.Dataset.range(8).map(lambda x: x * 2, num_parallel_calls=2).enumerate().batch(2)
    names = [stage_name(stage) for stage in stages(dataset)]
    assert names[0] == "Range" and any(name.startswith("ParallelMap") for name in names), names
    assert names[-1] == "Batch"

"""`diagnose_dataset()`: is a tf.data pipeline fast enough for its consumer, and if not, why?

Measures the producer alone (batches/s, no model), the consumer alone (its step on batches held in
memory), both together (time blocked in next() over step time: input-bound share with TF profiler's
5% / 20% bands, and the oscillation of the waits), then blames the first upstream stage slower than
the consumer and ranks fixes, measuring the gain where it can (final prefetch, map parallelization).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from myxtts.diagnostics.dataset_graph import graph_facts, has_final_prefetch, stage_name, stages

MODERATE_INPUT_BOUND = 0.05  # TF profiler: "moderately input-bound" above 5% of step time waiting
HIGH_INPUT_BOUND = 0.20  # "highly input-bound" above 20%


@dataclass
class StageTiming:
    stage: str
    batches_per_second: float  # element rate / elements per final batch upstream of batching
    slower_than_consumer: bool


@dataclass
class Recommendation:
    problem: str
    fix: str
    measured_gain: float | None = None  # ratio (e.g. 1.8 = 1.8x producer or step throughput), None if not measured


@dataclass
class PipelineReport:
    producer_batches_per_second: float
    consumer_steps_per_second: float | None  # measured consumer alone, or the target when no consumer is given
    combined_steps_per_second: float | None
    input_bound_share: float | None  # time blocked in next() / step time, both together
    input_bound_band: str
    wait_cv: float | None
    wait_period: int | None  # steps between wait peaks (autocorrelation), None when no oscillation
    target_steps_per_second: float | None
    feeds_target: bool | None
    stage_timings: list[StageTiming] = field(default_factory=list)
    slowest_stage: str | None = None
    py_functions: list[str] = field(default_factory=list)
    generator_sources: int = 0
    sequential_maps: int = 0
    final_prefetch: bool = True
    recommendations: list[Recommendation] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def format(self) -> str:
        lines = [f"producer alone: {self.producer_batches_per_second:.1f} batches/s"]
        if self.consumer_steps_per_second is not None:
            lines.append(f"consumer alone: {self.consumer_steps_per_second:.1f} steps/s")
        if self.combined_steps_per_second is not None:
            lines.append(f"together: {self.combined_steps_per_second:.1f} steps/s, input-bound share "
                         f"{self.input_bound_share:.1%} ({self.input_bound_band}); wait CV {self.wait_cv:.2f}"
                         + (f", oscillation period {self.wait_period} steps" if self.wait_period else ""))
        if self.target_steps_per_second is not None:
            lines.append(f"target consumer: {self.target_steps_per_second:.1f} steps/s -> "
                         f"{'fed' if self.feeds_target else 'NOT fed'} by this pipeline")
        for timing in self.stage_timings:
            mark = "  <- slower than the consumer" if timing.slower_than_consumer else ""
            lines.append(f"  stage {timing.stage:<28} {timing.batches_per_second:10.1f} batches/s{mark}")
        for rank, item in enumerate(self.recommendations, 1):
            gain = f" (measured gain x{item.measured_gain:.2f})" if item.measured_gain else ""
            lines.append(f"{rank}. {item.problem} Fix: {item.fix}{gain}")
        return "\n".join(lines)


def target_from_flops(model_flops_per_step: float, device_peak_flops: float, utilization: float = 0.4) -> float:
    """Steps/s a device would run at: FLOPs per step over (peak FLOP/s x a realistic utilization)."""
    if model_flops_per_step <= 0 or device_peak_flops <= 0 or not 0 < utilization <= 1:
        raise ValueError("model FLOPs and device peak must be > 0 and utilization in (0, 1].")
    return device_peak_flops * utilization / model_flops_per_step


def band(share: float) -> str:
    if share > HIGH_INPUT_BOUND:
        return "highly input-bound"
    if share > MODERATE_INPUT_BOUND:
        return "moderately input-bound"
    return "not input-bound"


def _rate(dataset: tf.data.Dataset, count: int, warmup: int = 2) -> tuple[float, int]:
    """Elements per second over `count` elements after `warmup` (fewer if the dataset ends)."""
    iterator = iter(dataset)
    for _ in range(warmup):
        if next(iterator, None) is None:
            return 0.0, 0
    produced, started = 0, time.perf_counter()
    for _ in range(count):
        if next(iterator, None) is None:
            break
        produced += 1
    elapsed = time.perf_counter() - started
    return (produced / elapsed if elapsed > 0 else float("inf")), produced


def _batch_size(batch: Any) -> int:
    leaves = tf.nest.flatten(batch)
    return int(leaves[0].shape[0]) if leaves and getattr(leaves[0], "shape", None) is not None and leaves[0].shape.rank else 1


def _oscillation(waits: list[float]) -> tuple[float | None, int | None]:
    if len(waits) < 8:
        return None, None
    values = np.asarray(waits, dtype=np.float64)
    mean = values.mean()
    cv = float(values.std() / mean) if mean > 0 else 0.0
    centred = values - mean
    if not centred.any():
        return cv, None
    correlation = np.correlate(centred, centred, mode="full")[len(values) - 1:]
    correlation = correlation / correlation[0]
    lags = [lag for lag in range(2, len(values) // 2) if correlation[lag] > 0.3 and
            correlation[lag] >= correlation[lag - 1] and correlation[lag] >= correlation[min(lag + 1, len(values) - 1)]]
    return cv, (lags[0] if lags and cv > 0.5 else None)


def diagnose_dataset(dataset: tf.data.Dataset, consumer: Callable[[Any], Any] | None = None, steps: int = 50,
                     target_steps_per_second: float | None = None, stage_elements: int = 64,
                     measure_fixes: bool = True) -> PipelineReport:
    """Measure `dataset` against `consumer` (a train step taking one batch) or a target rate."""
    if steps < 8:
        raise ValueError(f"diagnose_dataset: steps must be >= 8 to measure waits, got {steps}.")
    producer_rate, produced = _rate(dataset, steps)
    if produced == 0:
        raise ValueError("diagnose_dataset: the dataset yielded no batches.")
    first_batch = next(iter(dataset))
    per_batch = _batch_size(first_batch)

    consumer_rate = combined_rate = share = cv = None
    period = None
    if consumer is not None:
        held = list(dataset.take(min(8, steps)))  # in memory: the consumer alone, no input cost
        consumer(held[0])  # warm-up (traces)
        started = time.perf_counter()
        for index in range(steps):
            consumer(held[index % len(held)])
        consumer_rate = steps / (time.perf_counter() - started)
        combined_rate, share, waits = _together(dataset, consumer, steps)
        cv, period = _oscillation(waits)
    reference_rate = consumer_rate or target_steps_per_second

    chain = stages(dataset)
    timings: list[StageTiming] = []
    batching_seen_at = next((i for i, s in enumerate(chain) if "Batch" in stage_name(s) or "GroupByWindow"
                             in stage_name(s)), len(chain))
    for index, stage in enumerate(chain):
        if index < batching_seen_at:  # element stage: batch it so Python iteration cost matches the consumer's
            # elements may differ in shape: reduce each to a token so batching always works (still computed)
            tokens = stage.map(lambda *element: tf.constant(0, tf.int8)).batch(per_batch)
            rate, _ = _rate(tokens, max(8, stage_elements // per_batch))
        else:
            rate, _ = _rate(stage, max(8, stage_elements // per_batch))
        slower = reference_rate is not None and rate < reference_rate
        timings.append(StageTiming(stage_name(stage), round(rate, 2), slower))
    slowest = next((t.stage for t in timings if t.slower_than_consumer), None)

    facts = graph_facts(dataset)
    final_prefetch = has_final_prefetch(dataset)
    report = PipelineReport(
        producer_batches_per_second=round(producer_rate, 2),
        consumer_steps_per_second=round(consumer_rate, 2) if consumer_rate else target_steps_per_second,
        combined_steps_per_second=round(combined_rate, 2) if combined_rate else None,
        input_bound_share=round(share, 4) if share is not None else None,
        input_bound_band=band(share) if share is not None else ("would starve the target" if (
            target_steps_per_second and producer_rate < target_steps_per_second) else "not measured"),
        wait_cv=round(cv, 3) if cv is not None else None, wait_period=period,
        target_steps_per_second=target_steps_per_second,
        feeds_target=(producer_rate >= target_steps_per_second) if target_steps_per_second else None,
        stage_timings=timings, slowest_stage=slowest, py_functions=facts.py_functions,
        generator_sources=facts.generator_sources, sequential_maps=facts.sequential_maps,
        final_prefetch=final_prefetch)
    report.recommendations = _recommend(report, dataset, consumer, steps, measure_fixes)
    return report


def _together(dataset: tf.data.Dataset, consumer: Callable, steps: int) -> tuple[float, float, list[float]]:
    iterator = iter(dataset)
    consumer(next(iterator))  # warm-up
    waits: list[float] = []
    started = time.perf_counter()
    for _ in range(steps):
        wait_started = time.perf_counter()
        batch = next(iterator, None)
        if batch is None:
            break
        waits.append(time.perf_counter() - wait_started)
        consumer(batch)
    total = time.perf_counter() - started
    return len(waits) / total, sum(waits) / total, waits


def _recommend(report: PipelineReport, dataset: tf.data.Dataset, consumer: Callable | None, steps: int,
               measure: bool) -> list[Recommendation]:
    items: list[tuple[int, Recommendation]] = []
    if report.py_functions:
        items.append((0, Recommendation(
            f"Python functions in the pipeline ({'; '.join(report.py_functions[:3])}) hold the GIL, so "
            "num_parallel_calls cannot parallelize them.",
            "prepare features once into a cache (myxtts prepare) or rewrite with TF ops.")))
    if report.generator_sources:
        items.append((1, Recommendation("a Python generator source (Dataset.from_generator) runs on one thread "
                                        "under the GIL.", "read from a prepared cache (TFRecord / sharded arrays) "
                                        "or from_tensor_slices over in-memory arrays.")))
    if report.sequential_maps:
        gain = None
        if measure:
            options = tf.data.Options()
            options.experimental_optimization.map_parallelization = True
            rate, _ = _rate(dataset.with_options(options), steps)
            gain = round(rate / report.producer_batches_per_second, 2) if report.producer_batches_per_second else None
        items.append((2, Recommendation(f"{report.sequential_maps} Dataset.map without num_parallel_calls "
                                        "(sequential).", "pass num_parallel_calls=tf.data.AUTOTUNE.", gain)))
    if not report.final_prefetch:
        gain = None
        if measure and consumer is not None:
            rate, _, _ = _together(dataset.prefetch(tf.data.AUTOTUNE), consumer, steps)
            gain = round(rate / report.combined_steps_per_second, 2) if report.combined_steps_per_second else None
        items.append((3, Recommendation("the pipeline does not end with prefetch: the producer and the step "
                                        "take turns instead of overlapping.",
                                        "end the pipeline with .prefetch(tf.data.AUTOTUNE).", gain)))
    if report.slowest_stage is not None:
        items.append((4, Recommendation(f"stage {report.slowest_stage} is the first one slower than the consumer.",
                                        "parallelize it (num_parallel_calls / interleave), move its work before "
                                        "training (cache), or cache its output.")))
    if report.feeds_target is False:
        items.append((5, Recommendation(
            f"the producer ({report.producer_batches_per_second:.1f} batches/s) is below the target consumer "
            f"({report.target_steps_per_second:.1f} steps/s).", "fix the items above; then add parallelism or "
            "prepared features until the producer exceeds the target.")))
    if report.input_bound_share is not None and report.input_bound_share > MODERATE_INPUT_BOUND and not items:
        items.append((6, Recommendation(f"the step waits {report.input_bound_share:.0%} of its time for input.",
                                        "increase prefetch / parallelism.")))
    items.sort(key=lambda pair: (-(pair[1].measured_gain or 1.0), pair[0]))
    return [item for _, item in items]

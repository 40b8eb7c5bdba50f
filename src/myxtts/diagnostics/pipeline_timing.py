"""Measurements behind `diagnose_dataset`: repeated rates with their run-to-run spread, and input waits
corrected for the cost of `next()` itself.

Stage rates are counted inside one op (`take(n).reduce(...)`), so no Python call per element pollutes
them: a `Range` source runs at millions of elements/s whatever the machine load, and a stage is only
blamed for a drop that is larger than the spread of repeated measurements. Input waits seen from
Python include the iterator's own per-call cost (the same for any tf.data iterator); it is
measured on an in-memory dataset of the same element spec in the same loop and subtracted, step by
step, keeping only the excess the noise cannot explain (mean - 2 standard errors), so a pipeline whose
batches are always ready reads "not input-bound" even when a loaded machine stalls a few calls.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from myxtts.diagnostics.tf_warning import expected_traces

MIN_ELEMENTS_FOR_A_RATE = 16  # a stage that yields fewer (e.g. from_generator's one-element id source) is not timed
DROP_THRESHOLD = 1.5  # a stage is blamed only when its rate is this many times below its input's and the ranges are apart
MIN_EFFECT = 0.05  # a fix's measured effect must also exceed 5%, however tight the baseline's spread


@dataclass
class Rate:
    """A rate measured `len(samples)` times: the median and the run-to-run range."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, samples: list[float]) -> "Rate":
        if not samples:
            raise ValueError("Rate.of needs at least one sample.")
        return cls(statistics.median(samples), min(samples), max(samples))

    @property
    def spread(self) -> float:
        """(high - low) / median: the noise band of this measurement."""
        return (self.high - self.low) / self.median if self.median > 0 else 0.0

    def scaled(self, factor: float) -> "Rate":
        return Rate(self.median * factor, self.low * factor, self.high * factor)


@tf.autograph.experimental.do_not_convert
def _stamp(state: tuple, *_element: Any) -> tuple:
    """(count, warm_count, warm_time, last_time): the clock starts once a quarter of the pass is through."""
    count, warm_after, warm_time, _last = state
    now = tf.timestamp()
    warm_time = tf.where(tf.equal(count, warm_after), now, warm_time)
    return count + 1, warm_after, warm_time, now


def _counter(dataset: tf.data.Dataset) -> Callable[[int], tuple[int, float]]:
    """A traced `take(n).reduce(...)` that returns (elements, seconds) of the steady part of one pass.

    The timestamps are taken in-graph, so iterator start-up (thread pools, autotuning, buffers filling)
    and Python never enter the rate: only the element intervals after the first quarter of the pass.
    """
    @tf.function
    def count(elements: tf.Tensor) -> tuple:
        warm_after = elements // 4
        zero = tf.constant(0.0, tf.float64)
        return dataset.take(elements).reduce((tf.constant(0, tf.int64), warm_after, zero, zero), _stamp)

    def timed(elements: int) -> tuple[int, float]:
        with expected_traces():  # one counter per stage wraps the same code: TF's generic warning is wrong here
            produced, warm_after, warm_time, last_time = count(tf.constant(elements, tf.int64))
        steady = int(produced) - int(warm_after) - 1  # intervals between the timestamped elements
        if steady < 1:
            return 0, 0.0
        return steady, float(last_time - warm_time)

    return timed


def element_rate(dataset: tf.data.Dataset, repeats: int = 3, min_seconds: float = 0.03,
                 max_elements: int = 1 << 24, start_elements: int = 8,
                 clearly_fast: float | None = None) -> Rate | None:
    """Elements/s of `dataset`, timed in-graph; None for a finite dataset too short to time.

    The pass length grows x4 from `start_elements` (>= 4) until its steady part takes `min_seconds`;
    that last pass is the first of `repeats` samples (median and spread). A stage already above
    `clearly_fast` elements/s (e.g. 20x the consumer) cannot be a bottleneck: one sample is enough.
    """
    if start_elements < 4:
        raise ValueError(f"element_rate: start_elements must be >= 4 (a warm-up quarter plus intervals), got {start_elements}.")
    timed = _counter(dataset)  # the first pass also traces: tracing happens outside the in-graph clock
    elements = start_elements
    while True:
        steady, seconds = timed(elements)
        exhausted = steady < elements - elements // 4 - 1
        if (clearly_fast is not None and steady >= 8 and seconds > 0 and steady / seconds > clearly_fast
                and not exhausted):
            return Rate.of([steady / seconds])
        if exhausted or seconds >= min_seconds or elements >= max_elements:
            break
        elements *= 4
    if exhausted and (steady < MIN_ELEMENTS_FOR_A_RATE or seconds < min_seconds / 4):
        return None  # e.g. from_generator's one-element id source: nothing to time
    samples = [steady / seconds if seconds > 0 else float("inf")] if steady > 0 else []
    for _ in range(repeats - 1):
        steady, seconds = timed(elements)
        if steady > 0:
            samples.append(steady / seconds if seconds > 0 else float("inf"))
    return Rate.of(samples) if samples else None


def baseline_iterator(batch: Any, final_prefetch: bool = True) -> Any:
    """An iterator over an in-memory dataset with `batch`'s element spec: every next() is ready at once.

    With `final_prefetch` it ends in a prefetch like the pipeline it stands for: next() then waits on
    the prefetch thread's hand-off, which on a busy machine is part of any prefetched iterator's cost.
    """
    dataset = tf.data.Dataset.from_tensors(batch).repeat()
    iterator = iter(dataset.prefetch(tf.data.AUTOTUNE) if final_prefetch else dataset)
    next(iterator)  # the first call builds the iterator's runtime state
    return iterator


def iterator_call_seconds(batch: Any, calls: int = 64, final_prefetch: bool = True) -> float:
    """Median cost of one back-to-back `next()` on an in-memory dataset with `batch`'s element spec."""
    iterator = baseline_iterator(batch, final_prefetch)
    costs = []
    for _ in range(calls):
        started = time.perf_counter()
        next(iterator)
        costs.append(time.perf_counter() - started)
    return statistics.median(costs)


STANDARD_ERRORS = 2.0  # the excess wait reported is its lower ~95% bound: mean - 2 standard errors


def excess_lower_bound(mean_excess: float, standard_error: float) -> float:
    """Excess wait per call that the noise cannot explain: mean - 2 SE, never below 0.

    On a busy machine any next() is sometimes descheduled for milliseconds; those stalls hit the real
    and the in-memory iterator alike but at random, so a handful of them must not read as input-bound.
    """
    return max(0.0, mean_excess - STANDARD_ERRORS * standard_error)


def paired_excess(waits: list[float], baseline_waits: list[float]) -> tuple[float, float, int]:
    """(mean, standard error, pairs) of the real next() minus the in-memory next(), step by step."""
    differences = [wait - baseline for wait, baseline in zip(waits, baseline_waits)]
    if not differences:
        return 0.0, 0.0, 0
    if len(differences) == 1:
        return differences[0], abs(differences[0]), 1  # one pair: no spread known, so no confidence
    return (statistics.fmean(differences), statistics.stdev(differences) / math.sqrt(len(differences)),
            len(differences))


@dataclass
class TogetherRun:
    steps_per_second: float
    raw_share: float  # time blocked in next() / step time
    share: float  # the excess over next() on an in-memory dataset of the same spec (lower bound) / step time
    waits: list[float]
    call_seconds: float  # mean cost of that in-memory next() in this loop
    baseline_waits: list[float] = field(default_factory=list)
    elapsed: float = 0.0  # loop time without the in-memory calls


def run_together(dataset: tf.data.Dataset, consumer: Callable[[Any], Any], steps: int, baseline_batch: Any,
                 final_prefetch: bool = True) -> TogetherRun:
    """Producer and consumer in one loop, as a trainer runs them, with the iterator's own cost beside it.

    Each step also calls next() on an in-memory iterator of the same element spec, alternately before
    and after the real one: after a step (a sleep, a device wait) the first next() is slower than a warm
    one, so alternating makes the subtraction unbiased. The baseline's
    own time is taken out of the step time too.
    """
    iterator = iter(dataset)
    baseline = baseline_iterator(baseline_batch, final_prefetch)
    consumer(next(iterator))  # warm-up: the first step traces, the first batch fills buffers
    waits: list[float] = []
    baseline_waits: list[float] = []
    started = time.perf_counter()
    for step in range(steps):
        if step % 2:
            baseline_started = time.perf_counter()
            next(baseline)
            baseline_waits.append(time.perf_counter() - baseline_started)
        wait_started = time.perf_counter()
        batch = next(iterator, None)
        if batch is None:
            break
        waits.append(time.perf_counter() - wait_started)
        if not step % 2:
            baseline_started = time.perf_counter()
            next(baseline)
            baseline_waits.append(time.perf_counter() - baseline_started)
        consumer(batch)
    elapsed = time.perf_counter() - started - sum(baseline_waits)
    call_seconds = statistics.fmean(baseline_waits) if baseline_waits else 0.0
    if elapsed <= 0 or not waits:
        return TogetherRun(0.0, 0.0, 0.0, waits, call_seconds, baseline_waits, max(elapsed, 0.0))
    mean, error, _pairs = paired_excess(waits, baseline_waits)
    share = excess_lower_bound(mean, error) * len(waits) / elapsed
    return TogetherRun(len(waits) / elapsed, sum(waits) / elapsed, min(share, 1.0), waits, call_seconds,
                       baseline_waits, elapsed)


def pooled_share(runs: list[TogetherRun]) -> float:
    """Input-bound share over several runs: every step's pair pooled, so the noise bound tightens."""
    waits = [wait for run in runs for wait in run.waits]
    baseline_waits = [wait for run in runs for wait in run.baseline_waits[:len(run.waits)]]
    elapsed = sum(run.elapsed for run in runs)
    if elapsed <= 0 or not waits:
        return 0.0
    mean, error, _pairs = paired_excess(waits, baseline_waits)
    return min(excess_lower_bound(mean, error) * len(waits) / elapsed, 1.0)


def consumer_rate(consumer: Callable[[Any], Any], held: list[Any], steps: int, repeats: int = 3) -> Rate:
    """The consumer alone on batches held in memory (no input cost)."""
    consumer(held[0])  # warm-up (traces)
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        for index in range(steps):
            consumer(held[index % len(held)])
        samples.append(steps / (time.perf_counter() - started))
    return Rate.of(samples)


def sleeping_consumer(steps_per_second: float) -> Callable[[Any], None]:
    """Stands in for a device step of known speed: it releases the GIL, as a real accelerator step does."""
    seconds = min(max(1.0 / steps_per_second, 0.0005), 0.25)

    def consume(_batch: Any) -> None:
        time.sleep(seconds)

    return consume


def significant_gain(baseline: Rate, fixed: Rate) -> float | None:
    """fixed / baseline when the fixed median is outside the baseline's run-to-run range (and >5% away)."""
    if baseline.median <= 0:
        return None
    gain = fixed.median / baseline.median
    outside = fixed.median > baseline.high or fixed.median < baseline.low
    return gain if outside and abs(gain - 1.0) > MIN_EFFECT else None


def significant_drop(input_rate: Rate, output_rate: Rate) -> float | None:
    """input / output when the stage clearly loses throughput: ranges apart and >= DROP_THRESHOLD."""
    if output_rate.median <= 0:
        return float("inf")
    drop = input_rate.median / output_rate.median
    return drop if drop >= DROP_THRESHOLD and output_rate.high < input_rate.low else None


def oscillation(waits: list[float]) -> tuple[float | None, int | None]:
    """Coefficient of variation of the waits and their period in steps (None when they do not oscillate)."""
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

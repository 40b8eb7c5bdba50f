"""`diagnose_dataset()`: is a tf.data pipeline fast enough for its consumer, and if not, why?

1. Each stage's output rate, counted in-graph and repeated (pipeline_timing); when the pipeline's
   output is below the consumer, the blamed stage is the one whose rate falls most below its input's
   (the source: below an in-memory dataset of the same element spec), beyond the run-to-run spread,
   and below the consumer.
2. The consumer alone on batches held in memory, then both together: the input-bound share is the time
   blocked in next() beyond the cost of next() on an in-memory iterator of the same spec timed in the
   same loop (its lower ~95% bound), over the step time (TF profiler's 5% / 20% bands), so a cached,
   prefetched pipeline reads "not input-bound" even when a busy machine stalls a few calls.
3. Static facts per stage without serialising any data (dataset_graph), the effect of a missing final
   prefetch and of parallelising a blamed sequential map, each counted only outside the noise band.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import tensorflow as tf

from myxtts.diagnostics import pipeline_timing as timing
from myxtts.diagnostics.dataset_graph import graph_facts, has_final_prefetch, is_transparent, scan_stage, stage_name, stages
from myxtts.diagnostics.pipeline_advice import (HEALTHY, HIGH_INPUT_BOUND, MODERATE_INPUT_BOUND, NO_REFERENCE,
                                                Recommendation, StageView, band, bottleneck, recommend)
from myxtts.errors import InputError

__all__ = ["HIGH_INPUT_BOUND", "MODERATE_INPUT_BOUND", "HEALTHY", "PipelineReport", "Recommendation", "StageTiming",
           "band", "diagnose_dataset", "target_from_flops"]


@dataclass
class StageTiming:
    stage: str  # "Map[1]": type and position from the source
    batches_per_second: float | None  # median (elements/s / batch size upstream of batching); None: not timed
    slower_than_consumer: bool
    low: float | None = None  # run-to-run range of the repeated measurements
    high: float | None = None
    drop: float | None = None  # input rate / this rate, when the drop is significant
    blamed: bool = False


@dataclass
class PipelineReport:
    producer_batches_per_second: float
    consumer_steps_per_second: float | None  # measured consumer alone, or the target when no consumer is given
    combined_steps_per_second: float | None
    input_bound_share: float | None  # (time blocked in next() - per-call cost of any iterator) / step time
    input_bound_band: str
    wait_cv: float | None
    wait_period: int | None  # steps between wait peaks (autocorrelation), None when no oscillation
    target_steps_per_second: float | None
    feeds_target: bool | None
    stage_timings: list[StageTiming] = field(default_factory=list)
    slowest_stage: str | None = None  # the blamed stage (where throughput drops most, below the consumer)
    py_functions: list[str] = field(default_factory=list)
    generator_sources: int = 0
    sequential_maps: int = 0
    final_prefetch: bool = True
    recommendations: list[Recommendation] = field(default_factory=list)
    bottleneck: str = HEALTHY  # py_function, generator_source, sequential_map, slow_stage, missing_prefetch, ...
    raw_input_bound_share: float | None = None  # time blocked in next() / step time, uncorrected
    iterator_call_ms: float | None = None  # next() on an in-memory dataset of the same element spec
    notes: list[str] = field(default_factory=list)  # "could not scan: ..." and other limits of this run

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def format(self) -> str:
        lines = [f"producer alone: {self.producer_batches_per_second:.1f} batches/s"]
        if self.consumer_steps_per_second is not None:
            lines.append(f"consumer alone: {self.consumer_steps_per_second:.1f} steps/s")
        if self.combined_steps_per_second is not None:
            lines.append(f"together: {self.combined_steps_per_second:.1f} steps/s, input-bound share "
                         f"{self.input_bound_share:.1%} ({self.input_bound_band}; raw wait "
                         f"{self.raw_input_bound_share:.1%}, of which next() on an in-memory iterator of the same "
                         f"spec costs {self.iterator_call_ms:.2f} ms per call; lower bound beyond that and the "
                         f"noise); wait CV {self.wait_cv:.2f}"
                         + (f", oscillation period {self.wait_period} steps" if self.wait_period else ""))
        if self.target_steps_per_second is not None:
            lines.append(f"target consumer: {self.target_steps_per_second:.1f} steps/s -> "
                         f"{'fed' if self.feeds_target else 'NOT fed'} by this pipeline")
        for item in self.stage_timings:
            if item.batches_per_second is None:
                lines.append(f"  stage {item.stage:<22} not timed (finite, too few elements)")
                continue
            spread = f" [{item.low:.1f}-{item.high:.1f}]" if item.low is not None else ""
            mark = f"  drop x{item.drop:.1f}" if item.drop is not None else ""
            mark += "  <- bottleneck" if item.blamed else ""  # stages after it are slow too: only it is marked
            lines.append(f"  stage {item.stage:<22} {item.batches_per_second:10.1f} batches/s{spread}{mark}")
        lines.append(f"bottleneck: {self.bottleneck}" + (": nothing to fix" if self.bottleneck == HEALTHY else (
            ": no consumer or target, so no stage is blamed (pass one to compare)" if self.bottleneck == NO_REFERENCE
            else "")))
        for rank, item in enumerate(self.recommendations, 1):
            gain = f" (measured gain x{item.measured_gain:.2f})" if item.measured_gain else ""
            lines.append(f"{rank}. [{item.kind}] {item.problem} Fix: {item.fix}{gain}")
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)


def target_from_flops(model_flops_per_step: float, device_peak_flops: float, utilization: float = 0.4) -> float:
    """Steps/s a device would run at: FLOPs per step over (peak FLOP/s x a realistic utilization)."""
    if model_flops_per_step <= 0 or device_peak_flops <= 0 or not 0 < utilization <= 1:
        raise InputError("model FLOPs and device peak must be > 0 and utilization in (0, 1].")
    return device_peak_flops * utilization / model_flops_per_step


def _batch_size(batch: Any) -> int:
    leaves = tf.nest.flatten(batch)
    first = leaves[0] if leaves else None
    return int(first.shape[0]) if first is not None and getattr(first, "shape", None) is not None and \
        first.shape.rank and first.shape[0] is not None else 1


def _is_batching(dataset: Any) -> bool:
    name = stage_name(dataset)
    return "Batch" in name or "GroupByWindow" in name or "Bucket" in name


def _parallel_version(stage: Any) -> tf.data.Dataset | None:
    """A sequential map rebuilt with num_parallel_calls=AUTOTUNE (private attributes, guarded)."""
    function = getattr(getattr(stage, "_map_func", None), "_func", None)
    upstream = getattr(stage, "_input_dataset", None)
    if function is None or upstream is None:
        return None
    return upstream.map(function, num_parallel_calls=tf.data.AUTOTUNE)


_CLEARLY_FAST = 20.0  # a stage this many times faster than the consumer is timed once: it cannot be the bottleneck


def _time_stages(chain: list[Any], per_batch: int, repeats: int, notes: list[str], reference: float | None):
    """(label, dataset, Rate in batches/s or None) per non-transparent stage, and the source baseline."""
    batching_at = next((index for index, stage in enumerate(chain) if _is_batching(stage)), len(chain))
    timed = []
    for index, stage in enumerate(chain):
        if is_transparent(stage):
            continue
        scale = 1.0 / per_batch if index < batching_at else 1.0
        fast = reference * _CLEARLY_FAST / scale if reference else None  # in this stage's elements/s
        try:
            rate = timing.element_rate(stage, repeats=repeats, start_elements=8 if index < batching_at else 4,
                                       clearly_fast=fast)
        except Exception as err:  # e.g. a stage that cannot run on its own: say so, keep the others
            notes.append(f"could not time stage {stage_name(stage)}[{index}]: {type(err).__name__}: {err}")
            rate = None
        timed.append((f"{stage_name(stage)}[{index}]", stage, rate.scaled(scale) if rate else None, scale))
    baseline = None
    first = next(((stage, scale) for _, stage, rate, scale in timed if rate is not None), None)
    if first is not None:  # the source's "input": an in-memory dataset with the same element spec
        element = next(iter(first[0]))
        baseline = timing.element_rate(tf.data.Dataset.from_tensors(element).repeat(), repeats=repeats,
                                       clearly_fast=reference * _CLEARLY_FAST / first[1] if reference else None)
        baseline = baseline.scaled(first[1]) if baseline else None
    return timed, baseline


def diagnose_dataset(dataset: tf.data.Dataset, consumer: Callable[[Any], Any] | None = None, steps: int = 50,
                     target_steps_per_second: float | None = None, stage_elements: int = 64,
                     measure_fixes: bool = True, repeats: int = 3) -> PipelineReport:
    """Measure `dataset` against `consumer` (a train step taking one batch) or a target rate.

    `stage_elements` is accepted for compatibility and not used: stage passes grow until they last long enough.
    One function: the measurements (waits with the consumer, each stage's rate, the fixes tried) feed one report
    and run in this order on the same dataset; each measurement is a helper.
    """
    if steps < 8:
        raise InputError(f"diagnose_dataset: steps must be >= 8 to measure waits, got {steps}.")
    if repeats < 2:
        raise ValueError(f"diagnose_dataset: repeats must be >= 2 to know the run-to-run spread, got {repeats}.")
    del stage_elements
    first_batch = next(iter(dataset), None)
    if first_batch is None:
        raise ValueError("diagnose_dataset: the dataset yielded no batches.")
    per_batch = _batch_size(first_batch)
    notes: list[str] = []
    facts = graph_facts(dataset)
    if facts.note:
        notes.append(facts.note)
    final_prefetch = has_final_prefetch(dataset)

    consumer_rate = together_rate = share = raw_share = cv = call_seconds = None
    period = None
    if consumer is not None:
        held = list(dataset.take(4))  # in memory: the consumer alone, no input cost
        consumer_rate = timing.consumer_rate(consumer, held, steps, repeats).median
        runs = [timing.run_together(dataset, consumer, steps, first_batch, final_prefetch) for _ in range(repeats)]
        call_seconds = statistics.median(run.call_seconds for run in runs)
        together_rate = statistics.median(run.steps_per_second for run in runs)
        share = timing.pooled_share(runs)
        raw_share = statistics.median(run.raw_share for run in runs)
        cv, period = timing.oscillation(runs[0].waits)
    reference = consumer_rate or target_steps_per_second

    chain = stages(dataset)
    timed, baseline = _time_stages(chain, per_batch, repeats, notes, reference)
    final_rate = next((rate for _, _, rate, _ in reversed(timed) if rate is not None), None)
    if final_rate is None:  # too few batches for an in-graph count: time one Python pass
        started = time.perf_counter()
        produced = sum(1 for _ in dataset.take(steps))
        final_rate = timing.Rate.of([produced / max(1e-9, time.perf_counter() - started)])
    producer = final_rate.median

    # a stage can only be the bottleneck when the pipeline's output is below the consumer: a slow map before
    # a cache, or a short finite source, is not limiting when the final stage keeps up
    limiting = reference is not None and producer < reference
    views, timings, blamed = _blame(timed, baseline, reference if limiting else None, reference, repeats,
                                    measure_fixes)
    feeds = (producer >= target_steps_per_second) if target_steps_per_second else None
    prefetch_gain, prefetch_effect = None, ""
    if not final_prefetch and measure_fixes:
        prefetch_gain, prefetch_effect = _prefetch_effect(dataset, consumer or timing.sleeping_consumer(
            reference or producer), steps, repeats, first_batch)
    chain_py = {item for view in views for item in view.py_functions}
    kind = bottleneck(blamed, final_prefetch, share, feeds, reference is not None)
    report = PipelineReport(
        producer_batches_per_second=round(producer, 2),
        consumer_steps_per_second=round(consumer_rate, 2) if consumer_rate else target_steps_per_second,
        combined_steps_per_second=round(together_rate, 2) if together_rate else None,
        input_bound_share=round(share, 4) if share is not None else None,
        input_bound_band=band(share) if share is not None else ("would starve the target" if (
            target_steps_per_second and producer < target_steps_per_second) else "not measured"),
        wait_cv=round(cv, 3) if cv is not None else None, wait_period=period,
        target_steps_per_second=target_steps_per_second, feeds_target=feeds,
        stage_timings=timings, slowest_stage=blamed.label if blamed else None, py_functions=facts.py_functions,
        generator_sources=facts.generator_sources, sequential_maps=facts.sequential_maps,
        final_prefetch=final_prefetch, bottleneck=kind,
        raw_input_bound_share=round(raw_share, 4) if raw_share is not None else None,
        iterator_call_ms=round(call_seconds * 1e3, 4) if call_seconds is not None else None, notes=notes)
    report.recommendations = recommend(
        views, blamed, reference, final_prefetch=final_prefetch, prefetch_gain=prefetch_gain,
        prefetch_effect=prefetch_effect, other_py_functions=[p for p in facts.py_functions if p not in chain_py],
        generator_sources=facts.generator_sources, feeds_target=feeds, producer=producer,
        target=target_steps_per_second, share=share, call_ms=(call_seconds or 0.0) * 1e3, kind=kind)
    return report


def _blame(timed: list, baseline: timing.Rate | None, limit: float | None, reference: float | None, repeats: int,
           measure: bool) -> tuple[list[StageView], list[StageTiming], StageView | None]:
    """Per-stage drop against its input; blame the largest significant drop below `limit` (the consumer,
    None when the pipeline's output keeps up with it); `reference` only marks stages slower than it."""
    views: list[StageView] = []
    timings: list[StageTiming] = []
    previous = baseline
    candidates: list[tuple[float, StageView, StageTiming]] = []
    for label, stage, rate, scale in timed:
        facts = scan_stage(stage, 0)
        drop = timing.significant_drop(previous, rate) if (previous is not None and rate is not None) else None
        slower = rate is not None and reference is not None and rate.median < reference
        view = StageView(label, rate.median if rate else float("nan"), drop, slower, facts.py_functions,
                         facts.generator, facts.sequential_map, facts.stateful)
        item = StageTiming(label, round(rate.median, 2) if rate else None, slower,
                           round(rate.low, 2) if rate else None, round(rate.high, 2) if rate else None,
                           round(drop, 2) if drop is not None else None)
        views.append(view)
        timings.append(item)
        if drop is not None and limit is not None and rate.median < limit:  # no limit: nothing to blame
            candidates.append((drop, view, item))
        if rate is not None:
            previous = rate
    blamed = None
    if candidates:
        _, blamed, item = max(candidates, key=lambda candidate: candidate[0])
        item.blamed = True
    elif limit is not None:  # no sharp drop, but a stage clearly below the consumer: the first one
        for view, item in zip(views, timings):
            if item.high is not None and item.high < limit:
                blamed, item.blamed = view, True
                break
    if blamed is not None and blamed.sequential_map and not blamed.py_functions and measure:
        stage, rate, scale = next((stage, rate, scale) for label, stage, rate, scale in timed if label == blamed.label)
        _measure_parallel_map(blamed, stage, rate.scaled(1.0 / scale), repeats)
    return views, timings, blamed


def _measure_parallel_map(view: StageView, stage: Any, base: timing.Rate, repeats: int) -> None:
    """The blamed sequential map's own rate (elements/s, already measured) against its parallel rebuild."""
    parallel = _parallel_version(stage)
    if parallel is None:
        view.parallel_effect = "not measured: the map function could not be rebuilt"
        return
    try:
        fixed = timing.element_rate(parallel, repeats=repeats)
    except Exception as err:  # a function that cannot be re-mapped: report why instead of a gain
        view.parallel_effect = f"not measured: {type(err).__name__}: {err}"
        return
    if fixed is None:
        view.parallel_effect = "not measured: too few elements"
        return
    gain = timing.significant_gain(base, fixed)
    view.parallel_gain = gain if gain is not None and gain > 1 else None  # a loss is told in the effect text
    view.parallel_effect = _effect_text(base, fixed, gain is not None, "stage rate with num_parallel_calls")


def _prefetch_effect(dataset: tf.data.Dataset, consumer: Callable, steps: int, repeats: int,
                     first_batch: Any) -> tuple[float | None, str]:
    """Steps/s with and without a final prefetch, interleaved so both see the same machine load."""
    base, fixed = [], []
    prefetched = dataset.prefetch(tf.data.AUTOTUNE)
    for _ in range(repeats):
        base.append(timing.run_together(dataset, consumer, steps, first_batch, False).steps_per_second)
        fixed.append(timing.run_together(prefetched, consumer, steps, first_batch, True).steps_per_second)
    base_rate, fixed_rate = timing.Rate.of(base), timing.Rate.of(fixed)
    gain = timing.significant_gain(base_rate, fixed_rate)
    effect = _effect_text(base_rate, fixed_rate, gain is not None, "steps/s with .prefetch(AUTOTUNE)")
    return (gain if gain is not None and gain > 1 else None), effect


def _effect_text(base: timing.Rate, fixed: timing.Rate, significant: bool, what: str) -> str:
    ratio = fixed.median / base.median if base.median > 0 else float("nan")
    verdict = "outside the run-to-run spread" if significant else f"inside the run-to-run spread +-{base.spread / 2:.0%}"
    return f"{what} x{ratio:.2f} ({base.median:.1f} -> {fixed.median:.1f}), {verdict}"

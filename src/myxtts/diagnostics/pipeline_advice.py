"""What `diagnose_dataset` concludes: the bottleneck kind and the ranked recommendations.

Ranking is by kind, never by a measured gain (a gain inside the noise could put a cheap sequential
map above a Python function): structural findings whose stage is slower than the consumer first
(Python functions and generator sources cannot parallelise under the GIL), then the stage where
throughput drops, a missing final prefetch (always, with its measured effect), a missed target, an
unexplained input-bound share, and last the hints about stages that are not the bottleneck.
"""

from __future__ import annotations

from dataclasses import dataclass

MODERATE_INPUT_BOUND = 0.05  # TF profiler: "moderately input-bound" above 5% of step time waiting
HIGH_INPUT_BOUND = 0.20  # "highly input-bound" above 20%

# Order of the recommendations; a kind is also the report's `bottleneck` when it names the cause.
KINDS = ("py_function", "generator_source", "sequential_map", "slow_stage", "missing_prefetch", "below_target",
         "input_bound", "hint")
HEALTHY = "healthy"
NO_REFERENCE = "no_reference"  # neither a consumer nor a target: no stage can be called too slow


@dataclass
class Recommendation:
    problem: str
    fix: str
    measured_gain: float | None = None  # x throughput, only when outside the run-to-run spread of its baseline
    kind: str = "hint"  # one of KINDS
    effect: str = ""  # what was measured, significant or not ("x1.02, inside the noise band +-8%")


def band(share: float) -> str:
    if share > HIGH_INPUT_BOUND:
        return "highly input-bound"
    if share > MODERATE_INPUT_BOUND:
        return "moderately input-bound"
    return "not input-bound"


def bottleneck(blamed: "StageView | None", final_prefetch: bool, share: float | None,
               feeds_target: bool | None, has_reference: bool = True) -> str:
    """One word for the report: where the pipeline loses throughput, or `healthy`."""
    if blamed is not None:
        if blamed.py_functions:
            return "py_function"
        if blamed.generator:
            return "generator_source"
        if blamed.sequential_map:
            return "sequential_map"
        return "slow_stage"
    if not final_prefetch:
        return "missing_prefetch"
    if feeds_target is False:
        return "below_target"
    if share is not None and share > MODERATE_INPUT_BOUND:
        return "input_bound"
    return HEALTHY if has_reference else NO_REFERENCE


@dataclass
class StageView:
    """The facts about one timed stage that the advice needs (built by pipeline_probe)."""

    label: str  # "Map[1]"
    batches_per_second: float
    drop: float | None  # input rate / this rate when significant
    slower_than_consumer: bool
    py_functions: list[str]
    generator: bool
    sequential_map: bool
    stateful: bool
    parallel_gain: float | None = None  # sequential map rebuilt with num_parallel_calls=AUTOTUNE
    parallel_effect: str = ""


def _rate_text(view: StageView, reference: float | None) -> str:
    text = f"stage {view.label} runs at {view.batches_per_second:.1f} batches/s"
    if reference is not None:
        text += f" against a consumer at {reference:.1f} steps/s"
    if view.drop is not None:
        text += f" (throughput drops x{view.drop:.1f} there)"
    return text


def recommend(views: list[StageView], blamed: StageView | None, reference: float | None, *,
              final_prefetch: bool, prefetch_gain: float | None, prefetch_effect: str,
              other_py_functions: list[str], generator_sources: int, feeds_target: bool | None,
              producer: float, target: float | None, share: float | None, call_ms: float | None,
              kind: str) -> list[Recommendation]:
    items: list[Recommendation] = []
    for view in views:
        # without a consumer or target, a significant drop at the stage is the evidence that it matters
        slow = view.slower_than_consumer or view is blamed or (reference is None and view.drop is not None)
        if view.py_functions:
            items.append(Recommendation(
                f"Python functions in stage {view.label} ({'; '.join(view.py_functions[:3])}) hold the GIL, so "
                f"num_parallel_calls cannot parallelize them; {_rate_text(view, reference)}.",
                "prepare features once into a cache (myxtts prepare) or rewrite the function with TF ops.",
                kind="py_function" if slow else "hint"))
        if view.generator:
            items.append(Recommendation(
                f"a Python generator source (Dataset.from_generator) runs on one thread under the GIL; "
                f"{_rate_text(view, reference)}.", "read from a prepared cache (TFRecord / sharded arrays) or "
                "from_tensor_slices over in-memory arrays.", kind="generator_source" if slow else "hint"))
        if view.sequential_map:
            rewrite = "" if view.stateful else (" (its function is stateless, so TF's default map_parallelization "
                                                "rewrite may already run it in parallel)")
            if view is blamed and not view.py_functions:
                items.append(Recommendation(
                    f"Dataset.map without num_parallel_calls (sequential); {_rate_text(view, reference)}{rewrite}.",
                    "pass num_parallel_calls=tf.data.AUTOTUNE.", view.parallel_gain, "sequential_map",
                    view.parallel_effect))
            elif not view.py_functions:
                items.append(Recommendation(
                    f"stage {view.label} is a Dataset.map without num_parallel_calls{rewrite}; it is not where "
                    f"throughput drops today.", "pass num_parallel_calls=tf.data.AUTOTUNE.", kind="hint"))
    if other_py_functions:
        items.append(Recommendation(
            f"Python functions outside the main chain ({'; '.join(other_py_functions[:3])}) hold the GIL.",
            "prepare features once into a cache or rewrite with TF ops.", kind="hint"))
    if generator_sources and not any(view.generator for view in views):
        items.append(Recommendation("a Python generator source (Dataset.from_generator) outside the main chain "
                                    "runs under the GIL.", "read from a prepared cache.", kind="hint"))
    if blamed is not None and kind == "slow_stage":
        items.append(Recommendation(
            f"{_rate_text(blamed, reference)}: it is where the pipeline loses throughput.",
            "give it more parallelism (num_parallel_calls / interleave), move its work before training "
            "(myxtts prepare), or cache its output.", kind="slow_stage"))
    if not final_prefetch:
        items.append(Recommendation(
            "the pipeline does not end with prefetch: the producer and the step take turns instead of "
            f"overlapping{(' (measured: ' + prefetch_effect + ')') if prefetch_effect else ''}.",
            "end the pipeline with .prefetch(tf.data.AUTOTUNE).", prefetch_gain, "missing_prefetch",
            prefetch_effect))
    if feeds_target is False and target is not None:
        items.append(Recommendation(
            f"the producer ({producer:.1f} batches/s) is below the target consumer ({target:.1f} steps/s).",
            "fix the items above; then add parallelism or prepared features until the producer exceeds the "
            "target.", kind="below_target"))
    if kind == "input_bound" and share is not None:
        items.append(Recommendation(
            f"the step waits {share:.0%} of its time for input beyond the cost of next() itself "
            f"({call_ms:.2f} ms per call), but no stage is clearly slower than the consumer.",
            "rerun with more --steps; if it persists, raise the final prefetch buffer and the parallelism of "
            "the heaviest map.", kind="input_bound"))
    items.sort(key=lambda item: KINDS.index(item.kind))  # stable: by kind only, never by gain
    return items

"""Length statistics: percentiles, suggested max_* and bucket boundaries with the fill each gives.

Works on a prepared cache (``cache_stats``) or on raw length arrays (``length_stats``; the benchmark
uses it on LJSpeech transcript lengths).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np

from myxtts.data.buckets import TEXT_MULTIPLE, BucketParams, plan_buckets
from myxtts.data.cache import FeatureCache
from myxtts.errors import InputError

PERCENTILES = (50, 90, 95, 99)


def percentiles(values: Sequence[int] | np.ndarray) -> dict[str, float]:
    """p50/p90/p95/p99/max (and count/mean) of a length array."""
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        return {"count": 0}
    out: dict[str, float] = {"count": int(array.size), "mean": round(float(array.mean()), 2)}
    for p in PERCENTILES:
        out[f"p{p}"] = round(float(np.percentile(array, p)), 2)
    out["max"] = int(array.max())
    return out


def _round_up(value: float, multiple: int) -> int:
    return int(math.ceil(value / multiple) * multiple)


def length_stats(text_lengths: Sequence[int], mel_lengths: Sequence[int], params: BucketParams,
                 shapes: int | None = None, reduction_factor: int = 1) -> dict[str, Any]:
    """Statistics, suggested max_text_length / max_mel_frames and a bucket plan for ``shapes`` shapes.

    The suggestions cover every utterance (max rounded up to 8 tokens / the bucket multiple); the
    p99-based alternative would skip about 1% of the corpus.
    """
    text = np.asarray(text_lengths, dtype=np.int64)
    mel = np.asarray(mel_lengths, dtype=np.int64)
    if text.size == 0:
        raise InputError("No lengths to analyse (empty corpus or cache).")
    mel_multiple = math.lcm(params.bucket_multiple, max(reduction_factor, 1))
    suggested = {
        "max_text_length": _round_up(text.max(), TEXT_MULTIPLE),
        "max_mel_frames": _round_up(mel.max(), mel_multiple),
        "max_text_length_p99": _round_up(np.percentile(text, 99), TEXT_MULTIPLE),
        "max_mel_frames_p99": _round_up(np.percentile(mel, 99), mel_multiple),
    }
    bucket_params = dataclasses.replace(params, fixed=False, num_buckets=shapes or params.num_buckets)
    bucket_plan = plan_buckets(text, mel, bucket_params)
    fixed_plan = plan_buckets(text, mel, dataclasses.replace(params, fixed=True))
    return {
        "utterances": int(text.size),
        "text_tokens": percentiles(text),
        "mel_frames": percentiles(mel),
        "suggested": suggested,
        "configured": {"max_text_length": params.max_text_length, "max_mel_frames": params.max_mel_frames},
        "buckets": {"plan": bucket_plan.to_dict()["buckets"], "fill": bucket_plan.fill(text, mel).to_dict()},
        "fixed": {"plan": fixed_plan.to_dict()["buckets"], "fill": fixed_plan.fill(text, mel).to_dict()},
    }


def cache_stats(cfg: Any, shapes: int | None = None) -> dict[str, Any]:
    """``length_stats`` of the prepared cache of ``cfg`` (all splits); raises CacheError if none."""
    cache = FeatureCache.load(cfg, lengths_only=True)
    report = length_stats(cache.token_lengths, cache.mel_lengths, BucketParams.from_config(cfg.data),
                          shapes=shapes, reduction_factor=cfg.model.reduction_factor)
    report["cache_dir"] = str(cache.cache_dir)
    return report


def format_stats(report: dict[str, Any]) -> str:
    """Human-readable table of a ``length_stats`` report."""
    lines = [f"utterances: {report['utterances']}"]
    header = f"{'':14}{'p50':>8}{'p90':>8}{'p95':>8}{'p99':>8}{'max':>8}"
    lines.append(header)
    for name, key in (("text tokens", "text_tokens"), ("mel frames", "mel_frames")):
        row = report[key]
        lines.append(f"{name:14}" + "".join(f"{row[k]:>8g}" for k in ("p50", "p90", "p95", "p99", "max")))
    s, c = report["suggested"], report["configured"]
    lines.append(f"suggested data.max_text_length: {s['max_text_length']} (configured {c['max_text_length']}; "
                 f"p99 would be {s['max_text_length_p99']})")
    lines.append(f"suggested data.max_mel_frames:  {s['max_mel_frames']} (configured {c['max_mel_frames']}; "
                 f"p99 would be {s['max_mel_frames_p99']})")
    for title, key in (("buckets", "buckets"), ("fixed padding", "fixed")):
        fill = report[key]["fill"]
        lines.append(f"{title}: {fill['num_shapes']} shape(s), mel fill {fill['mel_fill']:.1%}, text fill "
                     f"{fill['text_fill']:.1%}, skipped (above max_*) {fill['num_skipped']}")
        if key == "buckets":
            lines.append(f"  {'text':>6} {'mel':>6} {'batch':>6} {'count':>6} {'mel fill':>9} {'text fill':>9}")
            for bucket in fill["per_bucket"]:
                lines.append(f"  {bucket['text_length']:>6} {bucket['mel_frames']:>6} {bucket['batch_size']:>6} "
                             f"{bucket['count']:>6} {bucket['mel_fill']:>9.1%} {bucket['text_fill']:>9.1%}")
    return "\n".join(lines)

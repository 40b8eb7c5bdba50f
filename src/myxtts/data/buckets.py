"""Bucket plans: a small, fixed list of (text_length, mel_frames, batch_size) batch shapes.

Every batch the pipeline yields has one of these shapes, so each compiled train step traces once per
bucket and never again. Boundaries are chosen from the length statistics of the corpus:

- mel bounds are multiples of ``data.bucket_multiple`` (a multiple of the reduction factor), capped
  at ``data.max_mel_frames``. Instead of plain quantiles of the mel lengths (``quantile_boundaries``,
  the baseline the tests compare against), an exact dynamic programme over the candidate multiples
  picks the bounds minimising padded mel cells + TEXT_COST_WEIGHT x padded text cells (each relative
  to the real total); then spare shapes split a mel group by text length where that saves most
  (same mel bound, smaller text bound), and the best split of the shape budget is kept;
- each bucket's text bound is the longest token count of its members rounded up to a multiple of 8,
  capped at ``data.max_text_length``;
- batch size = clamp(batch_frames // mel_frames, min_batch_size, batch_size), so short buckets carry
  more utterances and every batch costs about the same memory.

Fixed mode (``data.pad_to_fixed_length``) is the single bucket (max_text_length, max_mel_frames,
batch_size). In both modes, entries longer than max_* are reported (count + ids) and skipped, never
truncated.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from myxtts.errors import InputError

logger = logging.getLogger(__name__)

TEXT_MULTIPLE = 8  # text bounds are rounded up to this (friendly to matmul tiling)
# Padded text cells cost this much relative to padded mel cells when choosing boundaries: decoder
# steps over mel frames dominate a train step, text padding is cheaper (tuned on LJSpeech lengths).
TEXT_COST_WEIGHT = 0.2


@dataclass(frozen=True)
class Bucket:
    text_length: int  # tokens per row (bos + ids + eos, 0-padded)
    mel_frames: int  # frames per row
    batch_size: int  # rows per batch


@dataclass(frozen=True)
class BucketParams:
    """The data settings a plan depends on (a saved plan is reused only if these match)."""

    fixed: bool
    num_buckets: int
    bucket_multiple: int
    max_text_length: int
    max_mel_frames: int
    batch_size: int
    batch_frames: int
    min_batch_size: int
    replicas: int = 1  # devices the global batch is split over (each takes batch / replicas rows)

    @classmethod
    def from_config(cls, data_cfg: Any, replicas: int = 1) -> "BucketParams":
        if replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {replicas}.")
        return cls(fixed=data_cfg.pad_to_fixed_length, num_buckets=data_cfg.num_buckets,
                   bucket_multiple=data_cfg.bucket_multiple, max_text_length=data_cfg.max_text_length,
                   max_mel_frames=data_cfg.max_mel_frames, batch_size=data_cfg.batch_size,
                   batch_frames=data_cfg.batch_frames, min_batch_size=data_cfg.min_batch_size, replicas=replicas)


@dataclass(frozen=True)
class FillReport:
    """How much of the padded batches is real data (per utterance; drop_remainder not counted)."""

    real_mel_frames: int
    padded_mel_frames: int
    real_text_tokens: int
    padded_text_tokens: int
    num_shapes: int
    num_fitted: int
    num_skipped: int
    per_bucket: list[dict[str, Any]] = field(default_factory=list)

    @property
    def mel_fill(self) -> float:
        return self.real_mel_frames / self.padded_mel_frames if self.padded_mel_frames else 0.0

    @property
    def text_fill(self) -> float:
        return self.real_text_tokens / self.padded_text_tokens if self.padded_text_tokens else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["mel_fill"] = round(self.mel_fill, 4)
        out["text_fill"] = round(self.text_fill, 4)
        return out


@dataclass(frozen=True)
class BucketPlan:
    buckets: tuple[Bucket, ...]
    params: BucketParams

    @property
    def fixed(self) -> bool:
        return self.params.fixed

    def __len__(self) -> int:
        return len(self.buckets)

    def assign(self, text_lengths: Sequence[int], mel_lengths: Sequence[int]) -> np.ndarray:
        """Bucket index of each entry (the first bucket it fits), -1 for entries that fit none."""
        text = np.asarray(text_lengths, dtype=np.int64)[:, None]  # [entries, 1]
        mel = np.asarray(mel_lengths, dtype=np.int64)[:, None]
        text_bounds = np.array([b.text_length for b in self.buckets], dtype=np.int64)[None, :]  # [1, buckets]
        mel_bounds = np.array([b.mel_frames for b in self.buckets], dtype=np.int64)[None, :]
        fits = (text <= text_bounds) & (mel <= mel_bounds)  # [entries, buckets]
        first = np.argmax(fits, axis=1)
        return np.where(fits.any(axis=1), first, -1).astype(np.int64)

    def fill(self, text_lengths: Sequence[int], mel_lengths: Sequence[int]) -> FillReport:
        text = np.asarray(text_lengths, dtype=np.int64)
        mel = np.asarray(mel_lengths, dtype=np.int64)
        assigned = self.assign(text, mel)
        fitted = assigned >= 0
        per_bucket = []
        padded_mel = padded_text = 0
        for index, bucket in enumerate(self.buckets):
            members = assigned == index
            count = int(members.sum())
            padded_mel += count * bucket.mel_frames
            padded_text += count * bucket.text_length
            per_bucket.append({
                **asdict(bucket), "count": count,
                "mel_fill": round(float(mel[members].sum()) / (count * bucket.mel_frames), 4) if count else 0.0,
                "text_fill": round(float(text[members].sum()) / (count * bucket.text_length), 4) if count else 0.0,
            })
        return FillReport(real_mel_frames=int(mel[fitted].sum()), padded_mel_frames=int(padded_mel),
                          real_text_tokens=int(text[fitted].sum()), padded_text_tokens=int(padded_text),
                          num_shapes=len(self.buckets), num_fitted=int(fitted.sum()),
                          num_skipped=int((~fitted).sum()), per_bucket=per_bucket)

    def misfits(self, ids: Sequence[str], text_lengths: Sequence[int], mel_lengths: Sequence[int]) -> list[str]:
        """Ids of entries longer than every bucket (reported and skipped, never truncated)."""
        assigned = self.assign(text_lengths, mel_lengths)
        return [ids[i] for i in np.flatnonzero(assigned < 0)]

    # ---- persistence --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"buckets": [asdict(b) for b in self.buckets], "params": asdict(self.params)}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "BucketPlan":
        return cls(tuple(Bucket(**b) for b in raw["buckets"]), BucketParams(**raw["params"]))

    def save(self, path: str | Path) -> None:
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2), encoding="utf-8")
        tmp.replace(path)  # atomic: a reader never sees half a plan

    @classmethod
    def load(cls, path: str | Path) -> "BucketPlan":
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    def describe(self) -> str:
        shapes = ", ".join(f"{b.batch_size}x{b.text_length}t/{b.mel_frames}f" for b in self.buckets)
        return f"{'fixed' if self.fixed else 'buckets'} ({len(self.buckets)} shapes: {shapes})"


def _round_up(value: int, multiple: int) -> int:
    return int(math.ceil(value / multiple) * multiple)


def batch_size_for(mel_frames: int, params: BucketParams) -> int:
    """Global batch of a bucket: ``replicas`` x the per-replica batch from the frame budget per replica.

    Per replica: clamp((batch_frames / replicas) // mel_frames, ceil(min_batch_size / replicas),
    batch_size / replicas), at least 1. So every bucket's batch divides by the replica count and each
    device still gets about the same number of frames; one replica gives the single-device plan.
    """
    replicas = params.replicas
    per_replica = (params.batch_frames // replicas) // mel_frames
    per_replica = max(per_replica, -(-params.min_batch_size // replicas))
    per_replica = min(per_replica, max(1, params.batch_size // replicas))
    return int(max(per_replica, 1) * replicas)


def quantile_boundaries(mel_lengths: np.ndarray, num_buckets: int, multiple: int, cap: int) -> list[int]:
    """Mel bounds at equal-count quantiles, rounded up to ``multiple``, capped, deduplicated."""
    quantiles = np.quantile(mel_lengths, np.linspace(0, 1, num_buckets + 1)[1:])
    bounds = sorted({min(_round_up(int(math.ceil(q)), multiple), cap) for q in quantiles})
    return bounds


def plan_buckets(text_lengths: Sequence[int], mel_lengths: Sequence[int], params: BucketParams) -> BucketPlan:
    """The plan for these lengths (entries above max_* are left out of the statistics).

    One function: the steps (candidate bounds, the greedy merge to ``num_buckets``, batch sizes from the frame
    budget) share the filtered length arrays and read in order; each is commented where it starts."""
    if params.fixed:
        return BucketPlan((Bucket(params.max_text_length, params.max_mel_frames, params.batch_size),), params)
    text = np.asarray(text_lengths, dtype=np.int64)
    mel = np.asarray(mel_lengths, dtype=np.int64)
    fits = (text <= params.max_text_length) & (mel <= params.max_mel_frames)
    text, mel = text[fits], mel[fits]
    if mel.size == 0:
        raise InputError("No utterance fits data.max_text_length / data.max_mel_frames; raise them "
                         "(see `myxtts stats`).")
    # candidate mel bounds: multiples of bucket_multiple covering every length, capped at the max
    candidate_of = np.minimum(np.ceil(mel / params.bucket_multiple).astype(np.int64) * params.bucket_multiple,
                              params.max_mel_frames)
    candidates = np.unique(candidate_of)  # [candidates] ascending
    position = np.searchsorted(candidates, candidate_of)
    counts = np.bincount(position, minlength=candidates.size).astype(np.float64)  # [candidates]
    max_text = np.zeros(candidates.size, dtype=np.int64)
    np.maximum.at(max_text, position, text)
    total_mel, total_text = float(mel.sum()), float(text.sum())

    def text_bound(longest: int) -> int:
        return min(_round_up(longest, TEXT_MULTIPLE), params.max_text_length)

    # cost[a, b]: padded cells (relative) of one bucket holding candidates a..b with bound candidates[b]
    size = candidates.size
    cumulative = np.concatenate([[0.0], np.cumsum(counts)])
    cost = np.full((size, size), np.inf)
    for a in range(size):
        longest = 0
        for b in range(a, size):
            longest = max(longest, int(max_text[b]))
            count = cumulative[b + 1] - cumulative[a]
            cost[a, b] = (count * candidates[b] / total_mel
                          + TEXT_COST_WEIGHT * count * text_bound(longest) / total_text)
    # best[k, b]: lowest cost covering candidates 0..b with k + 1 buckets; exact, O(k * size^2)
    num_buckets = min(params.num_buckets, size)
    best = np.full((num_buckets, size), np.inf)
    previous = np.full((num_buckets, size), -1, dtype=np.int64)
    best[0] = cost[0]
    for k in range(1, num_buckets):
        for b in range(k, size):
            options = best[k - 1, k - 1:b] + cost[k:b + 1, b]  # last bucket starts at a = k..b
            choice = int(np.argmin(options))
            best[k, b] = options[choice]
            previous[k, b] = choice + k - 1
    # Text splits: a mel group may hold several text bounds (same mel bound, sorted by text), which
    # recovers text padding when text and audio lengths disagree. For every number of mel groups,
    # spend the remaining shapes on the best greedy text splits and keep the cheapest plan overall.
    best_plan: list[Bucket] = []
    best_cost = np.inf
    for groups in range(1, num_buckets + 1):
        if not np.isfinite(best[groups - 1, size - 1]):
            continue
        ends = _backtrack(previous, groups - 1, size - 1)
        buckets, mel_cost = [], 0.0
        subsets: list[tuple[int, np.ndarray]] = []
        start = 0
        for end in ends:
            mel_bound = int(candidates[end])
            members = (position >= start) & (position <= end)
            mel_cost += members.sum() * mel_bound / total_mel
            subsets.append((mel_bound, np.sort(text[members])))
            start = end + 1
        text_parts = _split_text(subsets, num_buckets - groups, text_bound)
        text_cost = TEXT_COST_WEIGHT * sum(len(part) * bound for _, bound, part in text_parts) / total_text
        if mel_cost + text_cost < best_cost - 1e-12:
            best_cost = mel_cost + text_cost
            buckets = [Bucket(bound, mel_bound, batch_size_for(mel_bound, params)) for mel_bound, bound, _ in text_parts]
            best_plan = buckets
    return BucketPlan(tuple(sorted(best_plan, key=lambda b: (b.mel_frames, b.text_length))), params)


def _backtrack(previous: np.ndarray, k: int, b: int) -> list[int]:
    """Last candidate index of each mel group for the DP solution with k + 1 groups ending at b."""
    ends = []
    while k >= 0 and b >= 0:
        ends.append(b)
        b = int(previous[k, b])
        k -= 1
    return ends[::-1]


def _split_text(subsets: list[tuple[int, np.ndarray]], extra: int, text_bound) -> list[tuple[int, int, np.ndarray]]:
    """Greedily split groups by a text threshold (``extra`` times), each time where it saves most padding.

    ``subsets`` holds (mel bound, sorted text lengths of members); returns (mel bound, text bound, members).
    """
    parts = [(mel_bound, text_bound(int(lengths[-1])), lengths) for mel_bound, lengths in subsets]
    for _ in range(extra):
        best_saving, best_index, best_split = 0.0, -1, None
        for index, (mel_bound, bound, lengths) in enumerate(parts):
            # thresholds at multiples of TEXT_MULTIPLE strictly inside the part's range
            for threshold in range(_round_up(int(lengths[0]), TEXT_MULTIPLE), bound, TEXT_MULTIPLE):
                lower = int(np.searchsorted(lengths, threshold, side="right"))
                if lower == 0 or lower == len(lengths):
                    continue
                upper_bound = text_bound(int(lengths[-1]))
                saving = len(lengths) * bound - (lower * threshold + (len(lengths) - lower) * upper_bound)
                if saving > best_saving:
                    best_saving, best_index, best_split = saving, index, (threshold, lower)
        if best_index < 0:
            break
        mel_bound, bound, lengths = parts.pop(best_index)
        threshold, lower = best_split
        parts.insert(best_index, (mel_bound, bound, lengths[lower:]))
        parts.insert(best_index, (mel_bound, threshold, lengths[:lower]))
    return parts


def plan_from_config(data_cfg: Any, text_lengths: Sequence[int], mel_lengths: Sequence[int]) -> BucketPlan:
    return plan_buckets(text_lengths, mel_lengths, BucketParams.from_config(data_cfg))


def log_misfits(plan: BucketPlan, ids: Sequence[str], text_lengths: Sequence[int], mel_lengths: Sequence[int],
                split: str = "") -> list[str]:
    """Log (count + ids) the entries no bucket holds; they are skipped, never truncated."""
    misfits = plan.misfits(ids, text_lengths, mel_lengths)
    if misfits:
        shown = ", ".join(misfits[:20]) + (" ..." if len(misfits) > 20 else "")
        logger.warning("%d %sutterance(s) exceed data.max_text_length=%d / data.max_mel_frames=%d and are skipped "
                       "(not truncated): %s", len(misfits), f"{split} " if split else "",
                       plan.params.max_text_length, plan.params.max_mel_frames, shown)
    return misfits

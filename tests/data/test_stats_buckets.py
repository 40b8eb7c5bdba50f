"""Bucket plans and length statistics on the real lengths of the bundled clips."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import soundfile

from myxtts.data.buckets import (BucketParams, BucketPlan, log_misfits, plan_buckets, plan_from_config,
                                 quantile_boundaries)
from myxtts.data.corpus import read_corpus
from myxtts.data.stats import format_stats, length_stats, percentiles


@pytest.fixture(scope="module")
def real_lengths(bundled_corpus: Path) -> tuple[list[str], np.ndarray, np.ndarray]:
    entries = read_corpus(bundled_corpus, "ljspeech").entries
    text = np.array([len(e.text) + 2 for e in entries])  # characters + bos/eos
    mel = np.array([1 + soundfile.info(str(e.audio_path)).frames // 256 for e in entries])
    return [e.id for e in entries], text, mel


def params(**changes) -> BucketParams:
    base = BucketParams(fixed=False, num_buckets=4, bucket_multiple=8, max_text_length=192, max_mel_frames=880,
                        batch_size=8, batch_frames=2400, min_batch_size=1)
    return dataclasses.replace(base, **changes)


def test_bucket_plan_invariants(real_lengths) -> None:
    _, text, mel = real_lengths
    p = params()
    plan = plan_buckets(text, mel, p)
    assert 1 <= len(plan) <= p.num_buckets
    for bucket in plan.buckets:
        assert bucket.mel_frames % p.bucket_multiple == 0 or bucket.mel_frames == p.max_mel_frames
        assert bucket.mel_frames <= p.max_mel_frames and bucket.text_length <= p.max_text_length
        assert bucket.text_length % 8 == 0 or bucket.text_length == p.max_text_length
        assert bucket.batch_size == min(max(p.batch_frames // bucket.mel_frames, p.min_batch_size), p.batch_size)
    assigned = plan.assign(text, mel)
    assert (assigned >= 0).all()
    for index, bucket in enumerate(plan.buckets):  # every bucket is used and its bounds are tight
        members = assigned == index
        assert members.any()
        assert mel[members].max() > bucket.mel_frames - p.bucket_multiple
        assert text[members].max() > bucket.text_length - 8


def test_refined_plan_is_at_least_as_full_as_quantile_boundaries(real_lengths) -> None:
    _, text, mel = real_lengths
    p = params(num_buckets=4)
    plan = plan_buckets(text, mel, p)
    bounds = quantile_boundaries(mel, p.num_buckets, p.bucket_multiple, p.max_mel_frames)
    assignment = np.searchsorted(bounds, mel)
    quantile_padded_mel = sum(bounds[i] for i in assignment)
    report = plan.fill(text, mel)
    assert report.padded_mel_frames <= quantile_padded_mel * 1.05  # text splits may trade a little mel
    assert report.mel_fill > mel.sum() / (len(mel) * 880)  # far better than fixed padding
    assert report.real_mel_frames == mel.sum() and report.num_skipped == 0


def test_more_shapes_fill_better(real_lengths) -> None:
    _, text, mel = real_lengths
    fills = [plan_buckets(text, mel, params(num_buckets=n)).fill(text, mel).mel_fill for n in (1, 2, 4, 8)]
    assert fills == sorted(fills)
    assert fills[-1] > 0.9


def test_fixed_mode_is_one_shape_and_reports_misfits(real_lengths, caplog) -> None:
    ids, text, mel = real_lengths
    cap = int(np.sort(mel)[-3])  # the two longest clips do not fit
    cap -= cap % 2
    p = params(fixed=True, max_mel_frames=cap, batch_size=4)
    plan = plan_buckets(text, mel, p)
    assert [(b.text_length, b.mel_frames, b.batch_size) for b in plan.buckets] == [(192, cap, 4)]
    expected = [ids[i] for i in np.flatnonzero(mel > cap)]
    assert expected and plan.misfits(ids, text, mel) == expected
    with caplog.at_level("WARNING"):
        assert log_misfits(plan, ids, text, mel, split="train") == expected
    assert str(len(expected)) in caplog.text and expected[0] in caplog.text
    assert plan.fill(text, mel).num_skipped == len(expected)


def test_bucket_mode_skips_entries_above_max(real_lengths) -> None:
    ids, text, mel = real_lengths
    cap = int(np.sort(mel)[-2]) // 8 * 8
    plan = plan_buckets(text, mel, params(max_mel_frames=cap))
    assert all(b.mel_frames <= cap for b in plan.buckets)
    assert plan.misfits(ids, text, mel) == [ids[i] for i in np.flatnonzero(mel > cap)]


def test_plan_save_load_roundtrip(tmp_path: Path, real_lengths, make_config) -> None:
    _, text, mel = real_lengths
    cfg = make_config(data={"num_buckets": 3, "batch_frames": 3000})
    plan = plan_from_config(cfg.data, text, mel)
    plan.save(tmp_path / "plan.json")
    loaded = BucketPlan.load(tmp_path / "plan.json")
    assert loaded == plan and loaded.params.batch_frames == 3000
    assert "buckets (" in loaded.describe()


def test_plan_needs_one_fitting_utterance() -> None:
    with pytest.raises(ValueError, match="max_mel_frames"):
        plan_buckets([10], [5000], params())


def test_percentiles_and_length_stats(real_lengths) -> None:
    _, text, mel = real_lengths
    row = percentiles(mel)
    assert row["max"] == mel.max() and row["p50"] == pytest.approx(np.percentile(mel, 50), abs=0.01)
    assert row["p50"] <= row["p90"] <= row["p95"] <= row["p99"] <= row["max"]
    report = length_stats(text, mel, params(), shapes=3, reduction_factor=2)
    assert report["suggested"]["max_mel_frames"] >= mel.max() and report["suggested"]["max_mel_frames"] % 8 == 0
    assert report["suggested"]["max_text_length"] >= text.max()
    assert report["buckets"]["fill"]["num_shapes"] <= 3
    assert report["buckets"]["fill"]["mel_fill"] > report["fixed"]["fill"]["mel_fill"]
    text_table = format_stats(report)
    assert "p99" in text_table and "suggested data.max_mel_frames" in text_table and "mel fill" in text_table
    with pytest.raises(ValueError, match="No lengths"):
        length_stats([], [], params())


@pytest.mark.parametrize("replicas", [2, 3, 4])
def test_replica_plans_split_the_frame_budget_and_divide_evenly(real_lengths, replicas) -> None:
    """Frame-budget batch sizes (7, 5, 3, 2 on one device) never divided by 2 replicas; per-replica sizes do."""
    _, text, mel = real_lengths
    single, split = plan_buckets(text, mel, params()), plan_buckets(text, mel, params(replicas=replicas))
    assert [b.batch_size for b in single.buckets] != [b.batch_size for b in split.buckets] or replicas == 1
    assert any(b.batch_size % replicas for b in single.buckets)  # the plan that could not run on N replicas
    for bucket in split.buckets:
        per_replica = bucket.batch_size // replicas
        assert bucket.batch_size % replicas == 0 and per_replica >= 1
        # each device's frames stay within its share of the budget (or it carries the one row it must)
        assert per_replica * bucket.mel_frames <= max(2400 // replicas, bucket.mel_frames)

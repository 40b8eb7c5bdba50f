"""``myxtts prepare``: validate every clip once, compute features in batches, write a sharded cache.

Each clip is checked (audio decodes, finite, duration within data.min/max_duration, not silent, text
encodes) and either accepted or written to ``rejected.csv`` with a named reason. Accepted clips get
their log mel computed with ``MelFrontend.batch`` and are written in shards of
``data.cache_shard_size`` utterances (see ``myxtts.data.cache`` for the layout).

Crash safety: the old manifest is deleted before anything else is written, every shard and the
manifest are written to a temporary name and renamed, and the manifest (written last) is what makes a
cache valid. A crash therefore leaves no cache that looks valid. A rerun with the same feature hash
reuses the cache; any change of an audio / text / corpus / filter parameter changes the hash and
triggers a rebuild (the reason is reported).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import os
import platform
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

from myxtts.data.buckets import PLAN_FILE, BucketParams, BucketPlan, log_misfits, plan_buckets
from myxtts.data.cache import (MANIFEST_FILE, REJECTED_FILE, SHARD_DIR, VOCAB_FILE, CacheError, FeatureCache,
                               check_manifest, feature_params)
from myxtts.data.corpus import CorpusEntry, Rejection, read_corpus

logger = logging.getLogger(__name__)

MEL_BATCH_CLIPS = 16  # clips per MelFrontend.batch call (one graph call, bounded memory)
FORMAT_VERSION = 1

# Reason codes added by prepare (audio reasons come from AudioError.reason, text ones from TextError.reason)
TOO_SHORT = "too_short"
TOO_LONG = "too_long"
SILENT = "silent"
NON_FINITE = "non_finite"


@dataclass
class PrepareResult:
    cache_dir: Path
    reused: bool
    reason: str  # why the cache was rebuilt ("" when reused)
    manifest: dict[str, Any]
    rejections: list[Rejection] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        m = self.manifest
        lines = []
        if self.reused:
            lines.append(f"Cache is up to date (feature hash {m['feature_hash']}); reused {self.cache_dir} "
                         f"in {self.seconds:.2f} s.")
        else:
            lines.append(f"Built cache {self.cache_dir} in {self.seconds:.1f} s (feature hash {m['feature_hash']}; "
                         "mel stored as float16).")
        lines.append(f"accepted: {m['counts']['accepted']} utterances ({m['hours']:.3f} h; train "
                     f"{len(m['splits']['train'])}, validation {len(m['splits']['validation'])}), "
                     f"speakers: {len(m['speakers'])}")
        by_reason = m["counts"]["rejected_by_reason"]
        lines.append(f"rejected: {m['counts']['rejected']}" + (
            " (" + ", ".join(f"{reason}: {count}" for reason, count in sorted(by_reason.items())) + ")"
            if by_reason else ""))
        if m["counts"]["rejected"]:
            lines.append(f"see {self.cache_dir / REJECTED_FILE} for every rejected line and why")
        return "\n".join(lines)


def prepare(cfg: Any, force: bool = False, progress: bool = True,
            echo: Callable[[str], None] = logger.info) -> PrepareResult:
    """Build (or reuse) the feature cache of ``cfg``; see the module docstring."""
    started = time.perf_counter()
    cache_dir = Path(cfg.cache_dir)
    expected_hash = cfg.feature_hash()
    manifest, problem = check_manifest(cache_dir, expected_hash, feature_params(cfg))
    if manifest is not None and not force:
        _ensure_bucket_plan(cfg, cache_dir)
        return PrepareResult(cache_dir, True, "", manifest, seconds=time.perf_counter() - started)
    reason = "forced rebuild (--force)" if force else problem
    echo(f"Preparing features: {reason}.")
    manifest = _build(cfg, cache_dir, progress)
    rejections = _read_rejections(cache_dir)
    return PrepareResult(cache_dir, False, reason, manifest, rejections, time.perf_counter() - started)


# ---------------------------------------------------------------------------------------------
# validation of one clip
# ---------------------------------------------------------------------------------------------

def validate_clip(entry: CorpusEntry, cfg: Any, text_processor: Any) -> tuple[np.ndarray, list[int]] | Rejection:
    """(waveform [samples] float32, token ids) for a usable clip, else the Rejection saying why."""
    from myxtts.audio import AudioError, load_audio
    from myxtts.text import TextError

    d = cfg.data
    sample_rate = cfg.audio.sample_rate

    def reject(reason: str, detail: str, file: Path | str = entry.audio_path) -> Rejection:
        return Rejection(str(file), entry.line_number, reason, f"line {entry.line_number} ('{entry.id}'): {detail}")

    try:
        waveform = load_audio(entry.audio_path, sample_rate)  # [samples], mono, resampled
    except AudioError as err:
        return reject(err.reason, str(err))
    if not np.all(np.isfinite(waveform)):
        return reject(NON_FINITE, f"{entry.audio_path}: NaN or Inf samples after resampling")
    duration = waveform.shape[0] / sample_rate
    if duration < d.min_duration:
        return reject(TOO_SHORT, f"{entry.audio_path}: {duration:.3f} s is shorter than data.min_duration "
                      f"= {d.min_duration} s")
    if duration > d.max_duration:
        return reject(TOO_LONG, f"{entry.audio_path}: {duration:.3f} s is longer than data.max_duration "
                      f"= {d.max_duration} s")
    peak = float(np.max(np.abs(waveform)))
    peak_db = 20.0 * np.log10(peak) if peak > 0 else -np.inf
    if peak_db < d.silence_threshold_db:
        return reject(SILENT, f"{entry.audio_path}: peak {peak_db:.1f} dBFS is below "
                      f"data.silence_threshold_db = {d.silence_threshold_db} dBFS (silent clip)")
    try:
        tokens = text_processor.encode(entry.text)
    except TextError as err:
        return reject(err.reason, f"text {entry.text!r}: {err}")
    return waveform, list(tokens)


# ---------------------------------------------------------------------------------------------
# building the cache
# ---------------------------------------------------------------------------------------------

class _ShardWriter:
    """Accumulates accepted utterances and writes a shard every ``shard_size`` of them (atomically)."""

    def __init__(self, shard_dir: Path, shard_size: int, n_mels: int) -> None:
        self.shard_dir, self.shard_size, self.n_mels = shard_dir, shard_size, n_mels
        self.pending: list[tuple[str, list[int], np.ndarray, int]] = []
        self.shards: list[dict[str, Any]] = []

    def add(self, utterance_id: str, tokens: list[int], mel: np.ndarray, speaker_id: int) -> None:
        self.pending.append((utterance_id, tokens, mel, speaker_id))
        if len(self.pending) >= self.shard_size:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        name = f"shard-{len(self.shards):05d}.npz"
        ids, tokens, mels, speakers = zip(*self.pending)
        arrays = {
            "ids": np.array(ids, dtype=str),
            "tokens": np.concatenate([np.asarray(t, np.int32) for t in tokens]),
            "token_lengths": np.array([len(t) for t in tokens], np.int32),
            "mel": np.concatenate(mels).astype(np.float16),  # [sum frames, n_mels]
            "mel_lengths": np.array([m.shape[0] for m in mels], np.int32),
            "speaker_ids": np.array(speakers, np.int32),
        }
        path = self.shard_dir / name
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as handle:
            np.savez(handle, **arrays)
        os.replace(tmp, path)  # atomic rename: a shard is either complete or absent
        self.shards.append({"file": name, "count": len(ids), "frames": int(arrays["mel_lengths"].sum()),
                            "bytes": path.stat().st_size})
        self.pending = []


def _build(cfg: Any, cache_dir: Path, progress: bool) -> dict[str, Any]:
    from tqdm import tqdm

    from myxtts.audio import MelFrontend
    from myxtts.text import TextProcessor

    d = cfg.data
    cache_dir.mkdir(parents=True, exist_ok=True)
    (cache_dir / MANIFEST_FILE).unlink(missing_ok=True)  # invalidate first: a crash leaves no valid-looking cache
    shard_dir = cache_dir / SHARD_DIR
    shard_dir.mkdir(exist_ok=True)
    for old in shard_dir.glob("shard-*"):
        old.unlink()
    corpus = read_corpus(cfg.corpus_path, d.corpus_format, language=d.language)
    rejections = list(corpus.rejections)
    text_processor = TextProcessor(cfg.text)
    frontend = MelFrontend(cfg.audio)
    writer = _ShardWriter(shard_dir, d.cache_shard_size, cfg.audio.n_mels)
    speakers: dict[str, int] = {}  # speaker name -> id, in order of first accepted utterance
    accepted: list[tuple[str, int, int]] = []  # (id, token count, mel frames)
    total_samples = 0
    batch: list[tuple[CorpusEntry, np.ndarray, list[int]]] = []

    def flush_batch() -> None:
        mels = frontend.batch([wave for _, wave, _ in batch])  # each [frames, n_mels] float32
        for (entry, _, tokens), mel in zip(batch, mels):
            speaker_id = speakers.setdefault(entry.speaker, len(speakers))
            writer.add(entry.id, tokens, mel, speaker_id)
            accepted.append((entry.id, len(tokens), mel.shape[0]))
        batch.clear()

    for entry in tqdm(corpus.entries, desc="prepare", unit="clip", disable=not progress, leave=False):
        checked = validate_clip(entry, cfg, text_processor)
        if isinstance(checked, Rejection):
            rejections.append(checked)
            continue
        waveform, tokens = checked
        total_samples += waveform.shape[0]
        batch.append((entry, waveform, tokens))
        if len(batch) >= MEL_BATCH_CLIPS:
            flush_batch()
    if batch:
        flush_batch()
    writer.flush()
    if len(accepted) <= d.validation_size:
        raise CacheError(f"Only {len(accepted)} utterance(s) were accepted from {cfg.corpus_path} "
                         f"({len(rejections)} rejected, see {cache_dir / REJECTED_FILE}); data.validation_size = "
                         f"{d.validation_size} would leave none for training.")
    _write_rejections(cache_dir, rejections)
    text_processor.vocabulary.save(cache_dir / VOCAB_FILE)
    ids = [utterance_id for utterance_id, _, _ in accepted]
    validation = set(validation_ids(ids, d.validation_size))
    counts = Counter(r.reason for r in rejections)
    manifest = {
        "format_version": FORMAT_VERSION,
        "feature_hash": cfg.feature_hash(),
        "feature_params": feature_params(cfg),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": _versions(),
        "corpus": str(cfg.corpus_path),
        "counts": {"accepted": len(accepted), "rejected": len(rejections), "rejected_by_reason": dict(counts)},
        "hours": total_samples / cfg.audio.sample_rate / 3600.0,
        "speakers": list(speakers),
        "n_mels": cfg.audio.n_mels,
        "mel_dtype": "float16",
        "vocab_size": len(text_processor.vocabulary),
        "splits": {"train": [i for i in ids if i not in validation], "validation": [i for i in ids if i in validation]},
        "shards": writer.shards,
    }
    _write_bucket_plan(cfg, cache_dir, np.array([a[1] for a in accepted]), np.array([a[2] for a in accepted]), ids)
    _atomic_write(cache_dir / MANIFEST_FILE, json.dumps(manifest, indent=1))  # last: makes the cache valid
    return manifest


def validation_ids(ids: list[str], count: int) -> list[str]:
    """``count`` ids held out deterministically: the smallest by a hash of the id (spread over the corpus,
    stable when other clips are added or rejected)."""
    ranked = sorted(ids, key=lambda i: hashlib.sha256(i.encode("utf-8")).hexdigest())
    return ranked[:count]


def _write_bucket_plan(cfg: Any, cache_dir: Path, text: np.ndarray, mel: np.ndarray, ids: list[str]) -> BucketPlan:
    plan = plan_buckets(text, mel, BucketParams.from_config(cfg.data))
    log_misfits(plan, ids, text, mel)
    plan.save(cache_dir / PLAN_FILE)
    return plan


def _ensure_bucket_plan(cfg: Any, cache_dir: Path) -> None:
    """Keep bucket_plan.json in step with the data settings (they are not part of the feature hash)."""
    path = cache_dir / PLAN_FILE
    if path.is_file():
        try:
            if BucketPlan.load(path).params == BucketParams.from_config(cfg.data):
                return
        except (ValueError, KeyError, TypeError):
            pass
    cache = FeatureCache.load(cfg, lengths_only=True)
    _write_bucket_plan(cfg, cache_dir, cache.token_lengths, cache.mel_lengths, cache.ids)


def _write_rejections(cache_dir: Path, rejections: list[Rejection]) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["file", "line", "reason", "message"])
    for r in sorted(rejections, key=lambda r: r.line):
        writer.writerow([r.file, r.line, r.reason, r.message])
    _atomic_write(cache_dir / REJECTED_FILE, buffer.getvalue())


def _read_rejections(cache_dir: Path) -> list[Rejection]:
    with open(cache_dir / REJECTED_FILE, encoding="utf-8", newline="") as handle:
        return [Rejection(row["file"], int(row["line"]), row["reason"], row["message"])
                for row in csv.DictReader(handle)]


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _versions() -> dict[str, str]:
    import soundfile
    import tensorflow as tf

    from myxtts import __version__

    return {"myxtts": __version__, "tensorflow": tf.__version__, "numpy": np.__version__,
            "soundfile": soundfile.__version__, "python": platform.python_version()}

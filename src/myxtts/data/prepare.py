"""``myxtts prepare``: validate every clip once, compute features, write the cache; later runs update it.

Each clip is checked (audio decodes, finite, duration within data.min/max_duration, not silent, text
encodes in the clip's language) and either accepted or written to ``rejected.csv`` with a named
reason. Accepted clips get their log mel computed with ``MelFrontend`` and their F0 track with
``myxtts.f0.tracker``, written to one file per utterance (see ``myxtts.data.cache`` for the layout). Clips are
processed by ``workers`` threads (decode, resampling and the TF ops all release the GIL, so the cores are busy in
parallel).
Then the per-bin mean / std of the train split's log mels (``myxtts.data.mel_stats``) are computed
from the cached utterance files (float64, one file at a time) and stored in the manifest; an update
recomputes them unless the train split's files are exactly the previous ones.

Freshness: the manifest records a fingerprint per clip (path, size, modification time, text,
speaker, language; ``myxtts.data.fingerprint``) and of the whole corpus. A rerun compares them:
nothing changed -> the cache is reused (no audio read); otherwise only the new or changed clips are
processed, removed ones dropped, and the report says how many of each. Any change of an audio / text
/ corpus / filter parameter changes the feature hash: the cache of the other parameters is never replaced unasked
(``CacheParametersChanged`` names the changed keys); ``rebuild=True`` (``myxtts prepare --rebuild``) rebuilds
everything, or another ``data.cache_dir`` keeps both.

What it writes into: ``cfg.cache_dir`` must be new, empty or a cache prepare made (``outputs.check_cache_dir``,
before any lock or file): a folder of other files (a corpus prepared into itself) is refused, naming a few of them.
A new cache is marked (``.myxtts.json``), and only files at the names prepare gives its own are ever deleted
(``myxtts.data.after_manifest``).

Crash safety (write order, each stage marked by ``myxtts.durable.reached``): the journal first records
the clips reused from the previous cache, then each processed clip once its files are written
(``myxtts.data.journal``); then ``rejected.csv``, the vocabulary (same for one feature hash), the new index
under a name derived from its content (so it never replaces the index the current manifest names), the mel
statistics, and last the manifest, which records the index's sha256 and the bucket plan. Every file is written
to a temporary name and renamed; the index, the manifest and the small files are flushed to disk (fsync)
before their rename, the new utterance files all together just before the manifest. Only after it:
``bucket_plan.json``, the journal's deletion, and the deletion of files the new manifest no longer names.
Until the manifest lands the previous cache loads as it was (``--force`` included); a kill after it leaves the
new one, whose leftovers the next run clears. A rerun after any kill redoes only the clips the journal does
not hold. A rebuild for other parameters (``rebuild``) deletes the old manifest first: a crash must not leave a
manifest of the old parameters over files of the new ones.

Locks (``myxtts.locks``): one ``prepare`` writes a cache at a time (a second one waits, then finds it up
to date), and none changes a file while a training holds the cache's reader lock (it fails, naming it).
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np
import soundfile

from myxtts import __version__, f0
from myxtts.cache_files import JOURNAL_FILE, MANIFEST_FILE, REJECTED_FILE, VOCAB_FILE
from myxtts.data.after_manifest import after_manifest, ensure_bucket_plan, finish_stopped_update
from myxtts.data.buckets import BucketParams, log_misfits, plan_buckets
from myxtts.data.cache import audio_file, read_utterance
from myxtts.data.cache_manifest import (FORMAT_VERSION, CacheError, changed_parameters, check_manifest, feature_params,
                                        load_index, read_manifest, save_index, write_manifest)
from myxtts.data.clips import Clip, Verdicts, known_verdicts, process_clips, rejection_detail
from myxtts.data.corpus import Rejection, read_config_corpus
from myxtts.durable import reached, write_durably
from myxtts.data.fingerprint import CorpusDiff, clip_fingerprint, corpus_fingerprint, diff_corpus
from myxtts.data.language import TextProcessors
from myxtts.data.journal import PrepareJournal
from myxtts.data.mel_stats import MelStats, MelStatsAccumulator
from myxtts.data.prepare_result import PrepareResult
from myxtts.data.splits import corpus_summaries, held_out_speaker_names, validation_ids
from myxtts.locks import exclude_cache_readers, lock_cache_for_writing
from myxtts.outputs import CACHE, check_cache_dir, read_marker, write_marker

logger = logging.getLogger(__name__)


class CacheParametersChanged(CacheError):
    """The cache folder holds a cache prepared with other feature parameters; prepare never replaces it unasked."""


def prepare(cfg: Any, force: bool = False, progress: bool = True,
            echo: Callable[[str], None] = logger.info, workers: int | None = None,
            lock_timeout: float | None = None, rebuild: bool = False) -> PrepareResult:
    """Build, update or reuse the feature cache of ``cfg``; see the module docstring.

    ``force``: recompute every clip of a cache of these parameters. ``rebuild``: replace a cache prepared with
    other parameters (else CacheParametersChanged). ``workers``: threads processing clips (default: every core,
    ``os.cpu_count()``). ``lock_timeout``: seconds to wait for another ``prepare`` of the same cache (default: as
    long as it takes), then DirectoryBusyError.
    """
    started = time.perf_counter()
    cache_dir = Path(cfg.cache_dir)
    check_cache_dir(cache_dir)  # before the lock: a folder of other files gets no lock file either
    corpus = read_config_corpus(cfg)  # bad input fails before any lock
    fingerprints = {entry.id: clip_fingerprint(entry) for entry in corpus.entries}
    with lock_cache_for_writing(cache_dir, echo, lock_timeout):  # a second prepare waits, then finds it up to date
        if read_marker(cache_dir) is None:  # a new cache, or one prepared before caches were marked
            write_marker(cache_dir, "prepare", CACHE)
        manifest, problem = check_manifest(cache_dir, cfg.feature_hash(), feature_params(cfg))
        if manifest is None and not rebuild:
            refuse_other_parameters(cfg, cache_dir)
        if manifest is not None and not force:
            if manifest.get("corpus_fingerprint") == corpus_fingerprint(corpus.entries, fingerprints,
                                                                        corpus.rejections):
                ensure_bucket_plan(cfg, cache_dir, manifest)
                finish_stopped_update(cache_dir, manifest)
                return PrepareResult(cache_dir, True, "", manifest, seconds=time.perf_counter() - started)
        with exclude_cache_readers(cache_dir):  # no file changes under a running training
            if manifest is None or force:
                reason = "forced rebuild (--force)" if force else problem
                if manifest is None:  # stale features: a crash must not leave them looking valid
                    (cache_dir / MANIFEST_FILE).unlink(missing_ok=True)
                else:  # --force recomputes every clip; the valid cache stays until the new manifest replaces it
                    (cache_dir / JOURNAL_FILE).unlink(missing_ok=True)
                previous, kept = {}, {}
            else:
                previous, kept = _previous_clips(cache_dir, manifest)
            diff = diff_corpus(corpus.entries, fingerprints, previous)
            if previous:
                reason = f"corpus changed: {diff.describe()}"
            echo(f"Preparing features: {reason}.")
            previous_stats = manifest.get("mel_stats") if previous else None
            manifest = _build(cfg, cache_dir, corpus, fingerprints, previous, kept, diff, progress,
                              workers or os.cpu_count() or 1, previous_stats)
    rejections = _read_rejections(cache_dir)
    return PrepareResult(cache_dir, False, reason, manifest, rejections, time.perf_counter() - started)


def refuse_other_parameters(cfg: Any, cache_dir: Path) -> None:
    """CacheParametersChanged when ``cache_dir``'s manifest was written for another feature hash than ``cfg``'s:
    naming the changed keys, ``--rebuild`` and a new ``data.cache_dir``."""
    previous = read_manifest(cache_dir)
    if previous is None or previous.get("feature_hash") in (None, cfg.feature_hash()):
        return
    changed = "".join(changed_parameters(previous.get("feature_params", {}), feature_params(cfg)))
    raise CacheParametersChanged(
        f"{cache_dir} holds the cache prepared with other parameters (feature hash {previous['feature_hash']} -> "
        f"{cfg.feature_hash()}{changed or ': none of the recorded keys differ, the hash covers more'}; corpus "
        f"{previous.get('corpus')}): `myxtts prepare` never replaces it unasked. Pass --rebuild to replace it, or set "
        "data.cache_dir to a new folder to keep both (e.g. one cache per corpus).")


# ---------------------------------------------------------------------------------------------
# building the cache (incrementally)
# ---------------------------------------------------------------------------------------------

def _previous_clips(cache_dir: Path, manifest: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Clip]]:
    """(manifest ``clips`` table, accepted clips rebuilt from the index) of a usable previous cache."""
    if manifest is None:
        return {}, {}
    index = load_index(cache_dir, manifest)
    offsets = np.concatenate([[0], np.cumsum(index["token_lengths"], dtype=np.int64)])
    table = manifest.get("clips", {})
    kept = {}
    for row, utterance_id in enumerate(str(i) for i in index["ids"]):
        file = str(index["files"][row])
        if (cache_dir / file).is_file() and (cache_dir / audio_file(file)).is_file():  # else processed again
            kept[utterance_id] = Clip(index["tokens"][offsets[row]:offsets[row + 1]].tolist(),
                                       int(index["mel_lengths"][row]), int(table[utterance_id]["samples"]), file)
    return table, kept


@dataclass
class _Accepted:
    """The accepted utterances in corpus order, their speaker / language ids and the train / validation split."""

    entries: list[Any]
    speakers: dict[str, int]  # name -> id, in order of first accepted utterance
    languages: dict[str, int]
    single_ids: list[str]  # the only clip of their speaker: cached; trained on by the single-clip policy "slice"
    validation: set[str]
    held_out: set[str] = field(default_factory=set)  # clips of the held-out speakers: neither trained nor validated
    held_out_speakers: list[str] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        return [entry.id for entry in self.entries]

    @property
    def train_ids(self) -> list[str]:
        return [i for i in self.ids if i not in self.validation and i not in self.held_out]

    @property
    def held_out_ids(self) -> list[str]:
        return [i for i in self.ids if i in self.held_out]

    @property
    def validation_ids(self) -> list[str]:
        return [i for i in self.ids if i in self.validation]


def _build(cfg: Any, cache_dir: Path, corpus: Any, fingerprints: dict[str, str], previous: dict[str, Any],
           kept: dict[str, Clip], diff: CorpusDiff, progress: bool, workers: int,
           previous_stats: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every clip's verdict, then rejected.csv, the vocabulary, the index, the train split's mel statistics and,
    last, the manifest (it makes the cache valid); then the bucket plan file, and the files it no longer names
    go. See the module docstring for why in this order."""
    feature_hash = cfg.feature_hash()
    cache_dir.mkdir(parents=True, exist_ok=True)
    processors = TextProcessors(cfg)
    journal = PrepareJournal(cache_dir, feature_hash)
    finished = journal.reusable(cache_dir, fingerprints)  # clips a stopped prepare completed: not redone
    verdicts = known_verdicts(corpus.entries, previous, kept, diff, finished, cache_dir)
    journal.open(keep=bool(finished))
    try:
        journal.settled({i: verdicts.clips[i] for i in verdicts.reused if i in verdicts.clips},
                        {i: previous[i]["rejected"] for i in verdicts.reused if i in verdicts.rejections}, fingerprints)
        reached("reused")
        process_clips(cfg, cache_dir, verdicts, fingerprints, processors, journal, progress=progress,
                      workers=workers)
    finally:
        journal.close(delete=False)
    clips = verdicts.clips
    rejections = list(corpus.rejections) + [verdicts.rejections[e.id] for e in corpus.entries
                                            if e.id in verdicts.rejections]
    accepted = _accepted(cfg, cache_dir, corpus.entries, clips, len(rejections))
    _write_rejections(cache_dir, rejections)
    reached("rejections")
    _write_vocabulary(cache_dir, processors.vocabulary)
    reached("vocabulary")
    index = _index(accepted, clips)
    index_entry = save_index(cache_dir, index)  # a new name: the current manifest's index stays
    reached("index")
    mel_stats = train_mel_stats(cache_dir, [clips[i].file for i in accepted.train_ids], cfg.audio.n_mels, workers,
                                previous_stats)
    reached("mel_stats")
    plan = plan_buckets(index["token_lengths"], index["mel_lengths"], BucketParams.from_config(cfg.data))
    log_misfits(plan, accepted.ids, index["token_lengths"], index["mel_lengths"])
    manifest = _manifest(cfg, corpus, fingerprints, diff, verdicts, accepted, rejections, workers=workers,
                         vocab_size=len(processors.vocabulary), mel_stats=mel_stats, index_entry=index_entry)
    manifest["bucket_plan"] = plan.to_dict()
    reused = set(verdicts.reused)  # their files are on disk since the manifest that named them
    new_files = [file for i in accepted.ids if i not in reused for file in (clips[i].file, audio_file(clips[i].file))]
    write_manifest(cache_dir, manifest, new_files, workers)  # last: makes the new cache valid, the old one superseded
    reached("manifest")
    after_manifest(cache_dir, manifest, plan)  # the plan file, the journal's deletion, the old files' deletion
    return manifest


def _accepted(cfg: Any, cache_dir: Path, entries: list[Any], clips: dict[str, Clip], rejected: int) -> _Accepted:
    """The accepted entries, their ids and split; an error when too few are left to train on."""
    accepted = [e for e in entries if e.id in clips]  # corpus order
    speakers: dict[str, int] = {}
    languages: dict[str, int] = {}
    for entry in accepted:
        speakers.setdefault(entry.speaker, len(speakers))
        languages.setdefault(entry.language, len(languages))
    clips_per_speaker = Counter(e.speaker for e in accepted)
    single_ids = [e.id for e in accepted if clips_per_speaker[e.speaker] == 1]
    held_out_speakers = held_out_speaker_names(cfg, accepted, clips)
    held_out = {e.id for e in accepted if e.speaker in set(held_out_speakers)}
    single = set(single_ids)
    trainable = [e.id for e in accepted if e.id not in held_out
                 and (e.id not in single or cfg.data.single_clip_policy == "slice")]
    # validation only among clips that have a reference in another clip (single-clip policy: see data/pipeline.py)
    with_reference = [e.id for e in accepted if e.id not in single and e.id not in held_out]
    if len(trainable) <= cfg.data.validation_size or len(with_reference) < cfg.data.validation_size:
        raise CacheError(f"Only {len(accepted)} utterance(s) were accepted from {cfg.corpus_path} "
                         f"({rejected} rejected, see {cache_dir / REJECTED_FILE}; {len(held_out)} of held-out "
                         f"speakers, {len(single)} the only clip of their speaker); data.validation_size = "
                         f"{cfg.data.validation_size} would leave none for training (validation takes clips whose "
                         "speaker has another clip; single-clip speakers train only with data.single_clip_policy: "
                         "slice).")
    validation = set(validation_ids(with_reference, cfg.data.validation_size))
    return _Accepted(accepted, speakers, languages, single_ids, validation, held_out, held_out_speakers)


def _index(accepted: _Accepted, clips: dict[str, Clip]) -> dict[str, np.ndarray]:
    """The index's columns, one row per accepted utterance (``tokens``: every utterance's, concatenated)."""
    ids = accepted.ids
    token_lists = [clips[i].tokens for i in ids]
    return {
        "ids": np.array(ids, dtype=str), "files": np.array([clips[i].file for i in ids], dtype=str),
        "tokens": np.concatenate([np.asarray(t, np.int32) for t in token_lists]),
        "token_lengths": np.array([len(t) for t in token_lists], np.int32),
        "mel_lengths": np.array([clips[i].frames for i in ids], np.int32),
        "speaker_ids": np.array([accepted.speakers[e.speaker] for e in accepted.entries], np.int32),
        "language_ids": np.array([accepted.languages[e.language] for e in accepted.entries], np.int32),
        "corpus_ids": np.array([e.corpus for e in accepted.entries], np.int32),
    }


def _manifest(cfg: Any, corpus: Any, fingerprints: dict[str, str], diff: CorpusDiff, verdicts: Verdicts,
              accepted: _Accepted, rejections: list[Rejection], *, workers: int, vocab_size: int,
              mel_stats: dict[str, Any], index_entry: dict[str, Any]) -> dict[str, Any]:
    """The manifest: what the cache holds and how it was built; its ``clips`` table is what the next run diffs."""
    ids, clips, todo, seconds = accepted.ids, verdicts.clips, verdicts.todo, verdicts.seconds
    table: dict[str, Any] = {i: {"fingerprint": fingerprints[i], "file": clips[i].file, "samples": clips[i].samples}
                             for i in ids}
    for utterance_id, rejection in verdicts.rejections.items():
        table[utterance_id] = {"fingerprint": fingerprints[utterance_id],
                               "rejected": [rejection.reason, rejection.file,
                                            rejection_detail(utterance_id, rejection)]}
    single_ids = accepted.single_ids
    return {
        "format_version": FORMAT_VERSION,
        "pitch_tracker": f0.TRACKER,
        "feature_hash": cfg.feature_hash(),
        "feature_params": feature_params(cfg),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": _versions(),
        "corpus": str(cfg.corpus_path),
        "corpus_fingerprint": corpus_fingerprint(corpus.entries, fingerprints, corpus.rejections),
        "counts": {"accepted": len(ids), "rejected": len(rejections),
                   "rejected_by_reason": dict(Counter(r.reason for r in rejections)),
                   "single_clip": {"speakers": len(single_ids), "clips": len(single_ids)}},
        "update": {"processed": len(todo), "added": len(diff.added), "changed": len(diff.changed),
                   "removed": len(diff.removed), "reused": len(corpus.entries) - len(todo), "resumed": verdicts.resumed,
                   "seconds": round(seconds, 3), "workers": workers,
                   "clips_per_second": round(len(todo) / seconds, 1) if todo and seconds > 0 else None},
        "single_clip_ids": single_ids,
        "single_clip_policy": cfg.data.single_clip_policy,
        "held_out_speakers": accepted.held_out_speakers,
        "corpora": corpus_summaries(cfg, accepted.entries, clips),
        "hours": sum(clips[i].samples for i in ids) / cfg.audio.sample_rate / 3600.0,
        "speakers": list(accepted.speakers),
        "languages": list(accepted.languages),
        "n_mels": cfg.audio.n_mels,
        "mel_dtype": "float16",
        "vocab_size": vocab_size,
        "splits": {"train": accepted.train_ids, "validation": accepted.validation_ids,
                   "held_out": accepted.held_out_ids},
        "mel_stats": mel_stats,
        "index": index_entry,
        "clips": table,
    }


def train_mel_stats(cache_dir: Path, files: list[str], n_mels: int, workers: int = 1,
                    previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """The manifest's ``mel_stats``: per-bin mean / std over every frame of the utterance ``files`` (the train
    split, relative to ``cache_dir``), float64, streamed file by file (memory flat in the corpus size), plus a
    digest of ``files``. ``previous`` (the last manifest's entry) is reused when the digest is equal: an
    utterance file's name covers its clip's fingerprint and the feature hash, so equal names are equal mels."""
    digest = hashlib.sha256("\n".join(files).encode("utf-8")).hexdigest()[:24]
    if previous and previous.get("files_digest") == digest:
        try:
            if MelStats.from_dict(previous).n_mels == n_mels:
                return previous
        except ValueError:
            pass  # malformed: recompute
    accumulator = MelStatsAccumulator(n_mels)
    chunk = 64 * max(1, workers)  # files in flight: bounded, whatever the corpus size
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:  # reads and float64 moments overlap
        for start in range(0, len(files), chunk):
            # map yields in order: the merge order, hence the float64 result, does not depend on thread timing
            for moments in pool.map(lambda file: MelStatsAccumulator.moments(read_utterance(cache_dir / file)[1]),
                                    files[start:start + chunk]):
                accumulator.merge(*moments)
    return {**accumulator.result().to_dict(), "split": "train", "files_digest": digest}


def _write_rejections(cache_dir: Path, rejections: list[Rejection]) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["file", "line", "reason", "message"])
    for r in sorted(rejections, key=lambda r: r.line):
        writer.writerow([r.file, r.line, r.reason, r.message])
    write_durably(cache_dir / REJECTED_FILE, buffer.getvalue())


def _write_vocabulary(cache_dir: Path, vocabulary: Any) -> None:
    """vocab.json, durably, and only when it differs (one feature hash has one vocabulary)."""
    path, text = cache_dir / VOCAB_FILE, json.dumps(vocabulary.to_dict(), ensure_ascii=False, indent=1)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        write_durably(path, text)


def _read_rejections(cache_dir: Path) -> list[Rejection]:
    with open(cache_dir / REJECTED_FILE, encoding="utf-8", newline="") as handle:
        return [Rejection(row["file"], int(row["line"]), row["reason"], row["message"])
                for row in csv.DictReader(handle)]


def _versions() -> dict[str, str]:
    import tensorflow as tf  # only when a manifest is written: an up-to-date prepare never loads TensorFlow

    return {"myxtts": __version__, "tensorflow": tf.__version__, "numpy": np.__version__,
            "soundfile": soundfile.__version__, "python": platform.python_version()}

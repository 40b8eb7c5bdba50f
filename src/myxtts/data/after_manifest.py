"""What ``prepare`` does once its manifest has landed (see ``myxtts.data.prepare``): write ``bucket_plan.json`` from
the manifest's plan, delete the journal, delete the files the manifest no longer names; and, on a later run,
finish those steps for a prepare that was stopped after its manifest.

Only files at the names prepare gives its own (``cache.written_by_prepare``: utterance and audio files, indexes, its
temporary files) are ever deleted, and only in a folder that is a myxtts cache (``outputs.check_cache_dir``, asked
before prepare writes anything): a file someone else put there stays, whatever its name's folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from myxtts.cache_files import INDEX_FILE, INDEX_PREFIX, JOURNAL_FILE, PLAN_FILE, UTTERANCE_DIR
from myxtts.data.buckets import BucketParams, BucketPlan, log_misfits, plan_buckets
from myxtts.data.cache import FeatureCache, audio_file, written_by_prepare
from myxtts.data.cache_manifest import index_path
from myxtts.durable import reached
from myxtts.locks import CACHE_READ_LOCK, DirectoryLock


def after_manifest(cache_dir: Path, manifest: dict[str, Any], plan: BucketPlan) -> None:
    """The steps after the manifest, in order; each stopped half-way is finished by the next run."""
    plan.save(cache_dir / PLAN_FILE)  # a copy of the manifest's plan: a kill before it is repaired on rerun
    reached("bucket_plan")
    (cache_dir / JOURNAL_FILE).unlink(missing_ok=True)  # the manifest now holds everything it recorded
    reached("journal")
    remove_unreferenced(cache_dir, manifest)
    reached("cleanup")


def remove_unreferenced(cache_dir: Path, manifest: dict[str, Any]) -> None:
    """Delete the files prepare wrote that ``manifest`` does not name: utterance and audio files, other indexes,
    temporary files of a stopped write. The indexes go last: an index besides the manifest's marks a cleanup still
    to finish (``finish_stopped_update``)."""
    referenced = {file for entry in manifest["clips"].values() if "file" in entry
                  for file in (entry["file"], audio_file(entry["file"]))}
    for path in (cache_dir / UTTERANCE_DIR).glob("*/*"):
        relative = path.relative_to(cache_dir).as_posix()
        if relative not in referenced and written_by_prepare(relative) and not path.is_symlink() and path.is_file():
            path.unlink(missing_ok=True)
    for path in _leftovers(cache_dir, manifest):
        path.unlink(missing_ok=True)


def _leftovers(cache_dir: Path, manifest: dict[str, Any]) -> list[Path]:
    """Temporary files prepare wrote and indexes other than the manifest's, at the cache's top level."""
    current = index_path(cache_dir, manifest)
    found = [*cache_dir.glob("*.tmp"), *cache_dir.glob(f"{INDEX_PREFIX}*.npz"), cache_dir / INDEX_FILE]
    return sorted(path for path in found if path != current and written_by_prepare(path.name)
                  and not path.is_symlink() and path.is_file())


def finish_stopped_update(cache_dir: Path, manifest: dict[str, Any]) -> None:
    """An up-to-date cache whose last prepare stopped after its manifest (its journal or other indexes are still
    there): finish that prepare's cleanup, unless a training reads the cache (then the next update does it)."""
    if not (cache_dir / JOURNAL_FILE).is_file() and not _leftovers(cache_dir, manifest):
        return
    readers = DirectoryLock(cache_dir, CACHE_READ_LOCK)
    if not readers.try_acquire():
        return
    try:
        (cache_dir / JOURNAL_FILE).unlink(missing_ok=True)
        remove_unreferenced(cache_dir, manifest)
    finally:
        readers.release()


def ensure_bucket_plan(cfg: Any, cache_dir: Path, manifest: dict[str, Any]) -> None:
    """Keep bucket_plan.json in step with the manifest's plan and the data settings (they are not part of the
    feature hash)."""
    path, params = cache_dir / PLAN_FILE, BucketParams.from_config(cfg.data)
    recorded = _plan_or_none(manifest.get("bucket_plan"))
    saved = _plan_or_none(path) if path.is_file() else None
    if saved is not None and saved.params == params and (recorded is None or recorded.params != params
                                                         or saved == recorded):
        return
    if recorded is not None and recorded.params == params:
        recorded.save(path)  # a prepare stopped between its manifest and its plan file
        return
    cache = FeatureCache.load(cfg, lengths_only=True)
    plan = plan_buckets(cache.token_lengths, cache.mel_lengths, params)
    log_misfits(plan, cache.ids, cache.token_lengths, cache.mel_lengths)
    plan.save(path)


def _plan_or_none(source: Any) -> BucketPlan | None:
    """The plan saved at a path or recorded as a dict; None when there is none or it does not read."""
    try:
        return BucketPlan.load(source) if isinstance(source, Path) else (
            BucketPlan.from_dict(source) if source else None)
    except (OSError, ValueError, KeyError, TypeError):
        return None

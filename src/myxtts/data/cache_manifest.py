"""The manifest and index of a prepared cache: what makes a cache valid, and what loading it checks.

Two of the files of ``cfg.cache_dir`` (written by ``myxtts prepare``, format 5; the file names: ``myxtts.cache_files``;
the utterance files they name: ``myxtts.data.cache``):

- ``index-HASH.npz``: per utterance, in corpus order: ``ids`` str, ``files`` str (relative paths),
  ``token_lengths``, ``mel_lengths``, ``speaker_ids``, ``language_ids``, ``corpus_ids`` (int32) and ``tokens`` (flat
  int32). Small (lengths and tokens only): the bucket plan, stats and the pipeline read it, never
  the features. Named by its content (HASH: the first 16 hex digits of its sha256), so a new index
  never replaces the one the current manifest names; the manifest's ``index`` entry records its name
  and full sha256, checked at load;
- ``manifest.json``: counts, hours, speaker and language tables, feature hash, per-split ids, the
  corpus fingerprint and per-clip fingerprints (``clips``), versions, the bucket plan, and ``mel_stats``:
  the per-bin mean / std of the train split's log mels (``myxtts.data.mel_stats``; the pipeline normalises
  with them). Written last and durably (``myxtts.durable``): it makes the cache valid, and until it
  lands the previous manifest and every file it names stay as they were. A cache without a manifest (a
  crash mid-build) is never used, nor one without ``mel_stats`` (format 2: rebuilt by prepare); ``pitch_tracker``
  records the settings of the F0 tracker (``myxtts.f0.TRACKER``): a cache of other settings is rebuilt.

Nothing here reads an utterance file: ``myxtts.data.cache`` (the utterance files and FeatureCache) imports this
module, never the other way round.
"""

from __future__ import annotations

import hashlib
import io
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from myxtts import f0
from myxtts.cache_files import INDEX_FILE, INDEX_PREFIX, MANIFEST_FILE, UTTERANCE_DIR, VOCAB_FILE
from myxtts.durable import fsync_directory, fsync_file, sha256_file, write_durably
from myxtts.data.mel_stats import MelStats, MelStatsError
from myxtts.errors import InputError

SPLITS = ("train", "validation", "held_out")  # held_out: the clips of held-out speakers (zero-shot development)
FORMAT_VERSION = 5  # 5: the F0 track; 4: the audio beside each utterance; 3: mel_stats; 2: one file per utterance


class CacheError(InputError):
    """The cache is missing, incomplete or was computed with other feature parameters."""


def read_manifest(cache_dir: Path) -> dict[str, Any] | None:
    """The manifest of ``cache_dir``; None when it is missing or unreadable (a cache never completed)."""
    path = Path(cache_dir) / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def feature_params(cfg: Any) -> dict[str, Any]:
    """The parameters cfg.feature_hash() covers, flat (stored in the manifest to explain a rebuild)."""
    params: dict[str, Any] = {f"audio.{k}": v for k, v in vars(cfg.audio).items() if k != "griffin_lim_iters"}
    params.update({f"text.{k}": v for k, v in vars(cfg.text).items()})
    d = cfg.data
    params.update({"data.corpus_path": str(cfg.corpus_path), "data.corpus_format": d.corpus_format,
                   "data.language": d.language, "data.min_duration": d.min_duration,
                   "data.max_duration": d.max_duration, "data.silence_threshold_db": d.silence_threshold_db})
    for index, corpus in enumerate(d.corpora):  # what feature_hash covers of each (its weight is not a feature)
        params.update({f"data.corpora[{index}].{key}": (str(cfg.resolve(value)) if key == "path" else value)
                       for key, value in vars(corpus).items() if key != "weight"})
    return params


def check_manifest(cache_dir: Path, expected_hash: str,
                   current_params: dict[str, Any] | None = None) -> tuple[dict[str, Any] | None, str]:
    """(manifest, "") when the cache is complete and its parameters current, else (None, why not).

    The corpus itself (new, edited or removed clips) is compared by ``prepare``; see its fingerprints.
    """
    cache_dir = Path(cache_dir)
    manifest = read_manifest(cache_dir)
    if manifest is None:
        return None, f"no complete cache in {cache_dir} (manifest.json missing)"
    if manifest.get("format_version") != FORMAT_VERSION:
        return None, (f"cache format {manifest.get('format_version')} is not the current format {FORMAT_VERSION} "
                      "(one file per utterance with its F0 track and its audio beside it, the train split's mel "
                      "statistics)")
    tracker = f0.TRACKER  # the settings alone (no TensorFlow): an up-to-date prepare never loads it
    if manifest.get("pitch_tracker") != tracker:
        return None, (f"the F0 tracker's settings changed ({manifest.get('pitch_tracker')} -> {tracker}): "
                      "every clip's pitch track is computed again")
    if manifest.get("feature_hash") != expected_hash:
        changed = "".join(changed_parameters(manifest.get("feature_params", {}), current_params or {}))
        return None, (f"feature hash changed ({manifest.get('feature_hash')} -> {expected_hash}): audio, text, "
                      f"corpus or filter parameters differ from the cached ones{changed}")
    problem = index_problem(cache_dir, manifest)
    if problem:
        return None, problem
    if not (cache_dir / VOCAB_FILE).is_file():
        return None, f"incomplete cache: {cache_dir / VOCAB_FILE} missing"
    try:
        manifest_mel_stats(cache_dir, manifest)
    except CacheError as err:
        return None, str(err)
    return manifest, ""


def index_problem(cache_dir: Path, manifest: dict[str, Any]) -> str:
    """"" when the index the manifest names is there with the content the manifest records, else what is wrong.

    A manifest records the index's sha256; one written without it (an index always named ``index.npz``) is
    checked by size, and the next update of the cache records the hash.
    """
    entry = manifest.get("index", {})
    name = str(entry.get("file", INDEX_FILE)) if isinstance(entry, dict) else ""
    if not name or Path(name).name != name or name in (".", ".."):
        return f"{Path(cache_dir) / MANIFEST_FILE} names no valid index file ({entry!r})"
    path = Path(cache_dir) / name
    if not path.is_file():
        return f"incomplete cache: {path}, the index its manifest names, is missing"
    if "sha256" in entry:
        if sha256_file(path) != entry["sha256"]:
            return f"incomplete cache: {path} does not have the content its manifest records (sha256 differs)"
    elif path.stat().st_size != entry.get("bytes"):
        return f"incomplete cache: {path} has the wrong size"
    return ""


def corpus_summary(manifest: dict[str, Any]) -> dict[str, Any]:
    """What a run trains on: languages, speaker count, utterances per split, hours of audio."""
    summary = {"languages": list(manifest["languages"]), "speakers": len(manifest["speakers"]),
               "utterances": {split: len(ids) for split, ids in manifest["splits"].items()}}
    if "hours" in manifest:
        summary["hours"] = manifest["hours"]
    return summary


def manifest_mel_stats(cache_dir: Path, manifest: dict[str, Any]) -> MelStats:
    """The train split's per-bin mel statistics stored in ``manifest`` (``mel_stats``); CacheError naming the
    manifest when they are missing or malformed."""
    path = Path(cache_dir) / MANIFEST_FILE
    if "mel_stats" not in manifest:
        raise CacheError(f"no mel statistics in {path} (a cache from before normalised mels)")
    try:
        stats = MelStats.from_dict(manifest["mel_stats"], f"{path} ('mel_stats')")
    except MelStatsError as err:
        raise CacheError(str(err).rstrip(".")) from None
    if "n_mels" in manifest and stats.n_mels != int(manifest["n_mels"]):
        raise CacheError(f"{path}: mel statistics of {stats.n_mels} bins for {manifest['n_mels']} mel bins")
    return stats


def changed_parameters(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """`` (key: old -> new; ...)`` for the feature parameters that differ (one string, or none when none differs
    or ``new`` is empty): what a feature-hash change is explained by."""
    if not new:
        return []
    changed = [f"{key}: {old.get(key)!r} -> {new.get(key)!r}" for key in sorted(set(old) | set(new))
               if old.get(key) != new.get(key)]
    return [f" ({'; '.join(changed)})"] if changed else []


def index_path(cache_dir: Path, manifest: dict[str, Any] | None = None) -> Path:
    """The index file ``manifest`` (default: the cache's manifest) names."""
    manifest = read_manifest(cache_dir) if manifest is None else manifest
    entry = (manifest or {}).get("index", {})
    return Path(cache_dir) / Path(str(entry.get("file", INDEX_FILE)) if isinstance(entry, dict) else INDEX_FILE).name


def load_index(cache_dir: Path, manifest: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
    """The columns of the index ``manifest`` (default: the cache's manifest) names."""
    with np.load(index_path(cache_dir, manifest), allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def save_index(cache_dir: Path, index: dict[str, np.ndarray]) -> dict[str, Any]:
    """Write the index durably under a name derived from its content; returns the manifest's ``index`` entry
    (file, sha256, bytes). The index the current manifest names is left as it is."""
    buffer = io.BytesIO()
    np.savez(buffer, **index)
    data = buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    name = f"{INDEX_PREFIX}{digest[:16]}.npz"
    write_durably(Path(cache_dir) / name, data)
    return {"file": name, "sha256": digest, "bytes": len(data)}


def write_manifest(cache_dir: Path, manifest: dict[str, Any], new_files: list[str], workers: int = 1) -> None:
    """Write the manifest durably, after flushing to disk the files it names that are not yet known to be there
    (``new_files``, relative to ``cache_dir``: those this prepare or a stopped one wrote) and the utterance
    folders (their renames). Flushed together here rather than one by one as they are written: one pass over
    data the system has mostly written back already, on ``workers`` threads."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(lambda file: fsync_file(Path(cache_dir) / file), new_files))
    for folder in sorted((Path(cache_dir) / UTTERANCE_DIR).glob("*")):
        if folder.is_dir():
            fsync_directory(folder)
    fsync_directory(Path(cache_dir) / UTTERANCE_DIR)
    write_durably(Path(cache_dir) / MANIFEST_FILE, json.dumps(manifest, indent=0))

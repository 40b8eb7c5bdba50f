"""FeatureCache: the prepared features of a corpus, loaded into memory once.

Layout of ``cfg.cache_dir`` (written by ``myxtts prepare``):

- ``shards/shard-NNNNN.npz``: up to ``data.cache_shard_size`` utterances each: ``ids`` [n] str,
  ``tokens`` [sum tokens] int32 (bos + ids + eos, concatenated), ``token_lengths`` [n] int32,
  ``mel`` [sum frames, n_mels] **float16** (log mel; float16 halves memory and disk, its ~1e-3
  relative precision is far below the model's error), ``mel_lengths`` [n] int32, ``speaker_ids`` [n] int32;
- ``manifest.json``: counts, hours, speaker table, feature hash, per-split ids, shard list, versions.
  Written last and atomically: a cache without a manifest (a crash mid-prepare) is never used;
- ``vocab.json`` (the Vocabulary), ``rejected.csv``, ``bucket_plan.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MANIFEST_FILE = "manifest.json"
VOCAB_FILE = "vocab.json"
REJECTED_FILE = "rejected.csv"
SHARD_DIR = "shards"
SPLITS = ("train", "validation")


class CacheError(ValueError):
    """The cache is missing, incomplete or was computed with other feature parameters."""


def read_manifest(cache_dir: Path) -> dict[str, Any] | None:
    path = cache_dir / MANIFEST_FILE
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
    return params


def check_manifest(cache_dir: Path, expected_hash: str,
                   current_params: dict[str, Any] | None = None) -> tuple[dict[str, Any] | None, str]:
    """(manifest, "") when the cache is complete and current, else (None, why it cannot be used)."""
    manifest = read_manifest(cache_dir)
    if manifest is None:
        return None, f"no complete cache in {cache_dir} (manifest.json missing)"
    if manifest.get("feature_hash") != expected_hash:
        changed = "".join(_changed_keys(manifest.get("feature_params", {}), current_params or {}))
        return None, (f"feature hash changed ({manifest.get('feature_hash')} -> {expected_hash}): audio, text, "
                      f"corpus or filter parameters differ from the cached ones{changed}")
    for shard in manifest.get("shards", []):
        path = cache_dir / SHARD_DIR / shard["file"]
        if not path.is_file() or path.stat().st_size != shard["bytes"]:
            return None, f"incomplete cache: shard {path} is missing or has the wrong size"
    if not (cache_dir / VOCAB_FILE).is_file():
        return None, f"incomplete cache: {cache_dir / VOCAB_FILE} missing"
    return manifest, ""


def _changed_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    if not new:
        return []
    changed = [f"{key}: {old.get(key)!r} -> {new.get(key)!r}" for key in sorted(set(old) | set(new))
               if old.get(key) != new.get(key)]
    return [f" ({'; '.join(changed)})"] if changed else []


@dataclass
class FeatureCache:
    """All utterances of a prepared cache in memory (flat arrays + row offsets)."""

    cache_dir: Path
    manifest: dict[str, Any]
    ids: list[str]
    tokens: np.ndarray  # [sum tokens] int32
    token_lengths: np.ndarray  # [utterances] int32
    mel: np.ndarray | None  # [sum frames, n_mels] float16 (None when loaded with lengths_only)
    mel_lengths: np.ndarray  # [utterances] int32
    speaker_ids: np.ndarray  # [utterances] int32

    @classmethod
    def load(cls, cfg: Any, lengths_only: bool = False) -> "FeatureCache":
        """Load ``cfg.cache_dir``; raises CacheError if it is missing or stale (features never reused stale)."""
        cache_dir = Path(cfg.cache_dir)
        manifest, problem = check_manifest(cache_dir, cfg.feature_hash(), feature_params(cfg))
        if manifest is None:
            raise CacheError(f"Cannot use the feature cache: {problem}. Run `myxtts prepare --config <your config>` "
                             "to (re)build it.")
        keys = ["ids", "token_lengths", "mel_lengths", "speaker_ids"] + ([] if lengths_only else ["tokens", "mel"])
        parts: dict[str, list[np.ndarray]] = {key: [] for key in keys}
        for shard in manifest["shards"]:
            with np.load(cache_dir / SHARD_DIR / shard["file"], allow_pickle=False) as data:
                for key in keys:
                    parts[key].append(data[key])
        n_mels = int(manifest["n_mels"])

        def joined(key: str, dtype: Any, empty_shape: tuple[int, ...] = (0,)) -> np.ndarray:
            return np.concatenate(parts[key]).astype(dtype, copy=False) if parts[key] else np.zeros(empty_shape, dtype)

        return cls(cache_dir=cache_dir, manifest=manifest, ids=[str(i) for i in joined("ids", str)],
                   tokens=joined("tokens", np.int32) if not lengths_only else np.zeros(0, np.int32),
                   token_lengths=joined("token_lengths", np.int32),
                   mel=None if lengths_only else joined("mel", np.float16, (0, n_mels)),
                   mel_lengths=joined("mel_lengths", np.int32), speaker_ids=joined("speaker_ids", np.int32))

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def speakers(self) -> list[str]:
        return list(self.manifest["speakers"])

    @property
    def n_mels(self) -> int:
        return int(self.manifest["n_mels"])

    def split_indices(self, split: str) -> np.ndarray:
        """Row indices of the utterances of ``split`` ("train" or "validation"), in cache order."""
        if split not in SPLITS:
            raise ValueError(f"Unknown split {split!r}: use one of {SPLITS}.")
        wanted = set(self.manifest["splits"][split])
        return np.array([i for i, utterance_id in enumerate(self.ids) if utterance_id in wanted], dtype=np.int64)

    def token_offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.token_lengths, dtype=np.int64)])  # [utterances + 1]

    def mel_offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.mel_lengths, dtype=np.int64)])  # [utterances + 1]

    def utterance_mel(self, index: int) -> np.ndarray:
        offsets = self.mel_offsets()
        return self.mel[offsets[index]:offsets[index + 1]]  # [frames, n_mels] float16

    def utterance_tokens(self, index: int) -> np.ndarray:
        offsets = self.token_offsets()
        return self.tokens[offsets[index]:offsets[index + 1]]  # [tokens] int32

"""FeatureCache: the prepared features of a corpus, streamed from disk one utterance at a time.

Layout of ``cfg.cache_dir`` (written by ``myxtts prepare``, format 5: ``myxtts.data.cache_manifest.FORMAT_VERSION``; the
file names: ``myxtts.cache_files``):

- ``utterances/XX/KEY.utt``: one file per accepted utterance, random access by path (so the pipeline
  shuffles row indices, not features, and reads any other utterance of the speaker as a reference).
  Fixed layout, little-endian: a 16-byte header of 4 int32 ``[UTTERANCE_MAGIC, tokens, frames,
  n_mels]``, then ``tokens`` int32 (bos + ids + eos), then ``frames x n_mels`` **float16** log mel
  (float16 halves memory and disk; its ~1e-3 relative precision is far below the model's error), then
  ``frames`` float16 F0 in Hz, 0 where unvoiced (``myxtts.f0.tracker``; float16 is within a cent): what
  ``model.pitch_conditioning`` trains on, read with the mel rather than tracked on every epoch.
  KEY hashes the id, the clip's fingerprint and the feature hash, so a changed clip gets a new file
  and the previous manifest stays valid until the new one replaces it;
- ``utterances/XX/KEY.wav``: the clip's audio as the mel was computed from it (mono, ``audio.sample_rate``,
  16-bit PCM), written before its ``.utt``: what the vocoder trains on (``tf.audio.decode_wav`` reads it);
- ``index-HASH.npz`` and ``manifest.json``: the index of every utterance (lengths, speakers, tokens) and the
  manifest that makes the cache valid; their layout, and the checks loading makes: ``myxtts.data.cache_manifest``;
- ``vocab.json`` (the Vocabulary), ``rejected.csv``, ``bucket_plan.json`` (written after the manifest,
  from the plan it records).

This module reads and writes the utterance files; it imports ``myxtts.data.cache_manifest``, never the other way round.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import soundfile

from myxtts.cache_files import INDEX_FILE, INDEX_PREFIX, UTTERANCE_DIR
from myxtts.data.cache_manifest import (FORMAT_VERSION, SPLITS, CacheError, check_manifest, feature_params,
                                        load_index, manifest_mel_stats)
from myxtts.data.mel_stats import MelStats

UTTERANCE_MAGIC = 0x32545558  # b"XUT2" little-endian (b"XUT1": format 2-4, no F0 track)
HEADER_BYTES = 16


# ---------------------------------------------------------------------------------------------
# one utterance file
# ---------------------------------------------------------------------------------------------

class Utterance(NamedTuple):
    """One utterance file's content."""

    tokens: np.ndarray  # [tokens] int32
    mel: np.ndarray  # [frames, n_mels] float16 log mel
    pitch: np.ndarray  # [frames] float16 F0 in Hz, 0 unvoiced


def utterance_bytes(tokens: int, frames: int, n_mels: int) -> int:
    """The size of a whole utterance file with that many tokens, frames and mel bins."""
    return HEADER_BYTES + 4 * tokens + 2 * frames * n_mels + 2 * frames


def write_utterance(path: Path, tokens: np.ndarray, mel: np.ndarray, pitch: np.ndarray) -> int:
    """Write one utterance file atomically (tmp + rename); returns its size in bytes. ``pitch``: [frames] Hz."""
    tokens = np.asarray(tokens, dtype="<i4")  # [tokens]
    mel = np.asarray(mel, dtype="<f2")  # [frames, n_mels]
    pitch = np.asarray(pitch, dtype="<f2")  # [frames]
    if pitch.shape != mel.shape[:1]:
        raise ValueError(f"{path}: a pitch track of {pitch.shape} values for a mel of {mel.shape[0]} frames")
    header = np.array([UTTERANCE_MAGIC, tokens.size, mel.shape[0], mel.shape[1]], dtype="<i4")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        handle.write(header.tobytes() + tokens.tobytes() + mel.tobytes() + pitch.tobytes())
    os.replace(tmp, path)  # flushed to disk with the others before the manifest names it (write_manifest)
    return path.stat().st_size


# the names prepare gives the files it writes (``utterances/XX/KEY.utt``: KEY 24 hex digits, XX its first
# two; ``save_index``; ``write_durably``'s temporary names): the only files it ever deletes
_PREPARED_NAMES = re.compile(
    rf"{UTTERANCE_DIR}/([0-9a-f]{{2}})/\1[0-9a-f]{{22}}\.(?:utt|wav)(?:\.tmp)?"
    rf"|{re.escape(INDEX_PREFIX)}[0-9a-f]{{16}}\.npz(?:\.tmp)?|{re.escape(INDEX_FILE)}"
    r"|(?:manifest\.json|vocab\.json|rejected\.csv|bucket_plan\.json)\.tmp")


def written_by_prepare(relative_path: str) -> bool:
    """True when ``relative_path`` (inside a cache folder, ``/``-separated) is a name ``prepare`` gives the files it
    writes: an utterance or its audio (or their temporary names), an index, a temporary file of its records."""
    return _PREPARED_NAMES.fullmatch(relative_path) is not None


def audio_file(utterance_file: str) -> str:
    """The audio file stored beside an utterance file (same folder and key, ``.wav``)."""
    return utterance_file[:-len(".utt")] + ".wav" if utterance_file.endswith(".utt") else utterance_file + ".wav"


def write_audio(path: Path, waveform: np.ndarray, sample_rate: int) -> int:
    """Write one clip's audio as 16-bit PCM WAV atomically (tmp + rename); returns its size in bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    soundfile.write(str(tmp), np.clip(np.asarray(waveform, np.float32), -1.0, 1.0), int(sample_rate),
                    subtype="PCM_16", format="WAV")
    os.replace(tmp, path)  # flushed to disk with the others before the manifest names it (write_manifest)
    return path.stat().st_size


def read_utterance(path: Path) -> Utterance:
    """The tokens, mel and F0 track of one utterance file; CacheError when it is not a whole one of this format."""
    raw = Path(path).read_bytes()
    if len(raw) < HEADER_BYTES:
        raise CacheError(f"{path} is truncated ({len(raw)} bytes); run `myxtts prepare`.")
    magic, token_count, frames, n_mels = (int(value) for value in np.frombuffer(raw[:HEADER_BYTES], dtype="<i4"))
    if magic != UTTERANCE_MAGIC:
        raise CacheError(f"{path} is not a myxtts utterance file of cache format {FORMAT_VERSION}; run "
                         "`myxtts prepare --force`.")
    if len(raw) != utterance_bytes(token_count, frames, n_mels):
        raise CacheError(f"{path} holds {len(raw)} bytes, its header announces "
                         f"{utterance_bytes(token_count, frames, n_mels)}; run `myxtts prepare`.")
    mel_start = HEADER_BYTES + 4 * token_count
    pitch_start = mel_start + 2 * frames * n_mels
    tokens = np.frombuffer(raw[HEADER_BYTES:mel_start], dtype="<i4").astype(np.int32)
    mel = np.frombuffer(raw[mel_start:pitch_start], dtype="<f2").reshape(frames, n_mels).astype(np.float16)
    pitch = np.frombuffer(raw[pitch_start:], dtype="<f2").astype(np.float16)
    return Utterance(tokens, mel, pitch)


def tf_read_utterance(path: Any, n_mels: int) -> tuple[Any, Any, Any]:
    """TF ops (usable in Dataset.map): (tokens [tokens] int32, mel [frames, n_mels] float16, F0 [frames] float16 Hz)
    of one file."""
    import tensorflow as tf  # the input pipeline's: prepare imports this module and an up-to-date one never loads TF

    raw = tf.io.read_file(path)
    header = tf.io.decode_raw(tf.strings.substr(raw, 0, HEADER_BYTES), tf.int32)  # [4]
    token_bytes = 4 * header[1]
    tokens = tf.io.decode_raw(tf.strings.substr(raw, HEADER_BYTES, token_bytes), tf.int32)  # [tokens]
    mel_bytes = 2 * header[2] * header[3]
    mel = tf.io.decode_raw(tf.strings.substr(raw, HEADER_BYTES + token_bytes, mel_bytes), tf.float16)
    pitch = tf.io.decode_raw(tf.strings.substr(raw, HEADER_BYTES + token_bytes + mel_bytes, 2 * header[2]),
                             tf.float16)  # [frames]
    return tokens, tf.reshape(mel, [-1, n_mels]), pitch  # [frames, n_mels], [frames]


# ---------------------------------------------------------------------------------------------
# the whole cache
# ---------------------------------------------------------------------------------------------

class FeatureCache:
    """The index of a prepared cache (ids, lengths, speakers, tokens) plus per-utterance feature files.

    Loading reads ``index.npz`` only; features are read from disk on demand (``utterance_mel``), so
    memory does not grow with the corpus' audio. ``mel`` (every mel concatenated) exists for small
    caches in tests and tools.
    """

    def __init__(self, cache_dir: Path, manifest: dict[str, Any], index: dict[str, np.ndarray]) -> None:
        self.cache_dir, self.manifest = Path(cache_dir), manifest
        self.ids: list[str] = [str(i) for i in index["ids"]]
        self.files: list[str] = [str(f) for f in index["files"]]  # relative to cache_dir
        self.tokens = index["tokens"].astype(np.int32, copy=False)  # [sum tokens]
        self.token_lengths = index["token_lengths"].astype(np.int32, copy=False)  # [utterances]
        self.mel_lengths = index["mel_lengths"].astype(np.int32, copy=False)  # [utterances]
        self.speaker_ids = index["speaker_ids"].astype(np.int32, copy=False)  # [utterances]
        self.language_ids = index["language_ids"].astype(np.int32, copy=False)  # [utterances]
        # position of each utterance's corpus in data.corpora (an index without the column: one corpus)
        self.corpus_ids = (index["corpus_ids"].astype(np.int32, copy=False) if "corpus_ids" in index
                           else np.zeros(len(self.ids), np.int32))  # [utterances]

    @classmethod
    def load(cls, cfg: Any, lengths_only: bool = False) -> "FeatureCache":
        """Load ``cfg.cache_dir``'s index; raises CacheError if it is missing or stale (never reused stale).

        ``lengths_only`` is kept for callers of format 1; the index is always small.
        """
        cache_dir = Path(cfg.cache_dir)
        manifest, problem = check_manifest(cache_dir, cfg.feature_hash(), feature_params(cfg))
        if manifest is None:
            raise CacheError(f"Cannot use the feature cache: {problem}. Run `myxtts prepare --config <your config>` "
                             "to (re)build it (with --rebuild if the cache there was prepared with other parameters, "
                             "or set a new data.cache_dir to keep it).")
        return cls(cache_dir, manifest, load_index(cache_dir, manifest))

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def speakers(self) -> list[str]:
        return list(self.manifest["speakers"])

    @property
    def languages(self) -> list[str]:
        return list(self.manifest["languages"])

    @property
    def n_mels(self) -> int:
        return int(self.manifest["n_mels"])

    @property
    def mel_stats(self) -> MelStats:
        """Per-bin mean / std of the train split's log mels (what the pipeline normalises with); CacheError
        naming the cache when the manifest has none."""
        try:
            return manifest_mel_stats(self.cache_dir, self.manifest)
        except CacheError as err:
            raise CacheError(f"Cannot use the feature cache {self.cache_dir}: {err}. Run `myxtts prepare --config "
                             "<your config>` to (re)build it.") from None

    @property
    def mel_mean(self) -> np.ndarray:
        return self.mel_stats.mean  # [n_mels] float32

    @property
    def mel_std(self) -> np.ndarray:
        return self.mel_stats.std  # [n_mels] float32, >= mel_stats.STD_FLOOR

    def paths(self) -> list[str]:
        """Absolute path of every utterance file, in row order."""
        return [str(self.cache_dir / f) for f in self.files]

    def split_indices(self, split: str) -> np.ndarray:
        """Row indices of the utterances of ``split`` ("train" or "validation"), in cache order."""
        if split not in SPLITS:
            raise ValueError(f"Unknown split {split!r}: use one of {SPLITS}.")
        wanted = set(self.manifest["splits"].get(split, []))
        return np.array([i for i, utterance_id in enumerate(self.ids) if utterance_id in wanted], dtype=np.int64)

    def token_offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.token_lengths, dtype=np.int64)])  # [utterances + 1]

    def utterance_mel(self, index: int) -> np.ndarray:
        return read_utterance(self.cache_dir / self.files[index]).mel  # [frames, n_mels] float16

    def utterance_pitch(self, index: int) -> np.ndarray:
        return read_utterance(self.cache_dir / self.files[index]).pitch  # [frames] float16 Hz, 0 unvoiced

    def utterance_tokens(self, index: int) -> np.ndarray:
        offsets = self.token_offsets()
        return self.tokens[offsets[index]:offsets[index + 1]]  # [tokens] int32

    @property
    def mel(self) -> np.ndarray:
        """Every mel concatenated [sum frames, n_mels] float16: reads the whole cache (small caches only)."""
        parts = [self.utterance_mel(i) for i in range(len(self))]
        return np.concatenate(parts) if parts else np.zeros((0, self.n_mels), np.float16)

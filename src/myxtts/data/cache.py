"""FeatureCache: the prepared features of a corpus, streamed from disk one utterance at a time.

Layout of ``cfg.cache_dir`` (written by ``myxtts prepare``, format 5; the file names: ``myxtts.cache_files``):

- ``utterances/XX/KEY.utt``: one file per accepted utterance, random access by path (so the pipeline
  shuffles row indices, not features, and reads any other utterance of the speaker as a reference).
  Fixed layout, little-endian: a 16-byte header of 4 int32 ``[UTTERANCE_MAGIC, tokens, frames,
  n_mels]``, then ``tokens`` int32 (bos + ids + eos), then ``frames x n_mels`` **float16** log mel
  (float16 halves memory and disk; its ~1e-3 relative precision is far below the model's error), then
  ``frames`` float16 F0 in Hz, 0 where unvoiced (``myxtts.pitch``; float16 is within a cent): what
  ``model.pitch_conditioning`` trains on, read with the mel rather than tracked on every epoch.
  KEY hashes the id, the clip's fingerprint and the feature hash, so a changed clip gets a new file
  and the previous manifest stays valid until the new one replaces it;
- ``utterances/XX/KEY.wav``: the clip's audio as the mel was computed from it (mono, ``audio.sample_rate``,
  16-bit PCM), written before its ``.utt``: what the vocoder trains on (``tf.audio.decode_wav`` reads it);
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
  records the settings of the F0 tracker (``myxtts.pitch_settings.TRACKER``): a cache of other settings is rebuilt;
- ``vocab.json`` (the Vocabulary), ``rejected.csv``, ``bucket_plan.json`` (written after the manifest,
  from the plan it records).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from myxtts import pitch_settings
from myxtts.cache_files import INDEX_FILE, INDEX_PREFIX, MANIFEST_FILE, UTTERANCE_DIR, VOCAB_FILE
from myxtts.durable import fsync_directory, fsync_file, sha256_file, write_durably
from myxtts.data.mel_stats import MelStats, MelStatsError
from myxtts.errors import InputError

SPLITS = ("train", "validation", "held_out")  # held_out: the clips of held-out speakers (zero-shot development)
FORMAT_VERSION = 5  # 5: the F0 track; 4: the audio beside each utterance; 3: mel_stats; 2: one file per utterance
UTTERANCE_MAGIC = 0x32545558  # b"XUT2" little-endian (b"XUT1": format 2-4, no F0 track)
HEADER_BYTES = 16


class CacheError(InputError):
    """The cache is missing, incomplete or was computed with other feature parameters."""


def read_manifest(cache_dir: Path) -> dict[str, Any] | None:
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
    tracker = pitch_settings.TRACKER  # the settings alone (no TensorFlow): an up-to-date prepare never loads it
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
    import soundfile

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
    import tensorflow as tf

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

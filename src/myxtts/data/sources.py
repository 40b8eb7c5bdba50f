"""What the pipeline's parse and reference maps read (``myxtts.data.pipeline`` describes the order of the maps).

- ``CacheSource``: the prepared cache, streamed (one utterance file per element, TF ops only);
- ``WavSource``: WAVs decoded and mels computed inside the map (``data.use_tf_native_loading``);
- references: another utterance of the same speaker (``pick_reference_row`` over ``speaker_tables``), never the
  target itself, and a seeded random crop (``crop_start``, ``crop_and_pad``); for a speaker with one clip
  (``single_clip_rows``) under the single-clip policy "slice", a crop of the target (``self_slice``) whose frames
  the losses do not score.

Every random op is stateless, seeded by (data.seed, element position), so a run is reproducible.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import soundfile
import tensorflow as tf

from myxtts.audio import tf_load_wav
from myxtts.mel import MelFrontend
from myxtts.data.cache import FeatureCache, tf_read_utterance
from myxtts.data.cache_manifest import CacheError
from myxtts.data.corpus import read_config_corpus
from myxtts.errors import InputError
from myxtts.f0.tracker import frames_f0


# ---------------------------------------------------------------------------------------------
# small TF functions (each works eagerly and inside Dataset.map)
# ---------------------------------------------------------------------------------------------

def uniform_index(seed: tf.Tensor, count: tf.Tensor) -> tf.Tensor:
    """A seeded uniform int32 in [0, count) (0 when count <= 0). ``seed``: int64 [2]."""
    count = tf.maximum(tf.cast(count, tf.int32), 1)
    u = tf.random.stateless_uniform([], seed=seed, dtype=tf.float32)
    return tf.minimum(tf.cast(tf.floor(u * tf.cast(count, tf.float32)), tf.int32), count - 1)


def pick_reference_row(row: tf.Tensor, seed: tf.Tensor, tables: dict[str, tf.Tensor]) -> tf.Tensor:
    """Another row of the same speaker (uniform over the others), or ``row`` itself when it is alone.

    The pipeline never asks for a row that is alone (single-clip policy, ``single_clip_rows``), so a
    batch's reference is never cut from its own target.

    ``tables``: ``group_start`` / ``group_size`` / ``position`` per row and ``members`` (rows sorted by
    speaker), all int32.
    """
    row = tf.cast(row, tf.int32)
    start = tf.gather(tables["group_start"], row)
    size = tf.gather(tables["group_size"], row)
    position = tf.gather(tables["position"], row)
    choice = uniform_index(seed, size - 1)  # among the size - 1 others
    choice = tf.where(choice >= position, choice + 1, choice)  # skip the utterance itself
    other = tf.gather(tables["members"], start + tf.minimum(choice, size - 1))
    return tf.where(size > 1, other, row)


def crop_start(length: tf.Tensor, frames: int, seed: tf.Tensor) -> tf.Tensor:
    """Seeded random first frame of a ``frames``-long crop of a ``length``-frame clip (0 if shorter)."""
    return uniform_index(seed, tf.maximum(tf.cast(length, tf.int32) - frames, 0) + 1)


def crop_and_pad(mel: tf.Tensor, start: tf.Tensor, frames: int) -> tuple[tf.Tensor, tf.Tensor]:
    """``mel[start:start + frames]`` zero-padded to ``frames`` -> ([frames, n_mels], true length)."""
    piece = mel[start:start + frames]  # [<= frames, n_mels]
    length = tf.shape(piece)[0]
    padded = tf.pad(piece, [[0, frames - length], [0, 0]])  # [frames, n_mels]
    padded = tf.ensure_shape(padded, [frames, mel.shape[-1]])
    return padded, length


def self_slice(mel: tf.Tensor, frames: int, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """A reference cut from the target's own (normalised) mel ``[length, n_mels]``: ``min(frames, length // 2)``
    frames (at least 1) at a seeded random start -> (``[frames, n_mels]`` zero-padded, its length, its start)."""
    length = tf.shape(mel)[0]
    size = tf.maximum(tf.minimum(frames, length // 2), 1)
    start = uniform_index(seed, length - size + 1)
    padded, size = crop_and_pad(mel[start:start + size], 0, frames)
    return padded, size, start


def single_clip_rows(speaker_ids: np.ndarray) -> np.ndarray:
    """[utterances] bool: True where the utterance's speaker has no other utterance in the cache."""
    counts = np.bincount(speaker_ids) if speaker_ids.size else np.zeros(0, np.int64)
    return counts[speaker_ids] == 1 if speaker_ids.size else np.zeros(0, dtype=bool)


def speaker_tables(speaker_ids: np.ndarray) -> dict[str, np.ndarray]:
    """Rows grouped by speaker: members (rows sorted by speaker), and per row its group's start,
    size and its own position inside the group."""
    order = np.argsort(speaker_ids, kind="stable").astype(np.int32)  # [utterances]
    counts = np.bincount(speaker_ids) if speaker_ids.size else np.zeros(0, np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if counts.size else np.zeros(0, np.int64)
    position = np.empty_like(order)
    position[order] = np.arange(order.size, dtype=np.int32) - starts[speaker_ids[order]]
    return {"members": order, "group_start": starts[speaker_ids].astype(np.int32),
            "group_size": counts[speaker_ids].astype(np.int32), "position": position.astype(np.int32)}


# ---------------------------------------------------------------------------------------------
# sources: what the parse map reads
# ---------------------------------------------------------------------------------------------

class CacheSource:
    """The cache index in memory (lengths, speakers, file paths); parse = read one utterance file.

    Memory does not grow with the audio: per utterance it holds a path and four int32s, and only the
    elements in flight (parse map, bucket windows, prefetch) hold features.
    """

    def __init__(self, cfg: Any, cache: FeatureCache | None) -> None:
        self.cache = cache if cache is not None else FeatureCache.load(cfg)
        c = self.cache
        self.ids, self.manifest = c.ids, c.manifest
        self.token_lengths, self.mel_lengths, self.speaker_ids = c.token_lengths, c.mel_lengths, c.speaker_ids
        self.corpus_ids = c.corpus_ids  # [utterances]: position of each one's corpus in data.corpora
        self.n_mels = c.n_mels
        self.mel_stats = c.mel_stats  # CacheError naming the cache when the manifest has none
        self.paths = tf.constant(c.paths())  # [utterances] string
        self.pitch = cfg.model.pitch_conditioning  # parse adds "pitch": frame F0 [frames] Hz (myxtts.f0.tracker)

    def _read(self, row: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        # tokens [t] int32, mel [f, n_mels] float16, F0 [f] float16 Hz
        return tf_read_utterance(tf.gather(self.paths, row), self.n_mels)

    def parse(self, row: tf.Tensor) -> dict[str, tf.Tensor]:
        tokens, mel, pitch = self._read(row)
        mel = self.mel_stats.normalize(tf.cast(mel, tf.float32))  # [frames, n_mels]
        element = {"tokens": tokens, "mel": tf.ensure_shape(mel, [None, self.n_mels])}
        if self.pitch:  # the F0 track prepare stored with the mel, of the same audio
            element["pitch"] = tf.ensure_shape(tf.cast(pitch, tf.float32), [None])  # [frames]
        return element

    def reference_mel(self, row: tf.Tensor, frames: int, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        _, mel, _ = self._read(row)  # [frames_row, n_mels] float16
        mel = tf.ensure_shape(mel, [None, self.n_mels])
        start = crop_start(tf.shape(mel)[0], frames, seed)
        piece = self.mel_stats.normalize(tf.cast(mel[start:start + frames], tf.float32))  # crop, then cast the crop
        return crop_and_pad(piece, 0, frames)  # zero padding after normalising


class WavSource:
    """Prepared manifest + vocab for ids / tokens; WAVs decoded and mels computed with TF ops."""

    def __init__(self, cfg: Any) -> None:
        try:
            cache = FeatureCache.load(cfg)  # the index: accepted ids, tokens (per language), splits, speakers
        except CacheError as err:
            raise CacheError(f"data.use_tf_native_loading needs the index of `myxtts prepare` (accepted ids, "
                             f"tokens, splits, speakers): {err}") from None
        self.manifest = cache.manifest
        self.mel_stats = cache.mel_stats  # the manifest's train-split statistics (prepare computes them)
        by_id = {e.id: e for e in read_config_corpus(cfg).entries}
        missing = [utterance_id for utterance_id in cache.ids if utterance_id not in by_id]
        if missing:
            raise CacheError(f"{len(missing)} cached utterance(s) are no longer in {cfg.corpus_path} (e.g. "
                             f"{missing[0]!r}); run `myxtts prepare` to update the cache.")
        entries = [by_id[utterance_id] for utterance_id in cache.ids]
        self.frontend = MelFrontend(cfg.audio)
        self.sample_rate, self.hop = cfg.audio.sample_rate, cfg.audio.hop_length
        frames = []
        for entry in entries:
            info = soundfile.info(str(entry.audio_path))
            if info.samplerate != self.sample_rate:
                raise InputError(f"{entry.audio_path}: {info.samplerate} Hz but audio.sample_rate is {self.sample_rate}; "
                                 "the TF-native loader cannot resample. Set data.use_tf_native_loading: false "
                                 "to train from the prepared cache (prepare converts every clip).")
            frames.append(self.frontend.num_frames(info.frames))
        self.ids = cache.ids
        self.token_lengths, self.speaker_ids = cache.token_lengths, cache.speaker_ids
        self.corpus_ids = cache.corpus_ids
        self.mel_lengths = np.array(frames, np.int32)
        self.n_mels = cfg.audio.n_mels
        self.paths = tf.constant([str(e.audio_path) for e in entries])
        self.pitch = cfg.model.pitch_conditioning
        self.tokens = tf.RaggedTensor.from_row_lengths(tf.constant(cache.tokens), tf.constant(self.token_lengths))

    def _mel(self, waveform: tf.Tensor) -> tf.Tensor:
        return tf.ensure_shape(self.frontend.in_graph(waveform), [None, self.n_mels])  # [frames, n_mels]

    def parse(self, row: tf.Tensor) -> dict[str, tf.Tensor]:
        waveform = tf_load_wav(tf.gather(self.paths, row), self.sample_rate)  # [samples]
        mel = self.mel_stats.normalize(self._mel(waveform))  # [frames, n_mels]
        element = {"tokens": self.tokens[row], "mel": mel}
        if self.pitch:
            element["pitch"] = frames_f0(waveform, tf.shape(mel)[0], self.sample_rate, self.hop)  # [frames]
        return element

    def reference_mel(self, row: tf.Tensor, frames: int, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        waveform = tf_load_wav(tf.gather(self.paths, row), self.sample_rate)  # [samples]
        length = tf.gather(tf.constant(self.mel_lengths), row)
        start = crop_start(length, frames, seed)
        # the samples behind frames [start, start + frames): frame i is centred on sample i * hop
        piece = waveform[start * self.hop:(start + frames - 1) * self.hop + 1]
        return crop_and_pad(self.mel_stats.normalize(self._mel(piece)), 0, frames)

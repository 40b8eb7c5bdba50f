"""InputPipeline: tf.data batches with a finite set of fully static shapes (``signatures()``).

Two sources, same batch-dict contract (docs/architecture.md):

- **cache** (default): streamed from disk. Only the cache index (lengths, speakers, one file path per
  utterance) is in memory; each element reads its utterance file with ``tf.io.read_file`` +
  ``tf.io.decode_raw`` (TF ops only: no Python generator, no py_function). Order: row indices ->
  shuffle -> repeat -> parse map (read) -> reference map (read another file, crop) -> bucket + pad
  -> prefetch. Memory is bounded independent of the corpus size: what is in flight (parallel maps,
  one window per bucket, prefetch) plus 4 bytes per utterance in the shuffle buffer.
  Shuffle quality: the buffer holds row indices, not features, so ``data.shuffle_buffer_size`` >=
  the number of training utterances (default 65536: LJSpeech is 13,100) is an exact uniform
  permutation each epoch; a smaller buffer mixes within a sliding window of that many rows of a
  seeded permutation of the split (fixed for the run), so every window is a uniform sample of the
  corpus (all speakers), and epochs differ only inside windows. A checkpointed iterator stores the
  position and that buffer of ints (small and exact; resume continues the same permutation).
- **on the fly** (``data.use_tf_native_loading: true``): ``tf_load_wav`` + ``MelFrontend`` inside the
  parse map (TF ops only). It uses the prepared manifest for the accepted ids, splits and speaker
  table, and ``vocab.json``; tokens are encoded ahead in Python once at construction (text is
  cheap) and frame counts come from the WAV headers. Order: rows -> parse map -> cache (in memory,
  so epochs after the first skip decoding) -> shuffle -> repeat -> reference map -> bucket + pad ->
  prefetch.

Normalised mels: both sources normalise the target and the reference mel per mel bin, ``(mel - mean) /
std`` (TF ops, before padding, so padding stays exactly 0), with the train split's statistics that
``prepare`` stored in the manifest (``myxtts.data.mel_stats``; ``InputPipeline.mel_stats``). The on-the-fly
source uses the same manifest statistics (computed from the cached float16 mels of the same front-end), so
``use_tf_native_loading`` still needs ``myxtts prepare``; a cache without them is a CacheError saying to
run it.

Buckets: ``group_by_window`` keyed by the bucket id with a per-bucket ``padded_batch`` to the bucket
shape, ``drop_remainder=True``; every batch therefore has exactly one shape of ``signatures()``.
The validation split (repeat=False) pads each bucket's rows to a whole number of batches by repeating
its own rows, so no validation utterance is dropped. The bucket plan is computed on all utterances
(train and validation), so both splits share the same signatures and nothing retraces.

References (voice conditioning): for each utterance, another utterance of the same speaker (chosen
at random among all cached utterances, never the target itself); then a random crop of
``data.reference_frames`` frames (zero-padded when shorter, ``reference_lengths`` = true length).
Single-clip policy: an utterance whose speaker has no other accepted clip is not trained or
validated on (a crop of the target as its own reference would leak the answer); it stays in the
cache, ``prepare`` counts these clips in its report and manifest and the pipeline logs the count.
All random ops are stateless, seeded by (data.seed, element position), so a run is reproducible.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from myxtts.config import AUTOTUNE
from myxtts.data.buckets import PLAN_FILE, BucketParams, BucketPlan, FillReport, log_misfits, plan_buckets
from myxtts.data.cache import CacheError, FeatureCache, tf_read_utterance
from myxtts.data.mel_stats import MelStats

logger = logging.getLogger(__name__)

BATCH_KEYS = ("tokens", "token_lengths", "mel", "mel_lengths", "reference_mel", "reference_lengths", "speaker_ids")


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


def bucket_key(element: dict[str, tf.Tensor]) -> tf.Tensor:
    return tf.cast(element["bucket"], tf.int64)


# ---------------------------------------------------------------------------------------------
# sources: what the parse map reads
# ---------------------------------------------------------------------------------------------

class _CacheSource:
    """The cache index in memory (lengths, speakers, file paths); parse = read one utterance file.

    Memory does not grow with the audio: per utterance it holds a path and four int32s, and only the
    elements in flight (parse map, bucket windows, prefetch) hold features.
    """

    def __init__(self, cfg: Any, cache: FeatureCache | None) -> None:
        self.cache = cache if cache is not None else FeatureCache.load(cfg)
        c = self.cache
        self.ids, self.manifest = c.ids, c.manifest
        self.token_lengths, self.mel_lengths, self.speaker_ids = c.token_lengths, c.mel_lengths, c.speaker_ids
        self.n_mels = c.n_mels
        self.mel_stats = c.mel_stats  # CacheError naming the cache when the manifest has none
        self.paths = tf.constant(c.paths())  # [utterances] string

    def _read(self, row: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return tf_read_utterance(tf.gather(self.paths, row), self.n_mels)  # tokens [t] int32, mel [f, n_mels] f16

    def parse(self, row: tf.Tensor) -> dict[str, tf.Tensor]:
        tokens, mel = self._read(row)
        mel = self.mel_stats.normalize(tf.cast(mel, tf.float32))  # [frames, n_mels]
        return {"tokens": tokens, "mel": tf.ensure_shape(mel, [None, self.n_mels])}

    def reference_mel(self, row: tf.Tensor, frames: int, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        _, mel = self._read(row)  # [frames_row, n_mels] float16
        mel = tf.ensure_shape(mel, [None, self.n_mels])
        start = crop_start(tf.shape(mel)[0], frames, seed)
        piece = self.mel_stats.normalize(tf.cast(mel[start:start + frames], tf.float32))  # crop, then cast the crop
        return crop_and_pad(piece, 0, frames)  # zero padding after normalising


class _WavSource:
    """Prepared manifest + vocab for ids / tokens; WAVs decoded and mels computed with TF ops."""

    def __init__(self, cfg: Any) -> None:
        import soundfile

        from myxtts.audio import MelFrontend
        from myxtts.data.corpus import read_corpus

        try:
            cache = FeatureCache.load(cfg)  # the index: accepted ids, tokens (per language), splits, speakers
        except CacheError as err:
            raise CacheError(f"data.use_tf_native_loading needs the index of `myxtts prepare` (accepted ids, "
                             f"tokens, splits, speakers): {err}") from None
        self.manifest = cache.manifest
        self.mel_stats = cache.mel_stats  # the manifest's train-split statistics (prepare computes them)
        by_id = {e.id: e for e in read_corpus(cfg.corpus_path, cfg.data.corpus_format, cfg.data.language).entries}
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
                raise ValueError(f"{entry.audio_path}: {info.samplerate} Hz but audio.sample_rate is {self.sample_rate}; "
                                 "the TF-native loader cannot resample. Set data.use_tf_native_loading: false "
                                 "to train from the prepared cache (prepare converts every clip).")
            frames.append(self.frontend.num_frames(info.frames))
        self.ids = cache.ids
        self.token_lengths, self.speaker_ids = cache.token_lengths, cache.speaker_ids
        self.mel_lengths = np.array(frames, np.int32)
        self.n_mels = cfg.audio.n_mels
        self.paths = tf.constant([str(e.audio_path) for e in entries])
        self.tokens = tf.RaggedTensor.from_row_lengths(tf.constant(cache.tokens), tf.constant(self.token_lengths))

    def _mel(self, waveform: tf.Tensor) -> tf.Tensor:
        return tf.ensure_shape(self.frontend.in_graph(waveform), [None, self.n_mels])  # [frames, n_mels]

    def parse(self, row: tf.Tensor) -> dict[str, tf.Tensor]:
        from myxtts.audio import tf_load_wav

        waveform = tf_load_wav(tf.gather(self.paths, row), self.sample_rate)  # [samples]
        return {"tokens": self.tokens[row], "mel": self.mel_stats.normalize(self._mel(waveform))}

    def reference_mel(self, row: tf.Tensor, frames: int, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        from myxtts.audio import tf_load_wav

        waveform = tf_load_wav(tf.gather(self.paths, row), self.sample_rate)  # [samples]
        length = tf.gather(tf.constant(self.mel_lengths), row)
        start = crop_start(length, frames, seed)
        # the samples behind frames [start, start + frames): frame i is centred on sample i * hop
        piece = waveform[start * self.hop:(start + frames - 1) * self.hop + 1]
        return crop_and_pad(self.mel_stats.normalize(self._mel(piece)), 0, frames)


# ---------------------------------------------------------------------------------------------
# the pipeline
# ---------------------------------------------------------------------------------------------

class InputPipeline:
    """Batches of the ``split`` ("train" or "validation") in the shapes of ``signatures()``."""

    def __init__(self, cfg: Any, split: str = "train", cache: FeatureCache | None = None, replicas: int = 1,
                 steps_per_execution: int | None = None, mel_stats: MelStats | None = None) -> None:
        """``replicas``: devices each batch is split over; bucket batch sizes are then multiples of it.
        ``mel_stats``: normalise with these rather than the manifest's (a warm start keeps its source's).
        ``steps_per_execution`` K (default: ``training.steps_per_execution`` for the train split, 1 for
        validation): K > 1 stacks K consecutive batches of one bucket into one element ``[K, batch, ...]``,
        what one compiled call of ``TrainingSteps`` trains on."""
        if split not in ("train", "validation"):
            raise ValueError(f"InputPipeline split must be 'train' or 'validation', got {split!r}.")
        self.cfg, self.split, self.replicas = cfg, split, replicas
        if steps_per_execution is None:
            steps_per_execution = cfg.training.steps_per_execution if split == "train" else 1
        if steps_per_execution < 1:
            raise ValueError(f"steps_per_execution must be >= 1, got {steps_per_execution}.")
        self.steps_per_execution = steps_per_execution
        d = cfg.data
        self.source = _WavSource(cfg) if d.use_tf_native_loading else _CacheSource(cfg, cache)
        s = self.source
        if mel_stats is not None:  # read by the sources' parse maps, which are traced later
            if mel_stats.n_mels != s.n_mels:
                raise ValueError(f"mel statistics of {mel_stats.n_mels} bins for {s.n_mels}-bin mels.")
            s.mel_stats = mel_stats
        self.mel_stats = s.mel_stats  # MelStats: batches hold (log mel - mean) / std; the trainer saves them
        self.plan = self._load_plan()
        self.row_buckets = self.plan.assign(s.token_lengths, s.mel_lengths)  # [utterances], -1 = fits no bucket
        wanted = set(s.manifest["splits"][split])
        in_split = np.array([utterance_id in wanted for utterance_id in s.ids], dtype=bool)
        split_rows = np.flatnonzero(in_split)
        self.skipped_ids = log_misfits(self.plan, [s.ids[i] for i in split_rows], s.token_lengths[split_rows],
                                       s.mel_lengths[split_rows], split=split)
        self.reference_tables = _speaker_tables(s.speaker_ids)
        alone = single_clip_rows(s.speaker_ids)  # [utterances] bool: no other clip of the speaker
        self.single_clip_ids = [s.ids[i] for i in split_rows[alone[split_rows]]]
        if self.single_clip_ids:
            logger.warning("single-clip speakers: %d %s clip(s) not trained on (no other clip of the speaker to use "
                           "as reference): %s", len(self.single_clip_ids), split,
                           ", ".join(self.single_clip_ids[:10]) + (" ..." if len(self.single_clip_ids) > 10 else ""))
        usable = (self.row_buckets[split_rows] >= 0) & ~alone[split_rows]
        self.rows = split_rows[usable]  # [fitting utterances of the split that have a reference]
        if self.rows.size == 0:
            raise ValueError(f"No {split} utterance fits the bucket plan ({self.plan.describe()}); raise "
                             "data.max_text_length / data.max_mel_frames (see `myxtts stats`) or add a second "
                             "clip to single-clip speakers.")

    def _load_plan(self) -> BucketPlan:
        """The plan saved by prepare when it matches the data settings, else computed on all utterances."""
        params = BucketParams.from_config(self.cfg.data, self.replicas)
        path = Path(self.cfg.cache_dir) / PLAN_FILE
        if path.is_file():
            try:
                plan = BucketPlan.load(path)
                if plan.params == params:
                    return plan
            except (ValueError, KeyError, TypeError):
                logger.warning("Ignoring unreadable %s; recomputing the bucket plan.", path)
        return plan_buckets(self.source.token_lengths, self.source.mel_lengths, params)

    # ---- contract --------------------------------------------------------------------------
    def signatures(self) -> list[dict[str, tf.TensorSpec]]:
        """One fully static element signature per bucket (the input_signature of each compiled train call):
        a batch, or with steps_per_execution K > 1 a block of K batches, ``[K, batch, ...]``."""
        batches = self.batch_signatures()
        if self.steps_per_execution == 1:
            return batches
        k = self.steps_per_execution
        return [{key: tf.TensorSpec([k, *spec.shape.as_list()], spec.dtype) for key, spec in signature.items()}
                for signature in batches]

    def batch_signatures(self) -> list[dict[str, tf.TensorSpec]]:
        """One fully static batch signature per bucket (what validate steps and the model see)."""
        n_mels, reference_frames = self.source.n_mels, self.cfg.data.reference_frames
        out = []
        for b in self.plan.buckets:
            out.append({
                "tokens": tf.TensorSpec([b.batch_size, b.text_length], tf.int32),
                "token_lengths": tf.TensorSpec([b.batch_size], tf.int32),
                "mel": tf.TensorSpec([b.batch_size, b.mel_frames, n_mels], tf.float32),
                "mel_lengths": tf.TensorSpec([b.batch_size], tf.int32),
                "reference_mel": tf.TensorSpec([b.batch_size, reference_frames, n_mels], tf.float32),
                "reference_lengths": tf.TensorSpec([b.batch_size], tf.int32),
                "speaker_ids": tf.TensorSpec([b.batch_size], tf.int32),
            })
        return out

    def fill_report(self) -> FillReport:
        """Real vs padded mel frames and text tokens of this split under the plan, number of shapes."""
        s = self.source
        wanted = set(s.manifest["splits"][self.split])
        split_rows = np.array([i for i, u in enumerate(s.ids) if u in wanted], dtype=np.int64)
        return self.plan.fill(s.token_lengths[split_rows], s.mel_lengths[split_rows])

    # ---- the dataset ---------------------------------------------------------------------------
    def _rows(self, repeat: bool) -> np.ndarray:
        """Rows of the split; validation without repeat: each bucket topped up to whole batches."""
        if self.split == "train":
            # a seeded permutation first: a shuffle buffer smaller than the split then draws from a uniform sample
            # of the corpus, not from a window of the cache order (VCTK / LibriTTS come speaker folder by folder)
            return np.random.default_rng(self.cfg.data.seed).permutation(self.rows)
        if repeat:
            return self.rows
        rows = []
        for index, bucket in enumerate(self.plan.buckets):
            members = self.rows[self.row_buckets[self.rows] == index]
            if members.size:
                total = -(-members.size // bucket.batch_size) * bucket.batch_size
                rows.append(np.resize(members, total))  # repeats its own rows to fill the last batch
        return np.concatenate(rows)

    def _row_source(self, repeat: bool) -> tf.data.Dataset:
        """The dataset of row indices everything else is built on (the source a tf.data service splits).

        A finite pass through a tf.data service ("distributed_epoch") hands the source's elements out to the
        workers one split at a time, and each worker batches what it receives with ``drop_remainder``: split
        row by row, a bucket's rows land on different workers and each worker drops its partial batch (with
        two workers a 2-utterance validation split came back empty). So that source is whole batches (one
        ragged row each), flattened after the split."""
        rows = self._rows(repeat)  # [rows]
        if repeat or self.split == "train" or not self.cfg.data.service_address:
            return tf.data.Dataset.from_tensor_slices(tf.constant(rows, tf.int32))
        batch_sizes = np.array([b.batch_size for b in self.plan.buckets], np.int64)[self.row_buckets[rows]]
        # validation rows come bucket after bucket, each bucket a whole number of batches (see _rows)
        lengths, position = [], 0
        while position < rows.size:
            lengths.append(int(batch_sizes[position]))
            position += int(batch_sizes[position])
        batches = tf.RaggedTensor.from_row_lengths(tf.constant(rows, tf.int32), tf.constant(lengths, tf.int64))
        return tf.data.Dataset.from_tensor_slices(batches).flat_map(tf.data.Dataset.from_tensor_slices)

    def dataset(self, repeat: bool = True) -> tf.data.Dataset:
        d = self.cfg.data
        s = self.source
        parallel = tf.data.AUTOTUNE if d.num_workers == AUTOTUNE else d.num_workers
        shuffle = self.split == "train"
        row_buckets = tf.constant(self.row_buckets, tf.int32)
        mel_lengths = tf.constant(s.mel_lengths, tf.int32)
        token_lengths = tf.constant(s.token_lengths, tf.int32)
        speaker_ids = tf.constant(s.speaker_ids, tf.int32)
        tables = {k: tf.constant(v, tf.int32) for k, v in self.reference_tables.items()}
        reference_frames = d.reference_frames

        def parse(row: tf.Tensor) -> dict[str, tf.Tensor]:
            element = s.parse(row)
            element.update(row=row, token_lengths=tf.gather(token_lengths, row),
                           mel_lengths=tf.gather(mel_lengths, row), speaker_ids=tf.gather(speaker_ids, row),
                           bucket=tf.gather(row_buckets, row))
            return element

        def add_reference(position: tf.Tensor, element: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
            seed = tf.stack([tf.constant(d.seed, tf.int64), tf.cast(position, tf.int64) * 2])  # [2]
            other = pick_reference_row(element["row"], seed, tables)
            reference, length = s.reference_mel(other, reference_frames, seed + tf.constant([0, 1], tf.int64))
            return {**element, "reference_mel": reference, "reference_lengths": length}

        rows = self._row_source(repeat)
        if d.use_tf_native_loading:
            dataset = rows.map(parse, num_parallel_calls=parallel).cache()
            if shuffle:
                dataset = dataset.shuffle(d.shuffle_buffer_size, seed=d.seed, reshuffle_each_iteration=True)
            if repeat:
                dataset = dataset.repeat()
        else:
            dataset = rows
            if shuffle:
                dataset = dataset.shuffle(d.shuffle_buffer_size, seed=d.seed, reshuffle_each_iteration=True)
            if repeat:
                dataset = dataset.repeat()
            dataset = dataset.map(parse, num_parallel_calls=parallel)
        dataset = dataset.enumerate().map(add_reference, num_parallel_calls=parallel)
        dataset = dataset.group_by_window(key_func=bucket_key, reduce_func=self._batch_bucket,
                                          window_size_func=self._window_size)
        if self.steps_per_execution > 1:  # K consecutive batches of one bucket -> one [K, batch, ...] block
            steps = self.steps_per_execution
            dataset = dataset.group_by_window(key_func=lambda batch: tf.cast(batch["bucket"][0], tf.int64),
                                              reduce_func=lambda _, window: window.batch(steps, drop_remainder=True),
                                              window_size=steps)
        dataset = dataset.map(lambda batch: {key: batch[key] for key in BATCH_KEYS}, num_parallel_calls=parallel)
        if d.service_address:  # everything above runs on the tf.data service workers (myxtts.data.service)
            from myxtts.data.service import distribute

            dataset = distribute(dataset, d.service_address)
        return self._prefetch(dataset)

    @property
    def checkpointable(self) -> bool:
        """Whether an iterator of ``dataset()`` can be saved in a checkpoint (not through a tf.data service)."""
        return not self.cfg.data.service_address

    def _window_size(self, key: tf.Tensor) -> tf.Tensor:
        return tf.gather(tf.constant([b.batch_size for b in self.plan.buckets], tf.int64), key)

    def _batch_bucket(self, key: tf.Tensor, window: tf.data.Dataset) -> tf.data.Dataset:
        """Pad one bucket's window to the bucket shape (text_length, mel_frames) with drop_remainder."""
        buckets = self.plan.buckets
        text = tf.gather(tf.constant([b.text_length for b in buckets], tf.int64), key)
        mel = tf.gather(tf.constant([b.mel_frames for b in buckets], tf.int64), key)
        scalar = tf.constant([], tf.int64)
        shapes = {"tokens": tf.reshape(text, [1]), "mel": tf.stack([mel, self.source.n_mels]),
                  "reference_mel": tf.constant([self.cfg.data.reference_frames, self.source.n_mels], tf.int64),
                  **{name: scalar for name in ("token_lengths", "mel_lengths", "reference_lengths", "speaker_ids",
                                               "row", "bucket")}}
        return window.padded_batch(self._window_size(key), padded_shapes=shapes, drop_remainder=True)

    def _prefetch(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        # host prefetch only: an iterator ending in prefetch_to_device / copy_to_device is a generator dataset
        # that cannot be checkpointed, so the copy to the accelerator (data.prefetch_to_gpu) is done by the
        # trainer one step ahead of the device (training/device_feed.py), after the checkpointed iterator
        d = self.cfg.data
        buffer = tf.data.AUTOTUNE if d.prefetch_buffer_size == AUTOTUNE else d.prefetch_buffer_size
        return dataset.prefetch(buffer)


def single_clip_rows(speaker_ids: np.ndarray) -> np.ndarray:
    """[utterances] bool: True where the utterance's speaker has no other utterance in the cache."""
    counts = np.bincount(speaker_ids) if speaker_ids.size else np.zeros(0, np.int64)
    return counts[speaker_ids] == 1 if speaker_ids.size else np.zeros(0, dtype=bool)


def _speaker_tables(speaker_ids: np.ndarray) -> dict[str, np.ndarray]:
    """Rows grouped by speaker: members (rows sorted by speaker), and per row its group's start,
    size and its own position inside the group."""
    order = np.argsort(speaker_ids, kind="stable").astype(np.int32)  # [utterances]
    counts = np.bincount(speaker_ids) if speaker_ids.size else np.zeros(0, np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if counts.size else np.zeros(0, np.int64)
    position = np.empty_like(order)
    position[order] = np.arange(order.size, dtype=np.int32) - starts[speaker_ids[order]]
    return {"members": order, "group_start": starts[speaker_ids].astype(np.int32),
            "group_size": counts[speaker_ids].astype(np.int32), "position": position.astype(np.int32)}

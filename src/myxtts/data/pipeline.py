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

Pitch (``model.pitch_conditioning``): the parse map also reads the audio the mel was computed from (the cache's
``.wav`` beside each utterance file, or the decoded clip on the fly) and adds its F0, one value per mel frame
(``myxtts.f0.tracker``, TF ops), padded with zeros like the mel: a ``pitch`` key ``[batch, mel_frames]`` in every batch.

References (voice conditioning): for each utterance, another utterance of the same speaker (chosen
at random among all cached utterances, never the target itself); then a random crop of
``data.reference_frames`` frames (zero-padded when shorter, ``reference_lengths`` = true length).
Single-clip policy (``data.single_clip_policy``): an utterance whose speaker has no other accepted clip is,
with "skip", not trained or validated on (a crop of the target as its own reference would leak the answer);
it stays in the cache, ``prepare`` counts these clips in its report and manifest and the pipeline logs the
count. With "slice" it is trained on with a crop of its own mel as the reference (``self_slice``: at most
``data.reference_frames``, at most half the clip) and ``reference_offsets`` says where the crop starts, so the
mel losses leave those frames unscored (XTTS's masked prompt): copying the reference earns nothing. Validation
never uses it (its references always come from other clips). ``data.self_reference_share`` gives the same
unscored slice of its own clip to that share of the other training examples too (a seeded draw per example). Every
batch of such a run carries ``reference_offsets`` (-1 for a reference from another clip).

Speaker augmentation (``data.voice_warp``, training only): after the reference map, each example's target mel,
reference mel and F0 move along the frequency axis by one drawn factor (``myxtts.data.voice_warp``): one voice that
no clip has, the pair still one speaker. Validation hears the corpus's own voices.

Several corpora (``data.corpora``): the training rows of each corpus are shuffled and repeated on their own and
drawn with ``sample_from_datasets`` at the corpora's normalised weights (``corpus_weights``), before the parse
map; validation reads its rows as they are.
All random ops are stateless, seeded by (data.seed, element position), so a run is reproducible.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from myxtts.cache_files import PLAN_FILE
from myxtts.config import AUTOTUNE
from myxtts.data.buckets import BucketParams, BucketPlan, FillReport, log_misfits, plan_buckets
from myxtts.data.cache import FeatureCache
from myxtts.data.corpus import corpus_sources
from myxtts.data.mel_stats import MelStats
from myxtts.data.service import distribute
from myxtts.data.sources import (CacheSource, WavSource, pick_reference_row, self_slice, single_clip_rows,
                                 speaker_tables)
from myxtts.data.voice_warp import VoiceWarp
from myxtts.errors import InputError

# The pipeline's functions are plain TF ops with no Python control flow on tensors, so tf.data need not run
# AutoGraph's source conversion on them (and on everything they call) each time a dataset is built.
graph_only = tf.autograph.experimental.do_not_convert

logger = logging.getLogger(__name__)

BATCH_KEYS = ("tokens", "token_lengths", "mel", "mel_lengths", "reference_mel", "reference_lengths", "speaker_ids")
PITCH_KEY = "pitch"  # with model.pitch_conditioning: frame F0 [batch, mel_frames] Hz, 0 unvoiced and at padding
# with data.single_clip_policy "slice": [batch] int32, the first target frame of a reference cut from the target itself
# (its reference_lengths frames are not scored by the mel losses), -1 for a reference from another clip
REFERENCE_OFFSET_KEY = "reference_offsets"


@graph_only
def bucket_key(element: dict[str, tf.Tensor]) -> tf.Tensor:
    return tf.cast(element["bucket"], tf.int64)


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
        self.source = WavSource(cfg) if d.use_tf_native_loading else CacheSource(cfg, cache)
        s = self.source
        if mel_stats is not None:  # read by the sources' parse maps, which are traced later
            if mel_stats.n_mels != s.n_mels:
                raise ValueError(f"mel statistics of {mel_stats.n_mels} bins for {s.n_mels}-bin mels.")
            s.mel_stats = mel_stats
        self.mel_stats = s.mel_stats  # MelStats: batches hold (log mel - mean) / std; the trainer saves them
        self.plan = self._load_plan()
        # batches carry reference_offsets when any reference may be a slice of its own target (every split alike:
        # one signature); validation's references all come from other clips
        self.self_slices = d.single_clip_policy == "slice" or d.self_reference_share > 0
        self.self_reference_share = d.self_reference_share if split == "train" else 0.0
        self.batch_keys = (BATCH_KEYS + ((PITCH_KEY,) if cfg.model.pitch_conditioning else ())
                           + ((REFERENCE_OFFSET_KEY,) if self.self_slices else ()))
        self.row_buckets = self.plan.assign(s.token_lengths, s.mel_lengths)  # [utterances], -1 = fits no bucket
        wanted = set(s.manifest["splits"][split])
        in_split = np.array([utterance_id in wanted for utterance_id in s.ids], dtype=bool)
        split_rows = np.flatnonzero(in_split)
        self.skipped_ids = log_misfits(self.plan, [s.ids[i] for i in split_rows], s.token_lengths[split_rows],
                                       s.mel_lengths[split_rows], split=split)
        self.reference_tables = speaker_tables(s.speaker_ids)
        alone = single_clip_rows(s.speaker_ids)  # [utterances] bool: no other clip of the speaker
        self.single_clip_ids = [s.ids[i] for i in split_rows[alone[split_rows]]]
        # validation references always come from other clips
        sliced = d.single_clip_policy == "slice" and split == "train"
        if self.single_clip_ids and sliced:
            logger.info("single-clip speakers: %d %s clip(s) trained with a slice of themselves as the reference, "
                        "its frames not scored (data.single_clip_policy: slice)", len(self.single_clip_ids), split)
        elif self.single_clip_ids:
            logger.warning("single-clip speakers: %d %s clip(s) not trained on (no other clip of the speaker to use "
                           "as reference; data.single_clip_policy: slice trains on them): %s",
                           len(self.single_clip_ids), split,
                           ", ".join(self.single_clip_ids[:10]) + (" ..." if len(self.single_clip_ids) > 10 else ""))
        usable = (self.row_buckets[split_rows] >= 0) & (~alone[split_rows] | sliced)
        self.rows = split_rows[usable]  # [fitting utterances of the split that have a reference]
        # speaker augmentation (data.voice_warp), training examples only: validation hears the corpus's own voices
        self.voice_warp = (VoiceWarp(d.voice_warp, s.n_mels, cfg.audio.fmin, cfg.audio.fmax, self.mel_stats)
                           if d.voice_warp > 0 and split == "train" else None)
        if self.rows.size == 0:
            raise InputError(f"No {split} utterance fits the bucket plan ({self.plan.describe()}); raise "
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

    def buckets_in_use(self) -> list[int]:
        """Indices of the buckets this split's utterances fall in: the only shapes its batches take (a validation
        pass emits no other, so only these need a compiled validate step)."""
        return sorted(int(index) for index in np.unique(self.row_buckets[self.rows]))

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
            if PITCH_KEY in self.batch_keys:
                out[-1][PITCH_KEY] = tf.TensorSpec([b.batch_size, b.mel_frames], tf.float32)
            if REFERENCE_OFFSET_KEY in self.batch_keys:
                out[-1][REFERENCE_OFFSET_KEY] = tf.TensorSpec([b.batch_size], tf.int32)
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

    def corpus_weights(self) -> dict[int, float]:
        """Per corpus (its position in data.corpora) that has rows in this split: its share of the training
        utterances drawn (the configured weights, normalised over those corpora)."""
        sources = corpus_sources(self.cfg)
        present = sorted(int(i) for i in np.unique(self.source_corpus_ids[self.rows]))
        total = sum(sources[i].weight for i in present)
        return {i: sources[i].weight / total for i in present}

    @property
    def source_corpus_ids(self) -> np.ndarray:
        return getattr(self.source, "corpus_ids", np.zeros(len(self.source.ids), np.int32))  # [utterances]

    def _weighted_rows(self, rows: np.ndarray) -> tf.data.Dataset:
        """Endless training rows drawn corpus by corpus at their weights (``corpus_weights``): each corpus' rows
        shuffled and repeated on their own, then sampled with a seeded choice (checkpointable, like the rest)."""
        d = self.cfg.data
        weights = self.corpus_weights()
        corpus_ids = self.source_corpus_ids
        streams = []
        for index in weights:
            members = rows[corpus_ids[rows] == index]  # [rows of this corpus], in the seeded permutation's order
            stream = tf.data.Dataset.from_tensor_slices(tf.constant(members, tf.int32))
            stream = stream.shuffle(min(d.shuffle_buffer_size, members.size), seed=d.seed + index,
                                    reshuffle_each_iteration=True)
            streams.append(stream.repeat())
        return tf.data.Dataset.sample_from_datasets(streams, weights=list(weights.values()), seed=d.seed)

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

        @graph_only
        def parse(row: tf.Tensor) -> dict[str, tf.Tensor]:
            element = s.parse(row)
            element.update(row=row, token_lengths=tf.gather(token_lengths, row),
                           mel_lengths=tf.gather(mel_lengths, row), speaker_ids=tf.gather(speaker_ids, row),
                           bucket=tf.gather(row_buckets, row))
            return element

        @graph_only
        def other_clip(element: dict[str, tf.Tensor], seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
            other = pick_reference_row(element["row"], seed, tables)
            reference, length = s.reference_mel(other, reference_frames, seed + tf.constant([0, 1], tf.int64))
            return reference, length, tf.constant(-1, tf.int32)

        @graph_only
        def add_reference(position: tf.Tensor, element: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
            seed = tf.stack([tf.constant(d.seed, tf.int64), tf.cast(position, tf.int64) * 2])  # [2]
            if not self.self_slices:
                reference, length, _ = other_clip(element, seed)
                return {**element, "reference_mel": reference, "reference_lengths": length}
            own = tf.gather(tables["group_size"], element["row"]) <= 1  # a single-clip speaker (policy "slice")
            if self.self_reference_share > 0:  # and a share of the others (data.self_reference_share)
                draw = tf.random.stateless_uniform([], tf.stack([tf.constant(d.seed + 2, tf.int64),
                                                                 tf.cast(position, tf.int64)]))
                own = own | (draw < self.self_reference_share)
            reference, length, offset = tf.cond(own, lambda: self_slice(element["mel"], reference_frames, seed),
                                                lambda: other_clip(element, seed))
            return {**element, "reference_mel": reference, "reference_lengths": length, REFERENCE_OFFSET_KEY: offset}

        rows = self._row_source(repeat)
        if d.use_tf_native_loading:
            dataset = rows.map(parse, num_parallel_calls=parallel).cache()
            if shuffle:
                dataset = dataset.shuffle(d.shuffle_buffer_size, seed=d.seed, reshuffle_each_iteration=True)
            if repeat:
                dataset = dataset.repeat()
        elif shuffle and repeat and len(self.corpus_weights()) > 1:  # several corpora: each drawn at its weight
            dataset = self._weighted_rows(self._rows(repeat)).map(parse, num_parallel_calls=parallel)
        else:
            dataset = rows
            if shuffle:
                dataset = dataset.shuffle(d.shuffle_buffer_size, seed=d.seed, reshuffle_each_iteration=True)
            if repeat:
                dataset = dataset.repeat()
            dataset = dataset.map(parse, num_parallel_calls=parallel)
        dataset = dataset.enumerate().map(add_reference, num_parallel_calls=parallel)
        if self.voice_warp is not None:  # target, reference and F0 of an example warped together: one new voice
            dataset = dataset.enumerate().map(graph_only(lambda position, element: self.voice_warp(
                element, tf.stack([tf.constant(d.seed + 1, tf.int64), tf.cast(position, tf.int64)]))),
                num_parallel_calls=parallel)
        dataset = dataset.group_by_window(key_func=bucket_key, reduce_func=self._batch_bucket,
                                          window_size_func=self._window_size)
        if self.steps_per_execution > 1:  # K consecutive batches of one bucket -> one [K, batch, ...] block
            steps = self.steps_per_execution
            dataset = dataset.group_by_window(
                key_func=graph_only(lambda batch: tf.cast(batch["bucket"][0], tf.int64)),
                reduce_func=graph_only(lambda _, window: window.batch(steps, drop_remainder=True)), window_size=steps)
        dataset = dataset.map(graph_only(lambda batch: {key: batch[key] for key in self.batch_keys}),
                              num_parallel_calls=parallel)
        if d.service_address:  # everything above runs on the tf.data service workers (myxtts.data.service)
            dataset = distribute(dataset, d.service_address)
        return self._prefetch(dataset)

    @property
    def checkpointable(self) -> bool:
        """Whether an iterator of ``dataset()`` can be saved in a checkpoint (not through a tf.data service)."""
        return not self.cfg.data.service_address

    @graph_only
    def _window_size(self, key: tf.Tensor) -> tf.Tensor:
        return tf.gather(tf.constant([b.batch_size for b in self.plan.buckets], tf.int64), key)

    @graph_only
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
        if REFERENCE_OFFSET_KEY in self.batch_keys:
            shapes[REFERENCE_OFFSET_KEY] = scalar
        if PITCH_KEY in self.batch_keys:
            shapes[PITCH_KEY] = tf.reshape(mel, [1])
        return window.padded_batch(self._window_size(key), padded_shapes=shapes, drop_remainder=True)

    def _prefetch(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        # host prefetch only: an iterator ending in prefetch_to_device / copy_to_device is a generator dataset
        # that cannot be checkpointed, so the copy to the accelerator (data.prefetch_to_gpu) is done by the
        # trainer one step ahead of the device (training/device_feed.py), after the checkpointed iterator
        d = self.cfg.data
        buffer = tf.data.AUTOTUNE if d.prefetch_buffer_size == AUTOTUNE else d.prefetch_buffer_size
        return dataset.prefetch(buffer)

"""InputPipeline on the prepared bundled corpus: static shapes, padding, normalisation, streaming, resume. Several
speakers' references and on-the-fly parity: test_reference_clips.py."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
import tensorflow as tf

from myxtts.data.cache import FeatureCache
from myxtts.data.pipeline import BATCH_KEYS, InputPipeline
from myxtts.data.sources import crop_and_pad, crop_start, pick_reference_row, speaker_tables, uniform_index

FORBIDDEN_OPS = ("PyFunc", "EagerPyFunc", "PyFuncStateless", "Generator")


def shapes_of(batch: dict[str, tf.Tensor]) -> dict[str, tuple]:
    return {key: tuple(value.shape) for key, value in batch.items()}


def signature_shapes(pipeline: InputPipeline) -> list[dict[str, tuple]]:
    return [{key: tuple(spec.shape) for key, spec in signature.items()} for signature in pipeline.signatures()]


def by_tokens(cache: FeatureCache) -> dict[tuple, int]:
    return {tuple(cache.utterance_tokens(i).tolist()): i for i in range(len(cache))}


def with_data(cfg, **changes):
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, **changes))


@pytest.fixture(scope="module")
def cache(prepared_cache) -> FeatureCache:
    return FeatureCache.load(prepared_cache)


def test_signatures_are_static_and_follow_the_contract(prepared_cache) -> None:
    pipeline = InputPipeline(prepared_cache)
    signatures = pipeline.signatures()
    assert len(signatures) == len(pipeline.plan.buckets) <= prepared_cache.data.num_buckets
    for signature, bucket in zip(signatures, pipeline.plan.buckets):
        assert tuple(signature) == BATCH_KEYS
        assert all(spec.shape.is_fully_defined() for spec in signature.values())
        assert signature["tokens"].dtype == tf.int32 and signature["mel"].dtype == tf.float32
        assert tuple(signature["mel"].shape) == (bucket.batch_size, bucket.mel_frames, prepared_cache.audio.n_mels)
        assert bucket.mel_frames % prepared_cache.model.reduction_factor == 0
        assert tuple(signature["reference_mel"].shape) == (bucket.batch_size, 96, prepared_cache.audio.n_mels)


def test_three_shuffled_epochs_only_produce_declared_shapes(prepared_cache, cache) -> None:
    pipeline = InputPipeline(prepared_cache, cache=cache)
    allowed = signature_shapes(pipeline)
    dataset = pipeline.dataset(repeat=False)
    counts = np.bincount(pipeline.row_buckets[pipeline.rows], minlength=len(pipeline.plan.buckets))
    orders = []
    for _ in range(3):
        seen = np.zeros(len(pipeline.plan.buckets), dtype=int)
        order = []
        for batch in dataset:
            shape = shapes_of(batch)
            assert shape in allowed
            index = allowed.index(shape)
            seen[index] += pipeline.plan.buckets[index].batch_size
            order.append(tuple(batch["token_lengths"].numpy()))
        # drop_remainder: whole batches only, less than one batch left over per bucket
        sizes = np.array([b.batch_size for b in pipeline.plan.buckets])
        assert np.all(seen <= counts) and np.all(counts - seen < sizes)
        orders.append(order)
    assert orders[0] != orders[1] or orders[1] != orders[2]  # reshuffled each epoch


def test_padding_is_zero_and_content_equals_the_cache(prepared_cache, cache) -> None:
    pipeline = InputPipeline(prepared_cache, cache=cache)
    lookup = by_tokens(cache)
    checked = 0
    for batch in pipeline.dataset().take(6):
        batch = {key: value.numpy() for key, value in batch.items()}
        for i in range(batch["tokens"].shape[0]):
            token_length, mel_length = batch["token_lengths"][i], batch["mel_lengths"][i]
            tokens = batch["tokens"][i]
            assert np.all(tokens[token_length:] == 0) and tokens[token_length - 1] == 2
            row = lookup[tuple(tokens[:token_length].tolist())]
            assert mel_length == cache.mel_lengths[row] and batch["speaker_ids"][i] == cache.speaker_ids[row]
            np.testing.assert_array_equal(batch["mel"][i, :mel_length],
                                          cache.mel_stats.normalize(cache.utterance_mel(row)))  # normalised
            assert np.all(batch["mel"][i, mel_length:] == 0)
            reference_length = batch["reference_lengths"][i]
            assert 0 < reference_length <= 96
            assert np.all(batch["reference_mel"][i, reference_length:] == 0)
            checked += 1
    assert checked >= 6


def test_runs_are_reproducible_with_the_seed(prepared_cache, cache) -> None:
    first = [b["reference_mel"].numpy() for b in InputPipeline(prepared_cache, cache=cache).dataset().take(3)]
    second = [b["reference_mel"].numpy() for b in InputPipeline(prepared_cache, cache=cache).dataset().take(3)]
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_validation_split_sees_every_utterance_once_per_pass(prepared_cache, cache) -> None:
    pipeline = InputPipeline(prepared_cache, split="validation", cache=cache)
    lookup = by_tokens(cache)
    validation = {cache.ids.index(i) for i in cache.manifest["splits"]["validation"]}
    seen = set()
    for batch in pipeline.dataset(repeat=False):
        assert shapes_of(batch) in signature_shapes(pipeline)
        for tokens, length in zip(batch["tokens"].numpy(), batch["token_lengths"].numpy()):
            seen.add(lookup[tuple(tokens[:length].tolist())])
    assert seen == validation
    # train and validation share the plan, so validation never adds a shape
    assert pipeline.signatures() == InputPipeline(prepared_cache, cache=cache).signatures()


def test_fixed_mode_pads_to_max_and_reports_misfits(prepared_cache, cache, caplog) -> None:
    cap = int(np.sort(cache.mel_lengths)[-3]) // 2 * 2  # the longest clips do not fit
    cfg = with_data(prepared_cache, pad_to_fixed_length=True, max_mel_frames=cap, batch_size=4)
    with caplog.at_level("WARNING"):
        pipeline = InputPipeline(cfg, cache=cache)
    assert len(pipeline.signatures()) == 1
    assert tuple(pipeline.signatures()[0]["mel"].shape) == (4, cap, 80)
    train = set(cache.manifest["splits"]["train"])
    expected = [cache.ids[i] for i in np.flatnonzero(cache.mel_lengths > cap) if cache.ids[i] in train]
    assert expected and pipeline.skipped_ids == expected
    assert str(len(expected)) in caplog.text and expected[0] in caplog.text
    for batch in pipeline.dataset(repeat=False):
        assert shapes_of(batch) == signature_shapes(pipeline)[0]
        assert batch["mel_lengths"].numpy().max() <= cap
    report = pipeline.fill_report()
    assert report.num_shapes == 1 and report.num_skipped == len(expected)
    buckets = InputPipeline(prepared_cache, cache=cache).fill_report()
    assert buckets.mel_fill > report.mel_fill and buckets.text_fill > report.text_fill


def test_dataset_graph_has_no_python_ops(prepared_cache, cache) -> None:
    from tensorflow.core.framework import graph_pb2

    graph = graph_pb2.GraphDef()
    graph.ParseFromString(InputPipeline(prepared_cache, cache=cache).dataset()._as_serialized_graph().numpy())
    ops = {node.op for node in graph.node}
    for function in graph.library.function:
        ops |= {node.op for node in function.node_def}
    assert "GroupByWindowDataset" in ops and any("Prefetch" in op for op in ops)
    assert not [op for op in ops if any(bad in op for bad in FORBIDDEN_OPS)]


# ---- normalised mels -------------------------------------------------------------------------------

def test_batches_are_normalised_with_the_train_split_statistics(prepared_cache, cache) -> None:
    """Every train utterance seen through the pipeline (several buckets, unequal lengths): its real frames are
    (mel - mean) / std of the cached mel, over the split they have per-bin mean 0 and std 1, and padding (target
    and reference) is exactly 0."""
    pipeline = InputPipeline(prepared_cache, cache=cache)
    stats = pipeline.mel_stats
    np.testing.assert_array_equal(stats.mean, cache.mel_mean)
    np.testing.assert_array_equal(stats.std, cache.mel_std)
    lookup = by_tokens(cache)
    seen: dict[int, np.ndarray] = {}
    shapes, lengths = set(), set()
    wanted = set(pipeline.rows.tolist())
    for batch in pipeline.dataset().take(200):
        batch = {key: value.numpy() for key, value in batch.items()}
        shapes.add(batch["mel"].shape)
        for i in range(batch["tokens"].shape[0]):
            row = lookup[tuple(batch["tokens"][i, :batch["token_lengths"][i]].tolist())]
            length, reference_length = batch["mel_lengths"][i], batch["reference_lengths"][i]
            assert np.all(batch["mel"][i, length:] == 0) and np.all(batch["reference_mel"][i, reference_length:] == 0)
            seen[row] = batch["mel"][i, :length]
            lengths.add(int(length))
        if set(seen) == wanted:
            break
    assert set(seen) == wanted and len(shapes) >= 2 and len(lengths) >= 10
    frames = np.concatenate([seen[row] for row in sorted(seen)]).astype(np.float64)  # [real frames, n_mels]
    train = set(cache.split_indices("train").tolist())
    if wanted == train:  # every train utterance fits a bucket and has a reference: exactly the split's statistics
        np.testing.assert_allclose(frames.mean(axis=0), 0.0, atol=1e-4)
        np.testing.assert_allclose(frames.std(axis=0), 1.0, atol=1e-4)
    else:
        np.testing.assert_allclose(frames.mean(axis=0), 0.0, atol=0.1)
        np.testing.assert_allclose(frames.std(axis=0), 1.0, atol=0.1)
    raw = np.concatenate([cache.utterance_mel(row).astype(np.float64) for row in sorted(seen)])
    np.testing.assert_allclose(stats.denormalize(frames), raw, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("source", ["load", "given", "tf_native"])
def test_a_cache_without_mel_stats_is_a_clear_error(prepared_cache, tmp_path, source) -> None:
    from myxtts.data.cache_manifest import CacheError, load_index

    copy = tmp_path / "cache"
    shutil.copytree(prepared_cache.cache_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    del manifest["mel_stats"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    cfg = with_data(prepared_cache, cache_dir=str(copy), use_tf_native_loading=source == "tf_native")
    given = FeatureCache(copy, manifest, load_index(copy)) if source == "given" else None
    with pytest.raises(CacheError) as error:
        InputPipeline(cfg, cache=given)
    message = str(error.value)
    assert str(copy) in message and "myxtts prepare" in message and "mel statistics" in message


# ---- small functions, eagerly and inside map --------------------------------------------------

def test_small_functions_eager_and_in_map() -> None:
    speakers = np.array([0, 1, 0, 0, 2, 1], np.int32)
    tables = {k: tf.constant(v) for k, v in speaker_tables(speakers).items()}
    for position in range(40):
        seed = tf.constant([7, position], tf.int64)
        assert 0 <= int(uniform_index(seed, 5)) < 5 and int(uniform_index(seed, 0)) == 0
        for row in range(6):
            other = int(pick_reference_row(tf.constant(row), seed, tables))
            assert speakers[other] == speakers[row]
            assert (other != row) == (np.sum(speakers == speakers[row]) > 1)
    mel = tf.reshape(tf.range(20 * 3, dtype=tf.float32), [20, 3])
    crop, length = crop_and_pad(mel, crop_start(20, 8, tf.constant([1, 2], tf.int64)), 8)
    assert crop.shape == (8, 3) and int(length) == 8
    start = int(crop[0, 0]) // 3
    np.testing.assert_array_equal(crop.numpy(), mel.numpy()[start:start + 8])
    short, short_length = crop_and_pad(mel[:5], crop_start(5, 8, tf.constant([1, 2], tf.int64)), 8)
    assert int(short_length) == 5 and np.all(short.numpy()[5:] == 0)
    np.testing.assert_array_equal(short.numpy()[:5], mel.numpy()[:5])

    def in_map(row: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        seed = tf.stack([tf.constant(3, tf.int64), tf.cast(row, tf.int64)])
        piece, piece_length = crop_and_pad(mel, crop_start(20, 8, seed), 8)
        return pick_reference_row(row, seed, tables), piece, piece_length

    for row, (other, piece, piece_length) in enumerate(tf.data.Dataset.range(6).map(
            lambda r: in_map(tf.cast(r, tf.int32)))):
        assert speakers[int(other)] == speakers[row] and piece.shape == (8, 3) and int(piece_length) == 8


# ---- streaming: features stay on disk; a saved iterator resumes exactly --------------------------

def test_features_are_streamed_not_embedded_in_the_graph(prepared_cache, cache) -> None:
    graph = InputPipeline(prepared_cache, cache=cache).dataset()._as_serialized_graph().numpy()
    feature_bytes = int(cache.mel_lengths.sum()) * cache.n_mels * 2  # every float16 mel of the cache
    assert len(graph) < feature_bytes / 10  # paths and lengths only, no mel constant
    assert b"ReadFile" in graph


def test_a_saved_iterator_resumes_exactly(prepared_cache, cache, tmp_path) -> None:
    pipeline = InputPipeline(prepared_cache, cache=cache)
    iterator = iter(pipeline.dataset())
    for _ in range(3):
        next(iterator)
    checkpoint = tf.train.Checkpoint(iterator=iterator)
    path = checkpoint.write(str(tmp_path / "iterator"))
    expected = [next(iterator) for _ in range(4)]
    restored = iter(InputPipeline(prepared_cache, cache=cache).dataset())
    tf.train.Checkpoint(iterator=restored).read(path).assert_consumed()
    for want in expected:
        got = next(restored)
        for key in BATCH_KEYS:
            np.testing.assert_array_equal(got[key].numpy(), want[key].numpy())


def test_steps_per_execution_stacks_k_batches_of_one_bucket(prepared_cache, cache) -> None:
    """steps_per_execution = 2: every element is a block [2, batch, ...] of two batches of one bucket, in the
    block signatures; the blocks hold real cached rows of unequal lengths; validation keeps plain batches."""
    pipeline = InputPipeline(prepared_cache, cache=cache, steps_per_execution=2)
    plain = InputPipeline(prepared_cache, cache=cache)
    assert [{k: (2, *v.shape) for k, v in s.items()} for s in plain.signatures()] == \
        [{k: tuple(v.shape) for k, v in s.items()} for s in pipeline.signatures()]
    assert pipeline.batch_signatures() == plain.signatures()
    allowed = signature_shapes(pipeline)
    buckets_seen, lengths = set(), set()
    for block in pipeline.dataset().take(12):
        assert shapes_of(block) in allowed
        rows = block["mel_lengths"].numpy()  # [2, batch]
        bucket = allowed.index(shapes_of(block))
        buckets_seen.add(bucket)
        lengths.update(rows.ravel().tolist())
        for mel_lengths in rows:  # both batches fit the same bucket
            assert np.all(mel_lengths <= pipeline.plan.buckets[bucket].mel_frames)
            assert set(mel_lengths.tolist()) <= set(cache.mel_lengths.tolist())
    assert len(buckets_seen) >= 2 and len(lengths) > 4
    validation = InputPipeline(prepared_cache, split="validation", cache=cache)
    assert validation.steps_per_execution == 1 and validation.signatures() == plain.signatures()


def test_a_small_shuffle_buffer_draws_from_a_seeded_permutation_of_the_corpus(prepared_cache, cache) -> None:
    """The train rows enter the shuffle buffer in a seeded random order, not in cache (speaker folder) order, so a
    buffer smaller than the corpus still mixes all of it: the same order for the same seed, another for another."""
    pipeline = InputPipeline(with_data(prepared_cache, shuffle_buffer_size=2), cache=cache)
    order = pipeline._rows(True)  # [train rows], what the source dataset yields
    assert sorted(order.tolist()) == sorted(pipeline.rows.tolist())
    assert not np.array_equal(order, np.sort(order))
    middle = np.median(order)
    assert (order[:8] < middle).any() and (order[:8] > middle).any()  # the first rows span the corpus
    again = InputPipeline(with_data(prepared_cache, shuffle_buffer_size=2), cache=cache)._rows(True)
    other = InputPipeline(with_data(prepared_cache, seed=7), cache=cache)._rows(True)
    assert np.array_equal(order, again) and not np.array_equal(order, other)

"""Reference clips on a corpus of several speakers with unequal clip counts: a single-clip speaker is counted, no
batch takes its reference from its own target, and the on-the-fly mel equals the cached one."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from myxtts.data.cache import FeatureCache
from myxtts.data.pipeline import InputPipeline
from test_pipeline import by_tokens, shapes_of, signature_shapes, with_data


SPEAKER_CLIPS = {"alice": 5, "bob": 3, "carol": 1}  # carol has a single clip


@pytest.fixture(scope="module")
def multi_speaker(tmp_path_factory, bundled_corpus: Path):
    from myxtts.config import config_from_dict
    from myxtts.data.prepare import prepare

    root = tmp_path_factory.mktemp("multi_speakers")
    lines = [line.split("|") for line in (bundled_corpus / "metadata.csv").read_text(encoding="utf-8").splitlines()
             if line]
    speakers = [name for name, count in SPEAKER_CLIPS.items() for _ in range(count)]
    rows = []
    for speaker, (utterance_id, _, text) in zip(speakers, lines):
        (root / speaker).mkdir(exist_ok=True)
        shutil.copy(bundled_corpus / "wavs" / f"{utterance_id}.wav", root / speaker / f"{utterance_id}.wav")
        rows.append(f"{speaker}/{utterance_id}.wav|{text}|{speaker}")
    (root / "list.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
    cfg = config_from_dict({"data": {"corpus_path": str(root / "list.txt"), "corpus_format": "list",
                                     "cache_dir": str(root / "cache"), "validation_size": 1, "num_buckets": 2,
                                     "batch_frames": 1800, "batch_size": 4, "reference_frames": 64}}, base_dir=root)
    return cfg, prepare(cfg, progress=False)


@pytest.fixture(scope="module")
def two_speaker_cfg(multi_speaker):
    return multi_speaker[0]


def _source_of_reference(reference: np.ndarray, length: int, cache: FeatureCache) -> set[int]:
    """Cache rows whose normalised mel contains ``reference[:length]`` as a contiguous slice."""
    found = set()
    for row in range(len(cache)):
        mel = cache.mel_stats.normalize(cache.utterance_mel(row))
        for start in np.flatnonzero(np.all(mel == reference[0], axis=1)):
            if start + length <= mel.shape[0] and np.array_equal(mel[start:start + length], reference[:length]):
                found.add(row)
    return found


def test_single_clip_speakers_are_counted_by_prepare(multi_speaker) -> None:
    cfg, result = multi_speaker
    manifest = result.manifest
    assert manifest["counts"]["single_clip"] == {"speakers": 1, "clips": 1}
    carol = [i for i in manifest["single_clip_ids"]]
    assert len(carol) == 1 and carol[0].startswith("carol/")
    assert carol[0] not in manifest["splits"]["validation"]  # validation clips all have a reference
    assert "single-clip speakers: 1 speaker(s), 1 clip(s) not trained on" in result.summary()


@pytest.mark.parametrize("split", ["train", "validation"])
def test_no_batch_has_a_reference_cut_from_its_own_target(multi_speaker, split, caplog) -> None:
    cfg, result = multi_speaker
    cache = FeatureCache.load(cfg)
    assert cache.speakers == ["alice", "bob", "carol"]
    lookup = by_tokens(cache)
    with caplog.at_level("WARNING"):
        pipeline = InputPipeline(cfg, split=split, cache=cache)
    carol = cache.ids.index(result.manifest["single_clip_ids"][0])
    if split == "train":
        assert pipeline.single_clip_ids == [cache.ids[carol]] and "single-clip speakers: 1" in caplog.text
    dataset = pipeline.dataset(repeat=split == "train")
    seen_speakers, checked = set(), 0
    for batch in (dataset.take(12) if split == "train" else dataset):
        batch = {key: value.numpy() for key, value in batch.items()}
        for i in range(batch["tokens"].shape[0]):
            row = lookup[tuple(batch["tokens"][i, :batch["token_lengths"][i]].tolist())]
            assert row != carol  # the single-clip speaker's clip is never a training target
            length = batch["reference_lengths"][i]
            target = cache.mel_stats.normalize(cache.utterance_mel(row))
            reference = batch["reference_mel"][i, :length]
            # the reference is no slice of the target's own mel
            assert not any(np.array_equal(target[start:start + length], reference)
                           for start in range(target.shape[0] - length + 1))
            sources = _source_of_reference(batch["reference_mel"][i], length, cache)
            assert sources and row not in sources and carol not in sources
            assert all(cache.speaker_ids[s] == cache.speaker_ids[row] for s in sources)
            assert batch["speaker_ids"][i] == cache.speaker_ids[row]
            seen_speakers.add(int(cache.speaker_ids[row]))
            checked += 1
    assert checked >= (12 if split == "train" else 1)
    if split == "train":
        assert seen_speakers == {0, 1}  # both multi-clip speakers, unequal counts, are trained on


def test_on_the_fly_mel_equals_the_cached_mel(two_speaker_cfg) -> None:
    cache = FeatureCache.load(two_speaker_cfg)
    lookup = by_tokens(cache)
    cfg = with_data(two_speaker_cfg, use_tf_native_loading=True)
    pipeline = InputPipeline(cfg)
    assert pipeline.signatures() == InputPipeline(two_speaker_cfg, cache=cache).signatures()
    allowed = signature_shapes(pipeline)
    checked = 0
    for batch in pipeline.dataset(repeat=False):
        assert shapes_of(batch) in allowed
        batch = {key: value.numpy() for key, value in batch.items()}
        for i in range(batch["tokens"].shape[0]):
            row = lookup[tuple(batch["tokens"][i, :batch["token_lengths"][i]].tolist())]
            length = batch["mel_lengths"][i]
            assert length == cache.mel_lengths[row]
            cached = cache.utterance_mel(row).astype(np.float32)
            # float16 cache; the same (manifest) statistics normalise both sources
            np.testing.assert_allclose(cache.mel_stats.denormalize(batch["mel"][i, :length]), cached, rtol=2e-3,
                                       atol=2e-3)
            assert np.all(batch["mel"][i, length:] == 0)
            assert batch["speaker_ids"][i] == cache.speaker_ids[row]
            reference_length = batch["reference_lengths"][i]
            assert np.all(batch["reference_mel"][i, reference_length:] == 0)
            assert np.abs(batch["reference_mel"][i, :reference_length].mean()) < 1.5  # normalised, not raw (~-5)
            checked += 1
    assert checked >= 4
    graph = pipeline.dataset()._as_serialized_graph().numpy()
    assert not any(op.encode() in graph for op in ("EagerPyFunc", "PyFuncStateless"))

"""Real multi-speaker corpora read as published (Common Voice's validated.tsv + mp3, LibriSpeech's tree), several
corpora in one cache drawn at their weights, held-out speakers, and single-clip speakers trained with a slice of their
own clip as the reference whose frames the loss does not score."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import soundfile
import soxr
import tensorflow as tf

from myxtts.config import config_from_dict
from myxtts.data.cache import FeatureCache
from myxtts.data.corpus import corpus_sources, read_corpus
from myxtts.data.pipeline import REFERENCE_OFFSET_KEY, InputPipeline
from myxtts.data.prepare import prepare
from myxtts.model.losses import compute_losses, loss_normalizers, scored_frame_mask
from myxtts.model.mel_discriminator import MelDiscriminator, adversarial_losses
from test_pipeline import by_tokens, with_data

REPO = Path(__file__).resolve().parents[2]
COMMONVOICE = REPO / "data" / "commonvoice-bundled"
LJSPEECH = REPO / "data" / "ljspeech-bundled"
DOWN_VOTED = "common_voice_en_37052414.mp3"


def _ljspeech_texts() -> dict[str, str]:
    return {line.split("|")[0]: line.split("|")[2] for line in
            (LJSPEECH / "metadata.csv").read_text(encoding="utf-8").splitlines() if line}


def librispeech_tree(root: Path, clips: dict[str, list[str]]) -> Path:
    """LibriSpeech as published: SPEAKER/CHAPTER/SPEAKER-CHAPTER.trans.txt (upper case) + 16-kHz FLAC beside it,
    made from bundled LJSpeech clips resampled to 16 kHz; one FLAC has no transcript line."""
    texts = _ljspeech_texts()
    for speaker, ids in clips.items():
        chapter = root / speaker / "1000"
        chapter.mkdir(parents=True)
        lines = []
        for number, utterance_id in enumerate(ids):
            name = f"{speaker}-1000-{number:04d}"
            audio, rate = soundfile.read(str(LJSPEECH / "wavs" / f"{utterance_id}.wav"), dtype="float32")
            soundfile.write(str(chapter / f"{name}.flac"), soxr.resample(audio, rate, 16000), 16000)
            lines.append(f"{name} {texts[utterance_id].upper()}")
        (chapter / f"{speaker}-1000.trans.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_commonvoice_folder_reads_as_published_with_its_vote_filter() -> None:
    result = read_corpus(COMMONVOICE, "commonvoice")
    assert len(result.entries) == 11
    voted = [r for r in result.rejections if r.reason == "voted_down"]
    assert len(voted) == 1 and DOWN_VOTED in voted[0].message and voted[0].file.endswith("validated.tsv")
    assert voted[0].line == 11  # the tsv's line, header counted
    speakers = Counter(entry.speaker for entry in result.entries)
    assert sorted(speakers.values()) == [1, 1, 3, 3, 3]  # client_id is the speaker
    assert all(entry.audio_path.parent.name == "clips" and entry.id == entry.audio_path.name
               for entry in result.entries)
    lenient = read_corpus(COMMONVOICE, "commonvoice", max_down_votes=1)
    assert len(lenient.entries) == 12 and not lenient.rejections


def test_a_commonvoice_header_without_a_column_is_a_clear_error(tmp_path: Path) -> None:
    shutil.copytree(COMMONVOICE, tmp_path / "cv")
    table = tmp_path / "cv" / "validated.tsv"
    table.write_text(table.read_text(encoding="utf-8").replace("client_id", "speaker", 1), encoding="utf-8")
    with pytest.raises(ValueError, match=r"validated.tsv:1: .*'client_id'"):
        read_corpus(tmp_path / "cv", "commonvoice")


def test_a_missing_corpus_of_several_names_its_item(tmp_path: Path) -> None:
    from myxtts.data.corpus import read_config_corpus

    cfg = config_from_dict({"data": {"corpora": [{"path": str(COMMONVOICE), "format": "commonvoice"},
                                                 {"path": str(tmp_path / "absent"), "format": "librispeech"}],
                                     "cache_dir": str(tmp_path / "cache")}}, base_dir=tmp_path)
    with pytest.raises(ValueError, match=r"data\.corpora\[1\] \(absent, format librispeech\): LibriSpeech corpus .*absent"):
        read_config_corpus(cfg)


def test_corpus_weights_are_refused_where_they_would_not_be_applied(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="data.corpora.*use_tf_native_loading"):
        config_from_dict({"data": {"corpora": [{"path": str(COMMONVOICE), "format": "commonvoice"},
                                               {"path": str(LJSPEECH), "format": "ljspeech", "weight": 3.0}],
                                   "use_tf_native_loading": True}}, base_dir=tmp_path)


def test_librispeech_tree_reads_as_published(tmp_path: Path) -> None:
    ids = sorted(_ljspeech_texts())
    root = librispeech_tree(tmp_path / "LibriSpeech" / "train-clean-100", {"19": ids[:2], "26": ids[2:3]})
    soundfile.write(str(root / "26" / "1000" / "26-1000-0009.flac"), np.zeros(16000, np.float32), 16000)
    result = read_corpus(tmp_path / "LibriSpeech", "librispeech")
    assert [(e.id, e.speaker, e.line_number) for e in result.entries] == [
        ("19-1000-0000", "19", 1), ("19-1000-0001", "19", 2), ("26-1000-0000", "26", 1)]
    assert result.entries[0].text == _ljspeech_texts()[ids[0]].upper()
    assert [r.reason for r in result.rejections] == ["missing_text"] and "26-1000-0009" in result.rejections[0].file


@pytest.fixture(scope="module")
def two_corpora(tmp_path_factory):
    """A 16-kHz LibriSpeech tree (weight 3) and the 22.05-kHz bundled LJSpeech corpus (weight 1) in one cache."""
    root = tmp_path_factory.mktemp("two_corpora")
    ids = sorted(_ljspeech_texts())
    librispeech_tree(root / "librispeech", {"19": ids[:4], "26": ids[4:8], "32": ids[8:9]})
    cfg = config_from_dict({"data": {
        "corpora": [{"path": str(root / "librispeech"), "format": "librispeech", "weight": 3.0, "name": "libri"},
                    {"path": str(LJSPEECH), "format": "ljspeech", "weight": 1.0, "held_out_speakers": 0}],
        "cache_dir": str(root / "cache"), "validation_size": 2, "num_buckets": 2, "batch_frames": 2400,
        "batch_size": 6, "reference_frames": 64, "single_clip_policy": "slice"}}, base_dir=root)
    return cfg, prepare(cfg, progress=False)


def test_two_corpora_at_16_and_22_khz_prepare_into_one_cache(two_corpora) -> None:
    cfg, result = two_corpora
    manifest = result.manifest
    corpora = {c["name"]: c for c in manifest["corpora"]}
    assert corpora["libri"]["source_sample_rates"] == {"16000": 9} and corpora["libri"]["bandwidth_hz"] == 8000
    assert corpora["ljspeech-bundled"]["source_sample_rates"] == {"22050": 32}
    assert corpora["ljspeech-bundled"]["bandwidth_hz"] == cfg.audio.fmax  # 11025 Hz of audio, 8000 Hz of mel
    cache = FeatureCache.load(cfg)
    assert {s.split(":")[0] for s in cache.speakers} == {"libri", "ljspeech-bundled"}
    assert all(i.split("/")[0] in ("libri", "ljspeech-bundled") for i in cache.ids)
    # a 16-kHz clip is resampled to the model's rate: its frames follow its duration at 22,050 Hz
    row = cache.ids.index("libri/19-1000-0000")
    seconds = soundfile.info(str(corpus_sources(cfg)[0].path + "/19/1000/19-1000-0000.flac")).duration
    assert abs(cache.mel_lengths[row] - seconds * cfg.audio.sample_rate / cfg.audio.hop_length) <= 2
    assert "single_clip" in manifest["counts"] and manifest["single_clip_policy"] == "slice"


def test_training_draws_each_corpus_at_its_weight(two_corpora) -> None:
    cfg, _ = two_corpora
    pipeline = InputPipeline(cfg, "train")
    assert pipeline.corpus_weights() == {0: 0.75, 1: 0.25}
    speakers = FeatureCache.load(cfg).speakers
    corpora = Counter()
    for batch in pipeline.dataset().take(60):
        corpora.update(speakers[i].split(":")[0] for i in batch["speaker_ids"].numpy())
    share = corpora["libri"] / sum(corpora.values())
    assert 0.65 < share < 0.85, corpora  # 9 of 41 clips, drawn at 3 : 1 (by count alone it would be 0.22)


def test_a_one_clip_speaker_trains_and_its_reference_frames_are_not_scored(two_corpora) -> None:
    cfg, _ = two_corpora
    cache = FeatureCache.load(cfg)
    alone = cache.speakers.index("libri:32")  # one clip: trained with a slice of itself
    pipeline = InputPipeline(cfg, "train")
    assert "libri/32-1000-0000" in pipeline.single_clip_ids
    seen = None
    for batch in pipeline.dataset().take(80):
        rows = np.flatnonzero(batch["speaker_ids"].numpy() == alone)
        offsets = batch[REFERENCE_OFFSET_KEY].numpy()
        others = np.flatnonzero(batch["speaker_ids"].numpy() != alone)
        assert (offsets[others] == -1).all()  # a speaker with other clips: a reference from another clip
        if rows.size:
            seen = {key: value.numpy() for key, value in batch.items()}
            break
    assert seen is not None, "the single-clip speaker was never drawn"
    row = int(rows[0])
    start, length = int(seen[REFERENCE_OFFSET_KEY][row]), int(seen["reference_lengths"][row])
    mel_length = int(seen["mel_lengths"][row])
    assert 0 <= start and 1 <= length <= min(cfg.data.reference_frames, mel_length // 2)
    # the reference is the target's own frames [start, start + length)
    np.testing.assert_array_equal(seen["reference_mel"][row, :length], seen["mel"][row, start:start + length])
    # the mel losses do not score those frames: a prediction wrong only there costs nothing; wrong elsewhere, it does
    batch = {key: tf.constant(value) for key, value in seen.items()}
    outputs = _perfect_outputs(batch)

    def mel_loss(mel):
        out = {**outputs, "mel_before": mel, "mel_after": mel}
        return float(compute_losses(batch, out, cfg)["mel_l1_after"])

    wrong_inside = seen["mel"].copy()
    wrong_inside[row, start:start + length] += 5.0
    wrong_outside = seen["mel"].copy()
    outside = start + length if start + length < mel_length else 0
    wrong_outside[row, outside] += 5.0
    assert mel_loss(tf.constant(wrong_inside)) == 0.0
    assert mel_loss(tf.constant(wrong_outside)) > 0.0
    # nor does the mel discriminator: its losses read the scored frames of the real and the made mel alone
    discriminator = MelDiscriminator(channels=4)
    discriminator.build((None, None, cfg.audio.n_mels))  # as the training step builds it
    scored = scored_frame_mask(batch, batch["mel"].shape[1])

    def adversarial(real, made):
        return {key: float(value) for key, value in adversarial_losses(
            discriminator, tf.constant(real), tf.constant(made), scored, tf.constant(100.0)).items()}

    made = seen["mel"] + 0.5 * np.random.default_rng(0).standard_normal(seen["mel"].shape).astype(np.float32)
    changed_inside = made.copy()
    changed_inside[row, start:start + length] = -made[row, start:start + length]
    real_inside = seen["mel"].copy()
    real_inside[row, start:start + length] = 0.0
    changed_outside = made.copy()
    changed_outside[row, outside] -= 3.0
    plain = adversarial(seen["mel"], made)
    assert adversarial(real_inside, changed_inside) == plain
    assert adversarial(seen["mel"], changed_outside) != plain
    counts = loss_normalizers(batch, cfg.audio.n_mels)
    total_frames = float(seen["mel_lengths"].sum())
    unscored = sum(float(seen["reference_lengths"][i]) for i in np.flatnonzero(seen[REFERENCE_OFFSET_KEY] >= 0))
    assert float(counts["scored_mel_elements"]) == (total_frames - unscored) * cfg.audio.n_mels
    # validation never takes a reference from its own target
    for batch in InputPipeline(cfg, "validation").dataset(repeat=False):
        assert (batch[REFERENCE_OFFSET_KEY].numpy() == -1).all()


@pytest.mark.parametrize("policy, share", [("slice", 0.5), ("skip", 1.0)])
def test_a_share_of_the_other_speakers_trains_on_slices_of_their_own_clip(two_corpora, policy, share) -> None:
    """data.self_reference_share: that share of the examples whose speaker has other clips take an unscored slice of
    their own clip as the reference too; single-clip speakers keep their policy; validation never slices."""
    cfg = with_data(two_corpora[0], single_clip_policy=policy, self_reference_share=share)
    cache = FeatureCache.load(cfg)
    alone = np.bincount(cache.speaker_ids)[cache.speaker_ids] == 1  # [utterances]
    lookup = by_tokens(cache)
    drawn = {"own": 0, "other": 0, "alone": 0}
    for batch in InputPipeline(cfg, "train").dataset().take(40):
        batch = {key: value.numpy() for key, value in batch.items()}
        for i in range(batch["tokens"].shape[0]):
            row = lookup[tuple(batch["tokens"][i, :batch["token_lengths"][i]].tolist())]
            start, length = int(batch[REFERENCE_OFFSET_KEY][i]), int(batch["reference_lengths"][i])
            if alone[row]:
                assert policy == "slice" and start >= 0  # "skip" never trains on a single-clip speaker
                drawn["alone"] += 1
            elif start >= 0:  # the target's own frames [start, start + length), at most half the clip
                assert 1 <= length <= min(cfg.data.reference_frames, int(batch["mel_lengths"][i]) // 2)
                np.testing.assert_array_equal(batch["reference_mel"][i, :length],
                                              batch["mel"][i, start:start + length])
                drawn["own"] += 1
            else:
                drawn["other"] += 1
    examples = drawn["own"] + drawn["other"]
    assert examples >= 100, drawn
    if share == 1.0:
        assert drawn["other"] == 0, drawn
    else:
        assert 0.35 < drawn["own"] / examples < 0.65, drawn  # a seeded draw per example
    for batch in InputPipeline(cfg, "validation").dataset(repeat=False):
        assert (batch[REFERENCE_OFFSET_KEY].numpy() == -1).all()


@pytest.mark.parametrize("share", [-0.1, 1.5, float("nan")])
def test_a_self_reference_share_outside_0_to_1_is_refused(share, tmp_path: Path) -> None:
    from myxtts.config import ConfigError

    with pytest.raises(ConfigError, match="data.self_reference_share"):
        config_from_dict({"data": {"self_reference_share": share}}, base_dir=tmp_path)


def test_train_vocoder_refuses_a_self_reference_share(tmp_path: Path) -> None:
    from myxtts.training.vocoder_trainer import VocoderTrainingError, check_vocoder_keys

    check_vocoder_keys(config_from_dict({"data": {"self_reference_share": 0.0}}, base_dir=tmp_path))  # the default
    with pytest.raises(VocoderTrainingError, match="data.self_reference_share"):
        check_vocoder_keys(config_from_dict({"data": {"self_reference_share": 0.5}}, base_dir=tmp_path))


def _perfect_outputs(batch: dict) -> dict:
    """Model outputs that reproduce the target mel exactly (the alignment terms are irrelevant to the mel losses)."""
    b, t_mel = batch["mel"].shape[:2]
    t_text = batch["tokens"].shape[1]
    uniform = tf.math.log(tf.fill([b, t_mel, t_text], 1.0 / t_text))
    return {"mel_before": batch["mel"], "mel_after": batch["mel"], "log_alignment": uniform,
            "hard_alignment": tf.zeros([b, t_mel, t_text]), "durations": tf.zeros([b, t_text], tf.int32),
            "log_duration_predictions": tf.zeros([b, t_text])}


def test_held_out_speakers_stay_out_of_training_and_validation(tmp_path: Path) -> None:
    cfg = config_from_dict({"data": {
        "corpora": [{"path": str(COMMONVOICE), "format": "commonvoice", "held_out_speakers": 1}],
        "cache_dir": str(tmp_path / "cache"), "validation_size": 1, "num_buckets": 1, "batch_frames": 2400,
        "batch_size": 4, "reference_frames": 64, "single_clip_policy": "slice"}}, base_dir=tmp_path)
    manifest = prepare(cfg, progress=False).manifest
    held = manifest["held_out_speakers"]
    assert len(held) == 1 and held[0].startswith("commonvoice-bundled:")
    held_ids = set(manifest["splits"]["held_out"])
    assert len(held_ids) == 3  # no speaker has 4 clips: one of the speakers with the most, 3
    assert not held_ids & (set(manifest["splits"]["train"]) | set(manifest["splits"]["validation"]))
    cache = FeatureCache.load(cfg)
    pipeline = InputPipeline(cfg, "train")
    assert not {cache.ids[row] for row in pipeline.rows} & held_ids


def test_a_run_over_both_corpora_trains_without_retracing(two_corpora, tmp_path: Path) -> None:
    """The trainer on the two-corpus cache with self-sliced references: every step's batch carries the offsets, the
    loss is finite and falls, and nothing traces after warm-up."""
    import json

    from myxtts.training import run
    from test_train import TINY_TINY

    cfg, _ = two_corpora
    raw = cfg.to_dict()
    raw["model"].update(TINY_TINY)
    raw["training"].update({"max_steps": 12, "learning_rate": 0.003, "warmup_steps": 2, "log_every": 4,
                            "validate_every": 12, "checkpoint_every": 12, "summary_every": 0, "listen_sentences": 0,
                            "strict_retracing": True})
    run_cfg = config_from_dict(raw, base_dir=cfg.base_dir)
    sliced = []

    def observe(step, batch):
        sliced.append(int((batch[REFERENCE_OFFSET_KEY].numpy() >= 0).sum()))
        return batch

    run(run_cfg, tmp_path / "run", progress=False, batch_filter=observe, echo=lambda _: None)
    from myxtts.config import load_config

    saved = load_config(tmp_path / "run" / "config.yaml")  # what synthesize, pack and --resume read back
    assert [c.path for c in saved.data.corpora] == [c.path for c in run_cfg.data.corpora]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r.get("split") == "train"]
    assert len(sliced) == 12 and sum(sliced) > 0  # the one-clip speaker was trained on
    assert all(np.isfinite(r["total"]) for r in train) and train[-1]["mel_l1_after"] < train[0]["mel_l1_after"]
    assert all(r.get("traces_after_warmup", 0) == 0 for r in records)

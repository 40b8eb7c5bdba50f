"""VCTK and LibriTTS / LibriTTS-R layouts as published, on small fixture trees made from the bundled clips."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile
import soxr

from myxtts.data.corpus import read_corpus


def _write(source: Path, target: Path, rate: int) -> None:
    audio, source_rate = soundfile.read(str(source), dtype="float32")
    target.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(str(target), soxr.resample(audio, source_rate, rate), rate)


@pytest.fixture(scope="module")
def vctk_tree(tmp_path_factory, bundled_corpus: Path) -> Path:
    """VCTK 0.92: txt/<spk>/<utt>.txt and wav48_silence_trimmed/<spk>/<utt>_mic1.flac (+ mic2), 48 kHz FLAC."""
    root = tmp_path_factory.mktemp("vctk")
    wavs = sorted((bundled_corpus / "wavs").glob("*.wav"))
    texts = {line.split("|")[0]: line.split("|")[2] for line in
             (bundled_corpus / "metadata.csv").read_text(encoding="utf-8").splitlines() if line}
    clips = {"p225": wavs[:3], "p226": wavs[3:5]}
    for speaker, sources in clips.items():
        for number, wav in enumerate(sources, start=1):
            utterance = f"{speaker}_{number:03d}"
            _write(wav, root / "wav48_silence_trimmed" / speaker / f"{utterance}_mic1.flac", 48000)
            _write(wav, root / "wav48_silence_trimmed" / speaker / f"{utterance}_mic2.flac", 48000)
            (root / "txt" / speaker).mkdir(parents=True, exist_ok=True)
            (root / "txt" / speaker / f"{utterance}.txt").write_text(texts[wav.stem] + "\n", encoding="utf-8")
    _write(wavs[5], root / "wav48_silence_trimmed" / "p315" / "p315_001_mic1.flac", 48000)  # no transcript
    (root / "txt" / "p226" / "p226_009.txt").write_text("a transcript without audio\n", encoding="utf-8")
    (root / "txt" / "p226" / "p226_010.txt").write_bytes(b"caf\xe9\n")
    return root


def test_vctk_layout_as_published(vctk_tree: Path, make_config) -> None:
    from myxtts.data.cache import FeatureCache
    from myxtts.data.pipeline import InputPipeline
    from myxtts.data.prepare import prepare

    result = read_corpus(vctk_tree, "vctk")
    assert [e.id for e in result.entries] == ["p225/p225_001", "p225/p225_002", "p225/p225_003", "p226/p226_001",
                                              "p226/p226_002"]
    assert [e.speaker for e in result.entries] == ["p225"] * 3 + ["p226"] * 2
    assert all(e.audio_path.name.endswith("_mic1.flac") for e in result.entries)  # first microphone only
    reasons = sorted((Path(r.file).name, r.reason) for r in result.rejections)
    assert reasons == [("p226_009_mic1.flac", "missing_file"), ("p226_010.txt", "non_utf8"),
                       ("p315_001_mic1.flac", "missing_text")]
    cfg = make_config(data={"corpus_path": str(vctk_tree), "corpus_format": "vctk", "validation_size": 1,
                            "num_buckets": 2, "batch_frames": 1800, "batch_size": 2})
    manifest = prepare(cfg, progress=False).manifest
    assert manifest["speakers"] == ["p225", "p226"] and manifest["counts"]["accepted"] == 5
    assert manifest["counts"]["rejected_by_reason"] == {"missing_file": 1, "non_utf8": 1, "missing_text": 1}
    cache = FeatureCache.load(cfg)
    source = soundfile.info(str(result.entries[0].audio_path))
    assert source.samplerate == 48000  # resampled to audio.sample_rate by prepare
    expected = 1 + int(round(source.frames * 22050 / 48000)) // 256
    assert abs(int(cache.mel_lengths[0]) - expected) <= 1
    batch = next(iter(InputPipeline(cfg, cache=cache).dataset()))
    assert set(np.unique(batch["speaker_ids"].numpy())) <= {0, 1}


@pytest.fixture(scope="module")
def libritts_tree(tmp_path_factory, bundled_corpus: Path) -> Path:
    """LibriTTS(-R): <subset>/<speaker>/<chapter>/<spk>_<chap>_<n>_<n>.wav + .normalized.txt / .original.txt."""
    root = tmp_path_factory.mktemp("libritts")
    wavs = sorted((bundled_corpus / "wavs").glob("*.wav"))
    layout = [("19", "198", wavs[0]), ("19", "198", wavs[1]), ("19", "227", wavs[2]), ("103", "1240", wavs[3]),
              ("103", "1240", wavs[4])]
    for number, (speaker, chapter, wav) in enumerate(layout):
        stem = root / "train-clean-100" / speaker / chapter / f"{speaker}_{chapter}_{number:06d}_000000"
        _write(wav, stem.with_name(stem.name + ".wav"), 24000)
        stem.with_name(stem.name + ".original.txt").write_text(f"Original text {number}, Mr. Smith.", encoding="utf-8")
        if number != 2:  # number 2 has only the original transcript
            stem.with_name(stem.name + ".normalized.txt").write_text(f"Normalized text {number}, Mister Smith.",
                                                                     encoding="utf-8")
    orphan = root / "train-clean-100" / "103" / "1240" / "103_1240_000099_000000.wav"
    _write(wavs[5], orphan, 24000)
    return root


def test_libritts_layout_as_published(libritts_tree: Path, make_config) -> None:
    from myxtts.data.prepare import prepare

    for path, prefix in ((libritts_tree, "train-clean-100/"), (libritts_tree / "train-clean-100", "")):
        result = read_corpus(path, "libritts")
        assert [e.id for e in result.entries] == [f"{prefix}103/1240/103_1240_000003_000000",
                                                  f"{prefix}103/1240/103_1240_000004_000000",
                                                  f"{prefix}19/198/19_198_000000_000000",
                                                  f"{prefix}19/198/19_198_000001_000000",
                                                  f"{prefix}19/227/19_227_000002_000000"]
        assert [e.speaker for e in result.entries] == ["103", "103", "19", "19", "19"]
        assert [e.text for e in result.entries][2:] == ["Normalized text 0, Mister Smith.",
                                                        "Normalized text 1, Mister Smith.",
                                                        "Original text 2, Mr. Smith."]
        assert [(Path(r.file).name, r.reason) for r in result.rejections] == [("103_1240_000099_000000.wav",
                                                                               "missing_text")]
    cfg = make_config(data={"corpus_path": str(libritts_tree), "corpus_format": "libritts", "validation_size": 1})
    manifest = prepare(cfg, progress=False).manifest
    assert manifest["speakers"] == ["103", "19"] and manifest["counts"]["accepted"] == 5


def test_unusable_layout_roots_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="wav48_silence_trimmed"):
        read_corpus(tmp_path, "vctk")
    with pytest.raises(ValueError, match="normalized.txt"):
        read_corpus(tmp_path, "libritts")

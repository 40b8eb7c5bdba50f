"""prepare(): every bad input rejected with its named reason; cache reuse, invalidation, crash safety.

Bad corpora are built in tmp_path from copies of the real bundled clips.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile

from myxtts.data.cache import FeatureCache
from myxtts.data.cache_manifest import CacheError
from myxtts.data.prepare import prepare
from myxtts.data.splits import validation_ids

GOOD = 4  # real clips kept as they are


def _read(path: Path) -> tuple[np.ndarray, int]:
    return soundfile.read(str(path), dtype="float32")


@pytest.fixture(scope="module")
def bad_corpus(tmp_path_factory, bundled_corpus: Path) -> tuple[Path, dict[str, str], list[str]]:
    """An LJSpeech-layout corpus: GOOD real clips, one line per bad case, a stereo and a 16 kHz clip."""
    root = tmp_path_factory.mktemp("bad_corpus")
    wavs = root / "wavs"
    wavs.mkdir()
    lines = [line for line in (bundled_corpus / "metadata.csv").read_text(encoding="utf-8").splitlines() if line]
    real = {line.split("|")[0]: line.split("|")[2] for line in lines}
    ids = list(real)
    source = bundled_corpus / "wavs"
    rows: list[bytes] = []
    expected: dict[str, str] = {}  # id (or line marker) -> reason
    for utterance_id in ids[:GOOD]:
        shutil.copy(source / f"{utterance_id}.wav", wavs)
        rows.append(f"{utterance_id}|{real[utterance_id]}|{real[utterance_id]}".encode())
    audio, rate = _read(source / f"{ids[4]}.wav")

    def add(name: str, reason: str | None, text: str = "a perfectly fine sentence") -> None:
        rows.append(f"{name}|{text}|{text}".encode())
        if reason:
            expected[name] = reason

    add("missing", "missing_file")
    (wavs / "zero.wav").write_bytes(b"")
    add("zero", "zero_length")
    (wavs / "notaudio.wav").write_text("<html>this is a web page, not audio</html>\n" * 20)
    add("notaudio", "not_audio")
    whole = (source / f"{ids[5]}.wav").read_bytes()
    (wavs / "truncated.wav").write_bytes(whole[: len(whole) // 2])
    add("truncated", "truncated")
    for name, text, reason in (("emptytext", "   ", "empty_text"), ("unknownchars", "日本語 ###", "unpronounceable"),
                               ("symbolsonly", "{} ### @@", "no_known_characters")):
        shutil.copy(source / f"{ids[6]}.wav", wavs / f"{name}.wav")
        add(name, reason, text)
    shutil.copy(source / f"{ids[6]}.wav", wavs / "fields.wav")
    rows.append(b"fields|only one text")  # 2 fields are fine for LJSpeech; 4 are not:
    rows[-1] = b"fields|a|b|c"
    expected["fields"] = "wrong_field_count"
    shutil.copy(source / f"{ids[6]}.wav", wavs / "latin1.wav")
    rows.append(b"latin1|caf\xe9 cr\xe8me|caf\xe9 cr\xe8me")
    expected["latin1"] = "non_utf8"
    rows.append(rows[0])  # duplicate of the first id
    expected["duplicate"] = "duplicate_id"
    soundfile.write(str(wavs / "short.wav"), audio[: int(0.2 * rate)], rate, subtype="PCM_16")
    add("short", "too_short")
    long_audio = np.concatenate([audio] * int(np.ceil(12.5 * rate / audio.size)))
    soundfile.write(str(wavs / "long.wav"), long_audio, rate, subtype="PCM_16")
    add("long", "too_long")
    soundfile.write(str(wavs / "silent.wav"), audio * 1e-5, rate, subtype="FLOAT")  # peak ~ -100 dBFS
    add("silent", "silent")
    broken = audio.copy()
    broken[100], broken[200] = np.nan, np.inf
    soundfile.write(str(wavs / "nonfinite.wav"), broken, rate, subtype="FLOAT")
    add("nonfinite", "non_finite")
    # converted, not rejected
    soundfile.write(str(wavs / "stereo.wav"), np.stack([audio, audio * 0.5], axis=1), rate, subtype="PCM_16")
    add("stereo", None)
    import soxr
    soundfile.write(str(wavs / "rate16k.wav"), soxr.resample(audio, rate, 16000), 16000, subtype="PCM_16")
    add("rate16k", None)
    (root / "metadata.csv").write_bytes(b"\n".join(rows) + b"\n")
    return root, expected, ids[:GOOD]


@pytest.fixture(scope="module")
def bad_result(bad_corpus, tmp_path_factory):
    from myxtts.config import config_from_dict

    root, _, _ = bad_corpus
    cfg = config_from_dict({"data": {"corpus_path": str(root), "cache_dir": str(root / "cache"),
                                     "validation_size": 1}}, base_dir=root)
    return cfg, prepare(cfg, progress=False)


def test_every_bad_input_is_rejected_with_its_reason(bad_corpus, bad_result) -> None:
    root, expected, good = bad_corpus
    cfg, result = bad_result
    with open(cfg.cache_dir / "rejected.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert set(rows[0]) == {"file", "line", "reason", "message"}
    lines = (root / "metadata.csv").read_bytes().split(b"\n")
    by_id = {}
    for row in rows:
        line = lines[int(row["line"]) - 1]
        name = "duplicate" if row["reason"] == "duplicate_id" else line.split(b"|")[0].decode()
        by_id[name] = row["reason"]
    assert by_id == expected
    manifest = result.manifest
    assert manifest["counts"]["rejected"] == len(expected)
    assert manifest["counts"]["rejected_by_reason"] == {reason: 1 for reason in expected.values()}
    assert manifest["counts"]["accepted"] == GOOD + 2
    summary = result.summary()
    for reason in expected.values():
        assert f"{reason}: 1" in summary
    assert "accepted: 6" in summary


def test_stereo_and_other_rates_are_converted(bad_corpus, bad_result) -> None:
    cfg, _ = bad_result
    cache = FeatureCache.load(cfg)
    index = {utterance_id: i for i, utterance_id in enumerate(cache.ids)}
    assert {"stereo", "rate16k"} <= set(index)
    stereo, rate16k = cache.utterance_mel(index["stereo"]), cache.utterance_mel(index["rate16k"])
    assert stereo.shape[1] == cfg.audio.n_mels
    # 16 kHz was resampled to 22050 Hz: the same number of frames as the stereo version of the same clip
    assert abs(stereo.shape[0] - rate16k.shape[0]) <= 1
    assert np.all(np.isfinite(stereo.astype(np.float32)))


def test_cache_layout_manifest_and_utterance_files(bad_result) -> None:
    cfg, result = bad_result
    manifest = json.loads((cfg.cache_dir / "manifest.json").read_text())
    assert manifest["feature_hash"] == cfg.feature_hash() and manifest["mel_dtype"] == "float16"
    assert manifest["format_version"] == 5 and manifest["languages"] == ["en"]
    assert manifest["pitch_tracker"]["method"] == "yin"  # the F0 tracker's settings: other ones rebuild the cache
    files = sorted(p.relative_to(cfg.cache_dir).as_posix() for p in (cfg.cache_dir / "utterances").glob("*/*.utt"))
    accepted = [c["file"] for c in manifest["clips"].values() if "file" in c]
    assert len(files) == 6 and sorted(accepted) == files  # one file per accepted utterance, nothing else
    audio = sorted(p.relative_to(cfg.cache_dir).as_posix() for p in (cfg.cache_dir / "utterances").glob("*/*.wav"))
    assert audio == sorted(file[:-len(".utt")] + ".wav" for file in files)  # each with its audio beside it
    # the 9 audio / text verdicts are remembered per clip (line-level ones are re-read from the metadata)
    assert sum("rejected" in c for c in manifest["clips"].values()) == 9
    assert len(manifest["splits"]["validation"]) == 1 and len(manifest["splits"]["train"]) == 5
    assert {"tensorflow", "numpy", "myxtts"} <= set(manifest["versions"]) and manifest["created"]
    assert manifest["hours"] > 0 and manifest["speakers"] == ["ljspeech"]
    assert (cfg.cache_dir / "vocab.json").is_file() and (cfg.cache_dir / "bucket_plan.json").is_file()
    assert not list(cfg.cache_dir.rglob("*.tmp"))
    cache = FeatureCache.load(cfg)
    assert cache.mel.dtype == np.float16 and cache.mel.shape[0] == cache.mel_lengths.sum()
    assert cache.tokens.shape[0] == cache.token_lengths.sum()
    tokens = cache.utterance_tokens(0)
    assert tokens[0] == 1 and tokens[-1] == 2  # bos ... eos
    from myxtts.data.cache import read_utterance
    file_tokens, file_mel, file_pitch = read_utterance(cfg.cache_dir / cache.files[0])
    np.testing.assert_array_equal(file_tokens, tokens)
    assert file_mel.shape == (cache.mel_lengths[0], cfg.audio.n_mels)
    assert file_pitch.shape == (cache.mel_lengths[0],) and np.all(file_pitch >= 0)  # F0 per frame, 0 unvoiced


RERUN_CHILD = """
import json, sys
from myxtts.config import config_from_dict
from myxtts.data.prepare import prepare
result = prepare(config_from_dict(json.loads(sys.argv[1]), base_dir=sys.argv[2]), progress=False)
print(json.dumps({"reused": result.reused, "tensorflow_loaded": "tensorflow" in sys.modules}))
"""


def test_rerun_reuses_and_a_changed_parameter_rebuilds(tmp_path: Path, corpus_copy: Path) -> None:
    from myxtts.config import config_from_dict

    metadata = corpus_copy / "metadata.csv"
    keep = metadata.read_text(encoding="utf-8").splitlines()[:5]
    metadata.write_text("\n".join(keep) + "\n", encoding="utf-8")
    raw = {"data": {"corpus_path": str(corpus_copy), "cache_dir": str(tmp_path / "cache"), "validation_size": 1}}
    cfg = config_from_dict(raw, base_dir=tmp_path)
    first = prepare(cfg, progress=False)
    assert not first.reused
    again = prepare(cfg, progress=False)
    assert again.reused and again.reason == "" and "reused" in again.summary()
    assert again.manifest["created"] == first.manifest["created"]
    # the check alone, in a fresh process: it never loads TensorFlow (seconds of import on an up-to-date cache)
    child = subprocess.run([sys.executable, "-c", RERUN_CHILD, json.dumps(raw), str(tmp_path)],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    assert json.loads(child.stdout.splitlines()[-1]) == {"reused": True, "tensorflow_loaded": False}
    changed = config_from_dict({**raw, "audio": {"n_mels": 64}}, base_dir=tmp_path)
    assert changed.feature_hash() != cfg.feature_hash()
    with pytest.raises(CacheError, match="feature hash changed"):
        FeatureCache.load(changed)  # stale features are never used
    from myxtts.data.prepare import CacheParametersChanged

    before = {p: p.read_bytes() for p in cfg.cache_dir.rglob("*") if p.is_file() and not p.name.endswith(".lock")}
    with pytest.raises(CacheParametersChanged, match=r"audio\.n_mels: 80 -> 64.*--rebuild.*data\.cache_dir"):
        prepare(changed, progress=False)  # the cache of the other parameters is never replaced unasked
    assert {p: p.read_bytes() for p in before} == before and FeatureCache.load(cfg).manifest == again.manifest
    rebuilt = prepare(changed, progress=False, rebuild=True)
    assert not rebuilt.reused and "feature hash changed" in rebuilt.reason and "audio.n_mels: 80 -> 64" in rebuilt.reason
    assert FeatureCache.load(changed).mel.shape[1] == 64


def test_a_changed_corpus_is_detected_and_only_new_or_changed_clips_processed(tmp_path: Path,
                                                                              corpus_copy: Path) -> None:
    from myxtts.config import config_from_dict

    metadata = corpus_copy / "metadata.csv"
    lines = metadata.read_text(encoding="utf-8").splitlines()
    metadata.write_text("\n".join(lines[:6]) + "\n", encoding="utf-8")
    cfg = config_from_dict({"data": {"corpus_path": str(corpus_copy), "cache_dir": str(tmp_path / "cache"),
                                     "validation_size": 1}}, base_dir=tmp_path)
    first = prepare(cfg, progress=False)
    assert first.manifest["update"]["processed"] == 6 and "6 processed (6 new" in first.summary()
    ids = [line.split("|")[0] for line in lines]
    before = FeatureCache.load(cfg)
    kept_file = before.files[before.ids.index(ids[1])]
    # edit one WAV (louder and shorter), edit one transcript, add two lines, remove one line
    audio, rate = _read(corpus_copy / "wavs" / f"{ids[0]}.wav")
    soundfile.write(str(corpus_copy / "wavs" / f"{ids[0]}.wav"), audio[: audio.size * 3 // 4] * 1.5, rate,
                    subtype="PCM_16")
    edited = lines[2].split("|")
    edited[2] = "an entirely different transcript"
    new_lines = [lines[0], lines[1], "|".join(edited), lines[3], lines[5], lines[6], lines[7]]  # line 4 removed
    metadata.write_text("\n".join(new_lines) + "\n", encoding="utf-8")
    # files someone else put in the cache, at names like prepare's: the update deletes none of them
    foreign = {"utterances/s/x.wav": b"a recording", "utterances/ab/notes.txt": b"notes", "shards/0.tar": b"tar",
               "notes.tmp": b"tmp", "index-mine.npz": b"npz", "manifest.json.bak": b"bak"}
    for name, data in foreign.items():
        (cfg.cache_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (cfg.cache_dir / name).write_bytes(data)
    second = prepare(cfg, progress=False)
    assert {name: (cfg.cache_dir / name).read_bytes() for name in foreign} == foreign
    for name in foreign:
        (cfg.cache_dir / name).unlink()
    assert not second.reused
    assert "corpus changed: 2 added, 2 changed, 1 removed, 3 unchanged" in second.reason
    update = second.manifest["update"]
    assert (update["processed"], update["added"], update["changed"], update["removed"]) == (4, 2, 2, 1)
    assert "4 processed (2 new, 2 changed" in second.summary() and "clips/s" in second.summary()
    after = FeatureCache.load(cfg)
    assert after.ids == [line.split("|")[0] for line in new_lines] and ids[4] not in after.ids
    assert after.files[after.ids.index(ids[1])] == kept_file  # unchanged clip: same file, not recomputed
    row = after.ids.index(ids[0])
    assert after.mel_lengths[row] < before.mel_lengths[before.ids.index(ids[0])]  # the edited audio
    from myxtts.text import TextProcessor

    edited_tokens = TextProcessor(cfg.text).encode("an entirely different transcript")  # the new transcript's
    assert after.utterance_tokens(after.ids.index(ids[2])).tolist() == edited_tokens
    on_disk = {p.relative_to(cfg.cache_dir).as_posix() for p in (cfg.cache_dir / "utterances").glob("*/*")}
    # the files (and audio) of removed / replaced clips deleted
    assert on_disk == set(after.files) | {file[:-len(".utt")] + ".wav" for file in after.files}
    third = prepare(cfg, progress=False)
    assert third.reused and "up to date" in third.summary()
    fresh = tmp_path / "fresh"  # the updated cache equals a cache built from scratch
    fresh_cfg = config_from_dict({"data": {"corpus_path": str(corpus_copy), "cache_dir": str(fresh),
                                           "validation_size": 1}}, base_dir=tmp_path)
    prepare(fresh_cfg, progress=False)
    rebuilt = FeatureCache.load(fresh_cfg)
    assert rebuilt.ids == after.ids and np.array_equal(rebuilt.mel_lengths, after.mel_lengths)
    np.testing.assert_array_equal(rebuilt.tokens, after.tokens)
    np.testing.assert_array_equal(rebuilt.mel, after.mel)
    assert second.manifest["splits"] == json.loads((fresh / "manifest.json").read_text())["splits"]
    # the mel statistics follow the update: those of the train split now, equal to a fresh build's
    assert second.manifest["mel_stats"] == json.loads((fresh / "manifest.json").read_text())["mel_stats"]
    assert second.manifest["mel_stats"]["mean"] != first.manifest["mel_stats"]["mean"]
    reference = _numpy_train_stats(after)
    np.testing.assert_allclose(after.mel_mean, reference[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(after.mel_std, reference[1], rtol=1e-6, atol=1e-6)


def _numpy_train_stats(cache: FeatureCache) -> tuple[np.ndarray, np.ndarray]:
    """Per-bin mean and std (float64, every frame at once) of the train split's cached mels."""
    frames = np.concatenate([cache.utterance_mel(i).astype(np.float64) for i in cache.split_indices("train")])
    return frames.mean(axis=0), frames.std(axis=0)


def test_mel_stats_are_those_of_the_train_split_only(bad_result) -> None:
    from myxtts.data.mel_stats import STD_FLOOR

    cfg, result = bad_result
    cache = FeatureCache.load(cfg)
    assert cache.mel_mean.dtype == np.float32 and cache.mel_mean.shape == (cfg.audio.n_mels,)
    assert cache.mel_std.dtype == np.float32 and cache.mel_std.shape == (cfg.audio.n_mels,)
    mean, std = _numpy_train_stats(cache)
    np.testing.assert_allclose(cache.mel_mean, mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(cache.mel_std, np.maximum(std, STD_FLOOR), rtol=1e-6, atol=1e-6)
    train = cache.split_indices("train")
    stats = result.manifest["mel_stats"]
    assert stats["frames"] == int(cache.mel_lengths[train].sum()) and stats["utterances"] == len(train) == 5
    assert stats["split"] == "train"
    # the validation clip is left out: statistics of every utterance differ
    everything = np.concatenate([cache.utterance_mel(i).astype(np.float64) for i in range(len(cache))])
    assert np.abs(everything.mean(axis=0) - cache.mel_mean).max() > 1e-3


def test_a_manifest_without_mel_stats_is_rebuilt_never_reused(tmp_path: Path, corpus_copy: Path) -> None:
    from myxtts.config import config_from_dict

    metadata = corpus_copy / "metadata.csv"
    metadata.write_text("\n".join(metadata.read_text(encoding="utf-8").splitlines()[:4]) + "\n", encoding="utf-8")
    cfg = config_from_dict({"data": {"corpus_path": str(corpus_copy), "cache_dir": str(tmp_path / "cache"),
                                     "validation_size": 1}}, base_dir=tmp_path)
    first = prepare(cfg, progress=False)
    path = cfg.cache_dir / "manifest.json"
    for old_format in (False, True):  # a manifest that lost its statistics; a format-2 cache (before them)
        manifest = json.loads(path.read_text())
        del manifest["mel_stats"]
        if old_format:
            manifest["format_version"] = 2
        path.write_text(json.dumps(manifest))
        with pytest.raises(CacheError, match="myxtts prepare"):
            FeatureCache.load(cfg)  # never used as it is
        again = prepare(cfg, progress=False)
        assert not again.reused and again.manifest["update"]["processed"] == 4  # a full rebuild
        assert ("cache format 2" if old_format else "no mel statistics") in again.reason
        assert again.manifest["mel_stats"] == first.manifest["mel_stats"]
        np.testing.assert_array_equal(FeatureCache.load(cfg).mel_mean, first.manifest["mel_stats"]["mean"])


def test_a_crashed_build_never_looks_valid(tmp_path: Path, corpus_copy: Path, monkeypatch) -> None:
    from myxtts.config import config_from_dict
    from myxtts.data import prepare as prepare_module

    metadata = corpus_copy / "metadata.csv"
    metadata.write_text("\n".join(metadata.read_text(encoding="utf-8").splitlines()[:4]) + "\n", encoding="utf-8")
    raw = {"data": {"corpus_path": str(corpus_copy), "cache_dir": str(tmp_path / "cache"), "validation_size": 1}}
    cfg = config_from_dict(raw, base_dir=tmp_path)
    first = prepare(cfg, progress=False)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("simulated crash while writing rejected.csv")

    monkeypatch.setattr(prepare_module, "_write_rejections", crash)
    with pytest.raises(KeyboardInterrupt):
        prepare(cfg, force=True, progress=False)  # same parameters: the valid cache stays until a new one lands
    assert FeatureCache.load(cfg).manifest == first.manifest
    changed = config_from_dict({**raw, "audio": {"n_mels": 64}}, base_dir=tmp_path)
    with pytest.raises(KeyboardInterrupt):
        prepare(changed, progress=False, rebuild=True)  # other parameters: the stale cache is unusable, and says so
    assert not (cfg.cache_dir / "manifest.json").exists()
    with pytest.raises(CacheError, match="manifest.json missing"):
        FeatureCache.load(changed)
    monkeypatch.undo()
    assert not prepare(changed, progress=False).reused  # rebuilt (no cache of other parameters is left), not reused


def test_validation_split_is_deterministic_and_stable() -> None:
    ids = [f"LJ{i:03d}" for i in range(50)]
    chosen = validation_ids(ids, 5)
    assert len(chosen) == 5 and chosen == validation_ids(list(reversed(ids)), 5)
    assert set(chosen) <= set(validation_ids(ids + ["extra"], 6))


def test_too_few_accepted_clips_is_a_clear_error(tmp_path: Path, corpus_copy: Path) -> None:
    from myxtts.config import config_from_dict

    metadata = corpus_copy / "metadata.csv"
    metadata.write_text(metadata.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    cfg = config_from_dict({"data": {"corpus_path": str(corpus_copy), "cache_dir": str(tmp_path / "cache"),
                                     "validation_size": 2}}, base_dir=tmp_path)
    with pytest.raises(CacheError, match="data.validation_size"):
        prepare(cfg, progress=False)

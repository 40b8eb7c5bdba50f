"""The F0 tracker (myxtts.f0.tracker) on the bundled real clips, and the pitch the pipeline adds with
model.pitch_conditioning."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import soundfile
import tensorflow as tf

from conftest import bundled_wavs
from myxtts.mel import MelFrontend
from myxtts.config import AudioConfig
from myxtts.f0.tracker import difference_function, frame_f0

HOP = AudioConfig().hop_length


def _clip(index: int) -> tuple[np.ndarray, int]:
    waveform, rate = soundfile.read(str(bundled_wavs()[index]), dtype="float32")
    return waveform, rate


def test_one_value_per_mel_frame_in_a_real_voice_range():
    frontend = MelFrontend(AudioConfig())
    lengths = set()
    for index in (0, 5, 11):  # clips of unequal lengths
        waveform, rate = _clip(index)
        f0 = frame_f0(waveform, rate, HOP).numpy()
        assert f0.shape == (frontend(waveform).shape[0],) == (1 + waveform.size // HOP,)
        lengths.add(f0.size)
        voiced = f0[f0 > 0]
        assert 0.25 < voiced.size / f0.size < 0.85  # speech: voiced vowels between consonants and pauses
        assert 150.0 < np.median(voiced) < 300.0  # LJSpeech's reader, a female voice
        assert voiced.min() >= 60.0 and voiced.max() <= 520.0  # the search range (+ interpolation)
    assert len(lengths) == 3
    assert not np.any(frame_f0(np.zeros(4000, np.float32), rate, HOP).numpy())  # silence: unvoiced


def test_the_difference_function_is_yins_sum_on_real_frames():
    """The FFT form (frame-length transforms, no zero padding) equals the definition sum_j (x_j - x_{j+lag})^2 over
    the window, for every lag the tracker reads: nothing wraps around."""
    waveform, _ = _clip(4)
    frame_length, max_lag = 1024, 368  # the tracker's at 22,050 Hz and 60 Hz
    window, num_lags = frame_length - max_lag - 1, max_lag + 2
    frames = np.stack([waveform[start:start + frame_length]
                       for start in range(0, waveform.size - frame_length, 2003)]).astype(np.float64)  # [T, frame]
    ours = difference_function(tf.constant(frames, tf.float32), window, num_lags).numpy()  # [T, lags]
    direct = np.stack([np.sum((frames[:, :window] - frames[:, lag:lag + window]) ** 2, axis=1)
                       for lag in range(num_lags)], axis=1)  # [T, lags]
    assert ours.shape == direct.shape and frames.shape[0] >= 10
    scale = np.sum(frames[:, :window] ** 2, axis=1, keepdims=True)  # [T, 1] e(0)
    assert np.all(np.abs(ours - direct) <= 1e-4 * scale + 1e-6)  # each frame within float32 of its own energy
    with pytest.raises(ValueError, match="leaves the frame"):
        difference_function(tf.constant(frames, tf.float32), window + 1, num_lags)


def test_a_voice_played_faster_is_higher_by_the_same_ratio():
    """The clip resampled to 1/1.25 of its samples and read at the same rate: every frequency x 1.25."""
    soxr = pytest.importorskip("soxr")
    waveform, rate = _clip(3)
    faster = soxr.resample(waveform, rate, rate / 1.25).astype(np.float32)
    original, shifted = frame_f0(waveform, rate, HOP).numpy(), frame_f0(faster, rate, HOP).numpy()
    ratio = np.median(shifted[shifted > 0]) / np.median(original[original > 0])
    assert 1.19 < ratio < 1.31


def test_agrees_with_librosa_pyin_on_real_clips():
    librosa = pytest.importorskip("librosa")
    agreement, errors = [], []
    for index in (1, 7):
        waveform, rate = _clip(index)
        ours = frame_f0(waveform, rate, HOP).numpy()
        theirs, voiced, _ = librosa.pyin(waveform, fmin=60, fmax=500, sr=rate, frame_length=1024, hop_length=HOP)
        assert theirs.size == ours.size
        agreement.append(np.mean((ours > 0) == voiced))
        both = (ours > 0) & voiced
        errors.append(np.abs(1200.0 * np.log2(ours[both] / theirs[both])))  # cents
    cents = np.concatenate(errors)
    assert np.mean(agreement) > 0.75
    assert np.median(cents) < 25.0 and np.mean(cents > 50.0) < 0.2


def test_the_pipeline_adds_each_clips_own_pitch_frame_by_frame(prepared_cache):
    """The track prepare stored is the tracker's on the clip's cached audio (float16: within a cent)."""
    from myxtts.data.cache import FeatureCache, audio_file
    from myxtts.data.pipeline import BATCH_KEYS, InputPipeline

    cfg = dataclasses.replace(prepared_cache, model=dataclasses.replace(prepared_cache.model, pitch_conditioning=True))
    cache = FeatureCache.load(cfg)
    pipeline = InputPipeline(cfg, cache=cache)
    for signature, bucket in zip(pipeline.signatures(), pipeline.plan.buckets):
        assert tuple(signature) == (*BATCH_KEYS, "pitch")
        assert tuple(signature["pitch"].shape) == (bucket.batch_size, bucket.mel_frames)
    rows = {tuple(cache.utterance_tokens(i).tolist()): i for i in range(len(cache))}
    shapes, checked = set(), 0
    for batch in pipeline.dataset().take(4):
        pitch, lengths = batch["pitch"].numpy(), batch["mel_lengths"].numpy()  # [batch, mel_frames], [batch]
        shapes.add(pitch.shape)
        assert pitch.shape == batch["mel"].shape[:2]
        for item in range(2):
            tokens = batch["tokens"].numpy()[item][: batch["token_lengths"].numpy()[item]]
            row = rows[tuple(tokens.tolist())]
            waveform, rate = soundfile.read(str(cache.cache_dir / audio_file(cache.files[row])), dtype="float32")
            expected = frame_f0(waveform, rate, HOP).numpy()
            assert expected.size == lengths[item] == cache.mel_lengths[row]
            np.testing.assert_allclose(pitch[item, : lengths[item]], expected, rtol=1e-3, atol=0)
            assert not pitch[item, lengths[item]:].any()  # padding: 0
            checked += 1
    assert checked == 8 and len(shapes) >= 2  # several buckets, rows of unequal lengths
    assert tf.reduce_any(batch["pitch"] > 0)


def test_a_cache_of_other_tracker_settings_is_not_used(prepared_cache, monkeypatch):
    """The manifest records the tracker's settings; other settings in the code make the cache stale (rebuilt)."""
    from myxtts import f0
    from myxtts.data.cache import FeatureCache
    from myxtts.data.cache_manifest import CacheError, check_manifest, feature_params

    manifest, problem = check_manifest(prepared_cache.cache_dir, prepared_cache.feature_hash())
    assert problem == "" and manifest["pitch_tracker"] == f0.TRACKER
    changed = {**f0.TRACKER, "threshold": f0.THRESHOLD + 0.05}
    monkeypatch.setattr(f0, "TRACKER", changed)
    manifest, problem = check_manifest(prepared_cache.cache_dir, prepared_cache.feature_hash(),
                                       feature_params(prepared_cache))
    assert manifest is None and "F0 tracker's settings changed" in problem and "'threshold'" in problem
    with pytest.raises(CacheError, match="myxtts prepare"):
        FeatureCache.load(prepared_cache)

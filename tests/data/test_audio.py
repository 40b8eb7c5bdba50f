"""myxtts.audio on the bundled LJSpeech clips: loaders, errors, and the TF mel front-end vs librosa."""

from __future__ import annotations

import struct
from pathlib import Path

import librosa
import numpy as np
import pytest
import soundfile
import soxr
import tensorflow as tf

from conftest import bundled_wavs
from myxtts.audio import AudioError, load_audio, tf_load_wav
from myxtts.mel import MelFrontend, sharpen_across_bins, slaney_mel_matrix
from myxtts.config import AudioConfig

SAMPLE_RATE = 22050


@pytest.fixture(scope="module")
def clips() -> list[np.ndarray]:
    return [load_audio(path, SAMPLE_RATE) for path in bundled_wavs(4)]


@pytest.fixture(scope="module")
def frontend() -> MelFrontend:
    return MelFrontend(AudioConfig())


def librosa_mel(wave: np.ndarray, cfg: AudioConfig) -> np.ndarray:
    mel = librosa.feature.melspectrogram(
        y=wave, sr=cfg.sample_rate, n_fft=cfg.n_fft, hop_length=cfg.hop_length, win_length=cfg.win_length,
        n_mels=cfg.n_mels, fmin=cfg.fmin, fmax=cfg.fmax, power=cfg.mel_power, htk=False, norm="slaney",
        center=True, pad_mode="reflect")
    return mel.T  # [frames, n_mels]


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    length = min(len(reference), len(other))
    noise = np.sum((reference[:length] - other[:length]) ** 2)
    return float("inf") if noise == 0 else float(10 * np.log10(np.sum(reference[:length] ** 2) / noise))


# ---- mel front-end ------------------------------------------------------------------------------

def test_mel_matrix_matches_librosa():
    cfg = AudioConfig()
    ours = slaney_mel_matrix(cfg.sample_rate, cfg.n_fft, cfg.n_mels, cfg.fmin, cfg.fmax)
    reference = librosa.filters.mel(sr=cfg.sample_rate, n_fft=cfg.n_fft, n_mels=cfg.n_mels, fmin=cfg.fmin,
                                    fmax=cfg.fmax, htk=False, norm="slaney").T
    assert ours.shape == (cfg.n_fft // 2 + 1, cfg.n_mels)
    assert np.abs(ours - reference).max() / reference.max() < 1e-6


@pytest.mark.parametrize("power", [1.0, 2.0])
@pytest.mark.parametrize("win_length", [1024, 800])
def test_mel_matches_librosa(clips, power, win_length):
    cfg = AudioConfig(mel_power=power, win_length=win_length, fmin=50.0)
    frontend = MelFrontend(cfg)
    for wave in clips[:3]:
        reference = librosa_mel(wave, cfg)
        ours = frontend.linear_mel(wave).numpy()
        assert ours.shape == reference.shape == (frontend.num_frames(len(wave)), cfg.n_mels)
        assert np.abs(ours - reference).max() / reference.max() < 1e-4
        meaningful = reference > 1e-3 * reference.max()  # per element where float32 rounding is not the story
        assert np.max(np.abs(ours - reference)[meaningful] / reference[meaningful]) < 1e-4


@pytest.mark.parametrize("compression", ["natural", "log10", "none"])
def test_log_compression_round_trip(clips, compression):
    cfg = AudioConfig(log_compression=compression, log_floor=1e-4)
    frontend = MelFrontend(cfg)
    linear = frontend.linear_mel(clips[0]).numpy()
    log_mel = frontend(clips[0]).numpy()
    if compression == "natural":
        np.testing.assert_allclose(log_mel, np.log(np.maximum(linear, 1e-4)), rtol=1e-5, atol=1e-5)
    elif compression == "log10":
        np.testing.assert_allclose(log_mel, np.log10(np.maximum(linear, 1e-4)), rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(log_mel, linear)
    restored = frontend.decompress(tf.constant(log_mel)).numpy()
    np.testing.assert_allclose(restored, np.maximum(linear, 1e-4) if compression != "none" else linear,
                               rtol=1e-4, atol=1e-7)


def test_batch_equals_one_at_a_time(frontend, clips):
    singles = [frontend(wave).numpy() for wave in clips]
    assert len({len(wave) for wave in clips}) > 1  # really different lengths
    for padded in (True, False, None):
        batched = frontend.batch(clips, padded=padded)
        for single, together, wave in zip(singles, batched, clips):
            assert together.shape == single.shape == (frontend.num_frames(len(wave)), 80)
            np.testing.assert_allclose(together, single, rtol=0, atol=1e-5)
            if padded is False:
                np.testing.assert_array_equal(together, single)
    # a [batch, samples] tensor of equal-length crops gives the same as each crop alone
    length = min(len(wave) for wave in clips)
    stacked = np.stack([wave[:length] for wave in clips])  # [batch, samples]
    result = frontend(stacked).numpy()
    assert result.shape == (len(clips), frontend.num_frames(length), 80)
    for index, wave in enumerate(clips):
        np.testing.assert_allclose(result[index], frontend(wave[:length]).numpy(), rtol=0, atol=1e-5)


def test_inside_dataset_map_equals_eager(frontend, clips):
    paths = [str(path) for path in bundled_wavs(3)]
    dataset = tf.data.Dataset.from_tensor_slices(paths).map(
        lambda path: frontend(tf_load_wav(path, SAMPLE_RATE)), num_parallel_calls=2, deterministic=True)
    for mel, wave in zip(dataset, clips):
        np.testing.assert_allclose(mel.numpy(), frontend(wave).numpy(), rtol=0, atol=1e-5)


def test_in_graph_ops_equal_compiled_call_inside_map(frontend, clips):
    paths = [str(path) for path in bundled_wavs(3)]
    dataset = tf.data.Dataset.from_tensor_slices(paths).map(
        lambda path: frontend.in_graph(tf_load_wav(path, SAMPLE_RATE)), num_parallel_calls=2, deterministic=True)
    for mel, wave in zip(dataset, clips):
        np.testing.assert_allclose(mel.numpy(), frontend(wave).numpy(), rtol=0, atol=1e-5)
    batch = np.stack([clips[0][:20000], clips[1][:20000]])  # [2, samples]
    np.testing.assert_allclose(frontend.in_graph(tf.constant(batch)).numpy(), frontend(batch).numpy(), atol=1e-5)


def test_no_retrace_over_lengths(clips):
    frontend = MelFrontend(AudioConfig())
    for length in (4000, 7001, 12345, 20000, 33333):
        frontend(clips[1][:length])
        frontend(np.stack([clips[1][:length], clips[2][:length]]))
    assert frontend._mel_single.experimental_get_tracing_count() == 1
    assert frontend._mel_batch.experimental_get_tracing_count() == 1
    assert frontend.tracing_count() == 2


def test_sharpening_across_bins_raises_band_contrast_and_leaves_flat_spectra(frontend, clips):
    """model.mel_sharpening's filter on real clips' log mels: more contrast between neighbouring bins with the amount,
    each frame on its own (a batch of unequal clips equals each alone), a mel flat across bins unchanged."""
    mels = [frontend(wave).numpy() for wave in clips[:2]]  # [frames, n_mels] each, unequal frames
    assert mels[0].shape[0] != mels[1].shape[0]

    def bin_to_bin(mel):
        return float(np.abs(np.diff(np.asarray(mel), axis=-1)).mean())

    contrast = [bin_to_bin(sharpen_across_bins(mels[0], amount)) for amount in (0.0, 0.5, 1.0)]
    np.testing.assert_array_equal(sharpen_across_bins(mels[0], 0.0).numpy(), mels[0])
    assert contrast[0] < contrast[1] < contrast[2], contrast
    sharpened = sharpen_across_bins(mels[0], 0.5).numpy()
    assert sharpened.shape == mels[0].shape and np.all(np.isfinite(sharpened))
    # frames are independent: the shorter clip padded into a batch with the longer one is itself, cut to its frames
    frames = mels[1].shape[0]
    batch = np.zeros((2, max(m.shape[0] for m in mels), 80), np.float32)
    for row, mel in enumerate(mels):
        batch[row, :mel.shape[0]] = mel
    np.testing.assert_allclose(sharpen_across_bins(batch, 0.5).numpy()[1, :frames],
                               sharpen_across_bins(mels[1], 0.5).numpy(), atol=1e-6)
    # each frame's level across bins (a flat spectrum) is left as it is: only the contrast between bins moves
    flat = np.repeat(mels[0].mean(axis=1, keepdims=True), 80, axis=1)  # [frames, n_mels]
    np.testing.assert_allclose(sharpen_across_bins(flat, 2.0).numpy(), flat, atol=1e-5)


def test_bad_rank_and_short_clip(frontend):
    with pytest.raises(ValueError, match=r"\[samples\] or \[batch, samples\]"):
        frontend(np.zeros((1, 2, 3000), np.float32))
    with pytest.raises(ValueError, match="reflect padding"):
        frontend.batch([np.zeros(100, np.float32)], padded=True)


# ---- load_audio ---------------------------------------------------------------------------------

def test_load_bundled_clip_is_mono_float32():
    path = bundled_wavs(1)[0]
    wave = load_audio(path, SAMPLE_RATE)
    info = soundfile.info(str(path))
    assert wave.dtype == np.float32 and wave.ndim == 1 and len(wave) == info.frames
    assert 0.05 < np.abs(wave).max() <= 1.0


def test_stereo_is_downmixed(tmp_path, clips):
    left, right = clips[0], 0.5 * clips[0][::-1].copy()
    path = tmp_path / "stereo.wav"
    soundfile.write(path, np.stack([left, right], axis=1), SAMPLE_RATE, subtype="FLOAT")
    wave = load_audio(path, SAMPLE_RATE)
    np.testing.assert_allclose(wave, (left + right) / 2, atol=1e-6)
    # the TF loader downmixes the same way (16-bit version)
    soundfile.write(tmp_path / "stereo16.wav", np.stack([left, right], axis=1), SAMPLE_RATE, subtype="PCM_16")
    np.testing.assert_allclose(tf_load_wav(str(tmp_path / "stereo16.wav"), SAMPLE_RATE).numpy(),
                               load_audio(tmp_path / "stereo16.wav", SAMPLE_RATE), atol=1e-6)


# (file name, rate written, subtype, container, minimum SNR in dB vs the original)
FORMATS = [
    ("rate16k.wav", 16000, "PCM_16", "WAV", 12.0),  # loses everything above 8 kHz
    ("rate44k.wav", 44100, "PCM_16", "WAV", 35.0),
    ("rate48k.flac", 48000, "PCM_24", "FLAC", 35.0),
    ("unsigned8.wav", SAMPLE_RATE, "PCM_U8", "WAV", 20.0),
    ("pcm24.wav", SAMPLE_RATE, "PCM_24", "WAV", 90.0),
    ("float.wav", SAMPLE_RATE, "FLOAT", "WAV", 90.0),
    ("lossless.flac", SAMPLE_RATE, "PCM_16", "FLAC", 90.0),
    ("vorbis.ogg", SAMPLE_RATE, "VORBIS", "OGG", 12.0),  # lossy codec
]


@pytest.mark.parametrize("name,rate,subtype,container,min_snr", FORMATS)
def test_other_formats_and_rates(tmp_path, frontend, clips, name, rate, subtype, container, min_snr):
    original = clips[1]
    written = soxr.resample(original, SAMPLE_RATE, rate) if rate != SAMPLE_RATE else original
    path = tmp_path / name
    soundfile.write(path, written, rate, subtype=subtype, format=container)
    wave = load_audio(path, SAMPLE_RATE)
    assert wave.dtype == np.float32
    assert abs(len(wave) - len(original)) <= 2  # same duration at 22050 Hz
    assert snr_db(original, wave) >= min_snr
    if container != "OGG" and subtype != "PCM_U8":
        length = min(len(wave), len(original))
        difference = np.abs(frontend(wave[:length]).numpy() - frontend(original[:length]).numpy())
        assert difference.mean() < 0.1  # log-mel bands (<= 8 kHz) survive resampling


# ---- AudioError reasons -------------------------------------------------------------------------

def _bad_files(directory: Path) -> dict[str, Path]:
    raw = bundled_wavs(1)[0].read_bytes()
    wave, rate = soundfile.read(str(bundled_wavs(1)[0]), dtype="float32")
    files = {
        "missing_file": directory / "does_not_exist.wav",
        "zero_length": directory / "empty.wav",
        "not_audio": directory / "page.wav",
        "truncated": directory / "cut.wav",
        "non_finite": directory / "nan.wav",
        "unreadable": directory / "codec.wav",
    }
    files["zero_length"].write_bytes(b"")
    files["not_audio"].write_text("<html><body>404 not found</body></html>\n" * 20)
    files["truncated"].write_bytes(raw[: len(raw) // 2])
    wave = wave.copy()
    wave[1000] = np.nan
    wave[2000] = np.inf
    soundfile.write(files["non_finite"], wave, rate, subtype="FLOAT")
    malformed = bytearray(raw)
    malformed[16:20] = struct.pack("<I", 2)  # a 'fmt ' chunk too short to describe the audio
    files["unreadable"].write_bytes(bytes(malformed))
    return files


def test_each_audio_error_reason(tmp_path):
    for reason, path in _bad_files(tmp_path).items():
        with pytest.raises(AudioError) as caught:
            load_audio(path, SAMPLE_RATE)
        assert caught.value.reason == reason, (reason, str(caught.value))
        assert str(path) in str(caught.value)
        assert isinstance(caught.value, ValueError)


def test_header_only_wav_is_truncated(tmp_path):
    raw = bundled_wavs(1)[0].read_bytes()
    path = tmp_path / "header_only.wav"
    path.write_bytes(raw[:44])
    with pytest.raises(AudioError, match="declares") as caught:
        load_audio(path, SAMPLE_RATE)
    assert caught.value.reason == "truncated"


# ---- tf_load_wav --------------------------------------------------------------------------------

def test_tf_load_wav_equals_load_audio():
    for path in bundled_wavs(2):
        tf_wave = tf_load_wav(str(path), SAMPLE_RATE).numpy()
        np.testing.assert_array_equal(tf_wave, load_audio(path, SAMPLE_RATE))


def test_tf_load_wav_rate_mismatch(tmp_path, clips):
    path = tmp_path / "rate16k.wav"
    soundfile.write(path, soxr.resample(clips[0], SAMPLE_RATE, 16000), 16000, subtype="PCM_16")
    with pytest.raises(tf.errors.InvalidArgumentError, match="myxtts prepare") as caught:
        tf_load_wav(str(path), SAMPLE_RATE)
    assert "rate16k.wav" in str(caught.value) and "16000" in str(caught.value)
    dataset = tf.data.Dataset.from_tensor_slices([str(path)]).map(lambda p: tf_load_wav(p, SAMPLE_RATE))
    with pytest.raises(tf.errors.InvalidArgumentError, match="myxtts prepare"):
        next(iter(dataset))

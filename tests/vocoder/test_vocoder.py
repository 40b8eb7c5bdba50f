"""myxtts.vocoder: Griffin-Lim on real clips (mel -> audio -> mel) and write_wav."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
import tensorflow as tf

from conftest import bundled_wavs
from myxtts.audio import load_audio
from myxtts.mel import MelFrontend
from myxtts.config import AudioConfig
from myxtts.vocoder import GriffinLim, Vocoder, write_wav

SAMPLE_RATE = 22050


@pytest.fixture(scope="module")
def clips() -> list[np.ndarray]:
    return [load_audio(path, SAMPLE_RATE) for path in bundled_wavs(3)]


def spectral_convergence(reference: np.ndarray, estimate: np.ndarray) -> float:
    return float(np.linalg.norm(reference - estimate) / np.linalg.norm(reference))


@pytest.mark.parametrize("power", [1.0, 2.0])
def test_griffin_lim_round_trip_beats_random_phase(clips, power):
    cfg = AudioConfig(mel_power=power, griffin_lim_iters=32)
    frontend = MelFrontend(cfg)
    wave = clips[1]
    log_mel = frontend(wave).numpy()  # [frames, n_mels]
    frames = log_mel.shape[0]
    results = {}
    for name, vocoder in (("baseline", GriffinLim(cfg, iterations=0)), ("griffin_lim", GriffinLim(cfg))):
        audio = vocoder(log_mel).numpy()
        assert audio.shape == ((frames - 1) * cfg.hop_length,)
        assert np.all(np.isfinite(audio))
        assert np.sqrt(np.mean(audio ** 2)) > 0.1 * np.sqrt(np.mean(wave ** 2))  # not silent
        rebuilt = frontend(audio).numpy()
        assert rebuilt.shape == log_mel.shape  # frames survive the round trip
        results[name] = (np.abs(rebuilt - log_mel).mean(),
                         spectral_convergence(frontend.linear_mel(wave).numpy(), frontend.linear_mel(audio).numpy()))
    assert GriffinLim(cfg).iterations == 32  # from audio.griffin_lim_iters
    baseline_l1, baseline_sc = results["baseline"]
    l1, sc = results["griffin_lim"]
    assert l1 < 0.6 * baseline_l1, results
    assert sc < 0.4 * baseline_sc, results
    assert sc < 0.25, results


def test_batch_and_no_retrace(clips):
    cfg = AudioConfig(griffin_lim_iters=4)
    frontend = MelFrontend(cfg)
    vocoder = GriffinLim(cfg)
    assert isinstance(vocoder, Vocoder)
    for length in (5000, 9000, 13000, 17000, 21000):
        vocoder(frontend(clips[0][:length]))
    assert vocoder._single.experimental_get_tracing_count() == 1
    mels = frontend(np.stack([clips[0][:20000], clips[2][:20000]]))  # [2, frames, n_mels]
    batched = vocoder(mels).numpy()
    assert batched.shape == (2, (mels.shape[1] - 1) * cfg.hop_length)
    for index in range(2):  # fixed seed, so the batch equals each clip alone
        np.testing.assert_allclose(batched[index], vocoder(mels[index]).numpy(), atol=1e-4)
    vocoder(frontend(np.stack([clips[0][:7000]] * 3)))
    assert vocoder.tracing_count() == 2
    with pytest.raises(ValueError, match="audio.n_mels"):
        vocoder(tf.zeros([10, 40]))


def test_write_wav_16bit(tmp_path, clips):
    path = write_wav(tmp_path / "out" / "a.wav", clips[0] * 1.5, SAMPLE_RATE)  # over full scale: clipped
    info = soundfile.info(str(path))
    assert (info.samplerate, info.subtype, info.channels, info.frames) == (SAMPLE_RATE, "PCM_16", 1, len(clips[0]))
    back = load_audio(path, SAMPLE_RATE)
    np.testing.assert_allclose(back, np.clip(clips[0] * 1.5, -1, 1), atol=1 / 32768 + 1e-6)
    with pytest.raises(ValueError, match="NaN"):
        write_wav(tmp_path / "bad.wav", np.array([0.0, np.nan], np.float32), SAMPLE_RATE)

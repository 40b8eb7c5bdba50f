"""myxtts.evaluation.metrics: MCD-DTW on real clips, DTW, attention diagonality and focus rate."""

from __future__ import annotations

import librosa
import numpy as np
import pytest

from conftest import bundled_wavs
from myxtts.evaluation.metrics import attention_diagonality, dtw_path, focus_rate, mel_cepstral_distortion

SAMPLE_RATE = 22050


@pytest.fixture(scope="module")
def clips() -> list[np.ndarray]:
    from myxtts.audio import load_audio
    return [load_audio(path, SAMPLE_RATE) for path in bundled_wavs(3)[1:]]


def test_mcd_identity_shift_stretch_and_other_clip(clips):
    wave, other = clips
    assert mel_cepstral_distortion(wave, wave, SAMPLE_RATE) == pytest.approx(0.0, abs=1e-9)
    shifted = np.concatenate([np.zeros(100, np.float32), wave])
    stretched = librosa.effects.time_stretch(wave, rate=1.1)
    different = mel_cepstral_distortion(wave, other, SAMPLE_RATE)
    for near in (shifted, stretched):
        distortion = mel_cepstral_distortion(wave, near, SAMPLE_RATE)
        assert 0 < distortion < 0.5 * different
    assert mel_cepstral_distortion(wave, shifted, SAMPLE_RATE) < 0.25 * different


def test_mcd_grows_with_noise(clips):
    wave = clips[0]
    noise = np.random.default_rng(0).standard_normal(len(wave)).astype(np.float32)
    distortions = [mel_cepstral_distortion(wave, wave + level * noise, SAMPLE_RATE)
                   for level in (0.001, 0.003, 0.01, 0.03, 0.1)]
    assert all(a < b for a, b in zip(distortions, distortions[1:])), distortions


def test_dtw_path_on_known_cost():
    cost = np.ones((4, 6))
    cost[[0, 1, 1, 2, 3, 3], [0, 1, 2, 3, 4, 5]] = 0.0  # a zero-cost route with a horizontal step
    path = dtw_path(cost)
    assert path[0].tolist() == [0, 0] and path[-1].tolist() == [3, 5]
    assert cost[path[:, 0], path[:, 1]].sum() == 0.0
    assert np.all(np.diff(path, axis=0) >= 0) and np.all(np.diff(path, axis=0).sum(axis=1) >= 1)


def diagonal_alignment(steps: int, tokens: int, width: float = 1.0) -> np.ndarray:
    centres = (np.arange(steps) + 0.5) / steps * tokens - 0.5  # [steps]
    weights = np.exp(-0.5 * ((np.arange(tokens)[None, :] - centres[:, None]) / width) ** 2)
    return weights / weights.sum(axis=1, keepdims=True)  # [steps, tokens]


def test_diagonality_and_focus():
    diagonal = diagonal_alignment(200, 60)
    uniform = np.full((200, 60), 1 / 60)
    assert attention_diagonality(diagonal, 60, 200) > 0.95
    assert attention_diagonality(uniform, 60, 200) < 0.3
    assert focus_rate(diagonal) > 0.35 and focus_rate(uniform) == pytest.approx(1 / 60)
    # padding outside the true lengths is ignored
    padded = np.zeros((256, 80))
    padded[:200, :60] = diagonal
    padded[200:, :] = 1 / 80
    assert attention_diagonality(padded, 60, 200) == pytest.approx(attention_diagonality(diagonal))
    with pytest.raises(ValueError, match="fit the alignment"):
        attention_diagonality(diagonal, 61, 200)

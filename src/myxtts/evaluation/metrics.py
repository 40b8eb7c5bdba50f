"""Objective metrics: mel cepstral distortion with DTW, attention diagonality and focus rate.

Everything here runs on host numpy after synthesis (evaluation, not the training hot path).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from myxtts.mel import MelFrontend
from myxtts.config import AudioConfig

_MCD_SCALE = 10.0 / math.log(10.0)  # natural-log cepstra -> dB


@functools.lru_cache(maxsize=4)
def _frontend(sample_rate: int) -> MelFrontend:
    # the project's front-end (natural log, slaney mel) at the clip's rate; fmax clipped to Nyquist
    return MelFrontend(AudioConfig(sample_rate=sample_rate, fmax=min(8000.0, sample_rate / 2.0),
                                   log_compression="natural", log_floor=1e-5))


def _dct_matrix(size: int) -> np.ndarray:
    """Orthonormal DCT-II: ``[size, size]`` with coefficients on rows (row 0 is c0)."""
    positions = np.arange(size)
    matrix = np.cos(np.pi * positions[:, None] * (2 * positions[None, :] + 1) / (2 * size))
    matrix *= np.sqrt(2.0 / size)
    matrix[0] /= np.sqrt(2.0)
    return matrix


def log_mel(wave: np.ndarray, sample_rate: int) -> np.ndarray:
    """Natural-log slaney mel ``[frames, n_mels]`` (float64) of a waveform at ``sample_rate``."""
    return _frontend(int(sample_rate))(np.asarray(wave, dtype=np.float32)).numpy().astype(np.float64)


def mel_cepstrum(log_mel: np.ndarray, num_coefficients: int = 13) -> np.ndarray:
    """Mel cepstra c1..c``num_coefficients`` of ``[frames, n_mels]`` (c0, the loudness, excluded)."""
    if num_coefficients >= log_mel.shape[1]:
        raise ValueError(f"num_coefficients ({num_coefficients}) must be below the number of mel bands "
                         f"({log_mel.shape[1]}).")
    cepstra = log_mel @ _dct_matrix(log_mel.shape[1]).T  # [frames, n_mels]
    return cepstra[:, 1: num_coefficients + 1]


def dtw_path(cost: np.ndarray) -> np.ndarray:
    """Minimum-cost monotonic alignment through ``cost [n, m]`` with steps (1,0), (0,1), (1,1).

    Vectorised over anti-diagonals (cells of one anti-diagonal only depend on the two before it).
    Returns the path as ``[length, 2]`` index pairs from (0, 0) to (n-1, m-1).
    """
    rows, cols = cost.shape
    total = np.full((rows + 1, cols + 1), np.inf)  # total[i + 1, j + 1] = best cost ending at (i, j)
    total[0, 0] = 0.0
    move = np.zeros((rows, cols), dtype=np.int8)  # 0 diagonal, 1 from above (i-1), 2 from the left (j-1)
    for diagonal in range(rows + cols - 1):
        i = np.arange(max(0, diagonal - cols + 1), min(rows, diagonal + 1))
        j = diagonal - i
        options = np.stack([total[i, j], total[i, j + 1], total[i + 1, j]])  # [3, cells]
        choice = np.argmin(options, axis=0)
        total[i + 1, j + 1] = cost[i, j] + options[choice, np.arange(len(i))]
        move[i, j] = choice
    path = [(rows - 1, cols - 1)]
    i, j = rows - 1, cols - 1
    while i > 0 or j > 0:
        step = move[i, j]
        if step == 0:
            i, j = i - 1, j - 1
        elif step == 1:
            i -= 1
        else:
            j -= 1
        path.append((i, j))
    return np.array(path[::-1])


def mel_cepstral_distortion(reference_wave: np.ndarray, synthesized_wave: np.ndarray, sample_rate: int,
                            num_coefficients: int = 13, dynamic_range_db: float = 60.0) -> float:
    """MCD-DTW in dB: 10 / ln 10 * sqrt(2 * sum_k (c_k - c'_k)^2), averaged over the DTW path.

    Cepstra c1..c``num_coefficients`` come from the DCT-II of the natural-log slaney mel (c0 excluded so
    overall loudness does not count); DTW aligns the two utterances so speaking rate does not count either.
    Both log mels are floored ``dynamic_range_db`` below the reference's peak, so the shape of near-silent
    frames (the exact noise floor) does not dominate the score.
    """
    reference_log_mel = log_mel(reference_wave, sample_rate)  # [frames_ref, n_mels]
    synthesized_log_mel = log_mel(synthesized_wave, sample_rate)  # [frames_syn, n_mels]
    floor = reference_log_mel.max() - dynamic_range_db / 20.0 * math.log(10.0)  # magnitude mel: 20 dB per decade
    reference = mel_cepstrum(np.maximum(reference_log_mel, floor), num_coefficients)  # [frames_ref, coefficients]
    synthesized = mel_cepstrum(np.maximum(synthesized_log_mel, floor), num_coefficients)  # [frames_syn, ...]
    differences = reference[:, None, :] - synthesized[None, :, :]  # [frames_ref, frames_syn, coefficients]
    frame_distortion = _MCD_SCALE * np.sqrt(2.0 * np.sum(differences ** 2, axis=-1))  # [ref, syn]
    path = dtw_path(frame_distortion)
    return float(np.mean(frame_distortion[path[:, 0], path[:, 1]]))


def _trim(alignment: np.ndarray, text_len: int | None, mel_steps: int | None) -> np.ndarray:
    alignment = np.asarray(alignment, dtype=np.float64)
    if alignment.ndim != 2:
        raise ValueError(f"alignment must be [decoder_steps, text_len], got shape {alignment.shape}.")
    steps = alignment.shape[0] if mel_steps is None else int(mel_steps)
    tokens = alignment.shape[1] if text_len is None else int(text_len)
    if not (0 < steps <= alignment.shape[0] and 0 < tokens <= alignment.shape[1]):
        raise ValueError(f"true lengths (mel_steps={steps}, text_len={tokens}) must be positive and fit the "
                         f"alignment shape {alignment.shape}.")
    return alignment[:steps, :tokens]


def attention_diagonality(alignment: np.ndarray, text_len: int | None = None, mel_steps: int | None = None,
                          band: float = 0.1) -> float:
    """Share of attention mass within ``band`` (relative) of the diagonal, in [0, 1].

    ``alignment`` is ``[decoder_steps, text_len]`` (padding allowed: the true lengths cut it). A clean
    monotonic alignment scores near 1; attention spread uniformly scores about ``2 * band``.
    """
    weights = _trim(alignment, text_len, mel_steps)  # [steps, tokens]
    steps, tokens = weights.shape
    step_position = (np.arange(steps) + 0.5) / steps  # [steps] relative progress through the audio
    token_position = (np.arange(tokens) + 0.5) / tokens  # [tokens] relative progress through the text
    near = np.abs(step_position[:, None] - token_position[None, :]) <= band  # [steps, tokens]
    total = weights.sum()
    return float((weights * near).sum() / total) if total > 0 else 0.0


def focus_rate(alignment: np.ndarray, text_len: int | None = None, mel_steps: int | None = None) -> float:
    """Mean over decoder steps of the largest attention weight (1 = every step attends to one token)."""
    weights = _trim(alignment, text_len, mel_steps)
    return float(np.mean(weights.max(axis=1)))

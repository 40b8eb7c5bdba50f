"""What every vocoder is: ``vocoder(log_mel)`` -> waveform; and the WAV writer every command uses."""

from __future__ import annotations

import abc
import os
from pathlib import Path

import numpy as np
import soundfile
import tensorflow as tf


class Vocoder(abc.ABC):
    """``vocoder(log_mel)``: ``[frames, n_mels]`` -> ``[samples]`` or ``[batch, frames, n_mels]`` -> ``[batch, samples]``."""

    sample_rate: int

    @abc.abstractmethod
    def __call__(self, log_mel: tf.Tensor | np.ndarray) -> tf.Tensor:
        ...


def write_wav(path: str | os.PathLike, waveform: tf.Tensor | np.ndarray, sample_rate: int) -> Path:
    """Write ``[samples]`` (or ``[samples, channels]``) float audio as 16-bit PCM WAV, clipped to [-1, 1]."""
    wave = np.asarray(waveform, dtype=np.float32)
    if wave.ndim not in (1, 2) or wave.size == 0:
        raise ValueError(f"write_wav: expected a non-empty [samples] or [samples, channels] waveform, got "
                         f"shape {wave.shape}.")
    if not np.all(np.isfinite(wave)):
        raise ValueError(f"write_wav: waveform for {path} holds NaN or Inf samples.")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(str(path), np.clip(wave, -1.0, 1.0), int(sample_rate), subtype="PCM_16", format="WAV")
    return path

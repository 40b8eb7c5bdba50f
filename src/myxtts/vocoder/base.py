"""What every vocoder is: ``vocoder(log_mel)`` -> waveform; and the WAV writer every command uses."""

from __future__ import annotations

import abc
import os
from pathlib import Path

import numpy as np
import soundfile
import tensorflow as tf

from myxtts.outputs import MARK_PREFIX, write_file_atomically


class Vocoder(abc.ABC):
    """``vocoder(log_mel)``: ``[frames, n_mels]`` -> ``[samples]`` or ``[batch, frames, n_mels]`` -> ``[batch, samples]``."""

    sample_rate: int

    @abc.abstractmethod
    def __call__(self, log_mel: tf.Tensor | np.ndarray) -> tf.Tensor:
        ...


def write_wav(path: str | os.PathLike, waveform: tf.Tensor | np.ndarray, sample_rate: int,
              made_by: str | None = None) -> Path:
    """Write ``[samples]`` (or ``[samples, channels]``) float audio as 16-bit PCM WAV, clipped to [-1, 1], whole or
    not at all (a temporary sibling renamed over ``path``). ``made_by``: the command writing it, recorded as the
    WAV's software tag (``myxtts COMMAND``), which ``outputs.check_output_file`` reads before replacing it."""
    wave = np.asarray(waveform, dtype=np.float32)
    if wave.ndim not in (1, 2) or wave.size == 0:
        raise ValueError(f"write_wav: expected a non-empty [samples] or [samples, channels] waveform, got "
                         f"shape {wave.shape}.")
    if not np.all(np.isfinite(wave)):
        raise ValueError(f"write_wav: waveform for {path} holds NaN or Inf samples.")

    def write(handle) -> None:
        channels = 1 if wave.ndim == 1 else wave.shape[1]
        with soundfile.SoundFile(handle, "w", int(sample_rate), channels, "PCM_16", format="WAV") as out:
            if made_by is not None:
                out.software = MARK_PREFIX + made_by
            out.write(np.clip(wave, -1.0, 1.0))

    return write_file_atomically(Path(path), write)

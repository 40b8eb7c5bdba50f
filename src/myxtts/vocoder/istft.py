"""The generators' shared output stage: an exact inverse STFT, and the bound on the magnitude a head may predict."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

# the largest linear magnitude the head may predict (exp of its log output): bounds the waveform of an untrained or
# diverging generator; speech at full scale stays well below it with the front-end's unnormalised STFT
MAX_LOG_MAGNITUDE = float(np.log(1e2))


class InverseStft(keras.layers.Layer):
    """Real / imaginary STFT ``[batch, frames, n_fft // 2 + 1]`` -> waveform ``[batch, (frames - 1) * hop]``.

    Inverse FFT per frame, synthesis window, overlap-add, then division by the overlap-added squared window (exact
    at every sample, the edges included, unlike ``tf.signal.inverse_stft``'s constant-overlap assumption), and the
    front-end's centre padding (``n_fft // 2`` each side) trimmed.
    """

    def __init__(self, n_fft: int, hop_length: int, window: np.ndarray, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.n_fft, self.hop_length = int(n_fft), int(hop_length)
        self.window = tf.constant(np.asarray(window, np.float32))  # [n_fft]

    def call(self, real: tf.Tensor, imaginary: tf.Tensor) -> tf.Tensor:
        frames = tf.signal.irfft(tf.complex(real, imaginary), fft_length=[self.n_fft])  # [batch, frames, n_fft]
        wave = tf.signal.overlap_and_add(frames * self.window, self.hop_length)  # [batch, (frames-1)*hop + n_fft]
        count = tf.shape(real)[1]
        squared = tf.broadcast_to(tf.square(self.window), [count, self.n_fft])  # [frames, n_fft]
        envelope = tf.signal.overlap_and_add(squared, self.hop_length)  # [(frames - 1) * hop + n_fft]
        trim = self.n_fft // 2
        length = (count - 1) * self.hop_length
        wave = wave[:, trim:trim + length]
        envelope = envelope[trim:trim + length]
        return wave / tf.maximum(envelope, 1e-6)  # [batch, (frames - 1) * hop]

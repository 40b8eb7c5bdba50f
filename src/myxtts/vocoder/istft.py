"""The generators' shared output stage: an exact inverse STFT, and the bound on the magnitude a head may predict."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from myxtts.spectral import inverse_dft_basis, overlap_add_by_padding

# the largest linear magnitude the head may predict (exp of its log output): bounds the waveform of an untrained or
# diverging generator; speech at full scale stays well below it with the front-end's unnormalised STFT
MAX_LOG_MAGNITUDE = float(np.log(1e2))


class InverseStft(keras.layers.Layer):
    """Real / imaginary STFT ``[batch, frames, n_fft // 2 + 1]`` -> waveform ``[batch, (frames - 1) * hop]``.

    Inverse FFT per frame, synthesis window, overlap-add, then division by the overlap-added squared window (exact
    at every sample, the edges included, unlike ``tf.signal.inverse_stft``'s constant-overlap assumption), and the
    front-end's centre padding (``n_fft // 2`` each side) trimmed.

    ``builtin_ops`` (set by an export for LiteRT; ``n_fft`` a multiple of the hop): the inverse DFT as two matmuls
    with a fixed basis and the overlap-add by padding (no complex numbers, no FFT op); the same waveform within
    float32 rounding, at more arithmetic than the FFT.
    """

    def __init__(self, n_fft: int, hop_length: int, window: np.ndarray, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.n_fft, self.hop_length = int(n_fft), int(hop_length)
        self.window = tf.constant(np.asarray(window, np.float32))  # [n_fft]
        self.builtin_ops = False
        self._basis = inverse_dft_basis(self.n_fft, window)  # numpy: constants only where the matmul form traces

    def call(self, real: tf.Tensor, imaginary: tf.Tensor, frame_mask: tf.Tensor | None = None) -> tf.Tensor:
        """``frame_mask`` ``[batch, frames]`` (a padded batch): the frames past it are left out, their spectra and their
        squared window, so each item's samples are those of its own frames inverted alone."""
        count = tf.shape(real)[1]
        squared = tf.broadcast_to(tf.square(self.window), [1, count, self.n_fft])  # [1, frames, n_fft]
        if frame_mask is not None:
            keep = tf.cast(frame_mask, real.dtype)[:, :, None]  # [batch, frames, 1]
            real, imaginary, squared = real * keep, imaginary * keep, squared * keep  # squared [batch, frames, n_fft]
        if self.builtin_ops:
            if self.n_fft % self.hop_length:
                raise ValueError(f"The inverse STFT in built-in ops needs n_fft ({self.n_fft}) to be a multiple of the "
                                 f"hop ({self.hop_length}).")
            real_basis, imaginary_basis = (tf.constant(basis) for basis in self._basis)
            # windowed frames [batch, frames, n_fft]
            frames = tf.matmul(real, real_basis) + tf.matmul(imaginary, imaginary_basis)
            wave = overlap_add_by_padding(frames, self.hop_length)
            envelope = overlap_add_by_padding(squared, self.hop_length)
        else:
            frames = tf.signal.irfft(tf.complex(real, imaginary), fft_length=[self.n_fft])  # [batch, frames, n_fft]
            wave = tf.signal.overlap_and_add(frames * self.window, self.hop_length)  # [batch, (frames-1)*hop + n_fft]
            envelope = tf.signal.overlap_and_add(squared, self.hop_length)  # [1 or batch, (frames - 1) * hop + n_fft]
        trim = self.n_fft // 2
        length = (count - 1) * self.hop_length
        wave = wave[:, trim:trim + length]
        envelope = envelope[:, trim:trim + length]
        return wave / tf.maximum(envelope, 1e-6)  # [batch, (frames - 1) * hop]

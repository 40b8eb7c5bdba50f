"""Short-time Fourier transforms in the ops a LiteRT model runs as built-ins: real matmuls with fixed DFT bases,
framing and overlap-add by reshape, slice, pad and add; no complex numbers, no FFT op.

The mel front-end (``MelFrontend.builtin_ops``) and the vocoders' inverse STFTs (``InverseStft.builtin_ops``,
``NeuralVocoder.use_builtin_ops``) trace these instead of ``tf.signal``'s FFTs when an export for LiteRT asks: the
same values within float32 rounding, at more arithmetic than an FFT. Each needs ``n_fft`` to be a multiple of the hop.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def inverse_dft_basis(n_fft: int, window: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(real, imaginary) bases ``[n_fft // 2 + 1, n_fft]`` float32 of a windowed inverse real DFT:
    ``real_part @ real_basis + imaginary_part @ imaginary_basis`` is ``irfft(spectrum) * window`` per frame (the
    imaginary parts of the DC and Nyquist bins are ignored, as ``irfft`` ignores them)."""
    bins, samples = np.arange(n_fft // 2 + 1)[:, None], np.arange(n_fft)[None, :]
    weight = np.where((bins == 0) | (bins == n_fft // 2), 1.0, 2.0) / n_fft  # [bins, 1]: the bins' mirror images
    angle = 2.0 * np.pi * bins * samples / n_fft  # [bins, n_fft]
    window = np.asarray(window, np.float64)[None, :]
    return ((weight * np.cos(angle) * window).astype(np.float32),
            (-weight * np.sin(angle) * window).astype(np.float32))


def forward_dft_basis(n_fft: int, window: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(real, imaginary) bases ``[n_fft, n_fft // 2 + 1]`` float32 of a windowed real DFT: ``frames @ real_basis``
    and ``frames @ imaginary_basis`` are the real and imaginary parts of ``rfft(frames * window)``."""
    samples, bins = np.arange(n_fft)[:, None], np.arange(n_fft // 2 + 1)[None, :]
    angle = 2.0 * np.pi * samples * bins / n_fft  # [n_fft, bins]
    window = np.asarray(window, np.float64)[:, None]
    return (np.cos(angle) * window).astype(np.float32), (-np.sin(angle) * window).astype(np.float32)


def frames_by_reshape(wave: tf.Tensor, n_fft: int, hop_length: int) -> tf.Tensor:
    """``[batch, samples]`` -> ``[batch, count, n_fft]`` frames hop apart, count = 1 + (samples - n_fft) // hop,
    ``n_fft`` a multiple of the hop (what ``tf.signal.frame`` gives, in reshape, slice and concat)."""
    pieces = n_fft // hop_length
    count = (tf.shape(wave)[1] - n_fft) // hop_length + 1  # samples past the last whole frame are left out
    wave = wave[:, :(count - 1) * hop_length + n_fft]
    blocks = tf.reshape(wave, [tf.shape(wave)[0], -1, hop_length])  # [batch, count + pieces - 1, hop]
    return tf.concat([blocks[:, index:index + count] for index in range(pieces)], axis=-1)  # [batch, count, n_fft]


def stft_in_builtin_ops(wave: tf.Tensor, n_fft: int, hop_length: int,
                        window: np.ndarray) -> tuple[tf.Tensor, tf.Tensor]:
    """``[batch, samples]`` (already padded) -> (real, imaginary) ``[batch, count, n_fft // 2 + 1]``: what
    ``tf.signal.stft`` with ``pad_end=False`` gives, as real matmuls."""
    if n_fft % hop_length:
        raise ValueError(f"The STFT in built-in ops needs n_fft ({n_fft}) to be a multiple of the hop ({hop_length}).")
    frames = frames_by_reshape(wave, n_fft, hop_length)  # [batch, count, n_fft]
    real_basis, imaginary_basis = (tf.constant(basis) for basis in forward_dft_basis(n_fft, window))
    return tf.matmul(frames, real_basis), tf.matmul(frames, imaginary_basis)


def overlap_add_by_padding(frames: tf.Tensor, hop_length: int) -> tf.Tensor:
    """``[batch, count, n_fft]`` -> ``[batch, (count - 1) * hop + n_fft]``, ``n_fft`` a multiple of the hop: each
    frame's hop-long pieces padded to their place and summed (what ``tf.signal.overlap_and_add`` computes, in
    reshape, split, pad and add)."""
    n_fft = frames.shape[-1]
    pieces = n_fft // hop_length
    parts = tf.split(tf.reshape(frames, [tf.shape(frames)[0], -1, pieces, hop_length]), pieces, axis=2)
    total = 0.0
    for index, part in enumerate(parts):  # part [batch, count, 1, hop]: frame t's piece lands at hop t + index
        total += tf.pad(part[:, :, 0, :], [[0, 0], [index, pieces - 1 - index], [0, 0]])
    return tf.reshape(total, [tf.shape(frames)[0], -1])  # [batch, (count + pieces - 1) * hop]

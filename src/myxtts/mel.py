"""The mel front-end: ``MelFrontend`` computes librosa-compatible slaney mel spectrograms with TF ops only (no numpy
in the graph), so the same code runs in ``prepare``, inside ``tf.data`` maps and at synthesis; the slaney filterbank
(numpy, computed once) and ``sharpen_across_bins``. Waveforms are loaded by ``myxtts.audio``.
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np
import tensorflow as tf

from myxtts.config import AudioConfig
from myxtts.spectral import stft_in_builtin_ops

# ---------------------------------------------------------------------------------------------
# mel filterbank (numpy, computed once)
# ---------------------------------------------------------------------------------------------

_SLANEY_F_SP = 200.0 / 3.0  # Hz per mel below 1 kHz (linear part of the slaney scale)
_SLANEY_MIN_LOG_HZ = 1000.0
_SLANEY_MIN_LOG_MEL = _SLANEY_MIN_LOG_HZ / _SLANEY_F_SP
_SLANEY_LOG_STEP = np.log(6.4) / 27.0


def hz_to_mel(frequencies: np.ndarray | float) -> np.ndarray:
    """Slaney (Auditory Toolbox) mel scale: linear below 1 kHz, logarithmic above."""
    hz = np.asarray(frequencies, dtype=np.float64)
    mels = hz / _SLANEY_F_SP
    above = hz >= _SLANEY_MIN_LOG_HZ
    return np.where(above, _SLANEY_MIN_LOG_MEL + np.log(np.maximum(hz, 1e-10) / _SLANEY_MIN_LOG_HZ)
                    / _SLANEY_LOG_STEP, mels)


def mel_to_hz(mels: np.ndarray | float) -> np.ndarray:
    mels = np.asarray(mels, dtype=np.float64)
    hz = mels * _SLANEY_F_SP
    above = mels >= _SLANEY_MIN_LOG_MEL
    return np.where(above, _SLANEY_MIN_LOG_HZ * np.exp(_SLANEY_LOG_STEP * (mels - _SLANEY_MIN_LOG_MEL)), hz)


def slaney_mel_matrix(sample_rate: int, n_fft: int, n_mels: int, fmin: float, fmax: float) -> np.ndarray:
    """Triangular slaney-scale filters with slaney area normalisation: ``[n_fft // 2 + 1, n_mels]`` float32.

    Same construction as librosa.filters.mel(htk=False, norm='slaney') (computed in float64).
    """
    fft_frequencies = np.linspace(0.0, sample_rate / 2.0, n_fft // 2 + 1)  # [n_freq]
    edges = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))  # [n_mels + 2] Hz
    widths = np.diff(edges)  # [n_mels + 1]
    ramps = edges[:, None] - fft_frequencies[None, :]  # [n_mels + 2, n_freq]
    rising = -ramps[:-2] / widths[:-1, None]  # [n_mels, n_freq]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))  # [n_mels, n_freq]
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]  # equal area per filter
    return weights.T.astype(np.float32)  # [n_freq, n_mels]


# ---------------------------------------------------------------------------------------------
# mel front-end (TF ops)
# ---------------------------------------------------------------------------------------------

class MelFrontend:
    """Log-compressed slaney mel spectrogram with TF ops; librosa-compatible (center=True, reflect pad).

    ``frontend(waveform)``: ``[samples]`` -> ``[frames, n_mels]`` or ``[batch, samples]`` ->
    ``[batch, frames, n_mels]``, frames = ``1 + samples // hop_length``. Both paths are tf.functions with
    ``None``-dim input signatures, so clips of any length share one trace.
    """

    def __init__(self, audio_cfg: AudioConfig) -> None:
        self.cfg = audio_cfg
        self.sample_rate = audio_cfg.sample_rate
        self.n_fft = audio_cfg.n_fft
        self.win_length = audio_cfg.win_length
        self.hop_length = audio_cfg.hop_length
        self.n_mels = audio_cfg.n_mels
        self.mel_power = float(audio_cfg.mel_power)
        self.log_compression = audio_cfg.log_compression
        self.log_floor = float(audio_cfg.log_floor)
        self.padding = self.n_fft // 2
        matrix = slaney_mel_matrix(self.sample_rate, self.n_fft, self.n_mels, audio_cfg.fmin, audio_cfg.fmax)
        self.mel_matrix = tf.constant(matrix)  # [n_fft // 2 + 1, n_mels]
        # periodic Hann of win_length, zero-padded to n_fft and centred (librosa's pad_center)
        left = (self.n_fft - self.win_length) // 2
        window = tf.signal.hann_window(self.win_length, periodic=True, dtype=tf.float32)
        self.window = tf.pad(window, [[left, self.n_fft - self.win_length - left]])  # [n_fft]
        # True (an export for LiteRT sets it before tracing): the STFT as real matmuls (myxtts.spectral), no FFT op
        self.builtin_ops = False

        self._mel_single = tf.function(
            self.single_log_mel, input_signature=[tf.TensorSpec([None], tf.float32)], autograph=False)
        self._mel_batch = tf.function(
            self._batched, input_signature=[tf.TensorSpec([None, None], tf.float32)], autograph=False)
        self._mel_prepadded = tf.function(
            self._linear_mel, input_signature=[tf.TensorSpec([None, None], tf.float32)], autograph=False)

    # -- graph pieces ----------------------------------------------------------------------------
    def window_fn(self, frame_length: int, dtype: tf.DType = tf.float32) -> tf.Tensor:
        """The analysis window ``[n_fft]`` (``window``) as ``tf.signal.stft``'s ``window_fn`` takes it: every STFT
        and inverse STFT that must match this front-end (Griffin-Lim, the neural vocoder's magnitude blend) passes
        it; ``frame_length`` is always ``n_fft`` there and not read."""
        return tf.cast(self.window, dtype)

    def _linear_mel(self, padded: tf.Tensor) -> tf.Tensor:
        """Mel (before compression) of already reflect-padded waves: [batch, padded] -> [batch, frames, n_mels]."""
        if self.builtin_ops:  # each [batch, frames, n_fft // 2 + 1]
            real, imaginary = stft_in_builtin_ops(padded, self.n_fft, self.hop_length, self.window.numpy())
        else:
            stft = tf.signal.stft(padded, frame_length=self.n_fft, frame_step=self.hop_length,
                                  fft_length=self.n_fft, window_fn=self.window_fn, pad_end=False)
            real, imaginary = tf.math.real(stft), tf.math.imag(stft)  # complex64 [batch, frames, n_fft // 2 + 1]
        # |X|^2 from real and imaginary parts: cheaper on CPU than tf.abs on complex64 followed by a square,
        # and exact to float32 rounding for audio magnitudes.
        power = tf.math.square(real) + tf.math.square(imaginary)
        if self.mel_power == 2.0:
            spectrum = power
        elif self.mel_power == 1.0:
            spectrum = tf.math.sqrt(power)
        else:
            spectrum = tf.math.pow(power, self.mel_power / 2.0)
        return tf.linalg.matmul(spectrum, self.mel_matrix)  # [batch, frames, n_mels]

    def _reflect_pad(self, waveform: tf.Tensor) -> tf.Tensor:
        """[batch, samples] -> [batch, samples + 2 * (n_fft // 2)], reflect padded like librosa center=True."""
        return tf.pad(waveform, [[0, 0], [self.padding, self.padding]], mode="REFLECT")

    def _batched(self, waveform: tf.Tensor) -> tf.Tensor:
        return self.compress(self._linear_mel(self._reflect_pad(waveform)))  # [batch, frames, n_mels]

    def single_log_mel(self, waveform: tf.Tensor) -> tf.Tensor:
        """One waveform ``[samples]`` -> its log mel ``[frames, n_mels]`` as plain ops (graph code: the compiled
        single-clip path of ``__call__``, ``in_graph`` and the exported speaker embedding run it)."""
        return self._batched(waveform[tf.newaxis, :])[0]  # [frames, n_mels]

    # -- public ----------------------------------------------------------------------------------
    def in_graph(self, waveform: tf.Tensor) -> tf.Tensor:
        """The same log mel as ``__call__`` as plain ops, for use inside another graph (a tf.data map).

        Calling the compiled ``__call__`` from inside a ``Dataset.map`` nests a function call per element;
        inlining the ops avoids that per-element overhead.
        """
        if waveform.shape.rank == 1:
            return self.single_log_mel(waveform)  # [frames, n_mels]
        return self._batched(waveform)  # [batch, frames, n_mels]

    def __call__(self, waveform: tf.Tensor | np.ndarray) -> tf.Tensor:
        waveform = tf.convert_to_tensor(waveform, dtype=tf.float32)
        rank = waveform.shape.rank
        if rank == 1:
            return self._mel_single(waveform)
        if rank == 2:
            return self._mel_batch(waveform)
        raise ValueError(f"MelFrontend expects a waveform of shape [samples] or [batch, samples], got "
                         f"shape {waveform.shape}.")

    def linear_mel(self, waveform: tf.Tensor | np.ndarray) -> tf.Tensor:
        """Mel before log compression (what is compared with librosa); same shapes as ``__call__``."""
        waveform = tf.convert_to_tensor(waveform, dtype=tf.float32)
        if waveform.shape.rank == 1:
            return self._mel_prepadded(self._reflect_pad(waveform[tf.newaxis, :]))[0]
        return self._mel_prepadded(self._reflect_pad(waveform))

    def log_mel_of_padded(self, padded: tf.Tensor) -> tf.Tensor:
        """Already padded waves ``[batch, (frames - 1) * hop + n_fft]`` -> their log mel ``[batch, frames, n_mels]``
        (graph code: the frames of a window the caller cut from a reflect-padded clip, as a LiteRT export reads
        its reference)."""
        return self.compress(self._linear_mel(padded))

    def compress(self, mel: tf.Tensor) -> tf.Tensor:
        """Log compression selected by ``audio.log_compression`` (values clipped at ``audio.log_floor``)."""
        if self.log_compression == "natural":
            return tf.math.log(tf.math.maximum(mel, self.log_floor))
        if self.log_compression == "log10":
            return tf.math.log(tf.math.maximum(mel, self.log_floor)) / tf.math.log(tf.constant(10.0, mel.dtype))
        return mel

    @functools.cached_property
    def inverse_mel_matrix(self) -> np.ndarray:
        """Least-squares inverse of the slaney filterbank ``[n_mels, n_fft // 2 + 1]`` (computed once, in float64;
        numpy, so each graph that uses it embeds its own constant)."""
        return np.linalg.pinv(self.mel_matrix.numpy().astype(np.float64)).astype(np.float32)

    def pseudo_inverse_magnitude(self, log_mel: tf.Tensor) -> tf.Tensor:
        """Linear STFT magnitude estimate of a log mel: ``[..., n_mels]`` -> ``[..., n_fft // 2 + 1]``, >= 0.

        What Griffin-Lim inverts, and the prior a vocoder's magnitude head may predict a residual over."""
        mel = self.decompress(log_mel)  # [..., n_mels]
        inverse = tf.constant(self.inverse_mel_matrix, dtype=mel.dtype)  # [n_mels, n_fft // 2 + 1]
        spectrum = tf.math.maximum(tf.linalg.matmul(mel, inverse), 0.0)  # [..., n_fft // 2 + 1]: |S| ** mel_power
        return spectrum if self.mel_power == 1.0 else tf.math.pow(spectrum, 1.0 / self.mel_power)

    def decompress(self, log_mel: tf.Tensor) -> tf.Tensor:
        """Inverse of ``compress`` (values below the floor come back as the floor)."""
        if self.log_compression == "natural":
            return tf.math.exp(log_mel)
        if self.log_compression == "log10":
            return tf.math.pow(tf.constant(10.0, log_mel.dtype), log_mel)
        return log_mel

    def tracing_count(self) -> int:
        """Total traces of the compiled paths (stays at one per path whatever the clip lengths)."""
        functions = (self._mel_single, self._mel_batch, self._mel_prepadded)
        return sum(function.experimental_get_tracing_count() for function in functions)

    def num_frames(self, num_samples: int) -> int:
        return 1 + int(num_samples) // self.hop_length

    def batch(self, waveforms: Sequence[np.ndarray], padded: bool | None = None) -> list[np.ndarray]:
        """Log mels of many clips; each equals ``frontend(wave)`` for that clip. Returns float32 ``[frames_i, n_mels]``.

        ``padded=True``: one graph call for all clips. Each clip is reflect-padded on its own (as a single
        call does), then zero-padded at the end to the longest; a frame only covers its own clip's padded
        samples, so the tail never leaks in (equal to one at a time up to float32 rounding, ~1e-6).
        ``padded=False``: the compiled single-clip graph per clip (bitwise equal, no padding work).
        ``None`` picks padded only when a GPU is present: on CPU the per-clip path is faster, since FFT
        batching does not pay there and padding to the longest clip adds work.
        """
        if not waveforms:
            return []
        clips = []
        for index, wave in enumerate(waveforms):
            wave = np.asarray(wave, dtype=np.float32)
            if wave.ndim != 1:
                raise ValueError(f"MelFrontend.batch: clip {index} has shape {wave.shape}; expected [samples].")
            if wave.shape[0] <= self.padding:
                raise ValueError(f"MelFrontend.batch: clip {index} has {wave.shape[0]} samples; reflect "
                                 f"padding needs more than n_fft // 2 = {self.padding}.")
            clips.append(wave)
        if padded is None:
            padded = bool(tf.config.list_physical_devices("GPU"))
        if not padded:
            return [self._mel_single(tf.constant(wave)).numpy() for wave in clips]
        padded_clips = [np.pad(wave, self.padding, mode="reflect") for wave in clips]
        longest = max(clip.shape[0] for clip in padded_clips)
        stacked = np.zeros((len(padded_clips), longest), dtype=np.float32)  # [batch, padded samples]
        for index, clip in enumerate(padded_clips):
            stacked[index, : clip.shape[0]] = clip
        mels = self.compress(self._mel_prepadded(tf.constant(stacked))).numpy()  # [batch, frames, n_mels]
        return [mels[index, : self.num_frames(wave.shape[0])] for index, wave in enumerate(clips)]


def sharpen_across_bins(log_mel: tf.Tensor | np.ndarray, amount: float) -> tf.Tensor:
    """``log_mel + amount * (log_mel - local mean)``, the local mean of each bin and its two neighbours (the edge
    bins repeated outward): an unsharp mask along the mel axis, ``[..., frames, n_mels]`` in, the same shape out.

    It raises the contrast between neighbouring bands (formant peaks, the harmonics the low bins resolve) that a
    decoder trained on L1 smooths; a mel flat across bins is left as it is. ``model.mel_sharpening``."""
    log_mel = tf.convert_to_tensor(log_mel, tf.float32)
    padded = tf.concat([log_mel[..., :1], log_mel, log_mel[..., -1:]], axis=-1)  # [..., frames, n_mels + 2]
    local_mean = (padded[..., :-2] + padded[..., 1:-1] + padded[..., 2:]) / 3.0  # [..., frames, n_mels]
    return log_mel + amount * (log_mel - local_mean)

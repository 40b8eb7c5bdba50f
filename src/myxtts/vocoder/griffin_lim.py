"""Griffin-Lim: log mel -> waveform with TF ops only (compiled once, any length), no training.

``GriffinLim`` inverts exactly the front-end of ``myxtts.mel.MelFrontend`` (same window, hop, slaney
mel matrix, mel power and log compression), so a mel from the cache or the model comes back as audio
without any extra configuration.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from myxtts.mel import MelFrontend
from myxtts.config import AudioConfig
from myxtts.vocoder.base import Vocoder


class GriffinLim(Vocoder):
    """Mel inversion (pseudo-inverse, clipped at 0) + fast Griffin-Lim (momentum 0.99) with tf.signal.

    The output has ``(frames - 1) * hop_length`` samples, so ``MelFrontend.num_frames`` of it gives the
    input's frame count back. Phases start from a fixed seed: the same mel gives the same audio.
    """

    def __init__(self, audio_cfg: AudioConfig, iterations: int | None = None, momentum: float = 0.99,
                 seed: int = 1234) -> None:
        self.frontend = MelFrontend(audio_cfg)
        self.sample_rate = audio_cfg.sample_rate
        self.iterations = audio_cfg.griffin_lim_iters if iterations is None else int(iterations)
        if self.iterations < 0:
            raise ValueError(f"GriffinLim iterations must be >= 0, got {self.iterations}.")
        self.momentum = float(momentum)
        self.seed = int(seed)
        self.n_fft = audio_cfg.n_fft
        self.hop_length = audio_cfg.hop_length
        self.n_mels = audio_cfg.n_mels
        self._inverse_window_fn = tf.signal.inverse_stft_window_fn(
            self.hop_length, forward_window_fn=self.frontend.window_fn)
        self._single = tf.function(
            self._invert_single,
            input_signature=[tf.TensorSpec([None, self.n_mels], tf.float32)], autograph=False)
        self._batched = tf.function(
            self.waveform, input_signature=[tf.TensorSpec([None, None, self.n_mels], tf.float32)],
            autograph=False)

    def tracing_count(self) -> int:
        return self._single.experimental_get_tracing_count() + self._batched.experimental_get_tracing_count()

    def magnitude(self, log_mel: tf.Tensor) -> tf.Tensor:
        """Linear STFT magnitude estimate: ``[batch, frames, n_mels]`` -> ``[batch, frames, n_fft // 2 + 1]``."""
        return self.frontend.pseudo_inverse_magnitude(log_mel)

    def _stft(self, padded_wave: tf.Tensor) -> tf.Tensor:
        return tf.signal.stft(padded_wave, frame_length=self.n_fft, frame_step=self.hop_length,
                              fft_length=self.n_fft, window_fn=self.frontend.window_fn, pad_end=False)

    def _istft(self, stft: tf.Tensor) -> tf.Tensor:
        # [batch, frames, n_freq] -> [batch, (frames - 1) * hop + n_fft]: the centre-padded waveform
        return tf.signal.inverse_stft(stft, frame_length=self.n_fft, frame_step=self.hop_length,
                                      fft_length=self.n_fft, window_fn=self._inverse_window_fn)

    def waveform(self, log_mel: tf.Tensor) -> tf.Tensor:
        """``[batch, frames, n_mels]`` -> ``[batch, (frames - 1) * hop]`` as plain ops (graph code: the compiled
        paths of ``__call__`` and the export's ``synthesize`` run it; ``NeuralVocoder.waveform`` is its twin)."""
        magnitude = tf.cast(self.magnitude(log_mel), tf.complex64)  # [batch, frames, n_freq]
        # one [frames, n_freq] draw shared by the batch: a clip gets the same start alone or batched
        phase = tf.random.stateless_uniform(tf.shape(magnitude)[1:], seed=[self.seed, 0], maxval=2 * np.pi)
        angles = tf.complex(tf.math.cos(phase), tf.math.sin(phase))  # unit phasors [frames, n_freq]
        angles = tf.broadcast_to(angles, tf.shape(magnitude))  # [batch, frames, n_freq]
        previous = tf.zeros_like(angles)
        keep = self.momentum / (1.0 + self.momentum)

        def step(index: tf.Tensor, angles: tf.Tensor, previous: tf.Tensor) -> tuple:
            rebuilt = self._stft(self._istft(magnitude * angles))  # consistent spectrogram nearest the guess
            accelerated = rebuilt - tf.cast(keep, tf.complex64) * previous
            norm = tf.cast(tf.math.abs(accelerated) + 1e-16, tf.complex64)
            return index + 1, accelerated / norm, rebuilt

        _, angles, _ = tf.while_loop(lambda index, *_: index < self.iterations, step,
                                     (tf.constant(0), angles, previous))
        padded = self._istft(magnitude * angles)  # [batch, (frames - 1) * hop + n_fft]
        trim = self.n_fft // 2  # undo the centre padding of the analysis
        return padded[:, trim: tf.shape(padded)[1] - trim]  # [batch, (frames - 1) * hop]

    def _invert_single(self, log_mel: tf.Tensor) -> tf.Tensor:
        return self.waveform(log_mel[tf.newaxis])[0]  # [frames, n_mels] -> [samples]

    def __call__(self, log_mel: tf.Tensor | np.ndarray) -> tf.Tensor:
        log_mel = tf.convert_to_tensor(log_mel, dtype=tf.float32)
        if log_mel.shape.rank == 2 and log_mel.shape[-1] == self.n_mels:
            return self._single(log_mel)
        if log_mel.shape.rank == 3 and log_mel.shape[-1] == self.n_mels:
            return self._batched(log_mel)
        raise ValueError(f"GriffinLim expects a log mel of shape [frames, {self.n_mels}] or [batch, frames, "
                         f"{self.n_mels}] (audio.n_mels), got {log_mel.shape}.")

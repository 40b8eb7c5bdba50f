"""Speaker augmentation on the mel: one training example heard as another voice (``data.voice_warp``).

A voice's timbre lives in where its formants and harmonics sit on the frequency axis. Scaling that axis by a factor
``alpha`` moves both at once, as speed perturbation does (Ko et al., 2015; as new speakers: Yamamoto et al., 2019)
without its tempo change, so the transcript's timing stays the clip's. Each training example draws one ``alpha =
exp(u)``, ``u ~ U(-w, w)``, and its target mel, its reference mel and its F0 track move together: the pair stays one
voice, a voice that no clip of the corpus has. The conditioning encoder then sees a continuum of voices around every
speaker instead of a few hundred points, and copying a memorised speaker no longer lowers the loss.

The warp reads the log mel (``log_mel(f) <- log_mel(f / alpha)``) by linear interpolation between the bins' centre
frequencies (the slaney scale of ``myxtts.mel``); below the lowest and above the highest centre the edge bin is
repeated. TF ops only: it runs in the input pipeline's parse stage.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from myxtts.mel import hz_to_mel, mel_to_hz


def bin_centres(n_mels: int, fmin: float, fmax: float) -> np.ndarray:
    """The centre frequency (Hz) of each of the ``n_mels`` slaney filters of ``myxtts.mel.slaney_mel_matrix``."""
    edges = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))  # [n_mels + 2] Hz
    return edges[1:-1]  # [n_mels]


def warp_weights(centres: np.ndarray, alpha: tf.Tensor) -> tf.Tensor:
    """``[n_mels, n_mels]`` interpolation matrix ``W`` with ``warped = log_mel @ W``: output bin ``j`` reads the
    source at frequency ``centres[j] / alpha`` (``alpha > 1``: the voice moves up)."""
    n_mels = len(centres)
    centre_mels = tf.constant(hz_to_mel(centres), tf.float32)  # [n_mels] on the mel scale, increasing
    wanted = tf.constant(centres, tf.float32) / tf.cast(alpha, tf.float32)  # [n_mels] Hz
    wanted_mels = mel_scale(wanted)  # [n_mels]
    # fractional source bin of each output bin: the mel scale's centres are equally spaced
    step = centre_mels[1] - centre_mels[0]
    position = tf.clip_by_value((wanted_mels - centre_mels[0]) / step, 0.0, float(n_mels - 1))  # [n_mels]
    lower = tf.cast(tf.floor(position), tf.int32)
    upper = tf.minimum(lower + 1, n_mels - 1)
    fraction = position - tf.cast(lower, tf.float32)  # [n_mels]
    # column j: (1 - fraction_j) at row lower_j, fraction_j at row upper_j
    return (tf.transpose(tf.one_hot(lower, n_mels)) * (1.0 - fraction)[None, :]
            + tf.transpose(tf.one_hot(upper, n_mels)) * fraction[None, :])  # [n_mels source, n_mels output]


def mel_scale(hz: tf.Tensor) -> tf.Tensor:
    """``myxtts.mel.hz_to_mel`` (slaney) in TF ops."""
    f_sp, min_log_hz = 200.0 / 3.0, 1000.0
    log_step = float(np.log(6.4) / 27.0)
    linear = hz / f_sp
    logarithmic = min_log_hz / f_sp + tf.math.log(tf.maximum(hz, 1e-10) / min_log_hz) / log_step
    return tf.where(hz >= min_log_hz, logarithmic, linear)


def draw_alpha(width: float, seed: tf.Tensor) -> tf.Tensor:
    """``exp(u)``, ``u ~ U(-width, width)``, from a stateless ``[2]`` int64 seed: a scalar float32."""
    return tf.exp(tf.random.stateless_uniform([], seed, -width, width))


class VoiceWarp:
    """Warps one example's normalised mels (and F0) by one drawn factor; ``mel_stats`` maps to the log mel and back
    (the warp moves log magnitudes, not per-bin standardised values)."""

    def __init__(self, width: float, n_mels: int, fmin: float, fmax: float, mel_stats) -> None:
        if not 0.0 < width <= 0.5:
            raise ValueError(f"voice warp width must be in (0, 0.5], got {width}.")
        self.width, self.mel_stats = width, mel_stats
        self.centres = bin_centres(n_mels, fmin, fmax)

    def __call__(self, element: dict[str, tf.Tensor], seed: tf.Tensor) -> dict[str, tf.Tensor]:
        """``element`` with ``mel`` ``[frames, n_mels]``, ``reference_mel`` ``[reference_frames, n_mels]`` (zero past
        ``reference_lengths``) and, when present, ``pitch`` ``[frames]`` (Hz, 0 unvoiced) warped by one factor."""
        alpha = draw_alpha(self.width, seed)
        weights = warp_weights(self.centres, alpha)  # [n_mels, n_mels]
        warped = dict(element)
        warped["mel"] = self.warp_mel(element["mel"], weights)  # [frames, n_mels]
        reference = self.warp_mel(element["reference_mel"], weights)  # [reference_frames, n_mels]
        valid = tf.range(tf.shape(reference)[0]) < element["reference_lengths"]  # [reference_frames]
        warped["reference_mel"] = tf.where(valid[:, None], reference, tf.zeros_like(reference))  # padding stays 0
        if "pitch" in element:
            warped["pitch"] = element["pitch"] * alpha  # unvoiced frames (0) stay 0
        return warped

    def warp_mel(self, normalized: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
        log_mel = self.mel_stats.denormalize(normalized)  # [frames, n_mels]
        return self.mel_stats.normalize(tf.matmul(log_mel, weights))

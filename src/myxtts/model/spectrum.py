"""The reference's long-term spectrum carried to the output (``model.reference_spectrum``).

A voice is partly its long-term spectrum: the mean of its log mel over the frames where it speaks (vocal tract,
voice quality, and the microphone it was recorded through). The conditioning encoder appends the reference's
(``speech_spectrum``, zero-padded to whole rows of ``d``) as the last rows of the conditioning, so a voice computed
once (serving, SavedModel, LiteRT) carries it; the decoder's mel is then moved a share ``alpha`` of the way from its
own long-term spectrum to the reference's (``move_spectrum``), in training as at synthesis, so the decoder learns
to leave that part of the voice to the reference.
"""

from __future__ import annotations

import tensorflow as tf

# a frame speaks when its energy (the mean of its normalised log mel over the bins) is within this many units of
# the loudest frame's: silence and room noise sit 1-2 units below speech in the normalised mel
SPEECH_WITHIN = 1.0


def speech_spectrum(mel, mask):
    """Normalised log mel ``[B, T, n_mels]`` with ``mask`` ``[B, T]`` (True: a real frame) -> ``[B, n_mels]`` float32,
    the mean of the frames that speak (``SPEECH_WITHIN``); an item without a real frame gives zeros (the mean voice).
    Which frames speak is not differentiated; the mean over them is."""
    mel = tf.cast(mel, tf.float32)
    mel = tf.where(mask[..., None], mel, tf.zeros_like(mel))  # where, not multiply: NaN-safe padding
    energy = tf.reduce_mean(mel, axis=-1)  # [B, T]
    loudest = tf.reduce_max(tf.where(mask, energy, tf.fill(tf.shape(energy), -1e9)), axis=1, keepdims=True)
    speaks = tf.logical_and(mask, energy >= loudest - SPEECH_WITHIN)  # [B, T]
    weights = tf.stop_gradient(tf.cast(speaks, tf.float32))[..., None]  # [B, T, 1]
    return tf.reduce_sum(mel * weights, axis=1) / tf.maximum(tf.reduce_sum(weights, axis=1), 1.0)  # [B, n_mels]


def spectrum_rows(reference_mel, mask, d_model: int, dtype):
    """The reference's ``speech_spectrum`` as conditioning rows ``[B, ceil(n_mels / d_model), d_model]``, zero-padded
    past n_mels (``ModelDims.spectrum_rows``)."""
    spectrum = speech_spectrum(reference_mel, mask)  # [B, n_mels]
    n_mels = spectrum.shape[-1]
    rows = -(-n_mels // d_model)
    padded = tf.pad(spectrum, [[0, 0], [0, rows * d_model - n_mels]])  # [B, rows * d]
    return tf.cast(tf.reshape(padded, [-1, rows, d_model]), dtype)


def conditioning_spectrum(conditioning, n_mels: int):
    """The reference's long-term spectrum ``[B, n_mels]`` float32 from the conditioning ``[B, rows..., d]``'s last
    ``spectrum_rows`` rows."""
    d_model = conditioning.shape[-1]
    rows = -(-n_mels // d_model)
    flat = tf.reshape(tf.cast(conditioning[:, -rows:], tf.float32), [-1, rows * d_model])
    return flat[:, :n_mels]


def move_spectrum(mel, mask, conditioning, alpha: float):
    """The decoder's mel ``[B, T, n_mels]`` (``mask`` ``[B, T]``) moved ``alpha`` of the way from its own long-term
    spectrum to the reference's (the conditioning's last rows, ``spectrum_rows``); zero past each length."""
    reference = conditioning_spectrum(conditioning, mel.shape[-1])  # [B, n_mels]
    shift = alpha * (reference - speech_spectrum(mel, mask))  # [B, n_mels]
    return (mel + shift[:, None, :]) * tf.cast(mask[..., None], mel.dtype)

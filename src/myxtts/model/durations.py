"""Duration predictor and length regulator.

The predictor reads the text encodings (with a stop-gradient: the duration loss must not reshape what the
decoder reads) and predicts log(1 + frames) per token. The length regulator expands token encodings to frames
with a hard alignment matrix, ``[B, T_mel, T_text] @ [B, T_text, d]``, so a bucket's static mel length is kept
whatever the durations (frames past an item's length are zero rows).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from myxtts.model.layers import BuiltByFirstCall, SiteCounter, length_mask, stateless_dropout, static_or_dynamic_dim

DURATION_FILTERS = 256
DURATION_KERNEL = 3


class DurationPredictor(BuiltByFirstCall, keras.layers.Layer):
    """text encodings ``[B, T_text, d]`` -> log(1 + frames) ``[B, T_text]`` float32 (0 at padding)."""

    def __init__(self, dropout: float, sites: SiteCounter, **kwargs):
        super().__init__(**kwargs)
        self.convs = [keras.layers.Conv1D(DURATION_FILTERS, DURATION_KERNEL, padding="same", activation="relu",
                                          name=f"conv_{i}") for i in range(2)]
        self.norms = [keras.layers.LayerNormalization(epsilon=1e-5, name=f"norm_{i}") for i in range(2)]
        self.output_proj = keras.layers.Dense(1, name="output")
        self.rate, self.site = dropout, sites()

    def call(self, text_encodings, token_lengths, training=False, seed=None):
        mask = length_mask(token_lengths, static_or_dynamic_dim(text_encodings, 1))  # [B, T_text]
        frame_mask = tf.cast(mask[..., None], self.compute_dtype)
        x = tf.stop_gradient(text_encodings) * frame_mask
        for index, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            x = norm(conv(x)) * frame_mask
            x = stateless_dropout(x, self.rate, training, seed, self.site * 16 + index)
        log_durations = tf.cast(tf.squeeze(self.output_proj(x), -1), tf.float32)  # [B, T_text]
        return tf.where(mask, log_durations, 0.0)


class PitchPredictor(DurationPredictor):
    """text encodings ``[B, T_text, d]`` -> each token's standardised log F0 ``[B, T_text]`` float32 (0 at padding):
    the duration predictor's layers on the same stop-gradient encodings (``model.pitch_conditioning``), its output
    layer zero-initialised: it starts at the utterance's mean pitch (0) and learns the contour from there."""

    def __init__(self, dropout: float, sites: SiteCounter, **kwargs):
        super().__init__(dropout, sites, **kwargs)
        self.output_proj = keras.layers.Dense(1, kernel_initializer="zeros", name="output")


def durations_from_log(log_durations, token_lengths, length_scale=1.0) -> tf.Tensor:
    """Predicted log(1 + frames) ``[B, T_text]`` -> whole frames ``[B, T_text]`` int32: scaled by ``length_scale``
    (a number, or ``[B]`` one per item; > 1 slower speech), rounded, at least 1 for every real token (the aligner
    gives each token >= 1 frame), 0 at padding."""
    scale = tf.reshape(tf.cast(length_scale, tf.float32), [-1, 1])  # [1, 1] or [B, 1]
    frames = tf.round((tf.exp(tf.cast(log_durations, tf.float32)) - 1.0) * scale)
    mask = length_mask(token_lengths, static_or_dynamic_dim(log_durations, 1))
    return tf.where(mask, tf.cast(tf.maximum(frames, 1.0), tf.int32), 0)


def alignment_from_durations(durations, frames: int) -> tf.Tensor:
    """Durations ``[B, T_text]`` int32 -> hard alignment ``[B, frames, T_text]`` float32: frame t belongs to token n
    when end[n-1] <= t < end[n]. Frames past the total are all-zero rows (the total may not exceed ``frames``:
    callers check it)."""
    ends = tf.cumsum(durations, axis=1)  # [B, T_text]
    starts = ends - durations
    t = tf.range(frames, dtype=durations.dtype)[None, :, None]  # [1, frames, 1]
    inside = (t >= starts[:, None, :]) & (t < ends[:, None, :])
    return tf.cast(inside, tf.float32)


def length_regulate(hard_alignment, text_encodings) -> tf.Tensor:
    """Expand token encodings to frames: ``[B, T_mel, T_text] @ [B, T_text, d]`` -> ``[B, T_mel, d]``."""
    return tf.matmul(tf.cast(hard_alignment, text_encodings.dtype), text_encodings)

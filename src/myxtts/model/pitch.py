"""Pitch as an input to the decoder (``model.pitch_conditioning``; FastPitch, Łańcucki 2021).

An L1-trained decoder that cannot know the pitch averages over it: harmonics and formant edges come out smoothed.
With pitch conditioning each token carries one pitch value, added to its encoding before the length regulator:

    targets: frame F0 [B, T_mel] Hz (myxtts.f0.tracker, 0 unvoiced) -> log, standardised over each utterance's voiced
             frames (the contour; the voice's own level comes from its reference; tracker outliers trimmed) -> mean over each token's voiced
             frames of the hard alignment -> token pitch [B, T_text] (0: a token with no voiced frame)
    text' = text + PitchEmbedding(token pitch)          # [B, T_text, d]; the recordings' pitch when known
    PitchPredictor(text) -> predicted token pitch      # trained by MSE on the targets, used at synthesis

With ``model.pitch_level`` each token's value is absolute instead, the voice's level and spread put back on the contour:

    level [B, 2]: ((utterance mean log F0 - log LEVEL_CENTER_HZ) / LEVEL_SCALE, log(utterance std / LEVEL_STD))
    token value = level[:, 0] + (std / LEVEL_SCALE) * contour            # a token without a voiced frame: the level
    PitchLevelPredictor(speaker latents) -> predicted level     # trained by MSE on the utterance's; used at synthesis

so the decoder is told where the harmonics of a voice it never heard go, instead of guessing an average level.

The embedding starts at zero, so a model warm-started from one without pitch begins as that model.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from myxtts.model.layers import BuiltByFirstCall, length_mask, static_or_dynamic_dim

PITCH_EMBEDDING_KERNEL = 3  # tokens the embedding's convolution sees
PITCH_CLIP = 4.0  # standardised values beyond +-4 (tracker errors) are clipped
MIN_LOG_F0_STD = 0.02  # an utterance on one note: no division by ~0
INLIER_RANGE = 2.5  # standard deviations of a first estimate: the frames the final mean and spread are taken over
LEVEL_CENTER_HZ = 150.0  # model.pitch_level: the level's origin, between typical male and female voices
LEVEL_SCALE = 0.5  # log F0 per unit of the level (voices' means lie within about +-0.7 of log 150 Hz)
LEVEL_STD = 0.15  # the typical spread of an utterance's log F0: the origin of the level's second value


def _moments(values: tf.Tensor, weight: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Weighted mean and standard deviation of each row ``[B, T]`` -> ``[B, 1]`` each."""
    count = tf.maximum(tf.reduce_sum(weight, axis=1, keepdims=True), 1.0)
    mean = tf.reduce_sum(values * weight, axis=1, keepdims=True) / count
    std = tf.sqrt(tf.reduce_sum(tf.square(values - mean) * weight, axis=1, keepdims=True) / count)
    return mean, tf.maximum(std, MIN_LOG_F0_STD)


def _log_f0_moments(frame_f0: tf.Tensor, mel_lengths: tf.Tensor):
    """Frame F0 ``[B, T_mel]`` Hz -> (log F0 ``[B, T_mel]``, voiced ``[B, T_mel]`` bool, mean ``[B, 1]``, std
    ``[B, 1]``): the moments of the voiced frames within ``INLIER_RANGE`` of a first estimate, so a few octave errors
    of the tracker neither shift nor squash the contour."""
    frame_f0 = tf.cast(frame_f0, tf.float32)
    voiced = (frame_f0 > 0.0) & length_mask(mel_lengths, static_or_dynamic_dim(frame_f0, 1))
    log_f0 = tf.math.log(tf.maximum(frame_f0, 1.0))
    mean, std = _moments(log_f0, tf.cast(voiced, tf.float32))
    inliers = voiced & (tf.abs(log_f0 - mean) <= INLIER_RANGE * std)
    mean, std = _moments(log_f0, tf.cast(inliers, tf.float32))
    return log_f0, voiced, mean, std


def standardized_log_f0(frame_f0: tf.Tensor, mel_lengths: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Frame F0 ``[B, T_mel]`` Hz (0 unvoiced) -> (log F0 standardised over each utterance's voiced frames
    ``[B, T_mel]``, 0 where unvoiced; voiced ``[B, T_mel]`` bool)."""
    log_f0, voiced, mean, std = _log_f0_moments(frame_f0, mel_lengths)
    standardized = tf.clip_by_value((log_f0 - mean) / std, -PITCH_CLIP, PITCH_CLIP)
    return tf.where(voiced, standardized, 0.0), voiced


def utterance_pitch_level(frame_f0: tf.Tensor, mel_lengths: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Frame F0 ``[B, T_mel]`` Hz -> (each utterance's level ``[B, 2]`` float32, see the module docstring; has_voiced
    ``[B]`` bool: False for an utterance without a voiced frame, whose level means nothing)."""
    _, voiced, mean, std = _log_f0_moments(frame_f0, mel_lengths)
    level = tf.concat([(mean - math.log(LEVEL_CENTER_HZ)) / LEVEL_SCALE, tf.math.log(std / LEVEL_STD)], axis=1)
    return level, tf.reduce_any(voiced, axis=1)


def absolute_token_pitch(contour: tf.Tensor, level: tf.Tensor) -> tf.Tensor:
    """Standardised token pitch ``[B, T_text]`` + level ``[B, 2]`` -> absolute token pitch ``[B, T_text]`` in level
    units (``model.pitch_level``): the level where the contour is 0 (a token without a voiced frame included)."""
    level = tf.cast(level, tf.float32)
    spread = LEVEL_STD * tf.exp(level[:, 1:2]) / LEVEL_SCALE  # [B, 1]: one contour unit in level units
    return level[:, :1] + spread * tf.cast(contour, tf.float32)


def token_pitch_targets(frame_f0: tf.Tensor, mel_lengths: tf.Tensor, hard_alignment: tf.Tensor) -> tf.Tensor:
    """Frame F0 ``[B, T_mel]`` Hz + hard alignment ``[B, T_mel, T_text]`` -> each token's mean standardised log F0
    over its voiced frames ``[B, T_text]`` float32 (0 for a token without one, and at padding)."""
    values, voiced = standardized_log_f0(frame_f0, mel_lengths)
    hard = tf.cast(hard_alignment, tf.float32)
    weight = tf.cast(voiced, tf.float32)
    total = tf.einsum("bt,btn->bn", values * weight, hard)  # [B, T_text]
    count = tf.einsum("bt,btn->bn", weight, hard)
    return tf.where(count > 0.0, total / tf.maximum(count, 1.0), 0.0)


class PitchEmbedding(BuiltByFirstCall, keras.layers.Layer):
    """Token pitch ``[B, T_text]`` -> an encoding update ``[B, T_text, d]`` (zero at padding), zero-initialised."""

    def __init__(self, d_model: int, **kwargs):
        super().__init__(**kwargs)
        self.conv = keras.layers.Conv1D(d_model, PITCH_EMBEDDING_KERNEL, padding="same", kernel_initializer="zeros",
                                        name="conv")

    def call(self, pitch, token_mask):
        mask = tf.cast(token_mask[..., None], self.compute_dtype)  # [B, T_text, 1]
        return self.conv(tf.cast(pitch[..., None], self.compute_dtype) * mask) * mask


class PitchLevelPredictor(BuiltByFirstCall, keras.layers.Layer):
    """Speaker latents ``[B, K, d]`` -> the voice's pitch level ``[B, 2]`` float32 (``model.pitch_level``): a hidden
    layer on the latents' mean and a zero-initialised output, so it starts at ``LEVEL_CENTER_HZ`` and ``LEVEL_STD``.
    Its loss reaches the conditioning encoder: the latents learn to carry the voice's pitch."""

    def __init__(self, d_model: int, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(d_model, activation="gelu", name="hidden")
        self.output_proj = keras.layers.Dense(2, kernel_initializer="zeros", name="output")

    def call(self, latents):
        return tf.cast(self.output_proj(self.hidden(tf.reduce_mean(latents, axis=1))), tf.float32)  # [B, 2]

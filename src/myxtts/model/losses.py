"""Training losses, every one masked by the true lengths so padding never counts.

- ``mel_l1_before`` / ``mel_l1_after``: mean absolute error over real frames x mel bins, before and after
  the postnet; ``mel_l2`` (mean squared error after the postnet) only enters ``total`` with ``model.mel_l2_weight`` > 0.
- ``stop``: binary cross-entropy of the stop token over real decoder steps; the single positive
  (last real step) is weighted by ``model.stop_positive_weight``.
- ``guided_attention``: mean of alignment x (1 - exp(-(n/N - t/T)^2 / (2 sigma^2))) over real
  (step, token) pairs: a diagonal prior that makes attention monotonic early (Tachibana et al. 2017),
  weighted by ``model.guided_attention_weight``.
"""

from __future__ import annotations

import tensorflow as tf

from myxtts.config import Config
from myxtts.model.layers import static_or_dynamic_dim


def _masked_mean(values: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    mask = tf.cast(mask, tf.float32)
    return tf.reduce_sum(values * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)


def decoder_step_lengths(mel_lengths: tf.Tensor, reduction_factor: int) -> tf.Tensor:
    """Number of real decoder steps per item: ceil(mel_length / r)."""
    return (mel_lengths + reduction_factor - 1) // reduction_factor


def guided_attention_weights(step_lengths, token_lengths, steps: int, text_len: int, sigma: float) -> tf.Tensor:
    """Penalty ``[B, steps, text_len]``: 0 on the diagonal n/N == t/T, -> 1 far from it."""
    n = tf.range(steps, dtype=tf.float32)[None, :, None] / tf.cast(step_lengths, tf.float32)[:, None, None]
    t = tf.range(text_len, dtype=tf.float32)[None, None, :] / tf.cast(token_lengths, tf.float32)[:, None, None]
    return 1.0 - tf.exp(-tf.square(n - t) / (2.0 * sigma * sigma))


def compute_losses(batch: dict, outputs: dict, cfg: Config) -> dict[str, tf.Tensor]:
    """Scalar float32 losses (masked by true lengths) and their weighted ``total``."""
    m = cfg.model
    l2_weight = m.mel_l2_weight
    r = m.reduction_factor
    target = tf.cast(batch["mel"], tf.float32)  # [B, T, n_mels]
    frames, n_mels = static_or_dynamic_dim(target, 1), static_or_dynamic_dim(target, 2)  # static when compiled
    steps, text_len = frames // r, static_or_dynamic_dim(batch["tokens"], 1)
    frame_mask = tf.logical_and(tf.sequence_mask(batch["mel_lengths"], frames)[..., None],
                                tf.ones([1, 1, n_mels], tf.bool))  # [B, T, n_mels]
    before = tf.cast(outputs["mel_before"], tf.float32)
    after = tf.cast(outputs["mel_after"], tf.float32)
    # where() rather than multiply: a NaN/Inf in the padding of the target must not poison the sum
    l1_before = _masked_mean(tf.where(frame_mask, tf.abs(before - target), 0.0), frame_mask)
    l1_after = _masked_mean(tf.where(frame_mask, tf.abs(after - target), 0.0), frame_mask)
    l2_after = _masked_mean(tf.where(frame_mask, tf.square(after - target), 0.0), frame_mask)

    step_lengths = decoder_step_lengths(batch["mel_lengths"], r)  # [B]
    step_mask = tf.sequence_mask(step_lengths, steps)  # [B, steps]
    stop_target = tf.one_hot(step_lengths - 1, steps, dtype=tf.float32)  # 1 on the last real step
    stop_logits = tf.cast(outputs["stop_logits"], tf.float32)
    stop_bce = tf.nn.weighted_cross_entropy_with_logits(labels=stop_target, logits=stop_logits,
                                                        pos_weight=m.stop_positive_weight)
    stop = _masked_mean(tf.where(step_mask, stop_bce, 0.0), step_mask)

    alignments = tf.cast(outputs["alignments"], tf.float32)  # [B, steps, T_text]
    pair_mask = step_mask[:, :, None] & tf.sequence_mask(batch["token_lengths"], text_len)[:, None, :]
    penalty = guided_attention_weights(step_lengths, batch["token_lengths"], steps, text_len,
                                       m.guided_attention_sigma)
    guided = _masked_mean(tf.where(pair_mask, alignments * penalty, 0.0), pair_mask)

    total = l1_before + l1_after + stop + m.guided_attention_weight * guided
    if l2_weight > 0:
        total = total + l2_weight * l2_after
    return {"total": total, "mel_l1_before": l1_before, "mel_l1_after": l1_after, "mel_l2": l2_after,
            "stop": stop, "guided_attention": guided}

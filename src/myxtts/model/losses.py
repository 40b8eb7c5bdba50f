"""Training losses, every one masked by the true lengths so padding never counts.

Each loss is a *sum* over real elements divided by the real count of the **global** batch
(``normalizers``): every micro-batch of a gradient-accumulation cycle and every replica divides by
the same count, so their summed gradients equal one big batch's exactly, whatever their lengths. (A
per-micro-batch mean divided by N weights a 2-row 840-frame batch like a 7-row 336-frame one: with
lengths [24, 24, 4, 4] that update was 1.49x off the big-batch one, cosine 0.07.) Without
``normalizers`` the counts are this batch's own (validation, tests).

- ``mel_l1_before`` / ``mel_l1_after``: mean absolute error over real frames x mel bins, before and after
  the postnet; ``mel_l2`` (mean squared error after the postnet) only enters ``total`` with ``model.mel_l2_weight`` > 0.
- ``stop``: binary cross-entropy of the stop token over real decoder steps; the single positive
  (last real step) is weighted by ``model.stop_positive_weight``.
- ``guided_attention``: sum over real text tokens of alignment x (1 - exp(-(n/N - t/T)^2 / (2 sigma^2))),
  averaged over real decoder steps: the attention mass each step puts off the diagonal, in [0, 1]; a
  diagonal prior that makes attention monotonic early (Tachibana et al. 2017), weighted by
  ``model.guided_attention_weight``.
"""

from __future__ import annotations

import tensorflow as tf

from myxtts.config import Config
from myxtts.model.layers import static_or_dynamic_dim


NORMALIZER_KEYS = ("mel_elements", "decoder_steps", "utterances", "tokens")


def _masked_sum(values: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    return tf.reduce_sum(tf.where(mask, values, tf.zeros_like(values)))


def decoder_step_lengths(mel_lengths: tf.Tensor, reduction_factor: int) -> tf.Tensor:
    """Number of real decoder steps per item: ceil(mel_length / r)."""
    return (mel_lengths + reduction_factor - 1) // reduction_factor


def loss_normalizers(batch: dict, reduction_factor: int, n_mels: int) -> dict[str, tf.Tensor]:
    """Real counts of a batch (float32 scalars): mel elements (frames x bins) and decoder steps. Add them
    over micro-batches / replicas for the global batch."""
    mel_lengths = tf.cast(batch["mel_lengths"], tf.float32)  # [B]
    steps = tf.cast(decoder_step_lengths(batch["mel_lengths"], reduction_factor), tf.float32)  # [B]
    return {"mel_elements": tf.reduce_sum(mel_lengths) * float(n_mels), "decoder_steps": tf.reduce_sum(steps),
            "utterances": tf.cast(tf.size(batch["mel_lengths"]), tf.float32),
            "tokens": tf.reduce_sum(tf.cast(batch["token_lengths"], tf.float32))}


def add_normalizers(parts: list[dict[str, tf.Tensor]]) -> dict[str, tf.Tensor]:
    """The global batch's counts from its parts (micro-batches of one accumulation cycle)."""
    return {key: tf.add_n([part[key] for part in parts]) for key in NORMALIZER_KEYS}


def guided_attention_weights(step_lengths, token_lengths, steps: int, text_len: int, sigma: float) -> tf.Tensor:
    """Penalty ``[B, steps, text_len]``: 0 on the diagonal n/N == t/T, -> 1 far from it."""
    n = tf.range(steps, dtype=tf.float32)[None, :, None] / tf.cast(step_lengths, tf.float32)[:, None, None]
    t = tf.range(text_len, dtype=tf.float32)[None, None, :] / tf.cast(token_lengths, tf.float32)[:, None, None]
    return 1.0 - tf.exp(-tf.square(n - t) / (2.0 * sigma * sigma))


def compute_losses(batch: dict, outputs: dict, cfg: Config, normalizers: dict[str, tf.Tensor] | None = None,
                   step: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
    """Scalar float32 losses (masked by true lengths) and their weighted ``total``.

    ``normalizers``: the global batch's real counts (``loss_normalizers`` summed over every part of the
    global batch); None: this batch's own counts (then each loss is this batch's masked mean). ``step``: the
    optimizer step (the parallel decoder's binarisation loss is ramped in by it; None: fully on).
    """
    if cfg.model.decoder == "parallel":
        return compute_parallel_losses(batch, outputs, cfg, normalizers, step)
    m = cfg.model
    l2_weight = m.mel_l2_weight
    r = m.reduction_factor
    target = tf.cast(batch["mel"], tf.float32)  # [B, T, n_mels]
    frames, n_mels = static_or_dynamic_dim(target, 1), static_or_dynamic_dim(target, 2)  # static when compiled
    steps, text_len = frames // r, static_or_dynamic_dim(batch["tokens"], 1)
    if normalizers is None:
        normalizers = loss_normalizers(batch, r, n_mels)
    # max(., 1): an all-padding global batch (never produced by the pipeline) gives 0, not NaN
    count = {key: tf.maximum(tf.cast(normalizers[key], tf.float32), 1.0) for key in NORMALIZER_KEYS}
    frame_mask = tf.logical_and(tf.sequence_mask(batch["mel_lengths"], frames)[..., None],
                                tf.ones([1, 1, n_mels], tf.bool))  # [B, T, n_mels]
    before = tf.cast(outputs["mel_before"], tf.float32)
    after = tf.cast(outputs["mel_after"], tf.float32)
    # where() rather than multiply: a NaN/Inf in the padding of the target must not poison the sum
    l1_before = _masked_sum(tf.abs(before - target), frame_mask) / count["mel_elements"]
    l1_after = _masked_sum(tf.abs(after - target), frame_mask) / count["mel_elements"]
    l2_after = _masked_sum(tf.square(after - target), frame_mask) / count["mel_elements"]

    step_lengths = decoder_step_lengths(batch["mel_lengths"], r)  # [B]
    step_mask = tf.sequence_mask(step_lengths, steps)  # [B, steps]
    stop_target = tf.one_hot(step_lengths - 1, steps, dtype=tf.float32)  # 1 on the last real step
    stop_logits = tf.cast(outputs["stop_logits"], tf.float32)
    stop_bce = tf.nn.weighted_cross_entropy_with_logits(labels=stop_target, logits=stop_logits,
                                                        pos_weight=m.stop_positive_weight)
    stop = _masked_sum(stop_bce, step_mask) / count["decoder_steps"]

    alignments = tf.cast(outputs["alignments"], tf.float32)  # [B, steps, T_text]
    pair_mask = step_mask[:, :, None] & tf.sequence_mask(batch["token_lengths"], text_len)[:, None, :]
    penalty = guided_attention_weights(step_lengths, batch["token_lengths"], steps, text_len,
                                       m.guided_attention_sigma)
    # per decoder step: the attention mass placed off the diagonal (in [0, 1]); a mean over (step, token)
    # pairs would divide it by the text length again (~1/100) and leave the alignment effectively unguided
    guided = _masked_sum(alignments * penalty, pair_mask) / count["decoder_steps"]

    total = l1_before + l1_after + stop + m.guided_attention_weight * guided
    if l2_weight > 0:
        total = total + l2_weight * l2_after
    return {"total": total, "mel_l1_before": l1_before, "mel_l1_after": l1_after, "mel_l2": l2_after,
            "stop": stop, "guided_attention": guided}


def _mel_losses(batch: dict, outputs: dict, count: dict) -> dict[str, tf.Tensor]:
    target = tf.cast(batch["mel"], tf.float32)  # [B, T, n_mels]
    frames, n_mels = static_or_dynamic_dim(target, 1), static_or_dynamic_dim(target, 2)
    frame_mask = tf.logical_and(tf.sequence_mask(batch["mel_lengths"], frames)[..., None],
                                tf.ones([1, 1, n_mels], tf.bool))  # [B, T, n_mels]
    before = tf.cast(outputs["mel_before"], tf.float32)
    after = tf.cast(outputs["mel_after"], tf.float32)
    return {"mel_l1_before": _masked_sum(tf.abs(before - target), frame_mask) / count["mel_elements"],
            "mel_l1_after": _masked_sum(tf.abs(after - target), frame_mask) / count["mel_elements"],
            "mel_l2": _masked_sum(tf.square(after - target), frame_mask) / count["mel_elements"]}


def binarization_schedule(step: tf.Tensor | None, start: int, ramp: int) -> tf.Tensor:
    """0 before ``start``, then linear to 1 over ``ramp`` steps (1 when ``step`` is None)."""
    if step is None:
        return tf.constant(1.0)
    progress = (tf.cast(step, tf.float32) - float(start)) / float(max(ramp, 1))
    return tf.clip_by_value(progress + (1.0 if ramp == 0 else 0.0), 0.0, 1.0)


def compute_parallel_losses(batch: dict, outputs: dict, cfg: Config,
                            normalizers: dict[str, tf.Tensor] | None = None,
                            step: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
    """The parallel decoder's losses: mel L1 before / after the postnet (per real mel element), the aligner's
    forward-sum (per token, mean over utterances), the duration loss (MSE of log(1 + frames) per real token, on
    the aligner's durations) and the binarisation loss (-log soft alignment on the hard path, per real frame)."""
    from myxtts.model.alignment import binarization_loss, forward_sum_loss

    m = cfg.model
    if normalizers is None:
        normalizers = loss_normalizers(batch, 1, static_or_dynamic_dim(batch["mel"], 2))
    count = {key: tf.maximum(tf.cast(normalizers[key], tf.float32), 1.0) for key in NORMALIZER_KEYS}
    losses = _mel_losses(batch, outputs, count)
    token_lengths, mel_lengths = batch["token_lengths"], batch["mel_lengths"]
    log_alignment = tf.cast(outputs["log_alignment"], tf.float32)
    losses["forward_sum"] = tf.reduce_sum(forward_sum_loss(log_alignment, token_lengths, mel_lengths)) \
        / count["utterances"]
    token_mask = tf.sequence_mask(token_lengths, static_or_dynamic_dim(batch["tokens"], 1))
    target = tf.math.log1p(tf.cast(outputs["durations"], tf.float32))  # [B, T_text]
    error = tf.square(tf.cast(outputs["log_duration_predictions"], tf.float32) - target)
    losses["duration"] = _masked_sum(error, token_mask) / count["tokens"]
    frames = count["mel_elements"] / float(static_or_dynamic_dim(batch["mel"], 2))
    losses["binarization"] = tf.reduce_sum(binarization_loss(outputs["hard_alignment"], log_alignment)) / frames
    ramp = binarization_schedule(step, m.binarization_start_step, m.binarization_ramp_steps)
    total = (losses["mel_l1_before"] + losses["mel_l1_after"] + m.forward_sum_weight * losses["forward_sum"]
             + m.duration_weight * losses["duration"] + m.binarization_weight * ramp * losses["binarization"])
    if m.mel_l2_weight > 0:
        total = total + m.mel_l2_weight * losses["mel_l2"]
    losses["total"] = total
    return losses

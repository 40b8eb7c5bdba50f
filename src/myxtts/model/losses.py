"""Training losses, every one masked by the true lengths so padding never counts.

Each loss is a *sum* over real elements divided by the real count of the **global** batch
(``normalizers``): every micro-batch of a gradient-accumulation cycle and every replica divides by
the same count, so their summed gradients equal one big batch's exactly, whatever their lengths. (A
per-micro-batch mean divided by N would weight a 2-row 840-frame batch like a 7-row 336-frame one, and
the accumulated update would point elsewhere than the big batch's.) Without ``normalizers`` the counts are
this batch's own (validation, tests).

- Frames of a reference cut from the target itself (``reference_offsets`` >= 0, data.single_clip_policy "slice")
  are not scored by the mel losses (``scored_frame_mask``; ``scored_mel_elements`` counts the rest); the aligner
  and duration losses still read every real frame (they learn where the text is, not what the voice sounds like).
- ``mel_l1_before`` / ``mel_l1_after``: mean absolute error over real frames x mel bins, before and after
  the postnet; ``mel_l2`` (mean squared error after the postnet) only enters ``total`` with ``model.mel_l2_weight`` > 0.
- ``mel_delta``: the L1 error of the mel's changes after the postnet, frame to frame (pairs of real frames) plus bin to
  bin, per real element: what an L1 loss on the values lets the decoder smooth away (harmonics, onsets); only enters
  ``total`` with ``model.mel_delta_weight`` > 0.
- ``forward_sum``: the aligner's forward-sum loss (per token, mean over utterances).
- ``duration``: MSE of the predicted log(1 + frames) against the aligner's durations, per real token.
- ``binarization``: -log soft alignment on the hard path, per real frame; ramped in by the optimizer step.
- ``pitch`` (``model.pitch_conditioning``, batches with ``pitch``): MSE of the predicted token pitch against the
  recordings', per real token, weighted ``PITCH_WEIGHT`` (FastPitch's 0.1).
- ``pitch_level`` (``model.pitch_level``, batches with ``pitch``): squared error of the predicted level (two values)
  against the utterance's, per utterance with a voiced frame, weighted ``PITCH_WEIGHT``.

Both decoders train on the same losses: the text reaches either only through the durations.
"""

from __future__ import annotations

import tensorflow as tf

from myxtts.config import Config
from myxtts.model.alignment import binarization_loss, forward_sum_loss
from myxtts.model.layers import static_or_dynamic_dim

NORMALIZER_KEYS = ("mel_elements", "scored_mel_elements", "utterances", "tokens")
REFERENCE_OFFSET_KEY = "reference_offsets"  # the pipeline's key (data/pipeline.py): a self-sliced reference's start
PITCH_WEIGHT = 0.1


def _masked_sum(values: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    return tf.reduce_sum(tf.where(mask, values, tf.zeros_like(values)))


def reference_frames_in_target(batch: dict) -> tf.Tensor | None:
    """[B] float32: how many of each target's real frames its reference was cut from (``reference_offsets`` >= 0:
    a slice of the target itself, data.single_clip_policy "slice"); None when the batch has no such key."""
    if REFERENCE_OFFSET_KEY not in batch:
        return None
    inside = tf.cast(batch[REFERENCE_OFFSET_KEY] >= 0, tf.float32)
    return inside * tf.cast(batch["reference_lengths"], tf.float32)


def scored_frame_mask(batch: dict, frames: tf.Tensor | int) -> tf.Tensor:
    """[B, T] bool: the real frames the mel losses score, i.e. within ``mel_lengths`` and outside a reference
    cut from the target itself (XTTS's masked prompt: copying the reference earns nothing)."""
    mask = tf.sequence_mask(batch["mel_lengths"], frames)  # [B, T]
    if REFERENCE_OFFSET_KEY not in batch:
        return mask
    positions = tf.range(frames)[None, :]  # [1, T]
    start = batch[REFERENCE_OFFSET_KEY][:, None]  # [B, 1], -1: the reference came from another clip
    end = start + tf.cast(batch["reference_lengths"], start.dtype)[:, None]
    in_reference = (start >= 0) & (positions >= start) & (positions < end)  # [B, T]
    return mask & ~in_reference


def loss_normalizers(batch: dict, n_mels: int) -> dict[str, tf.Tensor]:
    """Real counts of a batch (float32 scalars): mel elements (frames x bins), those the mel losses score (outside
    a reference cut from the target), utterances and tokens. Add them over micro-batches / replicas for the
    global batch."""
    mel_lengths = tf.cast(batch["mel_lengths"], tf.float32)  # [B]
    unscored = reference_frames_in_target(batch)
    scored = mel_lengths if unscored is None else mel_lengths - tf.minimum(unscored, mel_lengths)
    return {"mel_elements": tf.reduce_sum(mel_lengths) * float(n_mels),
            "scored_mel_elements": tf.reduce_sum(scored) * float(n_mels),
            "utterances": tf.cast(tf.size(batch["mel_lengths"]), tf.float32),
            "tokens": tf.reduce_sum(tf.cast(batch["token_lengths"], tf.float32))}


def add_normalizers(parts: list[dict[str, tf.Tensor]]) -> dict[str, tf.Tensor]:
    """The global batch's counts from its parts (micro-batches of one accumulation cycle)."""
    return {key: tf.add_n([part[key] for part in parts]) for key in NORMALIZER_KEYS}


def _mel_losses(batch: dict, outputs: dict, count: dict) -> dict[str, tf.Tensor]:
    target = tf.cast(batch["mel"], tf.float32)  # [B, T, n_mels]
    frames, n_mels = static_or_dynamic_dim(target, 1), static_or_dynamic_dim(target, 2)
    frame_mask = tf.logical_and(scored_frame_mask(batch, frames)[..., None],
                                tf.ones([1, 1, n_mels], tf.bool))  # [B, T, n_mels]
    before = tf.cast(outputs["mel_before"], tf.float32)
    after = tf.cast(outputs["mel_after"], tf.float32)
    error = after - target  # [B, T, n_mels]
    # the change from frame t to t + 1 counts where both are real; the change between neighbouring bins, in real frames
    pair_mask = tf.logical_and(frame_mask[:, 1:], frame_mask[:, :-1])  # [B, T - 1, n_mels]
    time_delta = _masked_sum(tf.abs(error[:, 1:] - error[:, :-1]), pair_mask)
    bin_delta = _masked_sum(tf.abs(error[..., 1:] - error[..., :-1]), frame_mask[..., 1:])
    scored = count["scored_mel_elements"]
    return {"mel_l1_before": _masked_sum(tf.abs(before - target), frame_mask) / scored,
            "mel_l1_after": _masked_sum(tf.abs(error), frame_mask) / scored,
            "mel_l2": _masked_sum(tf.square(error), frame_mask) / scored,
            "mel_delta": (time_delta + bin_delta) / scored}


def binarization_schedule(step: tf.Tensor | None, start: int, ramp: int) -> tf.Tensor:
    """0 before ``start``, then linear to 1 over ``ramp`` steps (1 when ``step`` is None)."""
    if step is None:
        return tf.constant(1.0)
    progress = (tf.cast(step, tf.float32) - float(start)) / float(max(ramp, 1))
    return tf.clip_by_value(progress + (1.0 if ramp == 0 else 0.0), 0.0, 1.0)


def compute_losses(batch: dict, outputs: dict, cfg: Config, normalizers: dict[str, tf.Tensor] | None = None,
                   step: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
    """Scalar float32 losses (masked by true lengths, see the module docstring) and their weighted ``total``.

    ``normalizers``: the global batch's real counts (``loss_normalizers`` summed over every part of the
    global batch); None: this batch's own counts (then each loss is this batch's masked mean). ``step``: the
    optimizer step (the binarisation loss is ramped in by it; None: fully on).
    """
    m = cfg.model
    if normalizers is None:
        normalizers = loss_normalizers(batch, static_or_dynamic_dim(batch["mel"], 2))
    count = {key: tf.maximum(tf.cast(normalizers[key], tf.float32), 1.0) for key in NORMALIZER_KEYS}
    losses = _mel_losses(batch, outputs, count)
    token_lengths, mel_lengths = batch["token_lengths"], batch["mel_lengths"]
    log_alignment = tf.cast(outputs["log_alignment"], tf.float32)
    # XLA has no kernel for TF's CTC op: the compiled step uses the same recursion in plain ops
    xla = cfg.training.enable_xla_compilation
    losses["forward_sum"] = tf.reduce_sum(forward_sum_loss(log_alignment, token_lengths, mel_lengths, xla)) \
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
    if "token_pitch" in outputs:
        error = tf.square(tf.cast(outputs["pitch_predictions"], tf.float32) - outputs["token_pitch"])
        losses["pitch"] = _masked_sum(error, token_mask) / count["tokens"]
        total = total + PITCH_WEIGHT * losses["pitch"]
    if "pitch_level" in outputs:  # model.pitch_level: per utterance with a voiced frame
        error = tf.reduce_sum(tf.square(outputs["pitch_level_predictions"] - outputs["pitch_level"]), axis=1)  # [B]
        losses["pitch_level"] = _masked_sum(error, outputs["pitch_level_voiced"]) / count["utterances"]
        total = total + PITCH_WEIGHT * losses["pitch_level"]
    if m.mel_l2_weight > 0:
        total = total + m.mel_l2_weight * losses["mel_l2"]
    if m.mel_delta_weight > 0:
        total = total + m.mel_delta_weight * losses["mel_delta"]
    losses["total"] = total
    return losses

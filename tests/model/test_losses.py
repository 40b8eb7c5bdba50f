"""Losses: masked by true lengths (padding never counts), each term reacts to what it measures."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from myxtts.model import build_model, compute_losses
from train_helpers import synthetic_batch

VOCAB = 40


@pytest.fixture(scope="module", params=["parallel", "autoregressive"])
def setup(request):
    from myxtts.config import config_from_dict
    cfg = config_from_dict({"model": {"preset": "tiny", "decoder": request.param, "d_model": 64, "ff_dim": 128,
                                      "mel_l2_weight": 0.5, "mel_delta_weight": 0.3, "duration_weight": 0.7,
                                      "forward_sum_weight": 1.3,
                                      "binarization_weight": 0.4}})
    return cfg, build_model(cfg, VOCAB)


def _losses(model, cfg, batch):
    return {k: float(v) for k, v in compute_losses(batch, model(batch, training=False), cfg).items()}


def _pad(batch, text=0, frames=0, reference=0, value=0.0):
    """Add padding to every padded dimension (frames keeps the reduction-factor multiple)."""
    out = dict(batch)
    out["tokens"] = tf.pad(batch["tokens"], [[0, 0], [0, text]])
    out["mel"] = tf.pad(batch["mel"], [[0, 0], [0, frames], [0, 0]], constant_values=value)
    out["reference_mel"] = tf.pad(batch["reference_mel"], [[0, 0], [0, reference], [0, 0]], constant_values=value)
    return out


def test_loss_ignores_padding_values(setup):
    cfg, model = setup
    batch = synthetic_batch(3, 12, 32, 20, vocab_size=VOCAB, seed=4)
    reference = _losses(model, cfg, batch)
    noisy = dict(batch)
    rng = np.random.default_rng(0)
    for key, length_key in (("mel", "mel_lengths"), ("reference_mel", "reference_lengths")):
        values = batch[key].numpy()
        pad = np.arange(values.shape[1])[None] >= batch[length_key].numpy()[:, None]
        values[pad] = rng.normal(50.0, 10.0, values[pad].shape)
        noisy[key] = tf.constant(values)
    tokens = batch["tokens"].numpy()
    tokens[np.arange(12)[None] >= batch["token_lengths"].numpy()[:, None]] = 7
    noisy["tokens"] = tf.constant(tokens)
    changed = _losses(model, cfg, noisy)
    for key in reference:
        assert changed[key] == pytest.approx(reference[key], rel=1e-5, abs=1e-6), key


def test_loss_ignores_added_padding(setup):
    cfg, model = setup
    batch = synthetic_batch(3, 12, 32, 20, vocab_size=VOCAB, seed=5)
    reference = _losses(model, cfg, batch)
    padded = _losses(model, cfg, _pad(batch, text=5, frames=8, reference=12))
    for key in reference:
        assert padded[key] == pytest.approx(reference[key], rel=1e-4, abs=1e-6), key


def test_nan_in_target_padding_does_not_poison_loss(setup):
    cfg, model = setup
    batch = synthetic_batch(2, 10, 24, 16, vocab_size=VOCAB, seed=6)
    batch["mel_lengths"] = tf.constant([24, 10], tf.int32)
    mel = batch["mel"].numpy()
    mel[1, 10:] = np.nan
    batch["mel"] = tf.constant(mel)
    assert all(np.isfinite(v) for v in _losses(model, cfg, batch).values())


def test_terms_react_to_what_they_measure(setup):
    cfg, model = setup
    m = cfg.model
    batch = synthetic_batch(2, 10, 24, 16, vocab_size=VOCAB, seed=7)
    outputs = model(batch, training=False)
    base = compute_losses(batch, outputs, cfg)
    assert float(base["total"]) == pytest.approx(
        float(base["mel_l1_before"] + base["mel_l1_after"] + 0.5 * base["mel_l2"] + 0.3 * base["mel_delta"]
              + 1.3 * base["forward_sum"] + 0.7 * base["duration"] + 0.4 * base["binarization"]), rel=1e-5)
    perfect = dict(outputs, mel_before=batch["mel"], mel_after=batch["mel"],
                   log_duration_predictions=tf.math.log1p(tf.cast(outputs["durations"], tf.float32)))
    perfect_losses = compute_losses(batch, perfect, cfg)
    for key in ("mel_l1_before", "mel_l1_after", "mel_l2", "mel_delta", "duration"):
        assert float(perfect_losses[key]) == 0.0, key
    # the binarisation loss is ramped in by the optimizer step: off before its start, full after the ramp
    ramped = [float(compute_losses(batch, outputs, cfg, step=tf.constant(step))["total"])
              for step in (0, m.binarization_start_step + m.binarization_ramp_steps)]
    assert ramped[1] - ramped[0] == pytest.approx(0.4 * float(base["binarization"]), rel=1e-4)


def test_mel_delta_measures_smoothing_that_the_l1_loss_misses():
    """A real mel (a bundled clip) against two outputs with the same L1 error: the target smoothed over 3 frames and
    3 bins, and the target shifted by a constant. The delta loss sees the smoothing, not the shift; its time term
    stays inside each utterance's real frames."""
    from conftest import bundled_wavs
    from myxtts.audio import load_audio
    from myxtts.mel import MelFrontend
    from myxtts.config import AudioConfig
    from myxtts.model.losses import _mel_losses

    audio = AudioConfig()
    real = MelFrontend(audio)(load_audio(bundled_wavs(1)[0], audio.sample_rate)).numpy()[:120]  # [frames, n_mels]
    kernel = np.ones(3) / 3
    smoothed = np.apply_along_axis(lambda row: np.convolve(row, kernel, mode="same"), 0, real)
    smoothed = np.apply_along_axis(lambda row: np.convolve(row, kernel, mode="same"), 1, smoothed)
    lengths = np.array([120, 70], np.int32)  # unequal: the second utterance's padding holds garbage
    error = np.abs(smoothed - real)
    shift = (error.sum() + error[:70].sum()) / (lengths.sum() * real.shape[1])
    shifted = real + shift  # the same mean absolute error over the real frames, no change of shape
    target = np.stack([real, real]).astype(np.float32)
    target[1, 70:] = 30.0

    def delta(output):
        output = np.stack([output, output]).astype(np.float32)
        output[1, 70:] = -30.0
        batch = {"mel": tf.constant(target), "mel_lengths": tf.constant(lengths)}
        elements = tf.constant(float(lengths.sum() * target.shape[2]))
        count = {"mel_elements": elements, "scored_mel_elements": elements}
        losses = _mel_losses(batch, {"mel_before": output, "mel_after": output}, count)
        return float(losses["mel_delta"]), float(losses["mel_l1_after"])

    smoothed_delta, smoothed_l1 = delta(smoothed)
    shifted_delta, shifted_l1 = delta(shifted)
    assert smoothed_l1 == pytest.approx(shifted_l1, rel=1e-4)
    assert shifted_delta < 1e-4 < smoothed_delta

"""Losses: masked by true lengths (padding never counts), each term reacts to what it measures."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from myxtts.model import build_model, compute_losses, guided_attention_weights
from train_helpers import synthetic_batch

VOCAB = 40


@pytest.fixture(scope="module")
def setup():
    from myxtts.config import config_from_dict
    cfg = config_from_dict({"model": {"preset": "tiny", "decoder": "autoregressive", "d_model": 64, "ff_dim": 128, "mel_l2_weight": 0.5}})
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
    batch = synthetic_batch(2, 10, 24, 16, vocab_size=VOCAB, seed=7)
    outputs = model(batch, training=False)
    base = compute_losses(batch, outputs, cfg)
    assert float(base["total"]) == pytest.approx(
        float(base["mel_l1_before"] + base["mel_l1_after"] + base["stop"] + 0.5 * base["mel_l2"]
              + cfg.model.guided_attention_weight * base["guided_attention"]), rel=1e-5)
    perfect = dict(outputs, mel_before=batch["mel"], mel_after=batch["mel"])
    perfect_losses = compute_losses(batch, perfect, cfg)
    assert float(perfect_losses["mel_l1_before"]) == 0.0 and float(perfect_losses["mel_l2"]) == 0.0
    # a diagonal alignment costs less than an anti-diagonal one
    steps, text = outputs["alignments"].shape[1:]
    diagonal = np.zeros([2, steps, text], np.float32)
    anti = np.zeros_like(diagonal)
    for i, (frames, tokens) in enumerate(zip(batch["mel_lengths"].numpy(), batch["token_lengths"].numpy())):
        n = -(-frames // 2)
        for s in range(n):
            diagonal[i, s, min(tokens - 1, s * tokens // n)] = 1.0
            anti[i, s, tokens - 1 - min(tokens - 1, s * tokens // n)] = 1.0
    cost = lambda a: float(compute_losses(batch, dict(outputs, alignments=tf.constant(a)), cfg)["guided_attention"])
    assert cost(diagonal) < 0.1 * cost(anti)
    # stop: confident right answers cost less than confident wrong ones
    step_lengths = (batch["mel_lengths"].numpy() + 1) // 2
    right = np.where(np.arange(steps)[None] == step_lengths[:, None] - 1, 10.0, -10.0).astype(np.float32)
    stop = lambda logits: float(compute_losses(batch, dict(outputs, stop_logits=tf.constant(logits)), cfg)["stop"])
    assert stop(right) < 0.01 < stop(-right)


def test_guided_attention_prior_is_zero_on_diagonal():
    weights = guided_attention_weights(tf.constant([10]), tf.constant([20]), 10, 20, 0.2).numpy()[0]
    assert weights[0, 0] == 0.0 and weights[5, 10] == pytest.approx(0.0, abs=1e-6)
    assert weights[0, 19] > 0.9

"""Model: shapes, presets and config overrides, cached step decoding == parallel decoding."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from myxtts.model import PRESETS, build_model, count_parameters, resolve_dims
from train_helpers import synthetic_batch

VOCAB = 40


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from myxtts.config import config_from_dict
    cfg = config_from_dict({"model": {"preset": "tiny", "decoder": "autoregressive", "d_model": 64, "ff_dim": 128,
                                      "prenet_dim": 64, "postnet_channels": 64, "decoder_layers": 3}})
    return cfg, build_model(cfg, VOCAB)


def test_tiny_preset_is_small_and_overrides_win(make_config):
    cfg = make_config(model={"preset": "tiny"})
    model = build_model(cfg, VOCAB)
    assert count_parameters(model) < 2_000_000
    dims = resolve_dims(make_config(model={"preset": "small", "num_heads": 8, "num_speaker_latents": 3,
                                           "postnet_layers": 2}).model, VOCAB, 80)
    assert (dims.num_heads, dims.num_speaker_latents, dims.postnet_layers) == (8, 3, 2)
    assert dims.d_model == PRESETS["small"]["d_model"]  # None keeps the preset


def test_every_model_override_reaches_the_built_layers(make_config):
    overrides = {"d_model": 48, "num_heads": 3, "ff_dim": 72, "text_layers": 1, "decoder_layers": 3,
                 "conditioning_layers": 1, "num_speaker_latents": 5, "prenet_dim": 40, "postnet_channels": 24,
                 "postnet_layers": 4, "reduction_factor": 3}
    cfg = make_config(data={"bucket_multiple": 9, "max_mel_frames": 882},
                      model={"preset": "tiny", "decoder": "autoregressive", **overrides})
    model = build_model(cfg, VOCAB)
    assert {key: getattr(model.dims, key) for key in overrides} == overrides
    text, cond, dec, post = model.text_encoder, model.conditioning_encoder, model.decoder, model.postnet
    assert text.embedding.embeddings.shape == (VOCAB, 48) and len(text.blocks) == 1
    assert text.blocks[0].feed_forward.inner.kernel.shape == (48, 72)
    assert text.blocks[0].self_attention.num_heads == 3
    assert len(cond.convs) == 1 and cond.latent_queries.shape == (5, 48)
    assert len(dec.blocks) == 3 and dec.prenet.layers_[0].kernel.shape == (3 * 80, 40)
    assert dec.mel_proj.kernel.shape == (48, 3 * 80)
    assert len(post.convs) == 4 and post.convs[0].kernel.shape[-1] == 24
    out = model(synthetic_batch(1, 6, 18, 9, vocab_size=VOCAB))
    assert out["stop_logits"].shape == (1, 6)


def test_inconsistent_sizes_are_rejected(make_config):
    with pytest.raises(ValueError, match="num_heads"):
        build_model(make_config(model={"preset": "tiny", "decoder": "autoregressive", "d_model": 30, "num_heads": 4}),
                    VOCAB)


@pytest.mark.parametrize("shape", [(2, 11, 24, 16), (3, 7, 40, 32)])
def test_output_shapes_and_alignment_rows(tiny, shape):
    cfg, model = tiny
    batch_size, text_len, frames, ref = shape
    batch = synthetic_batch(batch_size, text_len, frames, ref, vocab_size=VOCAB, seed=1)
    out = model(batch, training=True, seed=tf.constant([3, 4]))
    steps = frames // cfg.model.reduction_factor
    assert out["mel_before"].shape == out["mel_after"].shape == (batch_size, frames, 80)
    assert out["stop_logits"].shape == (batch_size, steps)
    assert out["alignments"].shape == (batch_size, steps, text_len)
    alignments = out["alignments"].numpy()
    lengths = batch["token_lengths"].numpy()
    for i, length in enumerate(lengths):
        assert np.all(alignments[i, :, length:] == 0.0)  # never attends to text padding
        # the aligning softmax runs over real text only: the speaker latents cannot take its mass
        np.testing.assert_allclose(alignments[i].sum(-1), 1.0, atol=1e-5)
    for value in out.values():
        assert value.dtype == tf.float32 and np.all(np.isfinite(value.numpy()))


def test_dropout_is_reproducible_from_the_seed(tiny):
    _, model = tiny
    batch = synthetic_batch(2, 9, 16, 12, vocab_size=VOCAB, seed=2)
    a = model(batch, training=True, seed=tf.constant([5, 6]))["mel_after"]
    b = model(batch, training=True, seed=tf.constant([5, 6]))["mel_after"]
    c = model(batch, training=True, seed=tf.constant([5, 7]))["mel_after"]
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.allclose(a.numpy(), c.numpy())


def test_cached_step_decoding_equals_parallel_decoder(tiny):
    cfg, model = tiny
    r = cfg.model.reduction_factor
    batch = synthetic_batch(2, 9, 24, 16, vocab_size=VOCAB, seed=3, full_lengths=True)
    full = model(batch, training=False)
    text = model.encode_text(batch["tokens"], batch["token_lengths"])
    latents = model.encode_reference(batch["reference_mel"], batch["reference_lengths"])
    memory, memory_mask = model.build_memory(text, batch["token_lengths"], latents)
    memory_kv = model.memory_key_values(memory)
    steps = 24 // r
    cache = model.initial_cache(2, steps + 3)  # a longer cache than needed: unused slots are masked
    decoder_inputs = model.teacher_forced_inputs(batch["mel"], batch["mel_lengths"])  # [B, steps, r*n_mels]

    @tf.function(jit_compile=False)
    def step(prev, index, cache):
        return model.decoder_step(prev, index, cache, memory_kv, memory_mask)

    frames, stops, attentions = [], [], []
    for index in range(steps):
        out_frames, stop, cache, attention = step(decoder_inputs[:, index], tf.constant(index), cache)
        frames.append(out_frames)
        stops.append(stop)
        attentions.append(attention)
    stepped = tf.concat(frames, axis=1)
    np.testing.assert_allclose(stepped.numpy(), full["mel_before"].numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(tf.stack(stops, 1).numpy(), full["stop_logits"].numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(tf.stack(attentions, 1)[:, :, :9].numpy(), full["alignments"].numpy(), atol=1e-5)
    # postnet on the stepped frames gives mel_after
    np.testing.assert_allclose(model.apply_postnet(stepped, batch["mel_lengths"]).numpy(),
                               full["mel_after"].numpy(), atol=1e-5)
    # the (text, latents) memory itself is accepted too (keys/values recomputed inside the step)
    same = model.decoder_step(decoder_inputs[:, 0], 0, model.initial_cache(2, steps), memory, memory_mask)
    np.testing.assert_allclose(same[0].numpy(), frames[0].numpy(), atol=1e-5)


def test_text_longer_than_position_table_is_a_clear_error(make_config):
    cfg = make_config(data={"max_text_length": 16, "max_mel_frames": 16}, model={
        "preset": "tiny", "max_attention_sequence_length": 16, "d_model": 32, "ff_dim": 32})
    model = build_model(cfg, VOCAB)
    with pytest.raises(ValueError, match="max_attention_sequence_length"):
        model(synthetic_batch(1, 20, 8, 8, vocab_size=VOCAB))


def test_none_dims_trace_and_match_while_static_signatures_stay_static(tiny):
    """A generic function with None dims (reduce_retracing, the naive baseline) traces and computes the same
    forward + losses as a static-signature one; the static one keeps every shape static (no tf.shape)."""
    from myxtts.model import compute_losses
    from train_helpers import batch_spec

    cfg, model = tiny
    batch = synthetic_batch(2, 11, 24, 16, vocab_size=VOCAB, seed=5)

    def forward(batch):
        outputs = model(batch, training=False)
        return {**outputs, **compute_losses(batch, outputs, cfg)}

    static_spec = batch_spec(2, 11, 24, 16)
    # what reduce_retracing generalises to: batch and lengths unknown, the mel bins (never varying) known
    dynamic_spec = {k: tf.TensorSpec([None] * min(len(v.shape), 2) + v.shape.as_list()[2:], v.dtype)
                    for k, v in static_spec.items()}
    static = tf.function(forward, input_signature=[static_spec]).get_concrete_function()
    dynamic = tf.function(forward, input_signature=[dynamic_spec]).get_concrete_function()
    for name, spec in static.structured_outputs.items():
        assert spec.shape.is_fully_defined(), (name, spec.shape)
    assert static.structured_outputs["alignments"].shape == (2, 12, 11)
    assert dynamic.structured_outputs["mel_after"].shape.as_list() == [None, None, 80]
    # the static graph reads no dims at run time: the None-dim fallback is confined to None-dim traces
    static_ops = {op.type for op in static.graph.get_operations()}
    dynamic_ops = {op.type for op in dynamic.graph.get_operations()}
    assert "Shape" in dynamic_ops and "Shape" not in static_ops
    expected, got = static(batch), dynamic(batch)
    for name in expected:
        np.testing.assert_allclose(got[name].numpy(), expected[name].numpy(), rtol=1e-5, atol=1e-6)


def test_reference_voice_reaches_the_output_through_its_own_path(tiny):
    """Another reference changes the mel, while the alignment over the text stays a distribution over the text."""
    _, model = tiny
    batch = synthetic_batch(2, 9, 24, 16, vocab_size=VOCAB, seed=6)
    other = dict(batch, reference_mel=tf.reverse(batch["reference_mel"], axis=[0]) * 2.0 + 1.0)
    a, b = model(batch, training=False), model(other, training=False)
    assert float(tf.reduce_mean(tf.abs(a["mel_before"] - b["mel_before"]))) > 1e-4
    np.testing.assert_allclose(tf.reduce_sum(b["alignments"], -1).numpy(), 1.0, atol=1e-5)

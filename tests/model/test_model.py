"""Model: shapes, presets and config overrides; the autoregressive decoder's free-running loop (KV cache) equals
its teacher-forced pass on its own output."""

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
                 "postnet_layers": 4, "reduction_factor": 3, "text_ff_kernel": 5}
    cfg = make_config(data={"bucket_multiple": 9, "max_mel_frames": 882},
                      model={"preset": "tiny", "decoder": "autoregressive", **overrides})
    model = build_model(cfg, VOCAB)
    assert {key: getattr(model.dims, key) for key in overrides} == overrides
    text, cond, dec, post = model.text_encoder, model.conditioning_encoder, model.decoder, model.postnet
    assert text.embedding.embeddings.shape == (VOCAB, 48) and len(text.blocks) == 1
    assert text.blocks[0].feed_forward.inner.kernel.shape == (5, 48, 72)
    assert text.blocks[0].self_attention.num_heads == 3
    assert len(cond.convs) == 1 and cond.latent_queries.shape == (5, 48)
    assert len(dec.blocks) == 3 and dec.prenet.layers_[0].kernel.shape == (3 * 80, 40)
    assert dec.mel_proj.kernel.shape == (48, 3 * 80) and dec.text_proj.kernel.shape == (3 * 48, 48)
    assert len(post.convs) == 4 and post.convs[0].kernel.shape[-1] == 24
    out = model(synthetic_batch(1, 6, 18, 9, vocab_size=VOCAB))
    assert out["mel_after"].shape == (1, 18, 80) and out["durations"].shape == (1, 6)


def test_convolutional_text_feed_forward_reads_neighbours_never_padding(make_config):
    """model.text_ff_kernel 3 builds convolution kernels, and what follows an item's last token (padding columns of
    any content, items of unequal lengths) changes nothing of its real encodings."""
    from myxtts.model.encoders import TextEncoder
    from myxtts.model.layers import SiteCounter

    dims = resolve_dims(make_config(model={"preset": "tiny", "text_ff_kernel": 3}).model, VOCAB, 80)
    encoder = TextEncoder(dims, SiteCounter(), embedding_stddev=dims.d_model ** -0.5)
    tokens = np.random.default_rng(0).integers(3, VOCAB, size=(2, 14)).astype(np.int32)  # [batch, tokens]
    lengths = tf.constant([14, 9], tf.int32)
    encodings = encoder(tf.constant(tokens), lengths).numpy()  # [batch, tokens, d_model]
    assert encoder.blocks[0].feed_forward.inner.kernel.shape == (3, dims.d_model, dims.ff_dim)
    longer = np.concatenate([tokens, np.full((2, 5), 7, np.int32)], axis=1)  # 5 more padding columns, not pad ids
    longer[1, 9:] = 11  # item 2's padding holds real-looking tokens
    padded = encoder(tf.constant(longer), lengths).numpy()
    np.testing.assert_allclose(padded[0, :14], encodings[0], atol=1e-5)
    np.testing.assert_allclose(padded[1, :9], encodings[1, :9], atol=1e-5)
    assert np.abs(padded[1, 9:]).max() == 0.0
    with pytest.raises(ValueError, match="text_ff_kernel.*odd"):
        make_config(model={"text_ff_kernel": 4})


@pytest.mark.parametrize("kernel, reach", [(1, 0), (3, 2)])
def test_the_feed_forward_reads_as_far_as_its_kernel(kernel, reach):
    """A change at one token moves the feed-forward's output within ``reach`` tokens of it and nowhere else: two
    convolutions of kernel 3 reach 2 tokens each way, the position-wise one only the token itself."""
    from myxtts.model.layers import FeedForward, SiteCounter

    feed_forward = FeedForward(16, 32, 0.0, SiteCounter(), kernel_size=kernel)
    x = np.random.default_rng(1).normal(size=(1, 12, 16)).astype(np.float32)  # [batch, tokens, d]
    mask = tf.ones([1, 12, 1])
    before = feed_forward(tf.constant(x), mask).numpy()
    x[0, 6] += 1.0
    moved = np.abs(feed_forward(tf.constant(x), mask).numpy() - before).max(axis=-1)[0]  # [tokens]
    assert set(np.flatnonzero(moved > 1e-6)) == set(range(6 - reach, 6 + reach + 1)), moved


def test_inconsistent_sizes_are_rejected(make_config):
    with pytest.raises(ValueError, match="num_heads"):
        build_model(make_config(model={"preset": "tiny", "decoder": "autoregressive", "d_model": 30, "num_heads": 4}),
                    VOCAB)


@pytest.mark.parametrize("shape", [(2, 11, 24, 16), (3, 7, 40, 32)])
def test_output_shapes_alignment_rows_and_durations(tiny, shape):
    cfg, model = tiny
    batch_size, text_len, frames, ref = shape
    batch = synthetic_batch(batch_size, text_len, frames, ref, vocab_size=VOCAB, seed=1)
    out = model(batch, training=True, seed=tf.constant([3, 4]))
    assert out["mel_before"].shape == out["mel_after"].shape == (batch_size, frames, 80)
    assert out["alignments"].shape == out["hard_alignment"].shape == (batch_size, frames, text_len)
    alignments = out["alignments"].numpy()
    tokens, mel_lengths = batch["token_lengths"].numpy(), batch["mel_lengths"].numpy()
    for i, (length, real_frames) in enumerate(zip(tokens, mel_lengths)):
        assert np.all(alignments[i, :, length:] < 1e-6)  # the aligner never places a frame on text padding
        np.testing.assert_allclose(alignments[i, :real_frames].sum(-1), 1.0, atol=1e-5)
        assert np.all(alignments[i, real_frames:] == 0.0)
        durations = out["durations"].numpy()[i]
        assert durations.sum() == real_frames and np.all(durations[:length] >= 1) and np.all(durations[length:] == 0)
    for value in out.values():
        assert np.all(np.isfinite(value.numpy()))


def test_dropout_is_reproducible_from_the_seed(tiny):
    _, model = tiny
    batch = synthetic_batch(2, 9, 16, 12, vocab_size=VOCAB, seed=2)
    a = model(batch, training=True, seed=tf.constant([5, 6]))["mel_after"]
    b = model(batch, training=True, seed=tf.constant([5, 6]))["mel_after"]
    c = model(batch, training=True, seed=tf.constant([5, 7]))["mel_after"]
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.allclose(a.numpy(), c.numpy())


@pytest.mark.parametrize("reduction_factor", [1, 2, 3])
def test_free_running_generation_equals_teacher_forcing_on_its_own_output(make_config, reduction_factor):
    """The compiled while_loop with its KV cache computes, step by step, what the teacher-forced pass computes at
    once when fed the frames the loop produced: the loop reads its own previous frames, nothing of the future."""
    from myxtts.model.durations import alignment_from_durations, length_regulate
    from myxtts.model.layers import length_mask

    frames = 12 * reduction_factor
    cfg = make_config(data={"bucket_multiple": reduction_factor * 4, "max_mel_frames": 120 * reduction_factor},
                      model={"preset": "tiny", "decoder": "autoregressive", "d_model": 32, "ff_dim": 64,
                             "prenet_dim": 32, "decoder_layers": 2, "dropout": 0.0,
                             "reduction_factor": reduction_factor})
    model = build_model(cfg, VOCAB)
    batch = synthetic_batch(2, 7, frames, 16, vocab_size=VOCAB, seed=3)
    durations = tf.constant([[3, 1, 2, 4, 2, 5, 1], [2, 2, 3, 1, 0, 0, 0]], tf.int32)  # unequal totals: 18, 8
    mel_lengths = tf.reduce_sum(durations, axis=1)
    text = model.encode_text(batch["tokens"], tf.constant([7, 4]))
    latents = model.encode_reference(batch["reference_mel"], batch["reference_lengths"])
    encodings = length_regulate(alignment_from_durations(durations, frames), text)  # [2, frames, d]
    mask = length_mask(mel_lengths, frames)
    generated = tf.function(model.decoder.generate)(encodings, mask, latents)  # [2, frames, n_mels]
    forced = model.decoder(encodings, mask, latents, generated, training=False)
    np.testing.assert_allclose(generated.numpy(), forced.numpy(), atol=2e-5, rtol=0)
    assert np.all(generated.numpy()[1, 8:] == 0.0) and np.all(np.abs(generated.numpy()[1, :8]).sum(-1) > 0)
    # another future does not change the past: the teacher-forced pass is causal
    changed = tf.concat([generated[:, :6], generated[:, 6:] + 3.0], axis=1)
    early = model.decoder(encodings, mask, latents, changed, training=False)
    first = 6 // reduction_factor * reduction_factor + reduction_factor  # the frames of steps before step 6//r+1
    np.testing.assert_allclose(early.numpy()[:, :first], forced.numpy()[:, :first], atol=1e-5)


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
    assert static.structured_outputs["alignments"].shape == (2, 24, 11)
    assert dynamic.structured_outputs["mel_after"].shape.as_list() == [None, None, 80]
    # the static graph reads no dims at run time: the None-dim fallback is confined to None-dim traces
    static_ops = {op.type for op in static.graph.get_operations()}
    dynamic_ops = {op.type for op in dynamic.graph.get_operations()}
    assert "Shape" in dynamic_ops and "Shape" not in static_ops
    expected, got = static(batch), dynamic(batch)
    for name in expected:
        np.testing.assert_allclose(got[name].numpy(), expected[name].numpy(), rtol=1e-5, atol=1e-6)


def test_reference_voice_reaches_the_output_through_its_own_path(tiny):
    """Another reference changes the mel, never the alignment: the text reaches the decoder only through the
    durations, which the voice does not touch."""
    _, model = tiny
    batch = synthetic_batch(2, 9, 24, 16, vocab_size=VOCAB, seed=6)
    other = dict(batch, reference_mel=tf.reverse(batch["reference_mel"], axis=[0]) * 2.0 + 1.0)
    a, b = model(batch, training=False), model(other, training=False)
    assert float(tf.reduce_mean(tf.abs(a["mel_before"] - b["mel_before"]))) > 1e-4
    np.testing.assert_array_equal(a["durations"].numpy(), b["durations"].numpy())

"""model.reference_tokens on real clips: the tokens are the reference's frames averaged stretch by stretch (a short
reference's empty stretches take its mean), a model that adds the reference attention to one without it starts as
that model and the attention learns, synthesis carries the tokens as part of the voice with no retrace, and a run
cannot be resumed with the attention switched on or off."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from test_parallel_model import mel_loss_gradients, parallel_config, warm_started
from test_pitch_conditioning import _real_batches

TOKENS = 16


def _expected_stretch_means(frames: np.ndarray, length: int, count: int) -> np.ndarray:
    """The tokens by their definition, one reference in numpy: frame t of the T-frame window falls in stretch
    t * count // T; each stretch is the mean of its real frames, an empty one the mean of all the real frames."""
    window = frames.shape[0]
    overall = frames[:length].mean(axis=0)
    out = np.empty((count, frames.shape[1]))
    for index in range(count):
        rows = [t for t in range(length) if t * count // window == index]
        out[index] = frames[rows].mean(axis=0) if rows else overall
    return out


def test_tokens_are_stretch_means_of_the_real_frames_and_a_short_reference_fills_with_its_mean(prepared_cache):
    from myxtts.model.encoders import stretch_means

    batch = _real_batches(parallel_config(prepared_cache), count=1)[0]
    reference = batch["reference_mel"].numpy()  # [B, reference_frames, n_mels], real clips, zero past each length
    lengths = batch["reference_lengths"].numpy().copy()
    window = reference.shape[1]
    lengths[0] = window // 3  # a third of the window: its last stretches hold no real frame
    assert len(set(lengths.tolist())) > 1
    # garbage past each length must not reach a token (the encoder's frames are not zero there after its norm)
    padded = np.where(np.arange(reference.shape[1])[None, :, None] < lengths[:, None, None], reference, 1e3)
    mask = tf.sequence_mask(lengths, reference.shape[1])
    tokens = stretch_means(tf.constant(padded, tf.float32), mask, TOKENS).numpy()  # [B, TOKENS, n_mels]
    assert tokens.shape == (len(lengths), TOKENS, reference.shape[2])
    for row, length in enumerate(lengths):
        np.testing.assert_allclose(tokens[row], _expected_stretch_means(reference[row], int(length), TOKENS),
                                   rtol=1e-5, atol=1e-5)
    # the short reference: its empty stretches are its mean, its first stretch its first window / TOKENS frames
    np.testing.assert_allclose(tokens[0, -1], reference[0, :window // 3].mean(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tokens[0, 0], reference[0, :-(-window // TOKENS)].mean(axis=0), rtol=1e-5, atol=1e-5)
    assert not np.allclose(tokens[0, 0], tokens[0, -1])


def test_adding_the_reference_attention_starts_from_the_plain_model_then_it_learns(prepared_cache):
    plain, model, cfg, fresh = warm_started(prepared_cache, {"reference_tokens": TOKENS})
    expected = [v.path for layer in (model.conditioning_encoder.reference_proj,
                                     model.conditioning_encoder.reference_norm, model.decoder.reference_norm,
                                     model.decoder.reference_attention) for v in layer.weights]
    assert sorted(fresh) == sorted(expected) and len(fresh) == 14
    batch = _real_batches(cfg, count=1)[0]  # real clips of unequal lengths, each with another clip as its reference
    batch = {key: value[:2] for key, value in batch.items()}  # two: the model runs eagerly here
    latents = model.encode_reference(batch["reference_mel"], batch["reference_lengths"])
    assert latents.shape == (2, model.dims.num_speaker_latents + TOKENS, model.dims.d_model)
    outputs = model(batch)
    np.testing.assert_allclose(outputs["mel_after"].numpy(), plain(batch)["mel_after"].numpy(), atol=1e-5)

    # it learns: the mel loss reaches the attention's zero output projection
    attention = model.decoder.reference_attention
    gradient, = mel_loss_gradients(model, batch, outputs["hard_alignment"], [attention.output_proj.kernel])
    assert gradient is not None and np.abs(gradient.numpy()).max() > 0

    # once it has moved, the decoder reads the tokens: the same pooled latents with the other clip's tokens differ
    attention.output_proj.kernel.assign(tf.random.stateless_normal(attention.output_proj.kernel.shape, [1, 2],
                                                                    stddev=0.05))
    k, mel_lengths = model.dims.num_speaker_latents, batch["mel_lengths"]
    text = model.encode_text(batch["tokens"], batch["token_lengths"])
    swapped = tf.concat([latents[:, :k], latents[::-1, k:]], axis=1)
    _, own = model.decode(text, outputs["hard_alignment"], mel_lengths, latents)
    _, other = model.decode(text, outputs["hard_alignment"], mel_lengths, swapped)
    assert np.abs(own.numpy() - other.numpy()).max() > 1e-3


def compiled_voices(prepared, model_keys: dict) -> tuple:
    """A tiny parallel model with ``model_keys`` behind a warmed-up CompiledDecoder (batch 2, text bucket 32): (model,
    decoder, three real clips' voices, a 12-token sentence twice (tokens ``[2, 32]``, lengths ``[2]``), graphs traced)."""
    from myxtts.model import build_model
    from myxtts.synthesis.decoding import CompiledDecoder
    from myxtts.text import Vocabulary

    cfg = parallel_config(prepared, model=model_keys)
    vocabulary = Vocabulary.load(prepared.cache_dir / "vocab.json")
    model = build_model(cfg, len(vocabulary))
    decoder = CompiledDecoder(model, cfg.data.max_text_length, 256, cfg.data.reference_frames, truncate=True)
    decoder.warm_up(2, [32])
    traced = decoder.tracing_count()
    batch = _real_batches(cfg, count=1)[0]
    voices = decoder.latents(batch["reference_mel"].numpy()[:3], batch["reference_lengths"].numpy()[:3], 2)
    assert voices.shape == (3, model.dims.conditioning_vectors, model.dims.d_model)
    tokens = np.zeros([2, 32], np.int32)
    tokens[:, :12] = batch["tokens"].numpy()[0, :12]
    return model, decoder, voices, (tokens, np.full([2], 12, np.int32)), traced


def test_synthesis_carries_the_tokens_in_the_voice_without_retracing(prepared_cache):
    model, decoder, voices, (tokens, lengths), traced = compiled_voices(prepared_cache, {"reference_tokens": TOKENS})
    attention = model.decoder.reference_attention  # moved off zero, as a trained one has
    attention.output_proj.kernel.assign(tf.random.stateless_normal(attention.output_proj.kernel.shape, [3, 4],
                                                                    stddev=0.05))
    # one sentence, two voices whose pooled latents are the same and whose reference tokens are another clip's
    k = model.dims.num_speaker_latents
    voice = np.stack([voices[0], np.concatenate([voices[0, :k], voices[1, k:]])])
    mel = decoder(tokens, lengths, voice)
    length = int(mel["mel_lengths"][0])
    assert length == int(mel["mel_lengths"][1]) and length > 0
    assert np.abs(mel["mel"][0, :length] - mel["mel"][1, :length]).max() > 1e-3
    assert decoder.tracing_count() == traced


def test_resuming_with_the_attention_switched_is_refused_and_the_checkpoint_says_which(prepared_cache, tmp_path):
    from myxtts.model import build_model
    from myxtts.model.restore import checkpoint_has_reference_attention
    from myxtts.text import Vocabulary
    from myxtts.training.checkpoint import WorkdirError, check_resumable

    vocabulary = Vocabulary.load(prepared_cache.cache_dir / "vocab.json")
    batch = {key: value[:1] for key, value in _real_batches(parallel_config(prepared_cache), count=1)[0].items()}
    for count in (TOKENS, 0):
        model = build_model(parallel_config(prepared_cache, model={"reference_tokens": count}), len(vocabulary))
        model(batch)
        checkpoint = tf.train.Checkpoint(model=model).save(str(tmp_path / f"tokens-{count}" / "ckpt"))
        assert checkpoint_has_reference_attention(checkpoint) is bool(count)
        flipped = parallel_config(prepared_cache, model={"reference_tokens": TOKENS - count})
        with pytest.raises(WorkdirError, match=f"trained {'with' if count else 'without'} the reference attention"
                                               f".*reference_tokens: {TOKENS - count}.*--init-from"):
            check_resumable(tmp_path, checkpoint, flipped, False, tmp_path)
        check_resumable(tmp_path, checkpoint, parallel_config(prepared_cache, model={"reference_tokens": count}),
                        False, tmp_path)
        if count:  # another count has the same variables: it resumes
            check_resumable(tmp_path, checkpoint, parallel_config(prepared_cache, model={"reference_tokens": 4}),
                            False, tmp_path)

"""Text encoder and conditioning (reference voice) encoder."""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from myxtts.model.layers import (BuiltByFirstCall, MultiHeadAttention, SiteCounter, TransformerBlock, length_mask,
                                 sinusoid_table, stateless_dropout, static_or_dynamic_dim)
from myxtts.model.presets import CONDITIONING_KERNEL, ModelDims
from myxtts.model.spectrum import spectrum_rows


class TextEncoder(BuiltByFirstCall, keras.layers.Layer):
    """tokens ``[B, T_text]`` -> encodings ``[B, T_text, d]``: embedding + sinusoidal positions + blocks."""

    def __init__(self, dims: ModelDims, sites: SiteCounter, embedding_stddev: float | None = None, **kwargs):
        """``embedding_stddev``: initialise the embedding N(0, stddev) (Keras' default is uniform +-0.05, which
        leaves the scaled tokens small next to the positions; the parallel model uses d ** -0.5, i.e. N(0, 1)
        after the sqrt(d) scaling, as FastPitch's embedding)."""
        super().__init__(**kwargs)
        self.dims = dims
        initializer = "uniform" if embedding_stddev is None else keras.initializers.RandomNormal(
            stddev=embedding_stddev)
        self.embedding = keras.layers.Embedding(dims.vocab_size, dims.d_model, embeddings_initializer=initializer,
                                                name="embedding")
        # the table covers model.max_attention_sequence_length positions (validated against max_text_length)
        self.positions = tf.constant(sinusoid_table(dims.max_positions, dims.d_model))
        self.blocks = [TransformerBlock(dims.d_model, dims.num_heads, dims.ff_dim, dims.dropout, sites,
                                        ff_kernel=dims.text_ff_kernel, name=f"block_{i}")
                       for i in range(dims.text_layers)]
        self.final_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="final_norm")
        self.site = sites()

    def embed(self, tokens):
        """tokens ``[B, T_text]`` -> scaled embeddings ``[B, T_text, d]`` (no positions)."""
        return self.embedding(tokens) * math.sqrt(self.dims.d_model)

    def call(self, tokens, token_lengths, training=False, seed=None):
        text_len = static_or_dynamic_dim(tokens, 1)
        if isinstance(text_len, int) and text_len > self.dims.max_positions:  # a None dim: not checked at trace
            raise ValueError(f"Text of {text_len} tokens exceeds model.max_attention_sequence_length "
                             f"({self.dims.max_positions}).")
        mask = length_mask(token_lengths, text_len)  # [B, T_text]
        x = self.embed(tokens)  # [B, T_text, d]
        x = x + tf.cast(self.positions[:text_len], x.dtype)[None]
        x = stateless_dropout(x, self.dims.dropout, training, seed, self.site)
        key_mask = mask[:, None, None, :]  # [B, 1, 1, T_text]
        token_mask = mask[..., None]  # [B, T_text, 1]
        for block in self.blocks:
            x = block(x, key_mask, sequence_mask=token_mask, training=training, seed=seed)
        x = self.final_norm(x)
        return x * tf.cast(mask[..., None], x.dtype)  # padded positions are exact zeros


def stretch_means(frames, mask, count: int):
    """Frames ``[B, T, d]`` with mask ``[B, T]`` (True: real) -> ``[B, count, d]``: the mean of the real frames in each
    of ``count`` equal stretches of the T-frame window; a stretch with no real frame (a short reference) takes the
    mean of all the real frames, so every token is the voice's."""
    length = static_or_dynamic_dim(frames, 1)
    stretch = tf.range(length) * count // length  # [T]: the stretch each frame falls in
    real = tf.cast(mask, frames.dtype)[..., None]  # [B, T, 1]
    frames = tf.where(mask[..., None], frames, tf.zeros_like(frames))  # where, not multiply: NaN-safe padding
    weights = tf.one_hot(stretch, count, dtype=frames.dtype)[None] * real  # [B, T, count]
    sums = tf.einsum("btm,btd->bmd", weights, frames)  # [B, count, d]
    counts = tf.reduce_sum(weights, axis=1)[..., None]  # [B, count, 1]
    overall = tf.reduce_sum(frames, axis=1, keepdims=True) / tf.maximum(tf.reduce_sum(real, axis=1, keepdims=True),
                                                                         1.0)  # [B, 1, d]
    return tf.where(counts > 0, sums / tf.maximum(counts, 1.0), overall)


class ConditioningEncoder(keras.layers.Layer):
    """Reference mel ``[B, T_ref, n_mels]`` -> K speaker latents ``[B, K, d]``, then with ``model.reference_tokens``
    R reference tokens: ``[B, K + R, d]``, then with ``model.reference_spectrum`` the reference's long-term spectrum
    in the last rows (model/spectrum.py).

    Convolutions (masked after each layer so padding never leaks in) then attention pooling with K
    learned queries over the real reference frames. Trained jointly with the decoder, so the latents
    learn whatever about the voice helps predict the target mel (voice cloning). The reference tokens are the
    convolutions' frames averaged over R equal stretches of the window (``stretch_means``), projected: the voice
    frame by frame, for the parallel decoder's reference attention.
    """

    def __init__(self, dims: ModelDims, sites: SiteCounter, **kwargs):
        super().__init__(**kwargs)
        self.dims = dims
        self.convs = [keras.layers.Conv1D(dims.d_model, CONDITIONING_KERNEL, padding="same", activation="gelu",
                                          name=f"conv_{i}") for i in range(dims.conditioning_layers)]
        self.norm = keras.layers.LayerNormalization(epsilon=1e-5, name="norm")
        self.pooling = MultiHeadAttention(dims.d_model, dims.num_heads, dims.dropout, sites, name="pooling")
        self.output_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="output_norm")
        if dims.reference_tokens:
            self.reference_proj = keras.layers.Dense(dims.d_model, name="reference_proj")
            self.reference_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="reference_norm")

    def build(self, input_shape):
        self.latent_queries = self.add_weight(name="latent_queries", shape=(self.dims.num_speaker_latents,
                                                                              self.dims.d_model),
                                              initializer=keras.initializers.RandomNormal(stddev=0.02))
        super().build(input_shape)

    def call(self, reference_mel, reference_lengths, training=False, seed=None):
        ref_len = static_or_dynamic_dim(reference_mel, 1)
        mask = length_mask(reference_lengths, ref_len)  # [B, T_ref]
        frame_mask = tf.cast(mask[..., None], self.compute_dtype)
        x = tf.cast(reference_mel, self.compute_dtype)
        x = tf.where(mask[..., None], x, tf.zeros_like(x))  # where, not multiply: NaN-safe padding
        for conv in self.convs:
            x = conv(x) * frame_mask  # [B, T_ref, d]; zeroed padding == the conv's own zero padding
        x = self.norm(x)
        # [B, K, d] queries, one set shared by the batch
        queries = tf.zeros_like(x[:, :1, :1]) + tf.cast(self.latent_queries, x.dtype)[None]
        latents, _ = self.pooling(queries, x, mask[:, None, None, :], training=training, seed=seed)
        rows = [self.output_norm(latents + queries)]  # [B, K, d]
        if self.dims.reference_tokens:
            tokens = stretch_means(x, mask, self.dims.reference_tokens)  # [B, R, d]
            rows.append(self.reference_norm(self.reference_proj(tokens)))
        if self.dims.reference_spectrum > 0:  # from the mel itself, not the convolutions: [B, spectrum rows, d]
            rows.append(spectrum_rows(reference_mel, mask, self.dims.d_model, rows[0].dtype))
        return rows[0] if len(rows) == 1 else tf.concat(rows, axis=1)  # [B, K (+ R) (+ spectrum rows), d]

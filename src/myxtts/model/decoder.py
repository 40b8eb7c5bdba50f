"""Autoregressive mel decoder (prenet, causal transformer with cross-attention, r frames per step) and postnet.

Decoder step s predicts mel frames ``[s*r, (s+1)*r)`` from the r frames of step s-1 (zeros at s=0).
Each block attends, in separate softmaxes, over the speaker latents (the voice) and over the text
encodings (the alignment, masked by text length). Keeping them apart is what lets the alignment
be learnt: with one softmax over text + latents, the latents became an attention sink that took all
the mass of the guided layer and the guided-attention loss was satisfied by ignoring the text.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from myxtts.model.layers import SiteCounter, TransformerBlock, sinusoid_table, stateless_dropout, static_or_dynamic_dim
from myxtts.model.presets import POSTNET_KERNEL, PRENET_DROPOUT, ModelDims


class Prenet(keras.layers.Layer):
    """Two ReLU layers with strong dropout (training only) on the previous r frames."""

    def __init__(self, dims: ModelDims, sites: SiteCounter, **kwargs):
        super().__init__(**kwargs)
        self.layers_ = [keras.layers.Dense(dims.prenet_dim, activation="relu", name=f"dense_{i}") for i in range(2)]
        self.sites = [sites(), sites()]
        # model.dropout == 0 turns every dropout off (exactness tests); otherwise the prenet's is strong
        self.rate = PRENET_DROPOUT if dims.dropout > 0 else 0.0

    def call(self, x, training=False, seed=None):
        for layer, site in zip(self.layers_, self.sites):
            x = stateless_dropout(layer(x), self.rate, training, seed, site)
        return x


class MelDecoder(keras.layers.Layer):
    def __init__(self, dims: ModelDims, sites: SiteCounter, **kwargs):
        super().__init__(**kwargs)
        self.dims = dims
        self.prenet = Prenet(dims, sites, name="prenet")
        self.input_proj = keras.layers.Dense(dims.d_model, name="input_proj")
        self.positions = tf.constant(sinusoid_table(dims.max_positions, dims.d_model))
        self.blocks = [TransformerBlock(dims.d_model, dims.num_heads, dims.ff_dim, dims.dropout, sites,
                                        cross_attention=True, speaker_attention=True, name=f"block_{i}")
                       for i in range(dims.decoder_layers)]
        self.final_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="final_norm")
        self.mel_proj = keras.layers.Dense(dims.n_mels * dims.reduction_factor, name="mel_proj")
        self.stop_proj = keras.layers.Dense(1, name="stop_proj")
        self.site = sites()

    def _embed_inputs(self, prev_frames, positions, training, seed):
        # prev_frames [B, steps, r*n_mels] -> [B, steps, d]
        x = self.input_proj(self.prenet(prev_frames, training=training, seed=seed))
        return x + tf.cast(positions, x.dtype)

    def _heads(self, x):
        # x [B, steps, d] -> frames [B, steps*r, n_mels] float32, stop logits [B, steps] float32
        x = self.final_norm(x)
        steps = static_or_dynamic_dim(x, 1)
        frames = tf.reshape(tf.cast(self.mel_proj(x), tf.float32), [-1, steps * self.dims.reduction_factor,
                                                                     self.dims.n_mels])
        stop = tf.cast(self.stop_proj(x), tf.float32)[..., 0]
        return frames, stop

    def call(self, decoder_inputs, memory, memory_mask, training=False, seed=None):
        """Teacher-forced, all steps in parallel.

        decoder_inputs ``[B, steps, r*n_mels]`` (frames of the previous step); memory = (text encodings
        ``[B, T_text, d]``, speaker latents ``[B, K, d]``); memory_mask ``[B, T_text]`` bool (real text).
        Returns mel_before ``[B, steps*r, n_mels]``, stop logits ``[B, steps]`` and the alignment layer's
        cross-attention over the text ``[B, steps, T_text]`` (mean over heads; rows sum to 1 over real text).
        """
        text, speaker = memory
        steps = static_or_dynamic_dim(decoder_inputs, 1)
        if isinstance(steps, int) and steps > self.dims.max_positions:  # a None dim is not checked at trace
            raise ValueError(f"{steps} decoder steps exceed model.max_attention_sequence_length "
                             f"({self.dims.max_positions}).")
        x = self._embed_inputs(decoder_inputs, self.positions[None, :steps], training, seed)
        x = stateless_dropout(x, self.dims.dropout, training, seed, self.site)
        causal = tf.linalg.band_part(tf.ones([steps, steps], tf.bool), -1, 0)[None, None]  # [1, 1, steps, steps]
        key_mask = memory_mask[:, None, None, :]  # [B, 1, 1, T_text]
        alignment = None
        for index, block in enumerate(self.blocks):
            x, weights = block(x, causal, text, key_mask, speaker, training=training, seed=seed)
            if index == self.dims.alignment_layer:
                alignment = tf.reduce_mean(weights, axis=1)  # [B, steps, T_text]
        frames, stop = self._heads(x)
        return frames, stop, alignment

    def memory_key_values(self, memory):
        """Per block ((text keys, values), (speaker keys, values)): computed once per utterance at synthesis."""
        text, speaker = memory
        return [(block.cross_attention.project_key_value(text), block.speaker_attention.project_key_value(speaker))
                for block in self.blocks]

    def step(self, prev_frames, step_index, kv_cache, memory_kv, memory_mask, alignment_mask=None,
             prenet_seed=None):
        """One decoder step; see ``XTTSModel.decoder_step`` for the contract. ``alignment_mask`` ``[B, T_text]``
        (optional) restricts the aligning layer's text attention (monotonic decoding); ``prenet_seed`` (int
        ``[2]``, optional) keeps the prenet's dropout on with that seed (the only dropout at inference)."""
        position = tf.gather(self.positions, step_index)[None, None]  # [1, 1, d]
        # [B, 1, d]; training=True reaches only the prenet (the one dropout kept at inference)
        x = self._embed_inputs(prev_frames[:, None, :], position, prenet_seed is not None, prenet_seed)
        key_mask = memory_mask[:, None, None, :]
        new_layers, attention = [], None
        for index, block in enumerate(self.blocks):
            mask = key_mask
            if alignment_mask is not None and index == self.dims.alignment_layer:
                mask = tf.logical_and(key_mask, alignment_mask[:, None, None, :])
            x, layer_cache, weights = block.step(x, step_index, kv_cache[index], memory_kv[index], mask)
            new_layers.append(layer_cache)
            if index == self.dims.alignment_layer:
                attention = tf.reduce_mean(weights, axis=1)[:, 0]  # [B, T_text]
        frames, stop = self._heads(x)
        return frames, stop[:, 0], tf.stack(new_layers), attention


class Postnet(keras.layers.Layer):
    """Residual conv stack refining mel_before; padded frames are zeroed after every layer."""

    def __init__(self, dims: ModelDims, sites: SiteCounter, **kwargs):
        # autocast off: the residual adds to the float32 mel_before, which must not be rounded to float16
        super().__init__(autocast=False, **kwargs)
        self.convs = [keras.layers.Conv1D(dims.postnet_channels, POSTNET_KERNEL, padding="same",
                                          activation="tanh", name=f"conv_{i}")
                      for i in range(dims.postnet_layers - 1)]
        self.convs.append(keras.layers.Conv1D(dims.n_mels, POSTNET_KERNEL, padding="same", name="conv_out"))
        self.rate, self.site = dims.dropout, sites()

    def call(self, mel_before, frame_mask, training=False, seed=None):
        """mel_before ``[B, T, n_mels]`` float32; frame_mask ``[B, T]`` bool -> mel_after ``[B, T, n_mels]``."""
        mask = tf.cast(frame_mask[..., None], self.compute_dtype)
        x = tf.cast(mel_before, self.compute_dtype) * mask
        for index, conv in enumerate(self.convs):
            x = conv(x) * mask
            if index < len(self.convs) - 1:
                x = stateless_dropout(x, self.rate, training, seed, self.site * 16 + index)
        return (mel_before + tf.cast(x, tf.float32)) * tf.cast(mask, tf.float32)

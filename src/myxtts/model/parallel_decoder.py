"""The parallel (non-autoregressive) model, the default (``model.decoder: parallel``): every mel frame at once.

The decoder is convolutional (residual dilated convolutions, no self-attention over frames): it stays small
(about 2 M parameters) and several times faster per step than a FastPitch-size attention decoder, so it learns
to speak within a short CPU training budget (docs/benchmarks.md, "Learning").
The rest of the model (text encoder, aligner, durations, conditioning, postnet) is ``TTSModel`` (model/tts.py).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from myxtts.model.layers import BuiltByFirstCall, MultiHeadAttention, SiteCounter, all_visible, stateless_dropout
from myxtts.model.presets import ModelDims
from myxtts.model.tts import TTSModel

DECODER_KERNEL = 5
DILATION_CYCLE = (1, 2, 4, 8)  # block i uses DILATION_CYCLE[i % 4]; the last block always uses 1
SPEAKER_ATTENTION_AFTER = 1  # frames attend to the speaker latents after this block


class ResidualConvBlock(BuiltByFirstCall, keras.layers.Layer):
    """x + dropout(relu(conv(LayerNorm(x)))) with a dilated 'same' convolution; padding re-zeroed.

    With ``adaptive`` (``model.speaker_adaptive_norm``) the normalised frames are scaled and shifted by the speaker
    vector, ``LayerNorm(x) * (1 + scale) + shift`` with ``[scale, shift] = speaker_film(speaker)`` (style-adaptive
    layer norm, Meta-StyleSpeech). The projection starts at zero: the block begins as the plain one.
    """

    def __init__(self, channels: int, dilation: int, dropout: float, sites: SiteCounter, adaptive: bool = False,
                 **kwargs):
        super().__init__(**kwargs)
        self.norm = keras.layers.LayerNormalization(epsilon=1e-5, name="norm")
        self.conv = keras.layers.Conv1D(channels, DECODER_KERNEL, padding="same", dilation_rate=dilation,
                                        activation="relu", name="conv")
        self.speaker_film = (keras.layers.Dense(2 * channels, kernel_initializer="zeros", name="speaker_film")
                             if adaptive else None)
        self.rate, self.site = dropout, sites()

    def call(self, x, frame_mask, speaker=None, training=False, seed=None):
        normed = self.norm(x)  # [B, T_mel, d]
        if self.speaker_film is not None:
            scale, shift = tf.split(self.speaker_film(speaker), 2, axis=-1)  # each [B, 1, d]
            normed = normed * (1.0 + scale) + shift
        update = stateless_dropout(self.conv(normed), self.rate, training, seed, self.site)
        return (x + update) * frame_mask


class ParallelDecoder(BuiltByFirstCall, keras.layers.Layer):
    """Frame encodings ``[B, T_mel, d]`` + speaker latents ``[B, K, d]`` -> mel ``[B, T_mel, n_mels]`` float32.

    The voice enters twice: a global speaker vector (projected mean of the latents) added to every frame, and
    an attention of every frame over the K latents after block ``SPEAKER_ATTENTION_AFTER``; with
    ``model.speaker_adaptive_norm`` a third time, in every block's norm (the mean of the latents). With
    ``model.reference_tokens`` the conditioning is ``[B, K + R, d]`` and every frame also attends over the R reference
    tokens after that block (its output projection starts at zero). With ``model.reference_spectrum`` the last rows are
    the reference's long-term spectrum, which ``TTSModel.decode`` reads (model/spectrum.py), not this decoder.
    """

    def __init__(self, dims: ModelDims, sites: SiteCounter, **kwargs):
        super().__init__(**kwargs)
        self.dims = dims
        count = dims.decoder_conv_blocks
        dilations = [DILATION_CYCLE[i % len(DILATION_CYCLE)] for i in range(count - 1)] + [1]
        self.blocks = [ResidualConvBlock(dims.d_model, dilation, dims.dropout, sites, dims.speaker_adaptive_norm,
                                         name=f"block_{i}") for i, dilation in enumerate(dilations)]
        self.speaker_proj = keras.layers.Dense(dims.d_model, name="speaker_proj")
        self.speaker_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="speaker_norm")
        self.speaker_attention = MultiHeadAttention(dims.d_model, dims.num_heads, dims.dropout, sites,
                                                    name="speaker_attention")
        self.final_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="final_norm")
        self.mel_proj = keras.layers.Dense(dims.n_mels, name="mel_proj")
        if dims.reference_tokens:
            self.reference_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="reference_norm")
            self.reference_attention = MultiHeadAttention(dims.d_model, dims.num_heads, dims.dropout, sites,
                                                          zero_output=True, name="reference_attention")

    def call(self, frames, frame_mask, latents, training=False, seed=None):
        mask = tf.cast(frame_mask[..., None], self.compute_dtype)  # [B, T_mel, 1]
        conditioning = tf.cast(latents, self.compute_dtype)  # [B, K + R, d]
        latents = conditioning[:, :self.dims.num_speaker_latents]  # [B, K, d]
        mean_latent = tf.reduce_mean(latents, axis=1)[:, None, :]  # [B, 1, d]
        speaker = self.speaker_proj(mean_latent)  # [B, 1, d]
        x = (frames + speaker) * mask
        for index, block in enumerate(self.blocks):
            x = block(x, mask, mean_latent, training=training, seed=seed)
            if index == SPEAKER_ATTENTION_AFTER:
                update, _ = self.speaker_attention(self.speaker_norm(x), latents, all_visible(), training=training,
                                                   seed=seed)
                x = (x + update) * mask
                if self.dims.reference_tokens:
                    first = self.dims.num_speaker_latents
                    reference = conditioning[:, first:first + self.dims.reference_tokens]  # [B, R, d]
                    update, _ = self.reference_attention(self.reference_norm(x), reference, all_visible(),
                                                         training=training, seed=seed)
                    x = (x + update) * mask
        return tf.cast(self.mel_proj(self.final_norm(x)), tf.float32) * tf.cast(mask, tf.float32)


class ParallelTTSModel(TTSModel):
    decoder_type = "parallel"

    def make_decoder(self, dims: ModelDims, sites: SiteCounter) -> keras.layers.Layer:
        return ParallelDecoder(dims, sites, name="decoder")

    def run_decoder(self, frames, frame_mask, latents, target_mel=None, training=False, seed=None):
        """Every frame at once (``target_mel`` is not read: the parallel decoder never sees its outputs)."""
        return self.decoder(frames, frame_mask, latents, training=training, seed=seed)

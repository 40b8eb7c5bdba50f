"""The autoregressive model (``model.decoder: autoregressive``): its mel decoder and ``AutoregressiveTTSModel``,
which is ``TTSModel`` (model/tts.py) with this decoder.

The autoregressive decoder reads the text only through the duration-expanded frames, as Non-Attentive Tacotron
and DurIAN do: decoder step s (r frames, ``model.reduction_factor``) gets the text encodings of its own frames
(from the aligner's hard alignment in training, from the predicted durations at synthesis), the previous
step's frames through a prenet with strong dropout, a global speaker vector and its position; causal
self-attention over earlier steps and attention over the speaker latents follow. Nothing attends freely over
the text, so the output can neither skip nor repeat, and the length is the durations' sum: no stop token.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from myxtts.model.layers import (BuiltByFirstCall, SiteCounter, TransformerBlock, length_mask, sinusoid_table,
                                 stateless_dropout, static_or_dynamic_dim)
from myxtts.model.presets import PRENET_DROPOUT, ModelDims
from myxtts.model.tts import TTSModel

# the prenet keeps its dropout at synthesis (Tacotron 2 does): the decoder then reads its own outputs through
# the same noisy bottleneck it was trained with; a fixed seed makes synthesis reproducible
PRENET_SEED = 20261123


class Prenet(BuiltByFirstCall, keras.layers.Layer):
    """Two ReLU layers with strong dropout on the previous r frames."""

    def __init__(self, dims: ModelDims, sites: SiteCounter, **kwargs):
        super().__init__(**kwargs)
        self.layers_ = [keras.layers.Dense(dims.prenet_dim, activation="relu", name=f"dense_{i}") for i in range(2)]
        self.sites = [sites(), sites()]
        # model.dropout == 0 turns every dropout off (exactness tests); otherwise the prenet's is strong
        self.rate = PRENET_DROPOUT if dims.dropout > 0 else 0.0

    def call(self, x, training=False, seed=None, shared_over_batch=False):
        for layer, site in zip(self.layers_, self.sites):
            x = stateless_dropout(layer(x), self.rate, training, seed, site, shared_over_batch)
        return x


def previous_step_frames(mel, mel_lengths, reduction_factor: int) -> tf.Tensor:
    """Target mel ``[B, T, n_mels]`` -> teacher-forced inputs ``[B, T/r, r*n_mels]``: the previous step's true
    frames (zeros at step 0). Padding is zeroed first so its values can never reach a real step."""
    frames, n_mels = static_or_dynamic_dim(mel, 1), static_or_dynamic_dim(mel, 2)
    if isinstance(frames, int) and frames % reduction_factor:  # a None dim: the pipeline pads to a multiple of r
        raise ValueError(f"mel frames ({frames}) must be a multiple of model.reduction_factor ({reduction_factor}).")
    mel = tf.where(length_mask(mel_lengths, frames)[..., None], mel, tf.zeros_like(mel))  # where: NaN-safe
    grouped = tf.reshape(mel, [-1, frames // reduction_factor, reduction_factor * n_mels])  # [B, steps, r*n_mels]
    return tf.pad(grouped[:, :-1], [[0, 0], [1, 0], [0, 0]])


class AutoregressiveDecoder(BuiltByFirstCall, keras.layers.Layer):
    """Frame encodings ``[B, T, d]`` (duration-expanded text) + speaker latents ``[B, K, d]`` -> mel
    ``[B, T, n_mels]`` float32, r frames per step; ``call`` is teacher-forced, ``generate`` free-running."""

    def __init__(self, dims: ModelDims, sites: SiteCounter, **kwargs):
        super().__init__(**kwargs)
        self.dims = dims
        self.prenet = Prenet(dims, sites, name="prenet")
        self.input_proj = keras.layers.Dense(dims.d_model, name="input_proj")
        self.text_proj = keras.layers.Dense(dims.d_model, name="text_proj")  # a step's r frame encodings -> d
        self.speaker_proj = keras.layers.Dense(dims.d_model, name="speaker_proj")
        self.positions = tf.constant(sinusoid_table(dims.max_positions, dims.d_model))
        self.blocks = [TransformerBlock(dims.d_model, dims.num_heads, dims.ff_dim, dims.dropout, sites,
                                        speaker_attention=True, name=f"block_{i}")
                       for i in range(dims.decoder_layers)]
        self.final_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="final_norm")
        self.mel_proj = keras.layers.Dense(dims.n_mels * dims.reduction_factor, name="mel_proj")
        self.site = sites()

    def _step_conditioning(self, frames, latents):
        """(frame encodings ``[B, T, d]``, latents) -> per-step text + speaker input ``[B, T/r, d]``."""
        r, d = self.dims.reduction_factor, self.dims.d_model
        steps = static_or_dynamic_dim(frames, 1) // r
        text = self.text_proj(tf.reshape(frames, [-1, steps, r * d]))  # [B, steps, d]
        speaker = self.speaker_proj(tf.reduce_mean(tf.cast(latents, text.dtype), axis=1))[:, None, :]  # [B, 1, d]
        return text + speaker

    def _frames(self, x):
        # x [B, steps, d] -> frames [B, steps*r, n_mels] float32
        steps = static_or_dynamic_dim(x, 1)
        return tf.reshape(tf.cast(self.mel_proj(self.final_norm(x)), tf.float32),
                          [-1, steps * self.dims.reduction_factor, self.dims.n_mels])

    def call(self, frames, frame_mask, latents, target_mel, training=False, seed=None):
        """Teacher-forced, every step at once: frames ``[B, T, d]``, frame_mask ``[B, T]`` bool, latents
        ``[B, K, d]``, target_mel ``[B, T, n_mels]`` (normalised) -> mel_before ``[B, T, n_mels]``."""
        mel_lengths = tf.reduce_sum(tf.cast(frame_mask, tf.int32), axis=1)
        previous = previous_step_frames(tf.cast(target_mel, tf.float32), mel_lengths, self.dims.reduction_factor)
        steps = static_or_dynamic_dim(previous, 1)
        if isinstance(steps, int) and steps > self.dims.max_positions:
            raise ValueError(f"{steps} decoder steps exceed model.max_attention_sequence_length "
                             f"({self.dims.max_positions}).")
        x = self.input_proj(self.prenet(tf.cast(previous, self.compute_dtype), training=training, seed=seed))
        x = x + self._step_conditioning(frames, latents) + tf.cast(self.positions[None, :steps], x.dtype)
        x = stateless_dropout(x, self.dims.dropout, training, seed, self.site)
        causal = tf.linalg.band_part(tf.ones([steps, steps], tf.bool), -1, 0)[None, None]  # [1, 1, steps, steps]
        speaker = tf.cast(latents, x.dtype)
        for block in self.blocks:
            x = block(x, causal, speaker=speaker, training=training, seed=seed)
        mask = tf.cast(frame_mask[..., None], tf.float32)
        return self._frames(x) * mask

    def generate(self, frames, frame_mask, latents):
        """Free-running: each step reads the frames it produced at the step before (a ``tf.while_loop`` over
        the bucket's T/r steps, a static count). Same shapes as ``call`` without the target."""
        r, n_mels, d = self.dims.reduction_factor, self.dims.n_mels, self.dims.d_model
        conditioning = self._step_conditioning(frames, latents)  # [B, steps, d]
        steps = static_or_dynamic_dim(conditioning, 1)
        batch = static_or_dynamic_dim(conditioning, 0)
        speaker = tf.cast(latents, conditioning.dtype)
        # per block: the speaker attention's (keys, values), projected once
        speaker_kv = [block.speaker_attention.project_key_value(speaker) for block in self.blocks]
        cache = tf.zeros([len(self.blocks), 2, batch, steps, d], conditioning.dtype)
        outputs = tf.TensorArray(tf.float32, size=steps)

        def body(step, previous, cache, outputs):
            seed = tf.stack([tf.cast(step, tf.int64), tf.constant(PRENET_SEED, tf.int64)])
            # the prenet's dropout stays on, one mask per step shared by the batch: an item says the same alone
            x = self.input_proj(self.prenet(previous[:, None, :], training=self.prenet.rate > 0, seed=seed,
                                            shared_over_batch=True))
            x = x + conditioning[:, step][:, None] + tf.cast(tf.gather(self.positions, step), x.dtype)  # [B, 1, d]
            layers = []
            for index, block in enumerate(self.blocks):
                x, layer_cache = block.step(x, step, cache[index], speaker_kv[index])
                layers.append(layer_cache)
            produced = self._frames(x)  # [B, r, n_mels]
            return (step + 1, tf.cast(tf.reshape(produced, [-1, r * n_mels]), previous.dtype), tf.stack(layers),
                    outputs.write(step, produced))

        previous = tf.zeros([batch, r * n_mels], self.compute_dtype)
        _, _, _, outputs = tf.while_loop(lambda step, *_: step < steps, body,
                                         (tf.constant(0), previous, cache, outputs))
        mel = tf.reshape(tf.transpose(outputs.stack(), [1, 0, 2, 3]), [-1, steps * r, n_mels])  # [B, T, n_mels]
        return mel * tf.cast(frame_mask[..., None], tf.float32)


class AutoregressiveTTSModel(TTSModel):
    """``TTSModel`` with the autoregressive decoder. The text reaches it only through the durations, so alignment,
    durations and synthesis lengths work exactly as in the parallel one; only ``run_decoder`` differs."""

    decoder_type = "autoregressive"

    def make_decoder(self, dims: ModelDims, sites: SiteCounter) -> keras.layers.Layer:
        return AutoregressiveDecoder(dims, sites, name="decoder")

    def run_decoder(self, frames, frame_mask, latents, target_mel=None, training=False, seed=None):
        """Teacher-forced on ``target_mel`` when given (training, validation), free-running without it."""
        if target_mel is None:
            return self.decoder.generate(frames, frame_mask, latents)
        return self.decoder(frames, frame_mask, latents, target_mel, training=training, seed=seed)

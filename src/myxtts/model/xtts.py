"""XTTSModel: text + reference voice -> mel, and the inference pieces the synthesizer compiles.

Synthesis recipe (what ``myxtts.synthesis`` compiles into a ``tf.while_loop``)::

    text = model.encode_text(tokens, token_lengths)                       # [B, T_text, d]
    latents = model.encode_reference(reference_mel, reference_lengths)    # [B, K, d]
    memory, memory_mask = model.build_memory(text, token_lengths, latents)  # (text, latents), [B, T_text]
    memory_kv = model.memory_key_values(memory)                           # per layer, text + speaker k/v, once
    cache = model.initial_cache(batch, max_steps)                         # [layers, 2, B, max_steps, d]
    prev = zeros [B, r * n_mels]
    for s in range(max_steps):                                            # tf.while_loop
        frames, stop_logit, cache, attention = model.decoder_step(prev, s, cache, memory_kv, memory_mask)
        prev = reshape(frames, [B, r * n_mels]); stop when sigmoid(stop_logit) > 0.5
    mel = model.apply_postnet(all frames [B, steps*r, n_mels], mel_lengths)
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from myxtts.config import Config
from myxtts.model.decoder import MelDecoder, Postnet
from myxtts.model.encoders import ConditioningEncoder, TextEncoder
from myxtts.model.layers import SiteCounter, length_mask, static_or_dynamic_dim, track_listed_layers
from myxtts.model.parallel import ParallelTTSModel
from myxtts.model.presets import ModelDims, resolve_dims


class XTTSModel(keras.Model):
    decoder_type = "autoregressive"

    def __init__(self, dims: ModelDims, **kwargs):
        super().__init__(**kwargs)
        self.dims = dims
        sites = SiteCounter()
        self.text_encoder = TextEncoder(dims, sites, name="text_encoder")
        self.conditioning_encoder = ConditioningEncoder(dims, sites, name="conditioning_encoder")
        self.decoder = MelDecoder(dims, sites, name="decoder")
        self.postnet = Postnet(dims, sites, name="postnet")
        track_listed_layers(self)

    # ---- inference pieces -------------------------------------------------------------------
    def encode_text(self, tokens, token_lengths, training=False, seed=None):
        """tokens ``[B, T_text]`` int32, token_lengths ``[B]`` -> ``[B, T_text, d]`` (zeros at padding)."""
        return self.text_encoder(tokens, token_lengths, training=training, seed=seed)

    def encode_reference(self, reference_mel, reference_lengths, training=False, seed=None):
        """reference_mel ``[B, T_ref, n_mels]``, reference_lengths ``[B]`` -> speaker latents ``[B, K, d]``."""
        return self.conditioning_encoder(reference_mel, reference_lengths, training=training, seed=seed)

    def build_memory(self, text_encodings, token_lengths, speaker_latents):
        """The decoder's memory: (text ``[B, T_text, d]``, speaker latents ``[B, K, d]``) and the text mask
        ``[B, T_text]`` (bool). Text and voice are attended in separate softmaxes (see model/decoder.py), so
        the alignment is a distribution over real text positions only.
        """
        text_mask = length_mask(token_lengths, static_or_dynamic_dim(text_encodings, 1))  # [B, T_text]
        return (text_encodings, tf.cast(speaker_latents, text_encodings.dtype)), text_mask

    def memory_key_values(self, memory):
        """List (one per decoder layer) of ((text keys, values), (speaker keys, values)); compute once, reuse
        every step."""
        return self.decoder.memory_key_values(memory)

    def initial_cache(self, batch_size: int, max_steps: int) -> tf.Tensor:
        """Zero self-attention cache ``[decoder_layers, 2 (keys, values), batch, max_steps, d_model]``."""
        if max_steps > self.dims.max_positions:
            raise ValueError(f"max_steps {max_steps} exceeds model.max_attention_sequence_length "
                             f"({self.dims.max_positions}).")
        return tf.zeros([self.dims.decoder_layers, 2, batch_size, max_steps, self.dims.d_model],
                        dtype=self.compute_dtype)

    def decoder_step(self, prev_frames, step_index, kv_cache, memory, memory_mask, alignment_mask=None,
                     prenet_seed=None):
        """One autoregressive step (no dropout, except the prenet's when ``prenet_seed`` is given).

        prev_frames ``[B, r*n_mels]`` (or ``[B, r, n_mels]``): the previous step's frames, zeros at step 0.
        step_index: scalar int32 (0-based). kv_cache: ``[layers, 2, B, max_steps, d]`` from ``initial_cache``.
        memory: either the list from ``memory_key_values`` (fast) or the (text, latents) pair of ``build_memory``.
        memory_mask: ``[B, T_text]`` bool. alignment_mask: optional ``[B, T_text]`` bool, the text positions the
        aligning layer may attend to at this step (a monotonic window at synthesis). prenet_seed: optional int
        ``[2]``: keep the prenet's dropout on with this seed, as in training (Tacotron 2 does this at inference:
        the decoder then sees its own outputs through the same noisy bottleneck it was trained with).
        Returns (frames ``[B, r, n_mels]`` float32 (before postnet), stop_logit ``[B]`` float32,
        new kv_cache (same shape), attention ``[B, T_text]`` float32: the alignment layer's cross-attention
        over the text, mean over heads).
        """
        r, n_mels = self.dims.reduction_factor, self.dims.n_mels
        prev_frames = tf.reshape(tf.cast(prev_frames, self.compute_dtype), [-1, r * n_mels])
        memory_kv = self.memory_key_values(memory) if isinstance(memory, tuple) else memory
        frames, stop, cache, attention = self.decoder.step(prev_frames, tf.cast(step_index, tf.int32),
                                                           kv_cache, memory_kv, memory_mask, alignment_mask,
                                                           prenet_seed)
        return tf.reshape(frames, [-1, r, n_mels]), stop, cache, attention

    def apply_postnet(self, mel_before, mel_lengths):
        """mel_before ``[B, T, n_mels]`` -> mel_after (zeros beyond each length)."""
        return self.postnet(mel_before, length_mask(mel_lengths, static_or_dynamic_dim(mel_before, 1)))

    # ---- training forward -------------------------------------------------------------------
    def teacher_forced_inputs(self, mel, mel_lengths):
        """Target mel ``[B, T, n_mels]`` -> decoder inputs ``[B, T/r, r*n_mels]``: previous step's true frames.

        Padding is zeroed first so its values can never reach a real step.
        """
        frames, n_mels, r = static_or_dynamic_dim(mel, 1), self.dims.n_mels, self.dims.reduction_factor
        if isinstance(frames, int) and frames % r:  # a None dim: the pipeline pads to a multiple of r
            raise ValueError(f"mel frames ({frames}) must be a multiple of model.reduction_factor ({r}).")
        mel = tf.where(length_mask(mel_lengths, frames)[..., None], mel, tf.zeros_like(mel))  # where: NaN-safe
        grouped = tf.reshape(mel, [-1, frames // r, r * n_mels])  # [B, steps, r*n_mels]
        return tf.pad(grouped[:, :-1], [[0, 0], [1, 0], [0, 0]])

    def call(self, batch, training=False, seed=None):
        """batch: the contract dict (docs/architecture.md). seed: optional int ``[2]`` for dropout.

        Returns mel_before / mel_after ``[B, T, n_mels]``, stop_logits ``[B, T/r]``, alignments
        ``[B, T/r, T_text]`` (all float32).
        """
        tokens, token_lengths = batch["tokens"], batch["token_lengths"]
        mel, mel_lengths = batch["mel"], batch["mel_lengths"]
        text = self.encode_text(tokens, token_lengths, training=training, seed=seed)
        latents = self.encode_reference(batch["reference_mel"], batch["reference_lengths"], training=training,
                                        seed=seed)
        memory, memory_mask = self.build_memory(text, token_lengths, latents)
        decoder_inputs = self.teacher_forced_inputs(tf.cast(mel, tf.float32), mel_lengths)
        mel_before, stop_logits, attention = self.decoder(tf.cast(decoder_inputs, self.compute_dtype), memory,
                                                          memory_mask, training=training, seed=seed)
        frame_mask = length_mask(mel_lengths, static_or_dynamic_dim(mel, 1))
        mel_after = self.postnet(mel_before, frame_mask, training=training, seed=seed)
        return {"mel_before": mel_before, "mel_after": mel_after, "stop_logits": stop_logits,
                "alignments": attention}  # [B, steps, T_text]: over real text positions only


def dummy_batch(dims: ModelDims, batch: int = 1, text_len: int = 5, steps: int = 2, ref_frames: int = 8) -> dict:
    """A tiny valid batch (numpy) used to build the variables eagerly before any tracing."""
    frames = steps * dims.reduction_factor
    rng = np.random.default_rng(0)
    return {"tokens": np.ones([batch, text_len], np.int32), "token_lengths": np.full([batch], text_len, np.int32),
            "mel": rng.normal(size=[batch, frames, dims.n_mels]).astype(np.float32),
            "mel_lengths": np.full([batch], frames, np.int32),
            "reference_mel": rng.normal(size=[batch, ref_frames, dims.n_mels]).astype(np.float32),
            "reference_lengths": np.full([batch], ref_frames, np.int32),
            "speaker_ids": np.zeros([batch], np.int32)}


MIXED_PRECISION_POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}


def build_model(cfg: Config, vocab_size: int) -> "XTTSModel | ParallelTTSModel":
    """Build the model for this config and create every variable (an eager call on a tiny batch), so no
    compiled step ever creates variables (which would make it trace twice).

    ``training.mixed_precision`` picks the Keras dtype policy (variables stay float32, compute in
    bfloat16/float16); it is set only while the layers are constructed, so the process-wide policy is
    left as it was.
    """
    dims = resolve_dims(cfg.model, vocab_size, cfg.audio.n_mels)
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(MIXED_PRECISION_POLICIES[cfg.training.mixed_precision])
    try:
        if cfg.model.decoder == "parallel":
            model = ParallelTTSModel(dims, name="parallel_tts")
        else:
            model = XTTSModel(dims, name="xtts")
        # 16 frames: enough for the aligner to place each of the 5 tokens
        model({k: tf.constant(v) for k, v in dummy_batch(dims, steps=16 // dims.reduction_factor).items()},
              training=False)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    return model


def count_parameters(model: keras.Model) -> int:
    return int(sum(np.prod(v.shape) for v in model.trainable_variables))

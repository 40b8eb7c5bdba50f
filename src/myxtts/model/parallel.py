"""The parallel (non-autoregressive) model: text + a reference voice -> every mel frame at once.

Where a batch is consumed (``ParallelTTSModel.call``)::

    text = text_encoder(tokens)                                          # [B, T_text, d]
    log_alignment = aligner(text embedding, normalised target mel)      # [B, T_mel, T_text] soft, log
    hard = monotonic_alignment_search(log_alignment)                    # [B, T_mel, T_text] 0/1
    durations = column sums of hard                                      # [B, T_text], sum = mel length
    log_duration_predictions = duration_predictor(text)                 # [B, T_text] (trained on durations)
    frames = hard @ text                                                 # [B, T_mel, d]  (length regulator)
    latents = conditioning_encoder(reference mel)                       # [B, K, d]
    mel_before = decoder(frames, latents); mel_after = postnet(mel_before)

At synthesis the hard alignment comes from the predicted durations instead (``durations_from_log`` +
``alignment_from_durations``); nothing attends freely over the text, so the output can neither skip nor repeat.
The decoder is convolutional (residual dilated convolutions, no self-attention over frames): at CPU scale a
9 M-parameter FastPitch-size decoder ran 0.22 steps/s here and said nothing after 30 minutes, where this
2 M-parameter design ran 1.4 steps/s and spoke (../shared/FIELD_NOTES.md, "A minimal duration model").
"""

from __future__ import annotations

import keras
import tensorflow as tf

from myxtts.model.alignment import AlignmentEncoder, durations_from_alignment, monotonic_alignment_search
from myxtts.model.decoder import Postnet
from myxtts.model.durations import DurationPredictor, alignment_from_durations, length_regulate
from myxtts.model.encoders import ConditioningEncoder, TextEncoder
from myxtts.model.layers import (MultiHeadAttention, SiteCounter, all_visible, length_mask, stateless_dropout,
                                 static_or_dynamic_dim, track_listed_layers)
from myxtts.model.presets import ModelDims

DECODER_KERNEL = 5
DILATION_CYCLE = (1, 2, 4, 8)  # block i uses DILATION_CYCLE[i % 4]; the last block always uses 1
SPEAKER_ATTENTION_AFTER = 1  # frames attend to the speaker latents after this block


class ResidualConvBlock(keras.layers.Layer):
    """x + dropout(relu(conv(LayerNorm(x)))) with a dilated 'same' convolution; padding re-zeroed."""

    def __init__(self, channels: int, dilation: int, dropout: float, sites: SiteCounter, **kwargs):
        super().__init__(**kwargs)
        self.norm = keras.layers.LayerNormalization(epsilon=1e-5, name="norm")
        self.conv = keras.layers.Conv1D(channels, DECODER_KERNEL, padding="same", dilation_rate=dilation,
                                        activation="relu", name="conv")
        self.rate, self.site = dropout, sites()

    def call(self, x, frame_mask, training=False, seed=None):
        update = stateless_dropout(self.conv(self.norm(x)), self.rate, training, seed, self.site)
        return (x + update) * frame_mask


class ParallelDecoder(keras.layers.Layer):
    """Frame encodings ``[B, T_mel, d]`` + speaker latents ``[B, K, d]`` -> mel ``[B, T_mel, n_mels]`` float32.

    The voice enters twice: a global speaker vector (projected mean of the latents) added to every frame, and
    an attention of every frame over the K latents after block ``SPEAKER_ATTENTION_AFTER``.
    """

    def __init__(self, dims: ModelDims, sites: SiteCounter, **kwargs):
        super().__init__(**kwargs)
        self.dims = dims
        count = dims.decoder_conv_blocks
        dilations = [DILATION_CYCLE[i % len(DILATION_CYCLE)] for i in range(count - 1)] + [1]
        self.blocks = [ResidualConvBlock(dims.d_model, dilation, dims.dropout, sites, name=f"block_{i}")
                       for i, dilation in enumerate(dilations)]
        self.speaker_proj = keras.layers.Dense(dims.d_model, name="speaker_proj")
        self.speaker_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="speaker_norm")
        self.speaker_attention = MultiHeadAttention(dims.d_model, dims.num_heads, dims.dropout, sites,
                                                    name="speaker_attention")
        self.final_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="final_norm")
        self.mel_proj = keras.layers.Dense(dims.n_mels, name="mel_proj")

    def call(self, frames, frame_mask, latents, training=False, seed=None):
        mask = tf.cast(frame_mask[..., None], self.compute_dtype)  # [B, T_mel, 1]
        latents = tf.cast(latents, self.compute_dtype)
        speaker = self.speaker_proj(tf.reduce_mean(latents, axis=1))[:, None, :]  # [B, 1, d]
        x = (frames + speaker) * mask
        for index, block in enumerate(self.blocks):
            x = block(x, mask, training=training, seed=seed)
            if index == SPEAKER_ATTENTION_AFTER:
                update, _ = self.speaker_attention(self.speaker_norm(x), latents, all_visible(), training=training,
                                                   seed=seed)
                x = (x + update) * mask
        return tf.cast(self.mel_proj(self.final_norm(x)), tf.float32) * tf.cast(mask, tf.float32)


class ParallelTTSModel(keras.Model):
    """The default model (``model.decoder: parallel``); see the module docstring for the data flow."""

    decoder_type = "parallel"

    def __init__(self, dims: ModelDims, **kwargs):
        super().__init__(**kwargs)
        self.dims = dims
        sites = SiteCounter()
        self.text_encoder = TextEncoder(dims, sites, embedding_stddev=dims.d_model ** -0.5, name="text_encoder")
        self.conditioning_encoder = ConditioningEncoder(dims, sites, name="conditioning_encoder")
        self.aligner = AlignmentEncoder(dims.d_model, dims.n_mels, name="aligner")
        self.duration_predictor = DurationPredictor(dims.dropout, sites, name="duration_predictor")
        self.decoder = ParallelDecoder(dims, sites, name="decoder")
        self.postnet = Postnet(dims, sites, name="postnet")
        track_listed_layers(self)

    # ---- pieces shared by training and synthesis ------------------------------------------------
    def encode_text(self, tokens, token_lengths, training=False, seed=None):
        """tokens ``[B, T_text]`` -> encodings ``[B, T_text, d]`` (zeros at padding)."""
        return self.text_encoder(tokens, token_lengths, training=training, seed=seed)

    def encode_reference(self, reference_mel, reference_lengths, training=False, seed=None):
        """reference_mel ``[B, T_ref, n_mels]`` -> speaker latents ``[B, K, d]``."""
        return self.conditioning_encoder(reference_mel, reference_lengths, training=training, seed=seed)

    def predict_log_durations(self, text_encodings, token_lengths, training=False, seed=None):
        """``[B, T_text]`` float32 log(1 + frames), 0 at padding."""
        return self.duration_predictor(text_encodings, token_lengths, training=training, seed=seed)

    def decode(self, text_encodings, hard_alignment, mel_lengths, latents, training=False, seed=None):
        """(text ``[B, T_text, d]``, hard alignment ``[B, T_mel, T_text]``, mel_lengths ``[B]``, latents) ->
        (mel_before, mel_after) ``[B, T_mel, n_mels]`` float32, zero past each length."""
        frame_mask = length_mask(mel_lengths, static_or_dynamic_dim(hard_alignment, 1))  # [B, T_mel]
        frames = length_regulate(hard_alignment, text_encodings)  # [B, T_mel, d]
        mel_before = self.decoder(frames, frame_mask, latents, training=training, seed=seed)
        mel_after = self.postnet(mel_before, frame_mask, training=training, seed=seed)
        return mel_before, mel_after

    def synthesize(self, tokens, token_lengths, durations, reference_mel, reference_lengths, frames: int):
        """Inference from whole-frame durations ``[B, T_text]`` int32 (their sum <= ``frames`` per item) ->
        mel_after ``[B, frames, n_mels]`` (normalised) and mel_lengths ``[B]``."""
        text = self.encode_text(tokens, token_lengths)
        latents = self.encode_reference(reference_mel, reference_lengths)
        hard = alignment_from_durations(durations, frames)  # [B, frames, T_text]
        mel_lengths = tf.reduce_sum(durations, axis=1)
        _, mel_after = self.decode(text, hard, mel_lengths, latents)
        return mel_after, mel_lengths

    # ---- training forward -------------------------------------------------------------------
    def call(self, batch, training=False, seed=None):
        """batch: the contract dict (docs/architecture.md), ``mel`` normalised. Returns mel_before / mel_after
        ``[B, T_mel, n_mels]``, alignments (soft, ``[B, T_mel, T_text]``), log_alignment, hard_alignment,
        durations ``[B, T_text]`` int32 and log_duration_predictions ``[B, T_text]``."""
        tokens, token_lengths = batch["tokens"], batch["token_lengths"]
        mel, mel_lengths = tf.cast(batch["mel"], tf.float32), batch["mel_lengths"]
        text = self.encode_text(tokens, token_lengths, training=training, seed=seed)
        log_alignment = self.aligner(self.text_encoder.embed(tokens), token_lengths, mel, mel_lengths)
        hard = monotonic_alignment_search(log_alignment, token_lengths, mel_lengths)  # [B, T_mel, T_text]
        latents = self.encode_reference(batch["reference_mel"], batch["reference_lengths"], training=training,
                                        seed=seed)
        mel_before, mel_after = self.decode(text, hard, mel_lengths, latents, training=training, seed=seed)
        frame_mask = length_mask(mel_lengths, static_or_dynamic_dim(mel, 1))[..., None]
        return {"mel_before": mel_before, "mel_after": mel_after,
                "alignments": tf.exp(log_alignment) * tf.cast(frame_mask, tf.float32),
                "log_alignment": log_alignment, "hard_alignment": hard,
                "durations": durations_from_alignment(hard),
                "log_duration_predictions": self.predict_log_durations(text, token_lengths, training=training,
                                                                       seed=seed)}

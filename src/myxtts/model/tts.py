"""The model both decoders share: text + a reference voice -> mel, with the alignment learned online and used
as durations.

Where a batch is consumed (``TTSModel.call``)::

    text = text_encoder(tokens)                                          # [B, T_text, d]
    log_alignment = aligner(text embedding, normalised target mel)      # [B, T_mel, T_text] soft, log
    hard = monotonic_alignment_search(log_alignment)                    # [B, T_mel, T_text] 0/1
    durations = column sums of hard                                      # [B, T_text], sum = mel length
    log_duration_predictions = duration_predictor(text)                 # [B, T_text] (trained on durations)
    frames = hard @ text                                                 # [B, T_mel, d]  (length regulator)
    latents = conditioning_encoder(reference mel)                       # [B, K (+ reference tokens), d]
    (model.pitch_conditioning: text += pitch_embedding(token pitch); model/pitch.py)
    mel_before = decoder(frames, latents); mel_after = postnet(mel_before)
    (model.reference_spectrum: mel_before moved toward the reference's long-term spectrum; model/spectrum.py)

At synthesis the hard alignment comes from the predicted durations instead (``durations_from_log`` +
``alignment_from_durations``); nothing attends freely over the text, so the output can neither skip nor repeat.
The decoder is the one difference between the two models: ``ParallelTTSModel`` (model/parallel_decoder.py, the
default) predicts every frame at once with residual dilated convolutions; ``AutoregressiveTTSModel``
(model/autoregressive_decoder.py) produces r frames per step from its previous ones. Both share the postnet
(model/postnet.py).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from myxtts.model.alignment import AlignmentEncoder, durations_from_alignment, monotonic_alignment_search
from myxtts.model.postnet import Postnet
from myxtts.model.durations import DurationPredictor, PitchPredictor, alignment_from_durations, length_regulate
from myxtts.model.encoders import ConditioningEncoder, TextEncoder
from myxtts.model.layers import BuiltByFirstCall, SiteCounter, length_mask, static_or_dynamic_dim, track_listed_layers
from myxtts.model.pitch import (PitchEmbedding, PitchLevelPredictor, absolute_token_pitch, token_pitch_targets,
                                utterance_pitch_level)
from myxtts.model.presets import ModelDims
from myxtts.model.spectrum import move_spectrum


class TTSModel(BuiltByFirstCall, keras.Model):
    """See the module docstring for the data flow; a subclass supplies the decoder (``make_decoder``) and how it
    runs (``run_decoder``)."""

    decoder_type = ""

    def __init__(self, dims: ModelDims, **kwargs):
        super().__init__(**kwargs)
        self.dims = dims
        self.pitch_variation = 1.0  # model.pitch_variation (build_model sets it): the predicted contour's scale
        sites = SiteCounter()
        self.text_encoder = TextEncoder(dims, sites, embedding_stddev=dims.d_model ** -0.5, name="text_encoder")
        self.conditioning_encoder = ConditioningEncoder(dims, sites, name="conditioning_encoder")
        self.aligner = AlignmentEncoder(dims.d_model, dims.n_mels, name="aligner")
        self.duration_predictor = DurationPredictor(dims.dropout, sites, name="duration_predictor")
        self.decoder = self.make_decoder(dims, sites)
        self.postnet = Postnet(dims, sites, name="postnet")
        if dims.pitch_conditioning:  # model/pitch.py; built last, so the other layers keep their names and sites
            self.pitch_predictor = PitchPredictor(dims.dropout, sites, name="pitch_predictor")
            self.pitch_embedding = PitchEmbedding(dims.d_model, name="pitch_embedding")
        if dims.pitch_level:  # after the pitch modules, for the same reason
            self.pitch_level = PitchLevelPredictor(dims.d_model, name="pitch_level")
        track_listed_layers(self)

    def make_decoder(self, dims: ModelDims, sites: SiteCounter) -> keras.layers.Layer:
        raise NotImplementedError

    # ---- pieces shared by training and synthesis ------------------------------------------------
    def encode_text(self, tokens, token_lengths, training=False, seed=None):
        """tokens ``[B, T_text]`` -> encodings ``[B, T_text, d]`` (zeros at padding)."""
        return self.text_encoder(tokens, token_lengths, training=training, seed=seed)

    def encode_reference(self, reference_mel, reference_lengths, training=False, seed=None):
        """reference_mel ``[B, T_ref, n_mels]`` -> speaker latents ``[B, K, d]`` (with ``model.reference_tokens``, the
        reference tokens after them: ``[B, K + R, d]``)."""
        return self.conditioning_encoder(reference_mel, reference_lengths, training=training, seed=seed)

    def speaker_latents(self, latents):
        """The K pooled speaker latents ``[B, K, d]`` of the conditioning ``[B, K (+ reference tokens), d]``."""
        return latents[:, :self.dims.num_speaker_latents]

    def predict_log_durations(self, text_encodings, token_lengths, training=False, seed=None):
        """``[B, T_text]`` float32 log(1 + frames), 0 at padding."""
        return self.duration_predictor(text_encodings, token_lengths, training=training, seed=seed)

    def decode(self, text_encodings, hard_alignment, mel_lengths, latents, target_mel=None, training=False,
               seed=None, token_pitch=None, pitch_level=None):
        """(text ``[B, T_text, d]``, hard alignment ``[B, T_mel, T_text]``, mel_lengths ``[B]``, latents) ->
        (mel_before, mel_after) ``[B, T_mel, n_mels]`` float32, zero past each length. ``target_mel`` (the
        normalised target, training only) is what a decoder that reads its previous frames is teacher-forced
        with; None: synthesis. ``token_pitch`` ``[B, T_text]`` (pitch conditioning): the recordings' token pitch;
        None: the predicted one. ``pitch_level`` ``[B, 2]`` (model.pitch_level): the recordings' level; None: the one
        predicted from ``latents``."""
        if self.dims.pitch_conditioning:
            token_mask = tf.reduce_sum(tf.cast(hard_alignment, tf.float32), axis=1) > 0.0  # [B, T_text]: >= 1 frame
            if token_pitch is None:
                token_lengths = tf.reduce_sum(tf.cast(token_mask, tf.int32), axis=1)
                token_pitch = self.pitch_predictor(text_encodings, token_lengths, training=training, seed=seed)
                token_pitch = token_pitch * self.pitch_variation  # model.pitch_variation: about the mean (0)
            if self.dims.pitch_level:
                level = pitch_level if pitch_level is not None else \
                    self.pitch_level(self.speaker_latents(latents))  # [B, 2]
                token_pitch = absolute_token_pitch(token_pitch, level)
            text_encodings = text_encodings + self.pitch_embedding(token_pitch, token_mask)
        frame_mask = length_mask(mel_lengths, static_or_dynamic_dim(hard_alignment, 1))  # [B, T_mel]
        frames = length_regulate(hard_alignment, text_encodings)  # [B, T_mel, d]
        mel_before = self.run_decoder(frames, frame_mask, latents, target_mel, training=training, seed=seed)
        if self.dims.reference_spectrum > 0:  # the reference's long-term spectrum, a share of the way (spectrum.py)
            mel_before = move_spectrum(mel_before, frame_mask, latents, self.dims.reference_spectrum)
        mel_after = self.postnet(mel_before, frame_mask, training=training, seed=seed)
        return mel_before, mel_after

    def run_decoder(self, frames, frame_mask, latents, target_mel=None, training=False, seed=None):
        """Frame encodings ``[B, T_mel, d]`` (frame_mask ``[B, T_mel]``) -> mel_before ``[B, T_mel, n_mels]``."""
        raise NotImplementedError

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
        durations ``[B, T_text]`` int32 and log_duration_predictions ``[B, T_text]``; with pitch conditioning
        pitch_predictions ``[B, T_text]``, and token_pitch (the targets) when the batch has ``pitch`` ``[B, T_mel]``
        (frame F0 in Hz); with model.pitch_level pitch_level_predictions ``[B, 2]``, and with ``pitch`` the targets
        pitch_level ``[B, 2]`` and pitch_level_voiced ``[B]`` (False: no voiced frame, not scored)."""
        tokens, token_lengths = batch["tokens"], batch["token_lengths"]
        mel, mel_lengths = tf.cast(batch["mel"], tf.float32), batch["mel_lengths"]
        text = self.encode_text(tokens, token_lengths, training=training, seed=seed)
        log_alignment = self.aligner(self.text_encoder.embed(tokens), token_lengths, mel, mel_lengths)
        hard = monotonic_alignment_search(log_alignment, token_lengths, mel_lengths)  # [B, T_mel, T_text]
        latents = self.encode_reference(batch["reference_mel"], batch["reference_lengths"], training=training,
                                        seed=seed)
        pitch = {}
        if self.dims.pitch_conditioning:  # the recordings' pitch when the batch has it (training, teacher forcing)
            pitch["pitch_predictions"] = self.pitch_predictor(text, token_lengths, training=training, seed=seed)
            if "pitch" in batch:
                pitch["token_pitch"] = token_pitch_targets(batch["pitch"], mel_lengths, hard)  # [B, T_text]
        level = None
        if self.dims.pitch_level:  # the decoder reads the recordings' level, the head learns to predict it
            pitch["pitch_level_predictions"] = level = self.pitch_level(self.speaker_latents(latents))  # [B, 2]
            if "pitch" in batch:
                target, has_voiced = utterance_pitch_level(batch["pitch"], mel_lengths)
                pitch["pitch_level"], pitch["pitch_level_voiced"] = target, has_voiced
                level = tf.where(has_voiced[:, None], target, level)  # no voiced frame: the predicted level
        mel_before, mel_after = self.decode(text, hard, mel_lengths, latents, target_mel=mel, training=training,
                                            seed=seed, token_pitch=pitch.get("token_pitch"), pitch_level=level)
        frame_mask = length_mask(mel_lengths, static_or_dynamic_dim(mel, 1))[..., None]
        return {**pitch, "mel_before": mel_before, "mel_after": mel_after,
                "alignments": tf.exp(log_alignment) * tf.cast(frame_mask, tf.float32),
                "log_alignment": log_alignment, "hard_alignment": hard,
                "durations": durations_from_alignment(hard),
                "log_duration_predictions": self.predict_log_durations(text, token_lengths, training=training,
                                                                       seed=seed)}

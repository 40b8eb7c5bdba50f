"""Teacher forcing: the model run on a real mel with the aligner's durations, as in training, one clip at a time.

What ``evaluate`` measures the model's fit with (held-out clips) and what ``train-vocoder --acoustic-run`` fine-tunes
a vocoder on (the acoustic model's own mels of the training clips). One function per (text bucket, frame bucket)
with a static signature; frames are padded to multiples of ``TEACHER_FORCED_FRAME_MULTIPLE``. A pitch-conditioned model
(``model.pitch_conditioning``) reads the recordings' pitch when the clip's audio is given, as in training.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from myxtts.diagnostics.tf_warning import first_trace_expected
from myxtts.f0.tracker import frame_f0
from myxtts.synthesis.engine import Reference
from myxtts.synthesis.synthesizer import Synthesizer
from myxtts.text import PAD_ID

# Finer than synthesis's MEL_BUCKET_MULTIPLE (synthesis/decoding.py): here a shape is compiled only when a clip needs
# it and runs one clip, so a finer multiple pads less; synthesis traces every bucket up front in warm_up, so it keeps
# their number small.
TEACHER_FORCED_FRAME_MULTIPLE = 64


@dataclass
class TeacherForced:
    """One clip through the model with its real mel (true lengths: no padding)."""

    tokens: np.ndarray  # [tokens] int32 (bos + ids + eos)
    mel: np.ndarray  # [frames, n_mels] the model's mel after the postnet, denormalised: a real log mel
    alignment: np.ndarray  # [frames, tokens] the aligner's soft alignment of the real mel
    aligner_durations: np.ndarray  # [tokens] frames per token from the aligner (what the duration predictor learns)
    log_duration_predictions: np.ndarray  # [tokens] the duration predictor's log(1 + frames)
    # pitch conditioning, the clip's audio given: each token's pitch from the recordings (standardised log F0, 0 where
    # the token has no voiced frame) and the predictor's, [tokens] (model/pitch.py); None otherwise
    token_pitch: np.ndarray | None = None
    pitch_predictions: np.ndarray | None = None


class TeacherForcing:
    """``TeacherForcing(synthesizer)(text, real_log_mel, reference_clip) -> TeacherForced``."""

    def __init__(self, synthesizer: Synthesizer) -> None:
        self.synthesizer = synthesizer
        self.functions: dict[tuple[int, int, bool], Any] = {}

    def _function(self, text_len: int, frames: int, pitch: bool):
        key = (text_len, frames, pitch)
        if key not in self.functions:
            cfg = self.synthesizer.cfg
            spec = {"tokens": tf.TensorSpec([1, text_len], tf.int32), "token_lengths": tf.TensorSpec([1], tf.int32),
                    "mel": tf.TensorSpec([1, frames, cfg.audio.n_mels], tf.float32),
                    "mel_lengths": tf.TensorSpec([1], tf.int32),
                    "reference_mel": tf.TensorSpec([1, cfg.data.reference_frames, cfg.audio.n_mels], tf.float32),
                    "reference_lengths": tf.TensorSpec([1], tf.int32), "speaker_ids": tf.TensorSpec([1], tf.int32)}
            if pitch:
                spec["pitch"] = tf.TensorSpec([1, frames], tf.float32)
            model = self.synthesizer.model
            self.functions[key] = tf.function(lambda batch: model(batch, training=False), input_signature=[spec],
                                              autograph=False)
        return self.functions[key]

    def __call__(self, text: str, mel: np.ndarray, reference: Reference,
                 waveform: np.ndarray | None = None) -> TeacherForced:
        """``mel``: the real log mel of ``text`` spoken, ``[frames, n_mels]`` (normalised here for the model; cut at
        ``data.max_mel_frames``); ``reference``: the voice's clip (a path or a waveform, as ``synthesize`` takes);
        ``waveform``: the audio ``mel`` was computed from, whose F0 a pitch-conditioned model reads (None: its
        predicted pitch)."""
        synthesizer = self.synthesizer
        stats = synthesizer.mel_stats
        tokens = synthesizer.engine.encode([text])[0]  # [tokens] int32
        reference_mel, reference_length = synthesizer.engine.reference_mel(reference)  # [reference_frames, n_mels]
        text_len = synthesizer.lengths.text_bucket(len(tokens))
        limit = synthesizer.cfg.data.max_mel_frames  # a multiple of the reduction factor (validated)
        frames = min(math.ceil(mel.shape[0] / TEACHER_FORCED_FRAME_MULTIPLE) * TEACHER_FORCED_FRAME_MULTIPLE, limit)
        true_frames = min(mel.shape[0], frames)
        padded_tokens = np.full([1, text_len], PAD_ID, np.int32)
        padded_tokens[0, : len(tokens)] = tokens
        padded_mel = np.zeros([1, frames, mel.shape[1]], np.float32)
        padded_mel[0, :true_frames] = stats.normalize(mel[:true_frames])  # zero padding after normalising
        batch = {"tokens": padded_tokens, "token_lengths": np.array([len(tokens)], np.int32), "mel": padded_mel,
                 "mel_lengths": np.array([true_frames], np.int32), "reference_mel": reference_mel[None],
                 "reference_lengths": np.array([reference_length], np.int32), "speaker_ids": np.zeros([1], np.int32)}
        if synthesizer.cfg.model.pitch_conditioning and waveform is not None:  # the recordings' pitch
            audio = synthesizer.cfg.audio
            f0 = frame_f0(np.asarray(waveform, np.float32), audio.sample_rate, audio.hop_length).numpy()  # [frames]
            batch["pitch"] = np.zeros([1, frames], np.float32)
            batch["pitch"][0, :min(true_frames, f0.size)] = f0[:true_frames]
        function = self._function(text_len, frames, "pitch" in batch)
        with first_trace_expected(function):  # one function per bucket shape: its first trace is the design
            outputs = {k: v.numpy()[0] for k, v in function({k: tf.constant(v) for k, v in batch.items()}).items()}
        return TeacherForced(
            tokens=tokens, mel=stats.denormalize(outputs["mel_after"][:true_frames]),
            alignment=outputs["alignments"][:true_frames, : len(tokens)],
            aligner_durations=outputs["durations"][: len(tokens)],
            log_duration_predictions=outputs["log_duration_predictions"][: len(tokens)],
            **{key: outputs[key][: len(tokens)] for key in ("token_pitch", "pitch_predictions")
               if "token_pitch" in outputs})  # the recordings' pitch was read

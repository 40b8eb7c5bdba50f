"""Synthesis: predicted durations, then the mel of every frame they give, in compiled graphs (both decoders:
the parallel one produces every frame at once, the autoregressive one runs its steps in a ``tf.while_loop``
inside the decode function).

Three kinds of compiled function, each with a static ``input_signature``:

- ``latents`` per batch size: normalised reference mels ``[B, reference_frames, n_mels]`` -> the conditioning
  encoder's speaker latents ``[B, K, d]`` (a voice; several references of one voice are averaged here, as XTTS
  averages its conditioning latents);
- ``durations`` per (batch size, text bucket): tokens -> text encodings and whole-frame durations (predicted
  log-durations x the length scale, rounded, >= 1 per token), both padded to ``data.max_text_length`` so the
  next call does not depend on the text bucket;
- ``decode`` per (batch size, mel bucket): encodings, durations and the voice's latents -> the normalised mel of
  the bucket's length (zero past each item's total).

The host reads the durations' totals in between to choose the smallest mel bucket that holds the batch. Mel
buckets are multiples of ``MEL_BUCKET_MULTIPLE`` frames up to ``data.max_mel_frames``: a handful of graphs,
all traced by ``warm_up`` and none after. A text whose predicted length exceeds the largest bucket is a
``SynthesisLengthError`` naming it (split the text into sentences).
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np
import tensorflow as tf

from myxtts.errors import InputError
from myxtts.diagnostics.tf_warning import expected_traces, first_trace_expected
from myxtts.model.durations import alignment_from_durations, durations_from_log

MEL_BUCKET_MULTIPLE = 128  # frames; coarser than TEACHER_FORCED_FRAME_MULTIPLE: every bucket is warmed up


class SynthesisLengthError(InputError):
    """Predicted durations that do not fit the largest mel bucket (data.max_mel_frames)."""


def mel_buckets(max_mel_frames: int, multiple: int = MEL_BUCKET_MULTIPLE) -> list[int]:
    """Frame counts of the decode graphs: multiples of ``multiple`` below ``max_mel_frames``, then it."""
    return list(range(multiple, max_mel_frames, multiple)) + [max_mel_frames]


class CompiledDecoder:
    """Builds and caches the compiled duration and decode functions of a ``TTSModel``."""

    def __init__(self, model, max_text_length: int, max_mel_frames: int, reference_frames: int,
                 length_scale: float = 1.0, truncate: bool = False) -> None:
        if length_scale <= 0:
            raise ValueError(f"length_scale must be > 0 (speed = 1 / length_scale), got {length_scale}.")
        self.model = model
        self.max_text_length = max_text_length
        self.reference_frames = reference_frames
        self.n_mels = model.dims.n_mels
        self.d_model = model.dims.d_model
        self.length_scale = float(length_scale)
        self.buckets = mel_buckets(max_mel_frames)
        # True: a batch predicted longer than the largest bucket is decoded in it, cut at its end, instead of raising
        # (the trainer's listening: an early duration predictor asks for far too many frames)
        self.truncate = truncate
        self.num_latents = model.dims.conditioning_vectors  # K speaker latents (+ reference tokens)
        self.latents_functions: dict[int, Callable] = {}
        self.duration_functions: dict[tuple[int, int], Callable] = {}
        self.decode_functions: dict[tuple[int, int], Callable] = {}

    # ---- graph bodies ---------------------------------------------------------------------------
    def _latents(self, reference_mel, reference_lengths):
        return tf.cast(self.model.encode_reference(reference_mel, reference_lengths), tf.float32)  # [B, K, d]

    def _durations(self, tokens, token_lengths, length_scales):
        text = self.model.encode_text(tokens, token_lengths)  # [B, T_bucket, d]
        log_durations = self.model.predict_log_durations(text, token_lengths)  # [B, T_bucket]
        durations = durations_from_log(log_durations, token_lengths, length_scales)  # [B, T_bucket] int32
        pad = self.max_text_length - int(tokens.shape[1])
        return (tf.pad(tf.cast(text, tf.float32), [[0, 0], [0, pad], [0, 0]]),  # [B, max_text, d]
                tf.pad(durations, [[0, 0], [0, pad]]))  # [B, max_text]

    def _decode(self, text, durations, latents, frames: int):
        hard = alignment_from_durations(durations, frames)  # [B, frames, max_text]
        mel_lengths = tf.minimum(tf.reduce_sum(durations, axis=1), frames)
        dtype = self.model.compute_dtype
        _, mel_after = self.model.decode(tf.cast(text, dtype), hard, mel_lengths, tf.cast(latents, dtype))
        return {"mel": mel_after, "mel_lengths": mel_lengths, "alignments": hard}

    # ---- compiled functions -------------------------------------------------------------------
    def latents_function(self, batch_size: int) -> Callable:
        if batch_size not in self.latents_functions:
            signature = [tf.TensorSpec([batch_size, self.reference_frames, self.n_mels], tf.float32,
                                       name="reference_mel"),
                         tf.TensorSpec([batch_size], tf.int32, name="reference_lengths")]
            self.latents_functions[batch_size] = tf.function(self._latents, input_signature=signature,
                                                             autograph=False)
        return self.latents_functions[batch_size]

    def latents(self, reference_mels: np.ndarray, reference_lengths: np.ndarray, batch_size: int) -> np.ndarray:
        """Normalised reference mels ``[R, reference_frames, n_mels]`` -> latents ``[R, K, d]``, in batches of
        ``batch_size`` (the one compiled shape; the last batch padded by repeating its first reference)."""
        function = self.latents_function(batch_size)
        out = []
        for start in range(0, len(reference_mels), batch_size):
            rows = list(range(start, min(start + batch_size, len(reference_mels))))
            rows += [rows[0]] * (batch_size - len(rows))
            with first_trace_expected(function):
                latents = function(tf.constant(np.asarray(reference_mels, np.float32)[rows]),
                                   tf.constant(np.asarray(reference_lengths, np.int32)[rows])).numpy()
            out.append(latents[: min(batch_size, len(reference_mels) - start)])
        return np.concatenate(out)  # [R, K, d]

    def durations_function(self, batch_size: int, text_bucket: int) -> Callable:
        key = (batch_size, text_bucket)
        if key not in self.duration_functions:
            signature = [tf.TensorSpec([batch_size, text_bucket], tf.int32, name="tokens"),
                         tf.TensorSpec([batch_size], tf.int32, name="token_lengths"),
                         tf.TensorSpec([batch_size], tf.float32, name="length_scales")]
            self.duration_functions[key] = tf.function(self._durations, input_signature=signature,
                                                       autograph=False)
        return self.duration_functions[key]

    def decode_function(self, batch_size: int, frames: int) -> Callable:
        key = (batch_size, frames)
        if key not in self.decode_functions:
            signature = [tf.TensorSpec([batch_size, self.max_text_length, self.d_model], tf.float32, name="text"),
                         tf.TensorSpec([batch_size, self.max_text_length], tf.int32, name="durations"),
                         tf.TensorSpec([batch_size, self.num_latents, self.d_model], tf.float32, name="latents")]
            self.decode_functions[key] = tf.function(functools.partial(self._decode, frames=frames),
                                                     input_signature=signature, autograph=False)
        return self.decode_functions[key]

    def mel_bucket(self, frames: int, texts: list[str] | None = None) -> int:
        for bucket in self.buckets:
            if bucket >= frames:
                return bucket
        if self.truncate:
            return self.buckets[-1]
        which = f" (texts: {'; '.join(repr(text[:60]) for text in texts)})" if texts else ""
        raise SynthesisLengthError(
            f"The predicted speech is {frames} frames long{which}, more than the largest mel bucket "
            f"(data.max_mel_frames = {self.buckets[-1]}); split the text into shorter pieces (as "
            "Synthesizer.synthesize_long and `myxtts synthesize` do) or raise the speed.")

    def __call__(self, tokens: np.ndarray, token_lengths: np.ndarray, latents: np.ndarray,
                 texts: list[str] | None = None, length_scales: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """tokens ``[B, text_bucket]`` + each item's voice (latents ``[B, K, d]``, see ``latents``) ->
        {"mel": ``[B, mel_bucket, n_mels]`` (normalised), "mel_lengths" ``[B]``, "durations" ``[B, text_bucket]``,
        "alignments" ``[B, mel_bucket, text_bucket]``, "mel_bucket"}."""
        batch_size, text_bucket = tokens.shape
        durations_function = self.durations_function(batch_size, text_bucket)
        scales = np.full([batch_size], self.length_scale, np.float32) if length_scales is None else \
            np.asarray(length_scales, np.float32)  # one per item: requests of different speeds share a batch
        with first_trace_expected(durations_function):
            text, durations = durations_function(tf.constant(tokens), tf.constant(token_lengths),
                                                 tf.constant(scales))
        totals = durations.numpy().sum(axis=1)
        frames = self.mel_bucket(int(totals.max()), texts)
        decode_function = self.decode_function(batch_size, frames)
        with first_trace_expected(decode_function):
            outputs = decode_function(text, durations, tf.constant(latents, tf.float32))
        result = {key: value.numpy() for key, value in outputs.items()}
        result["durations"] = durations.numpy()[:, :text_bucket]
        result["alignments"] = result["alignments"][:, :, :text_bucket]
        result["mel_bucket"] = frames
        return result

    def warm_up(self, batch_size: int, text_buckets: list[int]) -> None:
        """Trace and run once the latents function, every duration function of ``text_buckets`` and every decode
        function (TF's frequent-tracing warning is silenced: one trace per bucket of the same method is the
        design)."""
        ones = tf.ones([batch_size], tf.int32)
        text = tf.zeros([batch_size, self.max_text_length, self.d_model])
        durations = tf.zeros([batch_size, self.max_text_length], tf.int32)
        reference = tf.zeros([batch_size, self.reference_frames, self.n_mels])
        with expected_traces():
            latents = self.latents_function(batch_size)(reference, ones)
            for bucket in text_buckets:
                self.durations_function(batch_size, bucket)(tf.ones([batch_size, bucket], tf.int32), ones,
                                                            tf.ones([batch_size]))
            for frames in self.buckets:
                self.decode_function(batch_size, frames)(text, durations, latents)

    @property
    def functions(self) -> dict[tuple, Callable]:
        """Every compiled function so far, keyed ("latents", batch), ("durations", batch, text bucket), ("decode",
        batch, frames)."""
        return {**{("latents", key): f for key, f in self.latents_functions.items()},
                **{("durations", *key): f for key, f in self.duration_functions.items()},
                **{("decode", *key): f for key, f in self.decode_functions.items()}}

    def tracing_count(self) -> int:
        functions = [*self.latents_functions.values(), *self.duration_functions.values(),
                     *self.decode_functions.values()]
        return sum(function.experimental_get_tracing_count() for function in functions)


"""Free-running decoding compiled into ONE graph per (batch size, text bucket): a ``tf.while_loop`` over
decoder steps with a key/value cache preallocated for the bucket's maximum length.

Per step the decoder sees only the newest r frames and its aligning layer attends to a monotonic window
of the text when ``monotonic=True`` (the Synthesizer's ``monotonic_attention``); the self-attention keys/values of earlier steps
are in the cache and the cross-attention keys/values of the text and of the speaker latents are
projected once before the loop. Every item of the batch stops on its own (never before its minimum
number of steps): when its stop probability exceeds 0.5, when its aligning layer has dwelt on the end of
its text for ``ALIGNMENT_STOP_STEPS`` steps (``alignment_stop=True``, the default), or at its maximum; a
finished item keeps its length and the loop ends when every item is done or the bucket's maximum is reached.

Why the alignment stop: the stop token is one positive frame per utterance and a briefly trained model
often never fires it (the 1,000-sentence espeak benchmark: 0 of 16 items), so each output ran to its maximum
length, babbling past the text. The aligning layer, guided to the diagonal, reliably reaches the last
characters; when its focus sits there the text has been spoken.
"""

from __future__ import annotations

import tensorflow as tf

from myxtts.diagnostics.tf_warning import first_trace_expected
from myxtts.model import XTTSModel

STOP_THRESHOLD = 0.5  # sigmoid(stop_logit) above this ends an item
# Monotonic attention at synthesis: the aligning layer may attend to text positions [focus - BEHIND,
# focus + AHEAD], where focus is the furthest position it has focused on so far (argmax, never moving
# back). A character lasts ~2-3 decoder steps at r = 2, so the window allows normal speed with margin;
# it stops a briefly trained model from skipping, repeating or babbling (as Transformer-TTS / DCTTS do).
WINDOW_BEHIND, WINDOW_AHEAD = 1, 3
# Alignment stop: an item ends once the aligning layer's argmax has stayed on its last END_TOKENS real text
# positions (the final character and the end-of-sequence token) for ALIGNMENT_STOP_STEPS consecutive steps.
# Models attend to the final character (often a full stop) as much as to EOS, hence two positions; three
# steps (6 frames, 70 ms at r = 2 and hop 256) let the last sound finish.
END_TOKENS = 2
ALIGNMENT_STOP_STEPS = 3
# what ended each item (the ``ended_by`` output); ENDED_BY_NAMES[code] is its name in results and reports
# (the parallel decoder's length is the sum of its predicted durations: "durations")
NOT_ENDED, ENDED_BY_TOKEN, ENDED_BY_ALIGNMENT, ENDED_BY_MAXIMUM, ENDED_BY_DURATIONS = 0, 1, 2, 3, 4
ENDED_BY_NAMES = ("not ended", "stop token", "alignment", "maximum length", "durations")
# Prenet dropout at inference (Tacotron 2): the decoder reads its own previous frames through the same
# dropped-out bottleneck it was trained with, instead of a clean one it never saw. Seeded per step
# (stateless), so a synthesis is reproducible. Measured on the demo model (1000 steps, 8 training
# sentences): free-running output varies over time 2.4x more (per-bin std 0.48 -> 1.16; recordings 1.83),
# lengths nearer the recordings', pocketsphinx CER 0.97 -> 0.90; the same direction on 4 other tiny-model
# variants (prenet width 32 / 64, 3 decoder layers, d_model 192): 0.94-0.97 -> 0.85-0.95.
PRENET_SEED = 20261123


def update_end_dwell(dwell: tf.Tensor, attention: tf.Tensor, token_lengths: tf.Tensor) -> tf.Tensor:
    """Consecutive steps each item's aligning attention has spent on the end of its text.

    dwell ``[B]`` int32 (zeros before the first step); attention ``[B, T_text]`` (this step's aligning-layer
    weights over the text); token_lengths ``[B]``. Returns the new dwell ``[B]``: +1 where this step's argmax
    is one of the last ``END_TOKENS`` real positions, else 0.
    """
    focus = tf.argmax(attention, axis=-1, output_type=tf.int32)  # [B]
    at_end = focus >= token_lengths - END_TOKENS
    return tf.where(at_end, dwell + 1, tf.zeros_like(dwell))


def decode_signature(batch_size: int, text_bucket: int, reference_frames: int, n_mels: int) -> list[tf.TensorSpec]:
    """Static input signature of one compiled decoder."""
    return [tf.TensorSpec([batch_size, text_bucket], tf.int32, name="tokens"),
            tf.TensorSpec([batch_size], tf.int32, name="token_lengths"),
            tf.TensorSpec([batch_size, reference_frames, n_mels], tf.float32, name="reference_mel"),
            tf.TensorSpec([batch_size], tf.int32, name="reference_lengths"),
            tf.TensorSpec([batch_size], tf.int32, name="min_steps"),
            tf.TensorSpec([batch_size], tf.int32, name="max_steps")]


class CompiledDecoder:
    """Builds and caches the compiled decoding function of each (batch size, text bucket)."""

    def __init__(self, model: XTTSModel, reference_frames: int, bucket_steps: dict[int, int],
                 monotonic: bool = False, alignment_stop: bool = True, prenet_dropout: bool = True) -> None:
        """``bucket_steps``: text bucket -> decoder steps preallocated in its cache. ``monotonic``: restrict the
        aligning layer to a window that only moves forward (see WINDOW_BEHIND / WINDOW_AHEAD).
        ``alignment_stop``: also end an item when its alignment has reached the end of its text (see
        ``update_end_dwell``); False: only the stop token or the maximum length end it. ``prenet_dropout``: keep
        the prenet's training dropout on while decoding (see PRENET_SEED)."""
        self.model = model
        self.prenet_dropout = prenet_dropout
        self.monotonic = monotonic
        self.alignment_stop = alignment_stop
        self.reference_frames = reference_frames
        self.bucket_steps = dict(bucket_steps)
        self.functions: dict[tuple[int, int], tf.types.experimental.PolymorphicFunction] = {}

    def function(self, batch_size: int, text_bucket: int):
        key = (batch_size, text_bucket)
        if key not in self.functions:
            if text_bucket not in self.bucket_steps:
                raise ValueError(f"text bucket {text_bucket} is not one of {sorted(self.bucket_steps)}")
            steps = self.bucket_steps[text_bucket]
            signature = decode_signature(batch_size, text_bucket, self.reference_frames, self.model.dims.n_mels)
            # autograph off: the loop is an explicit tf.while_loop, nothing else needs converting
            self.functions[key] = tf.function(lambda *args: self._decode(*args, max_bucket_steps=steps),
                                              input_signature=signature, autograph=False, reduce_retracing=False)
        return self.functions[key]

    def tracing_count(self) -> int:
        return sum(f.experimental_get_tracing_count() for f in self.functions.values())

    def __call__(self, tokens, token_lengths, reference_mel, reference_lengths, min_steps, max_steps) -> dict:
        batch_size, text_bucket = tokens.shape
        function = self.function(int(batch_size), int(text_bucket))
        with first_trace_expected(function):
            return function(tokens, token_lengths, reference_mel, reference_lengths, min_steps, max_steps)

    # ---- the graph ------------------------------------------------------------------------------
    def _decode(self, tokens, token_lengths, reference_mel, reference_lengths, min_steps, max_steps, *,
                max_bucket_steps: int) -> dict[str, tf.Tensor]:
        model, dims = self.model, self.model.dims
        batch, text_len = tokens.shape  # static
        r, n_mels = dims.reduction_factor, dims.n_mels
        text = model.encode_text(tokens, token_lengths)  # [B, T_text, d]
        latents = model.encode_reference(reference_mel, reference_lengths)  # [B, K, d]
        memory, memory_mask = model.build_memory(text, token_lengths, latents)  # (text, latents), [B, T_text]
        memory_kv = model.memory_key_values(memory)  # per layer text + speaker (keys, values): once per utterance
        cache = model.initial_cache(batch, max_bucket_steps)  # [layers, 2, B, S, d]
        max_steps = tf.minimum(max_steps, max_bucket_steps)

        frames_array = tf.TensorArray(tf.float32, size=max_bucket_steps, element_shape=[batch, r, n_mels])
        stop_array = tf.TensorArray(tf.float32, size=max_bucket_steps, element_shape=[batch])
        attention_array = tf.TensorArray(tf.float32, size=max_bucket_steps, element_shape=[batch, text_len])

        positions = tf.range(text_len)[None, :]  # [1, T_text]

        def keep_going(step, prev, cache, finished, lengths, ended_by, focus, dwell, frames_array, stop_array,
                       attention_array):
            return tf.logical_and(step < max_bucket_steps, tf.logical_not(tf.reduce_all(finished)))

        def body(step, prev, cache, finished, lengths, ended_by, focus, dwell, frames_array, stop_array,
                 attention_array):
            window = None
            if self.monotonic:  # [B, T_text]: positions focus - BEHIND .. focus + AHEAD
                window = tf.logical_and(positions >= (focus - WINDOW_BEHIND)[:, None],
                                        positions <= (focus + WINDOW_AHEAD)[:, None])
            prenet_seed = tf.stack([tf.cast(step, tf.int64), tf.constant(PRENET_SEED, tf.int64)]) \
                if self.prenet_dropout else None
            frames, stop_logit, cache, attention = model.decoder_step(prev, step, cache, memory_kv, memory_mask,
                                                                      window, prenet_seed)
            # the furthest text position focused on so far (never back, never past the text)
            focus = tf.minimum(tf.maximum(focus, tf.argmax(attention, axis=-1, output_type=tf.int32)),
                               token_lengths - 1)
            dwell = update_end_dwell(dwell, attention, token_lengths)  # [B] steps spent on the end of the text
            produced = step + 1
            allowed = produced >= min_steps  # [B]
            by_token = tf.logical_and(tf.sigmoid(stop_logit) > STOP_THRESHOLD, allowed)
            by_alignment = tf.logical_and(dwell >= ALIGNMENT_STOP_STEPS, allowed) if self.alignment_stop \
                else tf.zeros_like(by_token)
            # why each item ends: the token first, then the alignment, then the maximum length
            reason = tf.where(by_token, ENDED_BY_TOKEN, tf.where(by_alignment, ENDED_BY_ALIGNMENT,
                                                                tf.where(produced >= max_steps, ENDED_BY_MAXIMUM,
                                                                         NOT_ENDED)))
            ends_now = tf.logical_and(tf.logical_not(finished), reason != NOT_ENDED)
            lengths = tf.where(ends_now, produced, lengths)  # a finished item keeps its length and reason
            ended_by = tf.where(ends_now, reason, ended_by)
            finished = tf.logical_or(finished, ends_now)
            return (step + 1, tf.reshape(frames, [batch, r * n_mels]), cache, finished, lengths, ended_by,
                    focus, dwell, frames_array.write(step, frames), stop_array.write(step, tf.sigmoid(stop_logit)),
                    attention_array.write(step, attention[:, :text_len]))

        zeros = tf.zeros([batch], tf.int32)
        initial = (tf.constant(0), tf.zeros([batch, r * n_mels], tf.float32), cache, tf.zeros([batch], tf.bool),
                   zeros, zeros + NOT_ENDED, zeros, zeros, frames_array, stop_array, attention_array)
        steps_run, _, _, _, step_lengths, ended_by, _, _, frames_array, stop_array, attention_array = \
            tf.while_loop(keep_going, body, initial, maximum_iterations=max_bucket_steps)

        # unwritten steps (after an early exit) stack as zeros: every output keeps its static shape
        frames = tf.transpose(frames_array.stack(), [1, 0, 2, 3])  # [B, S, r, n_mels]
        mel_before = tf.reshape(frames, [batch, max_bucket_steps * r, n_mels])  # [B, S*r, n_mels]
        mel_lengths = step_lengths * r  # [B] frames
        frame_mask = tf.sequence_mask(mel_lengths, max_bucket_steps * r)[..., None]  # [B, S*r, 1]
        mel_before = tf.where(frame_mask, mel_before, 0.0)
        mel_after = model.apply_postnet(mel_before, mel_lengths)  # [B, S*r, n_mels]
        step_mask = tf.sequence_mask(step_lengths, max_bucket_steps)  # [B, S]
        return {"mel": tf.cast(mel_after, tf.float32), "mel_before": mel_before, "mel_lengths": mel_lengths,
                "step_lengths": step_lengths,
                "stop_probabilities": tf.where(step_mask, tf.transpose(stop_array.stack()), 0.0),  # [B, S]
                "alignments": tf.where(step_mask[..., None], tf.transpose(attention_array.stack(), [1, 0, 2]),
                                       0.0),  # [B, S, T_text]
                "stopped_by_token": tf.equal(ended_by, ENDED_BY_TOKEN), "ended_by": ended_by,  # [B] ENDED_BY_*
                "steps_run": steps_run}

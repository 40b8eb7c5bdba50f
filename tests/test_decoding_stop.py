"""How free-running decoding ends an utterance: stop token, alignment reaching the end of the text, maximum.

The compiled loop is driven by a scripted model (a test double of ``XTTSModel``'s inference pieces) whose
aligning attention walks the text at a known speed and whose stop token fires at a known step, so each
ending rule can be checked exactly, per item of one batch, inside the real ``CompiledDecoder`` graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import tensorflow as tf

from myxtts.synthesis.decoding import (ALIGNMENT_STOP_STEPS, END_TOKENS, ENDED_BY_NAMES, CompiledDecoder,
                                       update_end_dwell)


@dataclass(frozen=True)
class _Dims:
    reduction_factor: int = 2
    n_mels: int = 4
    decoder_layers: int = 1
    d_model: int = 8


class ScriptedModel:
    """Attention on token ``step // steps_per_token[b]`` (capped at the last real token); stop logit +10 at
    ``stop_step[b]`` (0-based step index; -1: never). Frames carry the step index so their order is visible."""

    def __init__(self, steps_per_token, stop_step):
        self.dims = _Dims()
        self.compute_dtype = tf.float32
        self.steps_per_token = tf.constant(steps_per_token, tf.int32)  # [B]
        self.stop_step = tf.constant(stop_step, tf.int32)  # [B]

    def encode_text(self, tokens, token_lengths):
        return tf.zeros([tokens.shape[0], tokens.shape[1], self.dims.d_model])

    def encode_reference(self, reference_mel, reference_lengths):
        return tf.zeros([reference_mel.shape[0], 1, self.dims.d_model])

    def build_memory(self, text, token_lengths, latents):
        return (text, latents), tf.sequence_mask(token_lengths, text.shape[1])

    def memory_key_values(self, memory):
        return memory

    def initial_cache(self, batch, steps):
        return tf.zeros([1, 2, batch, steps, self.dims.d_model])

    def decoder_step(self, prev, step, cache, memory_kv, memory_mask, alignment_mask=None, prenet_seed=None):
        batch, text_len = memory_mask.shape
        token_lengths = tf.reduce_sum(tf.cast(memory_mask, tf.int32), axis=1)
        position = tf.minimum(step // self.steps_per_token, token_lengths - 1)  # [B]
        attention = tf.one_hot(position, text_len) * 0.9 + tf.cast(memory_mask, tf.float32) * 0.1 / tf.cast(
            token_lengths[:, None], tf.float32)  # [B, T_text]: peaked, rows sum to 1 over the real text
        stop_logit = tf.where(tf.equal(step, self.stop_step), 10.0, -10.0)
        frames = tf.fill([batch, self.dims.reduction_factor, self.dims.n_mels], tf.cast(step, tf.float32))
        return frames, stop_logit, cache, attention

    def apply_postnet(self, mel_before, mel_lengths):
        return mel_before


def _decode(model, token_lengths, min_steps, max_steps, alignment_stop=True, bucket=8, bucket_steps=40):
    batch = len(token_lengths)
    decoder = CompiledDecoder(model, reference_frames=3, bucket_steps={bucket: bucket_steps},
                              alignment_stop=alignment_stop)
    tokens = np.ones([batch, bucket], np.int32)
    out = decoder(tf.constant(tokens), tf.constant(token_lengths, tf.int32), tf.zeros([batch, 3, 4]),
                  tf.ones([batch], tf.int32), tf.constant(min_steps, tf.int32), tf.constant(max_steps, tf.int32))
    assert decoder.tracing_count() == 1
    return {key: value.numpy() for key, value in out.items()}


def test_end_dwell_counts_consecutive_steps_on_the_last_tokens():
    token_lengths = tf.constant([6, 4])
    dwell = tf.zeros([2], tf.int32)
    history = []
    # item 0 walks 3, 4 (end zone: positions 4, 5), 5, back to 2, then 5; item 1 sits on its EOS (3) throughout
    for focus0 in [3, 4, 5, 2, 5]:
        attention = tf.stack([tf.one_hot(focus0, 8), tf.one_hot(3, 8)])
        dwell = update_end_dwell(dwell, attention, token_lengths)
        history.append(dwell.numpy().tolist())
    assert END_TOKENS == 2
    assert history == [[0, 1], [1, 2], [2, 3], [0, 4], [1, 5]]
    # the same inside a graph, as the decoding loop runs it
    compiled = tf.function(update_end_dwell)
    attention = tf.stack([tf.one_hot(5, 8), tf.one_hot(1, 8)])
    np.testing.assert_array_equal(compiled(tf.constant([2, 7]), attention, token_lengths).numpy(), [3, 0])


def test_each_item_ends_by_its_own_rule():
    # item 0: 2 steps per token, 6 tokens -> reaches position 4 (end zone) at step 8; the dwell reaches
    #         ALIGNMENT_STOP_STEPS at step 8 + 2 -> 11 steps; no stop token.
    # item 1: stop token at step 4 (5 steps), well before its alignment ends.
    # item 2: 5 steps per token, 8 tokens: the end zone (position 6) starts at step 30 -> maximum (20) first.
    # item 3: like item 0 but min_steps 15 holds it until step 15.
    model = ScriptedModel(steps_per_token=[2, 2, 5, 2], stop_step=[-1, 4, -1, -1])
    out = _decode(model, token_lengths=[6, 6, 8, 6], min_steps=[1, 1, 1, 15], max_steps=[30, 30, 20, 30])
    first_end_step = 2 * (6 - END_TOKENS)  # step index at which item 0's focus enters the end zone
    expected_alignment_end = first_end_step + ALIGNMENT_STOP_STEPS  # steps produced
    assert out["step_lengths"].tolist() == [expected_alignment_end, 5, 20, 15]
    assert [ENDED_BY_NAMES[c] for c in out["ended_by"]] == ["alignment", "stop token", "maximum length", "alignment"]
    assert out["stopped_by_token"].tolist() == [False, True, False, False]
    np.testing.assert_array_equal(out["mel_lengths"], out["step_lengths"] * 2)
    # frames are the steps in order, zero after each item's end
    mel = out["mel"]  # [B, S*r, n_mels]
    assert mel[0, 2 * expected_alignment_end - 1, 0] == expected_alignment_end - 1
    assert np.all(mel[0, 2 * expected_alignment_end:] == 0)


@pytest.mark.parametrize("alignment_stop", [True, False])
def test_alignment_stop_can_be_turned_off(alignment_stop):
    model = ScriptedModel(steps_per_token=[2], stop_step=[-1])
    out = _decode(model, token_lengths=[6], min_steps=[1], max_steps=[25], alignment_stop=alignment_stop)
    expected = 2 * (6 - END_TOKENS) + ALIGNMENT_STOP_STEPS if alignment_stop else 25
    assert out["step_lengths"].tolist() == [expected]
    assert ENDED_BY_NAMES[out["ended_by"][0]] == ("alignment" if alignment_stop else "maximum length")

"""The parallel model's alignment pieces against plain references, and on real clips of unequal lengths."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from myxtts.model.alignment import (beta_binomial_log_prior, durations_from_alignment, forward_sum_loss,
                                    monotonic_alignment_search)
from myxtts.model.durations import alignment_from_durations, durations_from_log, length_regulate


def viterbi_reference(log_p: np.ndarray) -> np.ndarray:
    """Monotonic alignment search by plain dynamic programming over one item ``[frames, tokens]``."""
    frames, tokens = log_p.shape
    value = np.full((frames, tokens), -np.inf)
    value[0, 0] = log_p[0, 0]
    for t in range(1, frames):
        for n in range(tokens):
            stay = value[t - 1, n]
            move = value[t - 1, n - 1] if n > 0 else -np.inf
            value[t, n] = log_p[t, n] + (move if (move > stay or n == t) else stay)
    path, n = np.zeros((frames, tokens)), tokens - 1
    for t in range(frames - 1, -1, -1):
        path[t, n] = 1
        if t > 0 and n > 0 and (n == t or value[t - 1, n - 1] > value[t - 1, n]):
            n -= 1
    return path


def forward_sum_reference(log_p: np.ndarray, blank: float = -1.0) -> float:
    """CTC negative log-likelihood of the labels 1..N (blank 0) by the textbook recursion, per token."""
    frames, tokens = log_p.shape
    logits = np.concatenate([np.full((frames, 1), blank), log_p], axis=1)
    logits = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    states = 2 * tokens + 1
    label = [0 if s % 2 == 0 else s // 2 + 1 for s in range(states)]
    alpha = np.full((frames, states), -np.inf)
    alpha[0, 0], alpha[0, 1] = logits[0, 0], logits[0, 1]
    for t in range(1, frames):
        for s in range(states):
            terms = [alpha[t - 1, s]] + ([alpha[t - 1, s - 1]] if s > 0 else [])
            if s > 1 and label[s] != 0:
                terms.append(alpha[t - 1, s - 2])
            alpha[t, s] = np.logaddexp.reduce(terms) + logits[t, label[s]]
    return float(-np.logaddexp(alpha[-1, -1], alpha[-1, -2]) / tokens)


def random_log_alignment(seed: int, token_lengths, mel_lengths, text_len: int, frames: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=2.0, size=(len(token_lengths), frames, text_len)).astype(np.float32)
    mask = tf.sequence_mask(token_lengths, text_len)[:, None, :]
    return tf.nn.log_softmax(tf.where(mask, logits, -1e4), axis=-1).numpy()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mas_equals_dynamic_programming_reference(seed):
    token_lengths = np.array([13, 7, 4, 1], np.int32)
    mel_lengths = np.array([41, 23, 9, 5], np.int32)
    log_p = random_log_alignment(seed, token_lengths, mel_lengths, 13, 41)
    compiled = tf.function(monotonic_alignment_search)
    hard = compiled(log_p, token_lengths, mel_lengths).numpy()
    for item, (tokens, frames) in enumerate(zip(token_lengths, mel_lengths)):
        expected = viterbi_reference(log_p[item, :frames, :tokens])
        np.testing.assert_array_equal(hard[item, :frames, :tokens], expected)
        assert hard[item, frames:].sum() == 0 and hard[item, :, tokens:].sum() == 0  # nothing in the padding
    # every real frame on exactly one token; durations add up to the mel lengths, each token >= 1 frame
    durations = durations_from_alignment(hard).numpy()
    np.testing.assert_array_equal(durations.sum(axis=1), mel_lengths)
    for item, tokens in enumerate(token_lengths):
        assert (durations[item, :tokens] >= 1).all()


@pytest.mark.parametrize("in_graph_recursion", [False, True])
def test_forward_sum_loss_equals_reference_recursion(in_graph_recursion):
    """Both ways (TF's CTC kernel; the recursion in plain ops that XLA compiles) equal the textbook recursion; an
    item with fewer frames than tokens gives 0 instead of stopping the training step."""
    token_lengths = np.array([9, 5, 3, 6], np.int32)
    mel_lengths = np.array([30, 12, 3, 4], np.int32)
    log_p = random_log_alignment(7, token_lengths, mel_lengths, 9, 30)
    function = tf.function(forward_sum_loss, jit_compile=in_graph_recursion)
    loss = function(log_p, token_lengths, mel_lengths, in_graph_recursion).numpy()
    for item, (tokens, frames) in enumerate(zip(token_lengths[:3], mel_lengths[:3])):
        assert loss[item] == pytest.approx(forward_sum_reference(log_p[item, :frames, :tokens]), rel=1e-4)
    assert loss[3] == 0.0


@pytest.mark.parametrize("in_graph_recursion", [False, True])
def test_forward_sum_loss_has_gradients_and_ignores_padding(in_graph_recursion):
    token_lengths = np.array([6, 4], np.int32)
    mel_lengths = np.array([20, 11], np.int32)
    log_p = tf.constant(random_log_alignment(3, token_lengths, mel_lengths, 6, 20))
    with tf.GradientTape() as tape:
        tape.watch(log_p)
        loss = tf.reduce_sum(forward_sum_loss(log_p, token_lengths, mel_lengths, in_graph_recursion))
    grad = tape.gradient(loss, log_p).numpy()
    assert np.isfinite(grad).all() and np.abs(grad[0, :20, :6]).sum() > 0
    assert np.abs(grad[1, 11:]).sum() == 0  # frames past the item's length take no gradient


def test_beta_binomial_prior_is_a_distribution_along_the_diagonal():
    token_lengths, mel_lengths = np.array([10, 4], np.int32), np.array([50, 20], np.int32)
    prior = np.exp(beta_binomial_log_prior(token_lengths, mel_lengths, 12, 60).numpy())
    for item, (tokens, frames) in enumerate(zip(token_lengths, mel_lengths)):
        np.testing.assert_allclose(prior[item, :frames, :tokens].sum(axis=1), 1.0, rtol=1e-4)
        peaks = prior[item, :frames, :tokens].argmax(axis=1)
        assert (np.diff(peaks) >= 0).all() and peaks[0] == 0 and peaks[-1] == tokens - 1
        assert prior[item, frames:].max() < 1e-30 and prior[item, :, tokens:].max() < 1e-30


def test_length_regulator_is_exact():
    durations = tf.constant([[2, 1, 3, 0], [1, 1, 0, 0]], tf.int32)
    hard = alignment_from_durations(durations, 8).numpy()
    assert hard.shape == (2, 8, 4)
    np.testing.assert_array_equal(hard[0].argmax(axis=1)[:6], [0, 0, 1, 2, 2, 2])
    assert hard[0, 6:].sum() == 0 and hard[1, 2:].sum() == 0
    text = tf.constant(np.random.default_rng(0).normal(size=(2, 4, 5)), tf.float32)
    frames = length_regulate(hard, text).numpy()
    np.testing.assert_array_equal(frames[0, :6], text.numpy()[0, [0, 0, 1, 2, 2, 2]])
    np.testing.assert_array_equal(frames[1, :2], text.numpy()[1, [0, 1]])
    assert np.abs(frames[0, 6:]).sum() == 0
    # durations from predicted log(1 + d): scaled, rounded, >= 1 per real token, 0 at padding
    log_d = tf.math.log1p(tf.constant([[3.0, 0.2, 7.0, 5.0]]))
    np.testing.assert_array_equal(durations_from_log(log_d, tf.constant([3]), 2.0).numpy(), [[6, 1, 14, 0]])


def _hard_path_function(model):
    """The model's aligner + monotonic alignment search over a batch, compiled: run eagerly, the search's
    per-frame while loops cost ~9 s per pass over the bundled clips."""

    @tf.function(reduce_retracing=True)
    def hard_path(tokens, token_lengths, mel, mel_lengths):
        log_alignment = model.aligner(model.text_encoder.embed(tokens), token_lengths, mel, mel_lengths)
        return monotonic_alignment_search(log_alignment, token_lengths, mel_lengths)

    return hard_path


def _pause_shares(hard_path, batches, vocabulary, mel_stats) -> tuple[float, float]:
    """(share of silent frames among the frames the hard path gives to interior punctuation and the word space
    after it, the same share among all other frames), over the clips that have interior punctuation.

    Silent frames come from the audio alone: a frame whose mel energy is 20 (10 log10) units below the clip's
    loudest frame (leading / trailing silence and pauses, ~10% of LJSpeech frames)."""
    punctuation = {i for i, s in enumerate(vocabulary.symbols) if s in ",.;:!?"}
    space = vocabulary.symbols.index(" ")
    inside, outside = [], []
    for batch in batches:
        tokens, token_lengths, mel, mel_lengths = (batch[k] for k in ("tokens", "token_lengths", "mel", "mel_lengths"))
        hard = hard_path(tokens, token_lengths, mel, mel_lengths).numpy()
        log_mel = mel_stats.denormalize(mel.numpy())  # the real log mel
        for item in range(hard.shape[0]):
            frames, count = int(mel_lengths[item]), int(token_lengths[item])
            path = hard[item, :frames, :count].argmax(axis=1)
            # monotonic, from the first token to the last, every token visited
            assert path[0] == 0 and path[-1] == count - 1 and set(np.diff(path)) <= {0, 1}
            energy = 10 * np.log10(np.exp(log_mel[item, :frames]).sum(axis=-1))
            silent = energy < energy.max() - 20.0
            ids = tokens[item, :count].numpy()
            pause = set()
            for position in range(count - 2):  # not the final punctuation (before <eos>): its pause is the end
                if ids[position] in punctuation:
                    pause.update({position} | ({position + 1} if ids[position + 1] == space else set()))
            on_pause = np.isin(path, list(pause))
            if on_pause.any():
                inside.append(silent[on_pause].mean())
                outside.append(silent[~on_pause].mean())
    assert len(inside) >= 8
    return float(np.mean(inside)), float(np.mean(outside))


@pytest.mark.slow
def test_after_a_few_hundred_steps_pauses_at_punctuation_land_on_silent_frames(prepared_cache):  # ~300 steps
    """The model's own aligner (text embedding + AlignmentEncoder, tiny preset) trained by its forward-sum loss on
    the bundled clips: its hard path puts the silences of the audio on the punctuation that causes them."""
    import keras

    from myxtts.config import config_from_dict
    from myxtts.data.pipeline import InputPipeline
    from myxtts.model import build_model
    from myxtts.text import Vocabulary

    raw = prepared_cache.to_dict()
    raw["data"].update(corpus_path=str(prepared_cache.corpus_path), cache_dir=str(prepared_cache.cache_dir))
    raw["model"] = {"preset": "tiny", "decoder": "parallel", "reduction_factor": 1}
    cfg = config_from_dict(raw, base_dir=prepared_cache.base_dir)
    vocabulary = Vocabulary.load(cfg.cache_dir / "vocab.json")
    keras.utils.set_random_seed(3)
    model = build_model(cfg, len(vocabulary))
    pipeline = InputPipeline(cfg, "train")
    batches = list(pipeline.dataset(repeat=False))
    assert len({tuple(b["mel"].shape) for b in batches}) >= 3  # unequal lengths, several buckets
    hard_path = _hard_path_function(model)
    untrained = _pause_shares(hard_path, batches, vocabulary, pipeline.mel_stats)

    variables = model.text_encoder.embedding.trainable_variables + model.aligner.trainable_variables
    optimizer = keras.optimizers.Adam(0.003)

    @tf.function(reduce_retracing=True)
    def step(tokens, token_lengths, mel, mel_lengths):
        with tf.GradientTape() as tape:
            log_alignment = model.aligner(model.text_encoder.embed(tokens), token_lengths, mel, mel_lengths)
            loss = tf.reduce_mean(forward_sum_loss(log_alignment, token_lengths, mel_lengths))
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    losses = [float(step(b["tokens"], b["token_lengths"], b["mel"], b["mel_lengths"]))
              for _ in range(300 // len(batches) + 1) for b in batches]
    trained = _pause_shares(hard_path, batches, vocabulary, pipeline.mel_stats)
    assert np.mean(losses[-len(batches):]) < 0.6 * np.mean(losses[:len(batches)])
    # measured: untrained (the prior's diagonal) ~0.39 vs 0.10; after 300 steps 0.58-0.62 vs 0.06-0.07 (5 seeds)
    assert trained[0] >= 0.5 and trained[0] >= 5 * trained[1], (untrained, trained)
    assert not (untrained[0] >= 0.5 and untrained[0] >= 5 * untrained[1]), untrained  # the measure can fail

"""Alignment learned online and used as durations (Badlani et al. 2021, "One TTS Alignment To Rule Them All").

- ``AlignmentEncoder``: small convolutional encoders of the text embedding and of the (normalised) target mel;
  the soft alignment of each mel frame over the text is a softmax of minus their scaled squared L2 distance,
  times a static beta-binomial prior (``beta_binomial_log_prior``) that favours the diagonal while the encoders
  are still random.
- ``forward_sum_loss``: the likelihood of every monotonic path that visits each token in order (CTC with the
  token positions as labels; the blank is a constant column that never wins), per token.
- ``monotonic_alignment_search``: the single most likely monotonic path (Viterbi over the soft log-probs), as
  a ``tf.while_loop`` over frames vectorised over batch and text, so it runs inside the compiled train step
  with static shapes: no host round trip, no retrace.
- ``durations_from_alignment``: frames per token (the hard alignment's column sums): they add up to each mel
  length exactly, and every real token gets at least one frame.
- ``binarization_loss``: pulls the soft alignment towards the hard one (switched on after a warm-up).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from myxtts.model.layers import BuiltByFirstCall, length_mask, static_or_dynamic_dim

ALIGNER_CHANNELS = 80  # width of the space the text and mel encodings are compared in
ALIGNER_TEMPERATURE = 0.0005  # logits = -temperature * squared L2 distance (FastPitch / RAD-TTS)
PRIOR_SCALING = 1.0  # beta-binomial prior: alpha = scaling * (frame + 1), beta = scaling * (frames - frame)
BLANK_LOG_PROB = -1.0  # CTC blank column of the forward-sum loss (a constant the real tokens soon beat)
MASKED = -1e4  # log-prob of a padded text position: never chosen, and finite (no NaN in gradients)


class AlignmentEncoder(BuiltByFirstCall, keras.layers.Layer):
    """(text embedding ``[B, T_text, d]``, normalised mel ``[B, T_mel, n_mels]``) -> soft log-alignment
    ``[B, T_mel, T_text]`` (log-probabilities over real text positions for each frame, prior included)."""

    def __init__(self, d_model: int, n_mels: int, **kwargs):
        # float32 whatever the compute policy (mixed precision): distances, log-softmax and MAS need its range
        super().__init__(autocast=False, dtype="float32", **kwargs)

        def conv(*args, **conv_kwargs):
            return keras.layers.Conv1D(*args, dtype="float32", **conv_kwargs)

        self.text_convs = [conv(2 * d_model, 3, padding="same", activation="relu", name="text_conv_0"),
                           conv(ALIGNER_CHANNELS, 1, name="text_conv_1")]
        self.mel_convs = [conv(2 * ALIGNER_CHANNELS, 3, padding="same", activation="relu", name="mel_conv_0"),
                          conv(ALIGNER_CHANNELS, 1, activation="relu", name="mel_conv_1"),
                          conv(ALIGNER_CHANNELS, 1, name="mel_conv_2")]

    def call(self, text_embedding, token_lengths, mel, mel_lengths):
        text_len, frames = static_or_dynamic_dim(text_embedding, 1), static_or_dynamic_dim(mel, 1)
        text_mask = length_mask(token_lengths, text_len)  # [B, T_text]
        mel_mask = length_mask(mel_lengths, frames)  # [B, T_mel]
        keys = tf.cast(text_embedding, tf.float32) * tf.cast(text_mask[..., None], tf.float32)
        for layer in self.text_convs:
            keys = layer(keys)  # -> [B, T_text, C]
        queries = tf.where(mel_mask[..., None], tf.cast(mel, tf.float32), 0.0)
        for layer in self.mel_convs:
            queries = layer(queries)  # -> [B, T_mel, C]
        # ||q - k||^2 = ||q||^2 - 2 q.k + ||k||^2, as one matmul instead of a [B, T_mel, T_text, C] tensor
        distance = (tf.reduce_sum(tf.square(queries), -1)[:, :, None]
                    - 2.0 * tf.matmul(queries, keys, transpose_b=True)
                    + tf.reduce_sum(tf.square(keys), -1)[:, None, :])  # [B, T_mel, T_text]
        logits = tf.where(text_mask[:, None, :], -ALIGNER_TEMPERATURE * distance, MASKED)
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        log_probs = log_probs + beta_binomial_log_prior(token_lengths, mel_lengths, text_len, frames)
        # renormalised over real text: the soft alignment of each frame is a distribution
        return tf.nn.log_softmax(tf.where(text_mask[:, None, :], log_probs, MASKED), axis=-1)


def beta_binomial_log_prior(token_lengths, mel_lengths, text_len: int, frames: int,
                            scaling: float = PRIOR_SCALING) -> tf.Tensor:
    """log P(token n | frame t) ``[B, frames, text_len]`` under a beta-binomial over the N real tokens whose mean
    moves along the diagonal: n ~ BetaBinomial(N - 1, scaling (t + 1), scaling (T - t)). Zero (log 0 -> MASKED)
    outside the real (frame, token) rectangle. Pure TF ops: shapes are static in the compiled step."""
    n = tf.cast(token_lengths, tf.float32)[:, None, None]  # [B, 1, 1]
    t_total = tf.cast(mel_lengths, tf.float32)[:, None, None]
    k = tf.range(text_len, dtype=tf.float32)[None, None, :]  # [1, 1, T_text]
    t = tf.range(frames, dtype=tf.float32)[None, :, None]  # [1, T_mel, 1]
    alpha, beta = scaling * (t + 1.0), scaling * tf.maximum(t_total - t, 1.0)
    trials = n - 1.0
    valid = (k <= trials) & (t < t_total)
    k_safe, trials_safe = tf.minimum(k, trials), tf.maximum(trials, 0.0)

    def log_beta(a, b):
        return tf.math.lgamma(a) + tf.math.lgamma(b) - tf.math.lgamma(a + b)

    log_choose = (tf.math.lgamma(trials_safe + 1.0) - tf.math.lgamma(k_safe + 1.0)
                  - tf.math.lgamma(trials_safe - k_safe + 1.0))
    log_pmf = log_choose + log_beta(k_safe + alpha, trials_safe - k_safe + beta) - log_beta(alpha, beta)
    return tf.where(valid, log_pmf, MASKED)


def forward_sum_loss(log_alignment, token_lengths, mel_lengths, in_graph_recursion: bool = False) -> tf.Tensor:
    """Per-item negative log-likelihood of all monotonic paths, divided by the item's token count ``[B]``.

    log_alignment ``[B, T_mel, T_text]``: log-probs over text per frame. A blank class of constant log-prob
    ``BLANK_LOG_PROB`` is prepended and the labels are the token positions 1..N in order, so CTC sums exactly
    the paths that visit every token once, in order (with blank frames allowed, which the model learns not to
    use). An infeasible item (fewer frames than tokens) gives 0, not Inf.

    ``in_graph_recursion``: the CTC forward recursion as a ``tf.while_loop`` of plain ops instead of TF's C++ CTC
    kernel, which XLA cannot compile (``training.enable_xla_compilation``); the same value.
    """
    batch_shape = tf.shape(log_alignment)
    text_len = static_or_dynamic_dim(log_alignment, 2)
    blank = tf.fill([batch_shape[0], batch_shape[1], 1], BLANK_LOG_PROB)
    logits = tf.concat([blank, log_alignment], axis=-1)  # [B, T_mel, 1 + T_text]; class 0 = blank
    mask = tf.concat([tf.ones_like(blank, tf.bool), length_mask(token_lengths, text_len)[:, None, :]
                      & tf.ones_like(log_alignment, tf.bool)], axis=-1)
    logits = tf.nn.log_softmax(tf.where(mask, logits, MASKED), axis=-1)
    feasible = mel_lengths >= token_lengths  # [B]
    if in_graph_recursion:
        nll = _ctc_forward_recursion(logits, token_lengths, mel_lengths)
    else:
        # an infeasible item keeps only its first label (the kernel raises on it, and on an empty one); its loss is
        # zeroed below
        real = length_mask(token_lengths, text_len) & (feasible[:, None] | (tf.range(text_len) == 0)[None, :])
        labels = tf.range(1, text_len + 1, dtype=tf.int32)[None, :] * tf.cast(real, tf.int32)  # 0 = padding
        # sparse labels select TF's C++ CTC kernel (its dense-label path is a much slower graph loop)
        nll = tf.nn.ctc_loss(labels=tf.sparse.from_dense(labels), logits=logits, label_length=None,
                             logit_length=mel_lengths, logits_time_major=False, blank_index=0)  # [B]
    nll = tf.where(tf.math.is_finite(nll) & feasible, nll, 0.0)
    return nll / tf.maximum(tf.cast(token_lengths, tf.float32), 1.0)


def _ctc_forward_recursion(logits, token_lengths, mel_lengths) -> tf.Tensor:
    """CTC negative log-likelihood ``[B]`` of the labels 1..N over ``logits`` ``[B, T_mel, 1 + T_text]`` (log-probs,
    class 0 the blank): alpha over the 2N + 1 states (blank, token 1, blank, ..., token N, blank), a
    ``tf.while_loop`` over frames vectorised over batch and states; frames past an item's length leave it as it
    was. Tokens are all distinct, so a token state may also come from two states back."""
    frames, text_len = static_or_dynamic_dim(logits, 1), static_or_dynamic_dim(logits, 2) - 1
    states = 2 * text_len + 1
    label = tf.where(tf.range(states) % 2 == 0, 0, tf.range(states) // 2 + 1)  # [S] class of each state
    emissions = tf.gather(tf.transpose(logits, [1, 0, 2]), label, axis=2)  # [T_mel, B, S]
    impossible = tf.constant(-1e30, tf.float32)
    skip_allowed = (tf.range(states) % 2 == 1) & (tf.range(states) > 1)  # [S]: token states after the first
    first = tf.where(tf.range(states)[None, :] < 2, emissions[0], impossible)  # [B, S]

    def step(t, alpha):
        stay = alpha
        advance = tf.pad(alpha[:, :-1], [[0, 0], [1, 0]], constant_values=-1e30)
        skip = tf.where(skip_allowed[None, :], tf.pad(alpha[:, :-2], [[0, 0], [2, 0]], constant_values=-1e30),
                        impossible)
        new_alpha = tf.reduce_logsumexp(tf.stack([stay, advance, skip]), axis=0) + emissions[t]
        return t + 1, tf.where((t < mel_lengths)[:, None], tf.maximum(new_alpha, impossible), alpha)

    # a fixed iteration bound: XLA sizes the gradient's accumulators by it
    _, alpha = tf.while_loop(lambda t, _: t < frames, step, (tf.constant(1), first),
                             maximum_iterations=frames if isinstance(frames, int) else None)
    last = 2 * token_lengths  # [B]: the final blank state; the last token's state is just before it
    final = tf.stack([tf.gather(alpha, last, batch_dims=1), tf.gather(alpha, tf.maximum(last - 1, 0), batch_dims=1)])
    return -tf.reduce_logsumexp(final, axis=0)


def monotonic_alignment_search(log_alignment, token_lengths, mel_lengths) -> tf.Tensor:
    """The most likely monotonic alignment ``[B, T_mel, T_text]`` (float32 0/1): every real frame on exactly one
    token, token indices non-decreasing by steps of 0 or 1, from token 0 at frame 0 to token N-1 at frame T-1.

    Viterbi: value[t, n] = logp[t, n] + max(value[t-1, n], value[t-1, n-1]); ties stay on the same token (the
    move is taken only when strictly better, or forced when n == t). Then a backward pass from (T-1, N-1).
    Both passes are ``tf.while_loop`` s over frames, vectorised over batch and text.
    """
    log_alignment = tf.stop_gradient(tf.cast(log_alignment, tf.float32))
    frames = static_or_dynamic_dim(log_alignment, 1)
    text_len = static_or_dynamic_dim(log_alignment, 2)
    text_mask = length_mask(token_lengths, text_len)  # [B, T_text]
    log_p = tf.where(text_mask[:, None, :], log_alignment, -1e9)  # [B, T_mel, T_text]
    by_frame = tf.transpose(log_p, [1, 0, 2])  # [T_mel, B, T_text]
    positions = tf.range(text_len)[None, :]  # [1, T_text]
    unreachable = tf.constant(-1e30, tf.float32)

    first = tf.where(tf.equal(positions, 0), by_frame[0], unreachable)  # [B, T_text]
    moves = tf.TensorArray(tf.bool, size=frames, element_shape=first.shape)
    moves = moves.write(0, tf.zeros_like(first, tf.bool))

    def forward(t, value, moves):
        shifted = tf.pad(value[:, :-1], [[0, 0], [1, 0]], constant_values=-1e30)  # value[t-1, n-1]
        take_move = (shifted > value) | tf.equal(positions, t)
        best = tf.where(take_move, shifted, value)
        new_value = best + by_frame[t]
        active = (t < mel_lengths)[:, None]  # frames past an item's end leave its values as they were
        return t + 1, tf.where(active, new_value, value), moves.write(t, take_move & active)

    _, _, moves = tf.while_loop(lambda t, *_: t < frames, forward, (tf.constant(1), first, moves))
    moves = moves.stack()  # [T_mel, B, T_text]

    path = tf.TensorArray(tf.float32, size=frames, element_shape=first.shape)

    def backward(t, index, path):
        active = t < mel_lengths  # [B]
        one_hot = tf.one_hot(index, text_len, dtype=tf.float32) * tf.cast(active, tf.float32)[:, None]
        moved = tf.reduce_any(moves[t] & tf.cast(one_hot, tf.bool), axis=-1)  # [B]: came from index - 1
        step_back = active & moved & (t > 0)
        return t - 1, index - tf.cast(step_back, tf.int32), path.write(t, one_hot)

    _, _, path = tf.while_loop(lambda t, *_: t >= 0, backward,
                               (tf.constant(frames - 1) if isinstance(frames, int) else frames - 1,
                                tf.maximum(token_lengths - 1, 0), path))
    return tf.transpose(path.stack(), [1, 0, 2])  # [B, T_mel, T_text]


def durations_from_alignment(hard_alignment) -> tf.Tensor:
    """Frames per token ``[B, T_text]`` int32 (sum over frames of the hard alignment)."""
    return tf.cast(tf.round(tf.reduce_sum(hard_alignment, axis=1)), tf.int32)


def binarization_loss(hard_alignment, log_alignment) -> tf.Tensor:
    """Per-item sum over the hard path of -log soft alignment ``[B]`` (KL(hard || soft) up to a constant);
    divide by the frame count for a per-frame value."""
    return -tf.reduce_sum(hard_alignment * tf.maximum(log_alignment, -1e4), axis=[1, 2])

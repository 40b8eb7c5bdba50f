"""Building blocks: positions, stateless dropout, attention with a key/value cache, transformer blocks.

Conventions used by every layer here:
- dimensions come from ``static_or_dynamic_dim``: the static ``.shape[axis]`` whenever it is known (always
  in the trainer's compiled steps, whose input_signatures are fully static, so their traces keep fully
  static shapes), ``tf.shape(x)[axis]`` only when a generic function traces with a ``None`` dim
  (``reduce_retracing=True``, a signature-less baseline, jit_compile over None dims); the batch dim is
  reshaped with -1;
- masks are booleans built from true lengths (``True`` = a real position);
- attention logits and softmax run in float32 whatever the compute dtype (float16 overflows at -1e9);
- dropout is *stateless*: each site folds its own id into a ``seed`` tensor ``[2]`` given by the caller
  (the trainer derives it from the checkpointed step counter), so a resumed run draws the same masks.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import tensorflow as tf

NEG_INF = -1e9  # added to masked attention logits (in float32)


class BuiltByFirstCall:
    """Mixin (first base) for a Keras layer or model whose state is sublayers and weights created in ``__init__``.

    Without a ``build`` of its own, Keras builds such a layer by tracing its ``call`` symbolically in a scratch graph
    before the first real call, and again for every nested layer of this kind inside that trace: most of the cost of
    building a model, paid again by every process that loads one. Here ``build`` marks the layer built and its first
    real call builds each sublayer with the real shapes; variables, their paths and checkpoint keys are the same.
    """

    def build(self, input_shape) -> None:
        pass


def all_visible() -> tf.Tensor:
    """Attention mask ``[1, 1, 1, 1]`` for keys that are all real (the speaker latents)."""
    return tf.ones([1, 1, 1, 1], tf.bool)


def sinusoid_table(max_positions: int, d_model: int) -> np.ndarray:
    """Transformer sinusoidal position table ``[max_positions, d_model]`` (float32)."""
    positions = np.arange(max_positions, dtype=np.float64)[:, None]
    rates = np.exp(-math.log(10000.0) * (np.arange(0, d_model, 2, dtype=np.float64) / d_model))
    table = np.zeros((max_positions, d_model), dtype=np.float64)
    table[:, 0::2] = np.sin(positions * rates)
    table[:, 1::2] = np.cos(positions * rates[: d_model // 2])
    return table.astype(np.float32)


def static_or_dynamic_dim(x: tf.Tensor, axis: int) -> int | tf.Tensor:
    """``x.shape[axis]`` as a Python int when static, else the scalar int32 tensor ``tf.shape(x)[axis]``.

    Static dims keep the compiled steps' graphs fully static (no Shape ops, shapes known to XLA); the
    dynamic fallback only lets functions traced with a ``None`` dim work at all.
    """
    dim = x.shape[axis]
    return int(dim) if dim is not None else tf.shape(x)[axis]


def length_mask(lengths: tf.Tensor, max_length: int) -> tf.Tensor:
    """``[batch]`` true lengths -> ``[batch, max_length]`` bool, True on real positions."""
    return tf.sequence_mask(lengths, maxlen=max_length)


def stateless_dropout(x: tf.Tensor, rate: float, training: bool, seed: tf.Tensor | None, site: int,
                      shared_over_batch: bool = False) -> tf.Tensor:
    """Inverted dropout whose mask depends only on (seed, site); identity when not training.

    ``seed`` is an int ``[2]`` tensor; ``None`` falls back to stateful ``tf.nn.dropout`` (not resumable).
    ``shared_over_batch``: one mask for every item (its batch dimension 1), so an item's result does not depend on
    the batch it is in (synthesis).
    """
    if not training or rate <= 0.0:
        return x
    if seed is None:
        return tf.nn.dropout(x, rate=rate)
    site_seed = tf.random.experimental.stateless_fold_in(tf.cast(seed, tf.int64), site)
    if shared_over_batch:
        keep = tf.random.stateless_uniform([1, *x.shape.as_list()[1:]], seed=site_seed) >= rate
        return tf.where(keep, x / tf.cast(1.0 - rate, x.dtype), tf.zeros_like(x))
    # static shape inside compiled steps; the dynamic fallback only serves eager calls with an unknown batch
    shape = x.shape.as_list() if x.shape.is_fully_defined() else tf.shape(x)
    keep = tf.random.stateless_uniform(shape, seed=site_seed) >= rate
    return tf.where(keep, x / tf.cast(1.0 - rate, x.dtype), tf.zeros_like(x))


class SiteCounter:
    """Hands out distinct dropout site ids in construction order (same order in every process)."""

    def __init__(self) -> None:
        self._next = 0

    def __call__(self) -> int:
        self._next += 1
        return self._next


class MultiHeadAttention(BuiltByFirstCall, keras.layers.Layer):
    """Multi-head scaled dot-product attention that returns its weights and supports a KV cache."""

    def __init__(self, d_model: int, num_heads: int, dropout: float, sites: SiteCounter, zero_output: bool = False,
                 **kwargs):
        """``zero_output``: the output projection starts at zero, so a residual branch begins as no change (a module a
        warm start adds to a trained model)."""
        super().__init__(**kwargs)
        self.d_model, self.num_heads, self.dropout_rate = d_model, num_heads, dropout
        self.head_dim = d_model // num_heads
        self.query_proj = keras.layers.Dense(d_model, name="query")
        self.key_proj = keras.layers.Dense(d_model, name="key")
        self.value_proj = keras.layers.Dense(d_model, name="value")
        self.output_proj = keras.layers.Dense(d_model, kernel_initializer="zeros" if zero_output else "glorot_uniform",
                                              name="output")
        self.site = sites()

    def _split(self, x: tf.Tensor) -> tf.Tensor:
        # [batch, time, d_model] -> [batch, heads, time, head_dim]
        time = static_or_dynamic_dim(x, 1)
        x = tf.reshape(x, [-1, time, self.num_heads, self.head_dim])
        return tf.transpose(x, [0, 2, 1, 3])

    def project_key_value(self, source: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Keys and values ``[batch, time, d_model]`` of a source sequence (cacheable)."""
        return self.key_proj(source), self.value_proj(source)

    def attend(self, query_in: tf.Tensor, keys: tf.Tensor, values: tf.Tensor, mask: tf.Tensor,
               training: bool = False, seed: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        """Attend ``query_in [B, Tq, d]`` over projected ``keys``/``values`` ``[B, Tk, d]``.

        ``mask`` broadcasts to ``[B, heads, Tq, Tk]`` (True = may attend). Returns the output
        ``[B, Tq, d]`` and the weights ``[B, heads, Tq, Tk]`` (float32).
        """
        q = self._split(self.query_proj(query_in))  # [B, H, Tq, hd]
        k, v = self._split(keys), self._split(values)  # [B, H, Tk, hd]
        # scale q before the matmul and mask with where(), not "matmul * scale + mask": with static shapes
        # grappler's oneDNN remapper fuses that pattern into _MklFusedBatchMatMulV2, which oneDNN runs with
        # its slow reference kernel (docs/training.md, "CPU performance")
        q = tf.cast(q, tf.float32) * (1.0 / math.sqrt(self.head_dim))
        logits = tf.matmul(q, tf.cast(k, tf.float32), transpose_b=True)  # [B, H, Tq, Tk]
        logits = tf.where(mask, logits, NEG_INF)
        weights = tf.nn.softmax(logits, axis=-1)  # [B, H, Tq, Tk] float32
        dropped = stateless_dropout(weights, self.dropout_rate, training, seed, self.site)
        context = tf.matmul(tf.cast(dropped, v.dtype), v)  # [B, H, Tq, hd]
        tq = static_or_dynamic_dim(context, 2)
        context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [-1, tq, self.d_model])
        return self.output_proj(context), weights

    def call(self, query_in, source, mask, training=False, seed=None):
        keys, values = self.project_key_value(source)
        return self.attend(query_in, keys, values, mask, training=training, seed=seed)


class FeedForward(BuiltByFirstCall, keras.layers.Layer):
    """Position-wise (``kernel_size`` 1: two dense layers) or convolutional (FastSpeech / FastPitch's FFT block:
    two 'same' convolutions over ``kernel_size`` neighbours, so each token also reads its neighbours)."""

    def __init__(self, d_model: int, ff_dim: int, dropout: float, sites: SiteCounter, kernel_size: int = 1,
                 **kwargs):
        super().__init__(**kwargs)
        self.kernel_size = kernel_size
        if kernel_size == 1:
            self.inner = keras.layers.Dense(ff_dim, activation="gelu", name="inner")
            self.outer = keras.layers.Dense(d_model, name="outer")
        else:
            self.inner = keras.layers.Conv1D(ff_dim, kernel_size, padding="same", activation="gelu", name="inner")
            self.outer = keras.layers.Conv1D(d_model, kernel_size, padding="same", name="outer")
        self.rate, self.site = dropout, sites()

    def call(self, x, sequence_mask=None, training=False, seed=None):
        """x ``[B, T, d]``; sequence_mask ``[B, T, 1]`` (1 at real positions): a convolution must not read padding,
        so its inputs are zeroed there (None: every position is real)."""
        if self.kernel_size == 1 or sequence_mask is None:
            return self.outer(stateless_dropout(self.inner(x), self.rate, training, seed, self.site))
        mask = tf.cast(sequence_mask, x.dtype)
        hidden = stateless_dropout(self.inner(x * mask), self.rate, training, seed, self.site)
        return self.outer(hidden * mask)


class TransformerBlock(BuiltByFirstCall, keras.layers.Layer):
    """Pre-norm block: self-attention (optionally causal), optional attention over the speaker latents,
    feed-forward."""

    def __init__(self, d_model: int, num_heads: int, ff_dim: int, dropout: float, sites: SiteCounter,
                 speaker_attention: bool = False, ff_kernel: int = 1, **kwargs):
        super().__init__(**kwargs)
        self.self_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="self_norm")
        self.self_attention = MultiHeadAttention(d_model, num_heads, dropout, sites, name="self_attention")
        self.has_speaker = speaker_attention
        if speaker_attention:
            # its own softmax over the speaker latents, beside the self-attention's
            self.speaker_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="speaker_norm")
            self.speaker_attention = MultiHeadAttention(d_model, num_heads, dropout, sites, name="speaker_attention")
        self.ff_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="ff_norm")
        self.feed_forward = FeedForward(d_model, ff_dim, dropout, sites, kernel_size=ff_kernel, name="feed_forward")
        self.rate, self.site = dropout, sites()

    def _residual(self, x, update, training, seed, offset):
        return x + stateless_dropout(update, self.rate, training, seed, self.site * 16 + offset)

    def call(self, x, self_mask, speaker=None, sequence_mask=None, training=False, seed=None):
        """x ``[B, T, d]``; self_mask ``[B or 1, 1, T or 1, T]``; speaker ``[B, K, d]`` (speaker latents, all real);
        sequence_mask ``[B, T, 1]`` (what a convolutional feed-forward may read) -> ``[B, T, d]``."""
        h = self.self_norm(x)
        update, _ = self.self_attention(h, h, self_mask, training=training, seed=seed)
        x = self._residual(x, update, training, seed, 1)
        if self.has_speaker:
            update, _ = self.speaker_attention(self.speaker_norm(x), speaker, all_visible(), training=training,
                                               seed=seed)
            x = self._residual(x, update, training, seed, 4)
        update = self.feed_forward(self.ff_norm(x), sequence_mask, training=training, seed=seed)
        return self._residual(x, update, training, seed, 3)

    def step(self, x, step_index, layer_cache, speaker_kv=None):
        """One causal decoding position (inference, no dropout).

        x ``[B, 1, d]``; step_index scalar int32; layer_cache ``[2, B, S, d]`` (keys, values of every earlier
        position; S = max steps); speaker_kv: (keys, values) ``[B, K, d]`` of the speaker attention, projected once
        per utterance. Returns (output ``[B, 1, d]``, new layer_cache).
        """
        h = self.self_norm(x)
        new_key, new_value = self.self_attention.project_key_value(h)  # [B, 1, d]
        max_steps = static_or_dynamic_dim(layer_cache, 2)
        # write position step_index with a one-hot blend: no dynamic slicing, XLA-friendly
        slot = tf.reshape(tf.one_hot(step_index, max_steps, dtype=layer_cache.dtype), [1, max_steps, 1])
        keys = layer_cache[0] * (1.0 - slot) + tf.cast(new_key, layer_cache.dtype) * slot  # [B, S, d]
        values = layer_cache[1] * (1.0 - slot) + tf.cast(new_value, layer_cache.dtype) * slot
        visible = tf.reshape(tf.range(max_steps) <= step_index, [1, 1, 1, max_steps])
        update, _ = self.self_attention.attend(h, tf.cast(keys, h.dtype), tf.cast(values, h.dtype), visible)
        x = x + update
        if self.has_speaker:
            update, _ = self.speaker_attention.attend(self.speaker_norm(x), speaker_kv[0], speaker_kv[1], all_visible())
            x = x + update
        x = x + self.feed_forward(self.ff_norm(x))
        return x, tf.stack([keys, values])


def track_listed_layers(root: keras.layers.Layer) -> None:
    """Make layers held in Python lists (``self.blocks = [...]``) checkpoint children.

    Keras 3 tracks them for ``.variables`` but not for ``tf.train.Checkpoint``: without this, a
    checkpoint silently saves only the directly assigned layers (a small part of the model's variables) and a
    restore leaves every transformer block at its random initialisation. Each item becomes the child
    ``<attribute>_<index>``.
    """
    for layer in root._flatten_layers(include_self=True, recursive=True):
        for attribute, value in list(vars(layer).items()):
            if attribute.startswith("_") or not isinstance(value, (list, tuple)):
                continue
            for index, item in enumerate(value):
                if isinstance(item, keras.layers.Layer):
                    layer._track_trackable(item, name=f"{attribute}_{index}", overwrite=True)

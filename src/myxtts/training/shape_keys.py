"""The static shape identity of a batch: what the compiled train / validate steps are keyed by and named after."""

from __future__ import annotations

import tensorflow as tf

ShapeKey = tuple[tuple[int, ...], ...]


class UnknownShapeError(ValueError):
    """A batch whose shape no compiled step was built for (it would trace a new graph)."""


def shape_key(batch_or_spec: dict, stacked: bool = False) -> ShapeKey:
    """The static shape identity of a batch (or a signature): what the step functions are keyed by.
    ``stacked``: a block of K batches ``[K, batch, ...]`` (steps_per_execution), keyed by its batch shape."""
    return tuple(tuple(batch_or_spec[k].shape.as_list()[1 if stacked else 0:])
                 for k in ("tokens", "mel", "reference_mel"))


def unstack_spec(spec: dict) -> dict:
    """The batch signature inside a block signature ``[K, batch, ...]``."""
    return {key: tf.TensorSpec(value.shape[1:], value.dtype) for key, value in spec.items()}


def describe_key(key: ShapeKey) -> str:
    (batch, text), (_, frames, _), _ = key[0], key[1], key[2]
    return f"batch {batch} x text {text} x mel {frames}"


def warmup_name(kind: str, key: ShapeKey) -> str:
    """The warm-up timing key of the ``kind`` ("train" / "validate") step of one batch shape."""
    return f"{kind}_step[{describe_key(key)}]"

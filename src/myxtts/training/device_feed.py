"""Batches for the compiled steps: from the checkpointed host iterator, copied to the accelerator one step ahead.

Why not ``tf.data.experimental.prefetch_to_device``: it ends the pipeline in a generator-backed dataset,
and saving such an iterator raises ``UnimplementedError: GeneratorDataset does not support
checkpointing`` at the first checkpoint. Here the iterator that is checkpointed is the host pipeline's;
``DeviceFeed`` copies its next batch to the accelerator right after the current step is dispatched (and
after a checkpoint, if one is due), so the copy overlaps the device's work and a checkpoint never has a
batch in flight: the saved iterator position is exactly the next batch to train on.

The copy is asynchronous on an accelerator (an eager ``tf.identity`` placed on the device); with no
device (CPU training, or ``data.prefetch_to_gpu: false``) batches are handed over as the iterator yields
them.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import tensorflow as tf


def default_device(prefetch_to_gpu: bool) -> str | None:
    """The accelerator batches are copied to: the first GPU when ``data.prefetch_to_gpu`` and one exists."""
    return "/GPU:0" if prefetch_to_gpu and tf.config.list_logical_devices("GPU") else None


class DeviceFeed:
    """``take()`` the next batch (on ``device`` when one is given); ``refill()`` copies the following one
    ahead, to be called once the current step is dispatched and any checkpoint is written."""

    def __init__(self, iterator: Iterator[dict], device: str | None,
                 fetch: Callable[[Iterator[dict]], dict] | None = None) -> None:
        """``fetch(iterator)`` pulls one host batch (the trainer's timer measures the input wait through it)."""
        self.iterator, self.device = iterator, device
        self.fetch = fetch if fetch is not None else next
        self._ahead: dict | None = None

    def _to_device(self, batch: dict[str, Any]) -> dict[str, Any]:
        if self.device is None:
            return batch
        with tf.device(self.device):
            return {key: tf.identity(value) for key, value in batch.items()}

    def take(self) -> dict[str, Any]:
        if self._ahead is not None:
            batch, self._ahead = self._ahead, None
            return batch
        return self._to_device(self.fetch(self.iterator))

    def refill(self) -> None:
        """Copy the next batch to the device now (no-op without a device: the host prefetch already overlaps)."""
        if self.device is not None and self._ahead is None:
            self._ahead = self._to_device(self.fetch(self.iterator))

    @property
    def holds_batch(self) -> bool:
        """True while a batch has left the iterator but not been trained on (never at a checkpoint)."""
        return self._ahead is not None

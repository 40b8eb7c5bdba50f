"""Helpers for the model / trainer tests: synthetic batches that follow the batch contract."""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def synthetic_batch(batch: int, text_len: int, mel_frames: int, reference_frames: int, n_mels: int = 80,
                    vocab_size: int = 40, seed: int = 0, full_lengths: bool = False) -> dict[str, tf.Tensor]:
    """A batch dict of the given static shape (docs/architecture.md) with random true lengths.

    Padding holds zeros like the real pipeline; the first item always has the full lengths so every
    dimension is used.
    """
    rng = np.random.default_rng(seed)
    token_lengths = rng.integers(max(2, text_len // 2), text_len + 1, batch)
    mel_lengths = rng.integers(max(1, mel_frames // 2), mel_frames + 1, batch)
    reference_lengths = rng.integers(max(1, reference_frames // 2), reference_frames + 1, batch)
    if full_lengths:
        token_lengths[:], mel_lengths[:], reference_lengths[:] = text_len, mel_frames, reference_frames
    token_lengths[0], mel_lengths[0], reference_lengths[0] = text_len, mel_frames, reference_frames
    tokens = rng.integers(3, vocab_size, [batch, text_len])
    tokens[np.arange(text_len)[None] >= token_lengths[:, None]] = 0
    mel = rng.normal(-4.0, 2.0, [batch, mel_frames, n_mels])
    mel[np.arange(mel_frames)[None] >= mel_lengths[:, None]] = 0.0
    reference = rng.normal(-4.0, 2.0, [batch, reference_frames, n_mels])
    reference[np.arange(reference_frames)[None] >= reference_lengths[:, None]] = 0.0
    return {"tokens": tf.constant(tokens, tf.int32), "token_lengths": tf.constant(token_lengths, tf.int32),
            "mel": tf.constant(mel, tf.float32), "mel_lengths": tf.constant(mel_lengths, tf.int32),
            "reference_mel": tf.constant(reference, tf.float32),
            "reference_lengths": tf.constant(reference_lengths, tf.int32),
            "speaker_ids": tf.zeros([batch], tf.int32)}


def batch_spec(batch: int, text_len: int, mel_frames: int, reference_frames: int, n_mels: int = 80) -> dict:
    """The static signature of ``synthetic_batch`` (what InputPipeline.signatures() returns)."""
    return {"tokens": tf.TensorSpec([batch, text_len], tf.int32), "token_lengths": tf.TensorSpec([batch], tf.int32),
            "mel": tf.TensorSpec([batch, mel_frames, n_mels], tf.float32),
            "mel_lengths": tf.TensorSpec([batch], tf.int32),
            "reference_mel": tf.TensorSpec([batch, reference_frames, n_mels], tf.float32),
            "reference_lengths": tf.TensorSpec([batch], tf.int32), "speaker_ids": tf.TensorSpec([batch], tf.int32)}

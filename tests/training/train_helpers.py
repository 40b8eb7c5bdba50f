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


def batch_with_lengths(token_lengths: list[int], mel_lengths: list[int], text_len: int, mel_frames: int,
                       reference_frames: int, vocab_size: int = 40, seed: int = 0) -> dict[str, tf.Tensor]:
    """``synthetic_batch`` with exactly these true lengths (padding zeroed as the pipeline does)."""
    batch = synthetic_batch(len(mel_lengths), text_len, mel_frames, reference_frames, vocab_size=vocab_size,
                            seed=seed, full_lengths=True)
    token_lengths, mel_lengths = np.asarray(token_lengths), np.asarray(mel_lengths)
    tokens, mel = batch["tokens"].numpy(), batch["mel"].numpy()
    tokens[np.arange(text_len)[None] >= token_lengths[:, None]] = 0
    mel[np.arange(mel_frames)[None] >= mel_lengths[:, None]] = 0.0
    return dict(batch, tokens=tf.constant(tokens), token_lengths=tf.constant(token_lengths, tf.int32),
                mel=tf.constant(mel), mel_lengths=tf.constant(mel_lengths, tf.int32))


def crop_batch(batch: dict[str, tf.Tensor], rows: slice, text_len: int, mel_frames: int) -> dict[str, tf.Tensor]:
    """Rows of a batch re-padded to a smaller bucket shape (the padding it drops must be padding)."""
    out = {key: value[rows] for key, value in batch.items()}
    if int(tf.reduce_max(out["token_lengths"])) > text_len or int(tf.reduce_max(out["mel_lengths"])) > mel_frames:
        raise ValueError("crop_batch would cut real tokens or frames")
    out["tokens"] = out["tokens"][:, :text_len]
    out["mel"] = out["mel"][:, :mel_frames]
    return out


def compiled_train_step(model, cfg, signature: dict):
    """A minimal compiled training step (Adam 2e-3, clip 1.0) on one static batch signature: the learning tests
    train the model directly, independent of the trainer's run-directory machinery. Returns
    ``train_step(batch, seed [2] int64) -> total loss``."""
    import keras

    from myxtts.model import compute_losses

    optimizer = keras.optimizers.Adam(learning_rate=2e-3, global_clipnorm=1.0)
    optimizer.build(model.trainable_variables)

    @tf.function(input_signature=[signature, tf.TensorSpec([2], tf.int64)], autograph=False)  # as myxtts compiles
    def train_step(batch, seed):
        with tf.GradientTape() as tape:
            losses = compute_losses(batch, model(batch, training=True, seed=seed), cfg)
        optimizer.apply(tape.gradient(losses["total"], model.trainable_variables), model.trainable_variables)
        return losses["total"]

    return train_step

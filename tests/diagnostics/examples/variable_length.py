"""Classic retrace: padded_batch pads each batch to its own longest sequence, so every batch has a new
shape and the training step traces again on (nearly) every call."""

import numpy as np
import tensorflow as tf

lengths = [5, 9, 7, 12, 6, 10, 8, 11, 4, 13, 3, 14]


def examples():
    for length in lengths:
        yield {"tokens": np.arange(1, length + 1, dtype=np.int32)}


dataset = tf.data.Dataset.from_generator(
    examples, output_signature={"tokens": tf.TensorSpec([None], tf.int32)}).padded_batch(2)
weights = tf.Variable(tf.ones([16, 4]))


@tf.function
def train_step(batch):
    embedded = tf.nn.embedding_lookup(weights, batch["tokens"])  # [batch, text_len, 4]
    return tf.reduce_mean(embedded)


for batch in dataset:
    train_step(batch)

"""Classic retrace: a Python boolean flag that flips every step (e.g. `apply_dropout = step % 2 == 0`)."""

import tensorflow as tf


@tf.function
def train_step(features, apply_noise):
    if apply_noise:  # a Python bool: each value traces its own graph
        features = features + 0.1
    return tf.reduce_sum(features)


features = tf.ones([4, 8])
for step in range(6):
    train_step(features, step % 2 == 0)

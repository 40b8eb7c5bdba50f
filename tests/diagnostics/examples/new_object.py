"""Classic retrace: a fresh options object on every call (tf.function keys it by identity)."""

import tensorflow as tf


class StepOptions:
    def __init__(self, scale):
        self.scale = scale


@tf.function
def train_step(features, options):
    return tf.reduce_sum(features) * options.scale


features = tf.ones([4, 8])
for step in range(7):
    train_step(features, StepOptions(scale=2.0))

"""Classic retrace: NumPy arrays default to float64, so a batch built with np.random traces again."""

import numpy as np
import tensorflow as tf


@tf.function
def train_step(features):
    return tf.reduce_sum(features * 2)


train_step(np.ones([4, 8], dtype=np.float32))
train_step(np.random.rand(4, 8))  # float64
train_step(np.ones([4, 8], dtype=np.float32))  # no retrace: the float32 trace is reused

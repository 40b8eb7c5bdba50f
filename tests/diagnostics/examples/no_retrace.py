"""No retrace: a Python random.random() inside the function is baked in at trace time."""

import random

import tensorflow as tf


@tf.function(input_signature=[tf.TensorSpec([4, 8], tf.float32)])
def train_step(features):
    noise = random.random()  # a constant of the trace, read once
    return tf.reduce_sum(features) + noise


for step in range(10):
    train_step(tf.ones([4, 8]) * step)

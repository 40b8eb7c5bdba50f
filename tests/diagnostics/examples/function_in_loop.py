"""Classic retrace: the tf.function is created inside the loop, so each wrapper traces anew."""

import tensorflow as tf


def loss_fn(features):
    return tf.reduce_mean(tf.square(features))


features = tf.ones([4, 8])
for step in range(6):
    compiled = tf.function(loss_fn)
    compiled(features)

"""Classic retrace: a learning rate schedule computed in Python and passed as a float."""

import tensorflow as tf

weights = tf.Variable(tf.ones([8]))


@tf.function
def train_step(features, learning_rate):
    gradient = tf.reduce_mean(features, axis=0)  # [8]
    weights.assign_sub(learning_rate * gradient)
    return tf.reduce_sum(weights)


features = tf.ones([4, 8])
for step in range(8):
    learning_rate = 0.1 * 0.9 ** step
    train_step(features, learning_rate)

"""box_lists.py with the fix `explain-retracing --verify` proved: one input_signature for every call.

Every element of the box and label lists gets one spec whose axis 0 (the number of boxes) is None, so each
batch, whatever its box counts, reuses the one graph.
"""

import numpy as np
import tensorflow as tf

BOX_COUNTS = [(3, 3), (3, 5), (2, 4), (6, 1), (4, 4), (1, 2)]  # boxes per image, two images per batch
rng = np.random.default_rng(7)
images = tf.constant(rng.random((2, 8, 8, 3)), tf.float32)
weights = tf.Variable(tf.ones([4, 1]) * 0.5)


@tf.function(input_signature=[
    tf.TensorSpec([2, 8, 8, 3], tf.float32),
    [tf.TensorSpec([None, 4], tf.float32)] * 2,
    [tf.TensorSpec([None, 1], tf.float32)] * 2,
])
def train_step(images, boxes, labels):
    loss = tf.reduce_mean(images) * 0.0
    for image_boxes, image_labels in zip(boxes, labels):  # a Python list: unrolled into the graph
        scores = tf.matmul(image_boxes, weights)  # [boxes, 1]
        loss += tf.reduce_mean(tf.square(scores - image_labels))
    return loss


for counts in BOX_COUNTS:
    boxes = [tf.constant(rng.random((count, 4)), tf.float32) for count in counts]
    labels = [tf.constant(rng.integers(0, 2, (count, 1)), tf.float32) for count in counts]
    train_step(images, boxes, labels)

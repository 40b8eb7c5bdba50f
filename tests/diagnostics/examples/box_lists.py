"""Object-detection fine-tuning loop: each batch passes lists of per-image box and label tensors.

Every image has its own number of boxes, so the lists' elements change shape from batch to batch (the
first retrace changes only element [1]); axis 0 of boxes[i] is the number of boxes, not a batch.
"""

import numpy as np
import tensorflow as tf

BOX_COUNTS = [(3, 3), (3, 5), (2, 4), (6, 1), (4, 4), (1, 2)]  # boxes per image, two images per batch
rng = np.random.default_rng(7)
images = tf.constant(rng.random((2, 8, 8, 3)), tf.float32)
weights = tf.Variable(tf.ones([4, 1]) * 0.5)


@tf.function
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

"""A script that exits with its own code (the runner must pass it through)."""

import sys

import tensorflow as tf


@tf.function
def double(x):
    return x * 2


double(tf.constant(sys.argv[1:] and float(sys.argv[1]) or 1.0))
sys.exit(3)

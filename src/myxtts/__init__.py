"""myxtts: XTTS-style text-to-speech training on TensorFlow 2 / Keras 3 that never retraces."""

__version__ = "0.1.0"

"""myxtts: XTTS-style text-to-speech training on TensorFlow 2 / Keras 3 that never retraces."""

from myxtts.runtime import record_tensorflow_environment

__version__ = "0.2.0"

record_tensorflow_environment()  # before anything imports TensorFlow: what the process runs with (runtime.py)

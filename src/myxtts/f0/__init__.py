"""Fundamental frequency (F0): the tracker's settings here, importable without TensorFlow (the cache's freshness check,
the prepare journal and the manifest read ``TRACKER``, and an up-to-date ``prepare`` never loads TensorFlow); the
tracker itself, in TF ops, is ``myxtts.f0.tracker``."""

from __future__ import annotations

from typing import Any

FMIN_HZ = 60.0  # below a low male voice
FMAX_HZ = 500.0  # above a high female voice, below most child speech
THRESHOLD = 0.3  # d' below this at a dip: the frame is periodic (YIN's paper uses 0.1-0.2)
MARGIN = 0.1  # the first dip within this of the deepest: the period, not a multiple of it
SILENCE_DB = 45.0  # frames this far under the clip's loudest frame are unvoiced, whatever d' says
FLOOR_DB = -80.0  # and frames below this mean power (full scale 0 dB): digital silence repeats itself trivially
VERSION = 1  # raised when the estimator changes in a way its settings above do not show

# what a cached F0 track was computed with (the manifest's ``pitch_tracker``): another value rebuilds the cache
TRACKER: dict[str, Any] = {"method": "yin", "version": VERSION, "fmin_hz": FMIN_HZ, "fmax_hz": FMAX_HZ,
                           "threshold": THRESHOLD, "margin": MARGIN, "silence_db": SILENCE_DB, "floor_db": FLOOR_DB}

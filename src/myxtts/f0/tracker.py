"""Fundamental frequency (F0) of speech, frame by frame, with TF ops: what ``model.pitch_conditioning`` trains on.

The YIN estimator (de Cheveigné & Kawahara 2002) on the mel front-end's frames: frame t is centred on sample
``t * hop_length`` (the waveform zero-padded by half a frame at each end), so a clip of ``samples`` gives
``1 + samples // hop_length`` values, one per mel frame. Per frame:

- the difference function ``d(lag) = sum_j (x_j - x_{j+lag})^2`` over the frame's first ``frame - max_lag`` samples
  (``difference_function``: its cross term by FFT at the frame's length, the window's energy as a running sum over
  the lags);
- its cumulative-mean normalisation ``d'(lag) = d(lag) * lag / sum_{k<=lag} d(k)`` (1 at lag 0): low where the frame
  repeats itself after ``lag`` samples, and no dip at lag 0 to confuse;
- the period: the first local minimum of ``d'`` below ``THRESHOLD`` in the lag range of ``[fmin, fmax]``, refined by a
  parabola through it and its neighbours; none below the threshold, or a frame more than ``SILENCE_DB`` under the
  clip's loudest or below ``FLOOR_DB``: unvoiced (0 Hz).

Plain ops with no Python control flow on tensors: they run eagerly, in a tf.function and inside a ``Dataset.map``.
``myxtts prepare`` stores every clip's track in its utterance file (``clip_f0``), so training reads it rather than
running the tracker on every epoch; the cache records ``TRACKER`` (``myxtts.f0``, the settings without
TensorFlow), and a change of it rebuilds the cache.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import tensorflow as tf

from myxtts.f0 import FLOOR_DB, FMAX_HZ, FMIN_HZ, MARGIN, SILENCE_DB, THRESHOLD


def frame_f0(waveform: tf.Tensor, sample_rate: int, hop_length: int, frame_length: int | None = None,
             fmin: float = FMIN_HZ, fmax: float = FMAX_HZ) -> tf.Tensor:
    """``[samples]`` float32 in [-1, 1] -> F0 in Hz ``[1 + samples // hop_length]`` float32, 0 where unvoiced.
    ``frame_length`` None: the smallest power of two holding 2.5 periods of ``fmin`` (1024 samples at 22,050 Hz)."""
    min_lag = max(int(sample_rate // fmax), 2)
    max_lag = int(-(-sample_rate // fmin))
    if frame_length is None:
        frame_length = 1 << math.ceil(math.log2(2.5 * max_lag))
    if max_lag + 2 >= frame_length:
        raise ValueError(f"frame_f0: a frame of {frame_length} samples cannot hold a period of {fmin} Hz at "
                         f"{sample_rate} Hz ({max_lag} samples); use a longer frame or a higher fmin.")
    window = frame_length - max_lag - 1  # samples each lag compares: [0, window) against [lag, lag + window)
    waveform = tf.reshape(tf.cast(waveform, tf.float32), [-1])
    samples = tf.shape(waveform)[0]
    half = frame_length // 2
    padded = tf.pad(waveform, [[half, half + hop_length]])
    frames = tf.signal.frame(padded, frame_length, hop_length)[:1 + samples // hop_length]  # [T, frame_length]

    difference = difference_function(frames, window, max_lag + 2)  # [T, lags]

    lags = tf.range(max_lag + 2, dtype=tf.float32)[None, :]  # [1, lags]
    running = tf.math.cumsum(difference[:, 1:], axis=1)  # [T, lags - 1]: sum_{1..lag} d
    normalized = tf.concat([tf.ones_like(difference[:, :1]),
                            difference[:, 1:] * lags[:, 1:] / tf.maximum(running, 1e-12)], axis=1)  # [T, lags]

    # the first dip under the threshold in [min_lag, max_lag]
    centre = normalized[:, 1:-1]  # lags 1 .. max_lag
    in_range = (tf.range(1, max_lag + 1) >= min_lag)[None, :]  # [1, lags - 2]
    lowest = tf.reduce_min(tf.where(in_range, centre, 2.0), axis=1, keepdims=True)  # [T, 1]
    cutoff = tf.minimum(lowest + MARGIN, THRESHOLD)
    dip = (centre <= normalized[:, :-2]) & (centre <= normalized[:, 2:]) & (centre <= cutoff) & in_range
    voiced = lowest[:, 0] < THRESHOLD  # [T]
    lag = tf.argmax(tf.cast(dip, tf.int32), axis=1, output_type=tf.int32) + 1  # [T] the first dip's lag

    # parabolic interpolation through (lag - 1, lag, lag + 1)
    rows = tf.range(tf.shape(normalized)[0])
    left, middle, right = (tf.gather_nd(normalized, tf.stack([rows, lag + offset], axis=1)) for offset in (-1, 0, 1))
    curvature = left - 2.0 * middle + right
    shift = tf.where(curvature > 1e-9, 0.5 * (left - right) / tf.maximum(curvature, 1e-9), 0.0)
    period = tf.cast(lag, tf.float32) + tf.clip_by_value(shift, -1.0, 1.0)  # [T] samples

    frame_db = 10.0 * tf.math.log(tf.reduce_mean(tf.square(frames), axis=1) + 1e-10) / tf.math.log(10.0)
    loud = (frame_db > tf.reduce_max(frame_db) - SILENCE_DB) & (frame_db > FLOOR_DB)  # [T]
    return tf.where(voiced & loud, float(sample_rate) / period, 0.0)  # [T] Hz


def difference_function(frames: tf.Tensor, window: int, num_lags: int) -> tf.Tensor:
    """YIN's ``d(lag) = sum_{j < window} (x_j - x_{j + lag})^2`` of every frame ``[T, frame_length]`` for lags
    ``0 .. num_lags - 1`` -> ``[T, num_lags]``, as ``e(0) + e(lag) - 2 r(lag)``: the energies of the two windows
    (running sums) and their cross-correlation (by FFT). A circular correlation of ``frame_length`` points is the
    linear one here as long as ``window + num_lags - 1 <= frame_length``: the window shifted by the largest lag still
    ends inside the frame, so nothing wraps around and no zero padding is needed."""
    frame_length = frames.shape[-1]
    if window + num_lags - 1 > frame_length:
        raise ValueError(f"difference_function: a window of {window} samples shifted by {num_lags - 1} leaves the "
                         f"frame of {frame_length} samples.")
    spectrum = tf.signal.rfft(frames, [frame_length])  # [T, frame_length // 2 + 1]
    head = tf.signal.rfft(frames[:, :window], [frame_length])  # the window, zero-padded to the frame
    cross = tf.signal.irfft(tf.math.conj(head) * spectrum, [frame_length])[:, :num_lags]  # [T, lags]: r(lag)
    # e(lag) = sum_{lag <= j < lag + window} x_j^2: e(0), then each lag adds the sample entering the window and drops
    # the one leaving it (a running sum over the lags alone, not over the whole frame)
    leaving, entering = tf.square(frames[:, :num_lags - 1]), tf.square(frames[:, window:window + num_lags - 1])
    start = tf.reduce_sum(tf.square(frames[:, :window]), axis=1, keepdims=True)  # [T, 1] e(0)
    energy = start + tf.pad(tf.math.cumsum(entering - leaving, axis=1), [[0, 0], [1, 0]])  # [T, lags]: e(lag)
    return tf.maximum(energy[:, :1] + energy - 2.0 * cross, 0.0)  # [T, lags]


def frames_f0(waveform: tf.Tensor, frames: tf.Tensor, sample_rate: int, hop_length: int) -> tf.Tensor:
    """Frame F0 ``[frames]`` Hz (0 unvoiced) of ``waveform`` ``[samples]``: exactly as many values as its mel has
    frames (cut, or padded with unvoiced frames)."""
    f0 = frame_f0(waveform, sample_rate, hop_length)[:frames]  # [<= frames]
    return tf.pad(f0, [[0, frames - tf.shape(f0)[0]]])


@functools.lru_cache(maxsize=8)
def _compiled_frames_f0(sample_rate: int, hop_length: int) -> Any:
    """``frames_f0`` as one graph for any clip length (traced once per audio setting, shared by threads)."""
    signature = [tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.int32)]
    return tf.function(lambda waveform, frames: frames_f0(waveform, frames, sample_rate, hop_length),
                       input_signature=signature)


def clip_f0(waveform: np.ndarray, frames: int, sample_rate: int, hop_length: int) -> np.ndarray:
    """The F0 track ``prepare`` stores: ``[samples]`` float32 -> ``[frames]`` float32 Hz, 0 unvoiced."""
    compiled = _compiled_frames_f0(int(sample_rate), int(hop_length))
    return compiled(tf.constant(np.asarray(waveform, np.float32)), tf.constant(int(frames), tf.int32)).numpy()

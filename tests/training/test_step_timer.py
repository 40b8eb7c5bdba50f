"""StepTimer: the input-wait share subtracts the cost of next() measured on an in-memory iterator."""

from __future__ import annotations

import time

import numpy as np
import pytest
import tensorflow as tf

from myxtts.training.reporting import StepTimer


def _loop(dataset: tf.data.Dataset, step_seconds: float, steps: int = 40) -> tuple[StepTimer, float]:
    timer = StepTimer(sample_every=2)
    iterator = iter(dataset)
    started = time.perf_counter()
    for _ in range(steps):
        timer.next_batch(iterator)
        time.sleep(step_seconds)  # a device step: releases the CPU like an accelerator wait
    return timer, time.perf_counter() - started


def test_ready_batches_read_as_no_input_wait_and_a_starved_loop_does_not():
    batch = {"mel": np.ones([4, 80, 16], np.float32), "mel_lengths": np.full([4], 16, np.int32)}
    ready = tf.data.Dataset.from_tensors(batch).repeat().prefetch(tf.data.AUTOTUNE)
    timer, elapsed = _loop(ready, 0.02)  # next() on a ready batch costs ~0.1-0.5 ms: >= 40x below the step
    # calibrated on the first batch, then sampled before calls 2, 4, ..., 38
    assert timer.calls == 40 and timer.baseline_samples == 19 and timer.correction_note == ""
    assert timer.input_wait_share(elapsed) < 0.05  # TF profiler's "not input-bound" band
    assert timer.raw_input_wait_share(elapsed) >= timer.input_wait_share(elapsed)

    def slow(value):
        time.sleep(0.1)  # 20x the step: the loop is starved
        return value

    starved = tf.data.Dataset.range(1 << 30).map(lambda x: tf.numpy_function(slow, [x], tf.int64)).batch(1)
    timer, elapsed = _loop(starved, 0.005, steps=10)
    assert timer.input_wait_share(elapsed) > 0.5


def test_step_timer_validation():
    with pytest.raises(ValueError, match="sample_every"):
        StepTimer(sample_every=0)

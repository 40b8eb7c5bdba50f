"""training.ema_decay: the weight average's update rule and its config key (the trainer's use of it, its checkpoint,
what loading a run reads and its exact resume: test_warm_start; on two replicas: test_train_distribution)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from myxtts.config import config_from_dict
from myxtts.model.weight_average import WeightAverage


def test_the_average_follows_each_update_in_a_compiled_function_and_resets_to_the_weights():
    weights = [keras.Variable([1.0, -2.0], name="a"), keras.Variable([[4.0]], name="b")]  # as a model's are
    average = WeightAverage(weights, decay=0.75)
    update = tf.function(average.update, autograph=False)
    history = []
    for step, scale in enumerate((3.0, -1.0, 0.5)):
        for weight in weights:
            weight.assign(weight * scale + step)
        update()
        history.append([w.numpy().copy() for w in weights])
    # average_n = 0.75 * average_(n-1) + 0.25 * weight_n, from the weights it was created at
    expected = [np.array([1.0, -2.0]), np.array([[4.0]])]
    for values in history:
        expected = [0.75 * e + 0.25 * v for e, v in zip(expected, values)]
    for got, want in zip(average.averages, expected):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    assert update.experimental_get_tracing_count() == 1
    average.reset()
    assert all(np.array_equal(a.numpy(), w.numpy()) for a, w in zip(average.averages, weights))


@pytest.mark.parametrize("decay", [1.0, -0.1, 1.5])
def test_ema_decay_outside_zero_to_one_is_refused(decay):
    with pytest.raises(ValueError, match=r"training.ema_decay.*\[0, 1\)"):
        config_from_dict({"training": {"ema_decay": decay}})

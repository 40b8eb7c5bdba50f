"""training.ema_decay: the weight average's update rule and its config key (the trainer's use of it, its checkpoint,
what loading a run reads and its exact resume: test_warm_start; on two replicas: test_train_distribution)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from myxtts.config import config_from_dict
from myxtts.model.weight_average import WeightAverage, load_average_into
from myxtts.run_dir import RunError


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


class _Weights:
    """What ``load_average_into`` reads of a model: its variables, with their paths."""

    def __init__(self, **values):
        self.variables = [keras.Variable(value, name=name) for name, value in values.items()]


def test_a_checkpoints_average_is_loaded_whole_or_refused(tmp_path):
    trained = _Weights(a=[1.0, 2.0], b=[[3.0]])
    average = WeightAverage(trained.variables, decay=0.5)
    for weight in trained.variables:
        weight.assign(weight * 3.0)
    average.update()  # the average: 2x the first values, the weights: 3x
    prefix = tf.train.Checkpoint(weight_average=average.trackable).save(str(tmp_path / "ckpt"))

    same = _Weights(a=[0.0, 0.0], b=[[0.0]])
    assert load_average_into(same, prefix) == 2
    np.testing.assert_allclose(same.variables[0].numpy(), [2.0, 4.0])
    np.testing.assert_allclose(same.variables[1].numpy(), [[6.0]])
    # a model without one of the averaged weights: refused, naming it, nothing half-loaded
    other = _Weights(a=[0.0, 0.0], c=[[0.0]])
    with pytest.raises(RunError, match=r"weight average .*of 2 weights, 1 of which .*\(e\.g\. b\)"):
        load_average_into(other, prefix)
    assert other.variables[0].numpy().tolist() == [0.0, 0.0]
    # a checkpoint without an average leaves the weights as they are
    plain = tf.train.Checkpoint(step=tf.Variable(1)).save(str(tmp_path / "plain"))
    assert load_average_into(same, plain) == 0 and same.variables[0].numpy().tolist() == [2.0, 4.0]

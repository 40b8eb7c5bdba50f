"""Compiled steps on synthetic contract batches: accumulation == one big batch, mixed precision updates
match float32 (no stray loss-scale factor), the NaN guard skips the update inside the graph."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from myxtts.config import config_from_dict
from myxtts.model import build_model
from myxtts.training.shape_keys import UnknownShapeError, shape_key
from myxtts.training.steps import TrainingSteps
from train_helpers import batch_spec, batch_with_lengths, synthetic_batch

VOCAB = 40
# the parallel decoder at its smallest, the binarisation loss on from the first step (every loss term in play): the
# step logic (accumulation, loss weighting, mixed precision, the NaN guard, blocks) is the same for both decoders, and
# the autoregressive decoder's steps run in test_train (the trainer) and test_train_distribution (mirrored update)
TINY_TINY = {"preset": "tiny", "decoder": "parallel", "reduction_factor": 1, "d_model": 32, "num_heads": 2,
             "ff_dim": 32, "text_layers": 1, "conditioning_layers": 1, "postnet_channels": 32, "postnet_layers": 2,
             "decoder_conv_blocks": 2, "dropout": 0.0, "binarization_start_step": 0, "binarization_ramp_steps": 0}


# the mel discriminator on (model/mel_discriminator.py): its losses and update ride in the same step
ADVERSARIAL = {"mel_adversarial_weight": 0.5, "mel_feature_matching_weight": 1.0, "mel_discriminator_channels": 4}


def _setup(optimizer, reference_model=None, model=None, reference_steps=None, **training):
    cfg = config_from_dict({"model": {**TINY_TINY, **(model or {})}, "training": training})
    model = build_model(cfg, VOCAB)
    if reference_model is not None:
        model.set_weights(reference_model.get_weights())
    steps = TrainingSteps(model, optimizer, cfg, tf.distribute.get_strategy(), keras.optimizers.SGD(0.05))
    if reference_steps is not None and steps.discriminator is not None:
        steps.discriminator.set_weights(reference_steps.discriminator.get_weights())
    return cfg, model, steps


def _weights(model):
    return [np.array(v.numpy(), np.float64) for v in model.trainable_variables]


def _delta(before, model):
    return np.concatenate([(after - b).ravel() for b, after in zip(before, _weights(model))])


def test_gradient_accumulation_over_unequal_buckets_equals_one_big_batch():
    """Two micro-batches from different buckets (2 rows of 24 frames, then 2 rows of 6-8 frames in an 8-frame
    bucket) give exactly the update of one 4-row batch: each divides its sums by the cycle's real counts.
    (Per-micro-batch means / 2 weighted the short rows like the 24-frame ones: 1.49x off, cosine 0.07.) With the mel
    discriminator on (one step computes every loss): its losses and its own update also equal the big batch's,
    padding frames never count."""
    from train_helpers import batch_with_lengths, crop_batch

    big = batch_with_lengths([10, 9, 6, 5], [24, 21, 7, 8], 10, 24, 16, vocab_size=VOCAB, seed=11)
    long_rows, short_rows = crop_batch(big, slice(0, 2), 10, 24), crop_batch(big, slice(2, 4), 6, 8)
    _, model_a, steps_a = _setup(keras.optimizers.SGD(0.05), model=ADVERSARIAL, gradient_accumulation_steps=2)
    # the one big batch's reference update runs eagerly (the same step code, no second compile)
    _, model_b, steps_b = _setup(keras.optimizers.SGD(0.05), reference_model=model_a, model=ADVERSARIAL,
                                 reference_steps=steps_a, enable_graph_mode=False)
    steps_a.build([batch_spec(2, 10, 24, 16), batch_spec(2, 6, 8, 16)], lambda f, name: f)
    steps_b.build([batch_spec(4, 10, 24, 16)], lambda f, name: f)
    start = _weights(model_a)
    discriminator_start = steps_a.discriminator.get_weights()
    with pytest.raises(ValueError, match="train_cycle"):
        steps_a.train(long_rows)  # a micro-batch alone does not know its cycle's counts
    out_a = steps_a.train_cycle([long_rows, short_rows])
    assert bool(out_a["applied"]) and steps_a.update_step == 1
    out_b = steps_b.train(big)
    accumulated, single = _delta(start, model_a), _delta(start, model_b)
    assert np.linalg.norm(single) > 0
    # float32 sums in another order: the update within 1e-3 of its norm (seen: 2e-5), each weight within 1e-3 of
    # the largest move (a fresh clone saw one weight of 360,593 just past 1e-4); the per-micro-batch means were
    # off in norm and everywhere
    assert np.linalg.norm(accumulated - single) <= 1e-3 * np.linalg.norm(single)
    np.testing.assert_allclose(accumulated, single, atol=1e-6 + 1e-3 * np.abs(single).max())
    # every loss term divides by the cycle's counts (mel per element, forward-sum per utterance, duration per token,
    # binarisation per frame); the cycle reports the big batch's losses
    assert steps_a.discriminator_optimizer.iterations.numpy() == 1  # the discriminator stepped once too
    deltas = [np.concatenate([(w - w0).ravel() for w, w0 in zip(steps.discriminator.get_weights(),
                                                                discriminator_start)]) for steps in (steps_a, steps_b)]
    assert np.linalg.norm(deltas[1]) > 0
    np.testing.assert_allclose(deltas[0], deltas[1], atol=1e-6 + 1e-4 * np.abs(deltas[1]).max())
    for key in ("total", "mel_l1_before", "forward_sum", "duration", "binarization", "mel_adversarial",
                "mel_feature_matching", "mel_discriminator"):
        assert float(out_b[key]) > 0
        assert float(out_a[key]) == pytest.approx(float(out_b[key]), rel=1e-4), key
    # accumulators are zero again after the update
    assert all(float(tf.reduce_max(tf.abs(a))) == 0.0 for a in steps_a.accumulators)


def test_loss_is_the_global_mean_over_real_frames_not_a_mean_of_batch_means():
    """The weighting itself, on unequal lengths: halves with the global counts add up to the whole."""
    from myxtts.model import add_normalizers, compute_losses, loss_normalizers
    from train_helpers import batch_with_lengths, crop_batch

    cfg, model, _ = _setup(keras.optimizers.SGD(0.05))
    big = batch_with_lengths([10, 9, 6, 5], [24, 22, 8, 6], 10, 24, 16, vocab_size=VOCAB, seed=5)
    # the short rows' targets sit 3 units away: their error differs, so how rows are weighted shows
    big["mel"] = big["mel"] + tf.constant([0.0, 0.0, 3.0, 3.0])[:, None, None] * tf.cast(
        tf.sequence_mask(big["mel_lengths"], 24)[..., None], tf.float32)
    parts = [crop_batch(big, slice(0, 2), 10, 24), crop_batch(big, slice(2, 4), 6, 8)]
    counts = add_normalizers([loss_normalizers(p, 80) for p in parts])
    whole = compute_losses(big, model(big), cfg)
    shares = [compute_losses(p, model(p), cfg, counts) for p in parts]
    means = [compute_losses(p, model(p), cfg) for p in parts]
    for key in ("mel_l1_before", "forward_sum", "duration", "binarization"):
        assert float(shares[0][key] + shares[1][key]) == pytest.approx(float(whole[key]), rel=1e-5), key
    # the old weighting (mean of the two batch means) is measurably different on these lengths
    assert abs(float(means[0]["mel_l1_before"] + means[1]["mel_l1_before"]) / 2 - float(whole["mel_l1_before"])) \
        > 0.05 * float(whole["mel_l1_before"])


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_mixed_precision_update_matches_float32(precision):
    """The steps' own code run eagerly (training.enable_graph_mode: false; the compiled float16 step with its loss
    scale runs in the warm-up test below): the update math, not the tracing, is what differs by precision."""
    batch = synthetic_batch(3, 10, 24, 16, vocab_size=VOCAB, seed=12)
    _, model_32, steps_32 = _setup(keras.optimizers.SGD(0.05), gradient_clip_norm=0.0, enable_graph_mode=False)
    optimizer = keras.optimizers.SGD(0.05)
    if precision == "float16":
        # a scale far below Keras' 2**15 default: the first step must not overflow float16 whatever the random
        # initialisation (an overflow skips the update, which is right, but is not what this test compares)
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer, initial_scale=2.0 ** 8)
    _, model_mp, steps_mp = _setup(optimizer, reference_model=model_32, mixed_precision=precision,
                                   gradient_clip_norm=0.0, enable_graph_mode=False)
    assert model_mp.compute_dtype == precision and model_mp.trainable_variables[0].dtype == "float32"
    for steps in (steps_32, steps_mp):
        steps.build([batch_spec(3, 10, 24, 16)], lambda f, name: f)
    start = _weights(model_32)
    out_32, out_mp = steps_32.train(batch), steps_mp.train(batch)
    assert bool(out_mp["applied"])
    d32, dmp = _delta(start, model_32), _delta(start, model_mp)
    cosine = float(d32 @ dmp / (np.linalg.norm(d32) * np.linalg.norm(dmp)))
    ratio = float(np.linalg.norm(dmp) / np.linalg.norm(d32))
    assert cosine > 0.97, cosine
    assert 0.9 < ratio < 1.1, ratio  # a stray loss scale (e.g. / 32768) would be far off
    assert float(out_mp["total"]) == pytest.approx(float(out_32["total"]), rel=0.02)


def test_nan_guard_skips_update_in_graph():
    """With accumulation a poisoned micro-batch poisons its whole cycle (without accumulation the trainer's NaN guard
    test in test_train runs the same in-graph skip on real clips)."""
    accumulation = 2
    _, model, steps = _setup(keras.optimizers.Adam(1e-3), gradient_accumulation_steps=accumulation)
    steps.build([batch_spec(2, 10, 24, 16)], lambda f, name: f)
    clean = synthetic_batch(2, 10, 24, 16, vocab_size=VOCAB, seed=13)
    poisoned = dict(clean)
    mel = clean["mel"].numpy()
    mel[0, 3, 5] = np.nan  # inside the real frames
    poisoned["mel"] = tf.constant(mel)
    before = _weights(model)
    out = steps.train_cycle([poisoned] + [clean] * (accumulation - 1))  # one poisoned micro-batch poisons it
    assert not bool(out["applied"]) and int(out["nonfinite_in_a_row"]) == 1
    assert all(np.array_equal(a, b) for a, b in zip(before, _weights(model)))
    assert steps.update_step == 0 and int(steps.nonfinite_total.numpy()) == 1
    out = steps.train_cycle([clean] * accumulation)
    assert bool(out["applied"]) and int(out["nonfinite_in_a_row"]) == 0 and steps.update_step == 1
    assert all(np.isfinite(w).all() for w in _weights(model))


def test_unknown_shape_is_refused_not_traced():
    """Refused before any function is called: nothing traces (the functions' own first traces happen at warm-up,
    test_warm_up_runs_every_function_and_restores_every_variable_exactly)."""
    _, _, steps = _setup(keras.optimizers.Adam(1e-3))
    traced = []
    steps.build([batch_spec(2, 10, 24, 16)], lambda f, name: traced.append(f) or f)
    with pytest.raises(UnknownShapeError, match="not one of the pipeline's signatures"):
        steps.train(synthetic_batch(2, 11, 24, 16, vocab_size=VOCAB))
    with pytest.raises(UnknownShapeError):
        steps.validate(synthetic_batch(2, 10, 32, 16, vocab_size=VOCAB))
    assert len(traced) == 2 and [f.experimental_get_tracing_count() for f in traced] == [0, 0]


# every batch shape is warmed up; float16 with accumulation: the loss scale and the accumulators are restored too
# (the float32 state, a subset, is restored bit for bit by every resume: test_train_resume's SIGKILL test)
@pytest.mark.parametrize("precision, accumulation, shapes", [("float16", 2, 2)])
def test_warm_up_runs_every_function_and_restores_every_variable_exactly(precision, accumulation, shapes):
    """Warm-up traces AND runs each step (through the monitor: it counts the traces as warm-up), then puts
    model, optimizer (iterations, moments, loss scale), counters and accumulators back bit for bit."""
    from myxtts.training.reporting import TraceAccounting

    optimizer = keras.optimizers.Adam(1e-2)
    if precision == "float16":
        # a scale far below Keras' 2**15 default: the first step must not overflow float16 whatever the random
        # initialisation (an overflow skips the update, which is right, but is not what this test compares)
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer, initial_scale=2.0 ** 8)
    _, model, steps = _setup(optimizer, mixed_precision=precision, gradient_accumulation_steps=accumulation)
    traces = TraceAccounting(strict=True)
    dims = [(2, 10, 24), (3, 8, 16)][:shapes]
    specs = [batch_spec(*d, 16) for d in dims]
    steps.build(specs, traces.watch)
    steps.train_functions[shape_key(specs[0])].python_function(
        synthetic_batch(2, 10, 24, 16, vocab_size=VOCAB, seed=14))  # eager: non-trivial optimizer state, no trace
    before = [np.array(v.numpy(), copy=True) for v in steps.state_variables()]
    tracked = {id(v) for v in steps.state_variables()}
    assert {id(optimizer.iterations), id(steps.micro_step), id(steps.nonfinite_total)} <= tracked
    if precision == "float16":
        inner = optimizer.inner_optimizer
        assert {id(optimizer.dynamic_scale), id(inner.iterations), *map(id, inner.variables)} <= tracked
    assert len(steps.state_variables()) > len(model.trainable_variables) * 2  # weights + Adam moments + ...
    seconds = steps.warm_up(runs=2)  # restored after each run
    after = [v.numpy() for v in steps.state_variables()]
    assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(before, after))
    assert sorted(seconds) == sorted(f"{kind}_step[batch {b} x text {t} x mel {m}]"
                                     for kind in ("train", "validate") for b, t, m in dims)
    assert all(value > 0 for value in seconds.values())
    assert all(len(runs) == 2 and sum(runs) == seconds[name] for name, runs in steps.warmup_runs_seconds.items())
    # every function traced exactly once, in warm-up, and the monitor saw each of those traces
    counts = traces.counts()
    assert len(counts) == 2 * shapes and counts["train_step[bucket 0: batch 2 x text 10 x mel 24]"] == 1
    assert sum(counts.values()) == 2 * shapes
    traces.end_warmup()
    assert len(traces.monitor.first_traces) == 2 * shapes and not traces.monitor.unexpected
    assert steps.apply_function.experimental_get_tracing_count() == 1  # one update function for every bucket
    assert traces.monitor.summary() is not None
    # training goes on from the restored state without a single trace
    out = steps.train_cycle([synthetic_batch(*dims[-1], 16, vocab_size=VOCAB, seed=15)] * accumulation)
    assert np.isfinite(float(out["total"])) and traces.retraces_after_warmup() == 0
    traces.close()


@pytest.mark.slow
def test_steps_per_execution_runs_k_updates_in_one_call_equal_to_k_single_steps():
    """training.steps_per_execution = 3: one compiled call on a block [3, batch, ...] of unequal-length batches
    applies 3 updates (Adam, dropout on: the per-step seeds and the schedule advance inside the graph loop)
    equal to 3 single-step calls, and reports the mean losses and summed frames of the 3 steps."""
    tiny = {**TINY_TINY, "dropout": 0.1}
    blocks = [batch_with_lengths([10, 7], [24, 13], 10, 24, 16, vocab_size=VOCAB, seed=seed) for seed in (21, 22, 23)]
    cfg_k = config_from_dict({"model": tiny, "training": {"steps_per_execution": 3, "max_steps": 9}})
    cfg_1 = config_from_dict({"model": tiny})
    model_k, model_1 = build_model(cfg_k, VOCAB), build_model(cfg_1, VOCAB)
    model_1.set_weights(model_k.get_weights())
    steps_k = TrainingSteps(model_k, keras.optimizers.Adam(1e-3), cfg_k, tf.distribute.get_strategy())
    steps_1 = TrainingSteps(model_1, keras.optimizers.Adam(1e-3), cfg_1, tf.distribute.get_strategy())
    spec = batch_spec(2, 10, 24, 16)
    steps_k.build([{k: tf.TensorSpec([3, *v.shape], v.dtype) for k, v in spec.items()}], lambda f, name: f)
    steps_1.build([spec], lambda f, name: f)
    with pytest.raises(UnknownShapeError):
        steps_k.train(blocks[0])  # a single batch is not a block of this signature
    block = {key: tf.stack([batch[key] for batch in blocks]) for key in blocks[0]}  # [3, batch, ...]
    out_k = steps_k.train(block)
    singles = [steps_1.train(batch) for batch in blocks]
    assert steps_k.update_step == steps_1.update_step == 3 and int(out_k["applied"]) == 3
    assert int(steps_k.micro_step.numpy()) == 3
    for a, b in zip(_weights(model_k), _weights(model_1)):
        np.testing.assert_allclose(a, b, atol=1e-6)
    for key in ("total", "mel_l1_before", "forward_sum", "duration", "grad_norm"):
        assert float(out_k[key]) == pytest.approx(np.mean([float(s[key]) for s in singles]), rel=1e-4), key
    assert float(out_k["real_frames"]) == pytest.approx(sum(float(s["real_frames"]) for s in singles))
    # validation keeps the batch signature
    assert set(steps_k.validate(blocks[0])) >= {"total", "real_frames"}


def test_steps_per_execution_config_rules():
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        config_from_dict({"training": {"steps_per_execution": 2, "gradient_accumulation_steps": 2}})
    with pytest.raises(ValueError, match="training.max_steps"):
        config_from_dict({"training": {"steps_per_execution": 4, "max_steps": 10}})
    with pytest.raises(ValueError, match="training.steps_per_execution"):
        config_from_dict({"training": {"steps_per_execution": 0}})


def _compiled_apply(optimizer, variables):
    return tf.function(lambda grads: optimizer.apply(grads, variables))


def test_fused_adamw_updates_like_keras_adamw_on_the_schedule_and_round_trips_its_config():
    """The trainer's optimizer (one fused kernel per variable) against Keras' AdamW: same slots, same arithmetic,
    over warm-up and decay, in a compiled step, with gradients of unequal scales per variable."""
    from myxtts.training.schedule import FusedAdamW, WarmupDecay

    rng = np.random.default_rng(0)
    shapes = [(3, 5), (7,), (2, 2, 4)]
    initial = [rng.normal(size=shape).astype(np.float32) for shape in shapes]
    gradients = [[(10.0 ** i * rng.normal(size=shape)).astype(np.float32) for i, shape in enumerate(shapes)]
                 for _ in range(6)]
    finals = []
    for kind in (keras.optimizers.AdamW, FusedAdamW):
        schedule = WarmupDecay(0.01, warmup_steps=2, max_steps=6, decay="cosine", min_learning_rate=1e-4)
        optimizer = kind(learning_rate=schedule, weight_decay=0.05, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
        variables = [keras.Variable(value) for value in initial]
        optimizer.build(variables)

        apply = _compiled_apply(optimizer, variables)
        for grads in gradients:
            apply([tf.constant(g) for g in grads])
        finals.append([np.array(v.numpy()) for v in variables])
        assert int(optimizer.iterations.numpy()) == 6
    again = FusedAdamW.from_config(optimizer.get_config())
    assert again.decoupled_weight_decay == 0.05 and again.beta_2 == 0.98
    for keras_value, fused_value, start in zip(*finals, initial):
        assert not np.allclose(fused_value, start)  # it moved ...
        np.testing.assert_allclose(fused_value, keras_value, rtol=2e-6, atol=1e-7)  # ... as Keras' AdamW moves

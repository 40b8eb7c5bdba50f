"""bfloat16 discriminators (``training.mixed_precision: bfloat16`` in train-vocoder) on real segments of the bundled
clips. How much faster they are: benchmarks/vocoder_precision.py (no timing here)."""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from test_neural_vocoder import vocoder_cfg  # noqa: F401  (the fixture: the bundled cache, a small vocoder)


def test_bfloat16_discriminators_score_like_float32_ones_and_the_gan_step_trains(vocoder_cfg):  # noqa: F811
    """training.mixed_precision: bfloat16: the discriminators' convolutions compute in bfloat16 on float32 weights;
    with the float32 discriminators' weights they give the same scores to within bfloat16's precision, and an
    alternating step updates both networks with finite float32 losses. The generator stays float32."""
    from myxtts.data.vocoder_segments import VocoderSegments
    from myxtts.training.vocoder_steps import GanSteps
    from myxtts.vocoder.discriminators import build_discriminators
    from myxtts.vocoder.generators import build_generator

    batch = next(iter(VocoderSegments(vocoder_cfg, "train").dataset()))
    mixed_cfg = vocoder_cfg.replace(training=dataclasses.replace(vocoder_cfg.training, mixed_precision="bfloat16"))
    full, mixed = build_discriminators(vocoder_cfg), build_discriminators(mixed_cfg)
    mixed.set_weights(full.get_weights())
    convs = [layer for member in mixed.members for layer in member.convs]
    assert convs and all(layer.compute_dtype == "bfloat16" for layer in convs)
    assert all(variable.dtype == "float32" for variable in mixed.trainable_variables)
    for (full_score, _), (mixed_score, features) in zip(full(batch["audio"]), mixed(batch["audio"])):
        assert mixed_score.dtype == tf.bfloat16 and features[0].dtype == tf.bfloat16
        full_score, mixed_score = np.asarray(full_score), np.asarray(tf.cast(mixed_score, tf.float32))
        assert np.abs(mixed_score - full_score).max() <= 0.05 * np.abs(full_score).max() + 1e-3
    generator = build_generator(mixed_cfg)
    assert all(variable.dtype == "float32" for variable in generator.weights) and generator.compute_dtype == "float32"
    before = [np.asarray(v).copy() for v in (*generator.trainable_variables, *mixed.trainable_variables)]
    out = GanSteps(mixed_cfg, generator, mixed).adversarial_step(batch)
    assert all(out[key].dtype == tf.float32 and np.isfinite(float(out[key]))
               for key in ("total", "discriminator", "adversarial", "feature_matching"))
    after = [np.asarray(v) for v in (*generator.trainable_variables, *mixed.trainable_variables)]
    changed = [not np.array_equal(b, a) for b, a in zip(before, after)]
    assert any(changed[:len(generator.trainable_variables)]) and any(changed[len(generator.trainable_variables):])

"""model.pitch_conditioning on real clips: the token pitch targets, a model that adds pitch to one without it starts
as that model, and its predictor and embedding learn; model.pitch_level: the level targets, the absolute token pitch
the decoder hears, the head that predicts the level at synthesis, and its learning."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from test_parallel_model import parallel_config
from train_helpers import compiled_train_step


def _real_batches(cfg, count: int = 2) -> list[dict]:
    from myxtts.data.pipeline import InputPipeline

    seen = {}
    for batch in InputPipeline(cfg, "train").dataset(repeat=False):
        seen.setdefault(tuple(batch["mel"].shape[:2]), batch)
        if len(seen) == count:
            break
    return list(seen.values())


def _expected_token_pitch(f0: np.ndarray, mel_length: int, hard: np.ndarray) -> np.ndarray:
    """The targets by their definition (model/pitch.py), one utterance in numpy."""
    voiced = np.zeros(f0.shape, bool)
    voiced[:mel_length] = f0[:mel_length] > 0
    log_f0 = np.log(f0[voiced])
    inliers = log_f0[np.abs(log_f0 - log_f0.mean()) <= 2.5 * max(log_f0.std(), 0.02)]  # octave errors left out
    standardized = np.zeros(f0.shape)
    standardized[voiced] = np.clip((log_f0 - inliers.mean()) / max(inliers.std(), 0.02), -4, 4)
    weight = hard * voiced[:, None]  # [frames, tokens]
    count = weight.sum(axis=0)
    return np.where(count > 0, (standardized[:, None] * weight).sum(axis=0) / np.maximum(count, 1), 0.0)


def test_token_pitch_is_each_tokens_mean_standardised_log_f0_over_its_voiced_frames(prepared_cache):
    from myxtts.model import build_model
    from myxtts.model.pitch import standardized_log_f0, token_pitch_targets
    from myxtts.text import Vocabulary

    cfg = parallel_config(prepared_cache, model={"pitch_conditioning": True})
    model = build_model(cfg, len(Vocabulary.load(cfg.cache_dir / "vocab.json")))
    for batch in _real_batches(cfg):  # two buckets of real clips of unequal lengths
        outputs = model(batch, training=False)
        targets = outputs["token_pitch"].numpy()  # [batch, tokens]
        hard, f0 = outputs["hard_alignment"].numpy(), batch["pitch"].numpy()
        np.testing.assert_array_equal(targets, token_pitch_targets(batch["pitch"], batch["mel_lengths"],
                                                                    outputs["hard_alignment"]).numpy())
        for item, (tokens, frames) in enumerate(zip(batch["token_lengths"].numpy(), batch["mel_lengths"].numpy())):
            np.testing.assert_allclose(targets[item], _expected_token_pitch(f0[item], frames, hard[item]), atol=1e-4)
            assert not targets[item, tokens:].any()
            assert (targets[item, :tokens] != 0).sum() > tokens // 3  # most tokens have a voiced frame
        values, voiced = standardized_log_f0(batch["pitch"], batch["mel_lengths"])
        for item in range(values.shape[0]):  # a contour: each utterance's level removed, unit spread
            contour = values.numpy()[item][voiced.numpy()[item]]
            inliers = contour[np.abs(contour) <= 2.5]
            assert abs(inliers.mean()) < 0.1 and 0.85 < inliers.std() < 1.05
            assert inliers.size > 0.9 * contour.size
        assert outputs["pitch_predictions"].shape == targets.shape


def test_adding_pitch_to_a_model_starts_from_it_and_then_learns(prepared_cache):
    from myxtts.model import build_model, compute_losses
    from myxtts.text import Vocabulary
    from myxtts.training.warm_start import copy_weights

    keras.utils.set_random_seed(1)  # a reproducible start: 20 steps of a whole model are a noisy trajectory
    vocabulary = Vocabulary.load(prepared_cache.cache_dir / "vocab.json")
    plain_cfg = parallel_config(prepared_cache)
    cfg = parallel_config(prepared_cache, model={"pitch_conditioning": True, "pitch_level": True})
    plain, model = build_model(plain_cfg, len(vocabulary)), build_model(cfg, len(vocabulary))
    copied, fresh, dropped = copy_weights(model, plain, vocabulary, vocabulary)
    assert copied == len(plain.weights) and fresh and not dropped
    assert {path.split("/")[1] for path in fresh} == {"pitch_predictor", "pitch_embedding", "pitch_level"}
    batch = _real_batches(cfg, count=1)[0]
    # the embedding starts at zero: with the recordings' pitch (training) or the predicted one (the batch without it:
    # synthesis) the model says exactly what the model without pitch says
    without = {key: value for key, value in batch.items() if key != "pitch"}
    expected = plain(without)["mel_after"].numpy()
    for inputs in (batch, without):
        np.testing.assert_allclose(model(inputs)["mel_after"].numpy(), expected, atol=1e-5)

    # then it learns: the predictor fits the recordings' token pitch and the embedding leaves zero
    batch = {key: value[:3] for key, value in batch.items()}  # three real clips of unequal lengths
    signature = {key: tf.TensorSpec(value.shape, value.dtype) for key, value in batch.items()}
    train_step = compiled_train_step(model, cfg, signature)
    # the pitch losses, compiled: eagerly, the alignment search steps frame by frame in Python
    pitch_losses = tf.function(lambda inputs: [compute_losses(inputs, model(inputs), cfg)[key]
                                               for key in ("pitch", "pitch_level")],
                               input_signature=[signature], autograph=False)
    before = np.array(pitch_losses(batch))
    during = []  # the whole model trains: the encodings the predictor reads and the alignment's targets move too
    for step in range(20):
        assert np.isfinite(float(train_step(batch, tf.constant([0, step], tf.int64))))
        if step + 1 in (10, 15, 20):
            during.append(np.array(pitch_losses(batch)))
    # untrained predictors say 0: their losses stay near the targets' mean squares
    assert (np.min(during, axis=0) < 0.7 * before).all(), (before, during)
    assert np.abs(model.pitch_embedding.conv.kernel.numpy()).max() > 0
    assert train_step.experimental_get_tracing_count() == 1
    # the other way, the trained pitch modules are left out and named; the rest is the trained model's
    back = copy_weights(plain, model, vocabulary, vocabulary)  # plain is not read again: no third model built
    assert back.copied == len(plain.weights) and not back.fresh and sorted(back.dropped) == sorted(fresh)


def test_pitch_level_is_the_utterances_and_the_decoder_hears_it_on_the_contour(prepared_cache):
    """model.pitch_level: each utterance's level is its inlier mean and spread of log F0; the decoder hears the
    absolute token pitch (the level where a token has no voiced frame); at synthesis the head's level takes the
    recordings' place."""
    from myxtts.model import build_model
    from myxtts.model.pitch import LEVEL_CENTER_HZ, LEVEL_SCALE, LEVEL_STD, absolute_token_pitch
    from myxtts.text import Vocabulary

    cfg = parallel_config(prepared_cache, model={"pitch_conditioning": True, "pitch_level": True})
    model = build_model(cfg, len(Vocabulary.load(cfg.cache_dir / "vocab.json")))
    rng = np.random.default_rng(0)
    for layer in (model.pitch_embedding.conv, model.pitch_level.output_proj):  # both start at zero
        layer.kernel.assign(rng.normal(0.0, 0.05, layer.kernel.shape).astype(np.float32))
    batch = _real_batches(cfg, count=1)[0]  # real clips of unequal lengths, with their F0
    outputs = model(batch)
    level, f0 = outputs["pitch_level"].numpy(), batch["pitch"].numpy()  # [batch, 2], [batch, frames]
    assert outputs["pitch_level_voiced"].numpy().all()
    for item, frames in enumerate(batch["mel_lengths"].numpy()):
        log_f0 = np.log(f0[item, :frames][f0[item, :frames] > 0])
        inliers = log_f0[np.abs(log_f0 - log_f0.mean()) <= 2.5 * log_f0.std()]
        expected = [(inliers.mean() - np.log(LEVEL_CENTER_HZ)) / LEVEL_SCALE, np.log(inliers.std() / LEVEL_STD)]
        np.testing.assert_allclose(level[item], expected, atol=1e-4)
    assert np.ptp(level[:, 0]) > 0.01  # clips differ in level
    contour = outputs["token_pitch"]  # [batch, tokens] standardised
    absolute = absolute_token_pitch(contour, level).numpy()
    mean, std = level[:, :1] * LEVEL_SCALE + np.log(LEVEL_CENTER_HZ), LEVEL_STD * np.exp(level[:, 1:])
    np.testing.assert_allclose(absolute, (mean + std * contour.numpy() - np.log(LEVEL_CENTER_HZ)) / LEVEL_SCALE,
                               atol=1e-5)
    # the decoder hears the level: the recordings' in training, the head's prediction at synthesis
    text = model.encode_text(batch["tokens"], batch["token_lengths"])
    latents = model.encode_reference(batch["reference_mel"], batch["reference_lengths"])
    hard, lengths = outputs["hard_alignment"], batch["mel_lengths"]
    forced = model.decode(text, hard, lengths, latents, token_pitch=contour, pitch_level=level)[1].numpy()
    np.testing.assert_allclose(outputs["mel_after"].numpy(), forced, atol=1e-5)
    higher = model.decode(text, hard, lengths, latents, token_pitch=contour, pitch_level=level + [0.5, 0.0])[1]
    assert np.abs(higher.numpy() - forced).max() > 1e-3
    predicted = outputs["pitch_level_predictions"]
    assert np.abs(predicted.numpy() - level).max() > 0.01  # an untrained head: not the recordings' level
    said = model.decode(text, hard, lengths, latents)[1].numpy()  # synthesis: no pitch given
    contour_said = model.pitch_predictor(text, batch["token_lengths"])
    np.testing.assert_allclose(said, model.decode(text, hard, lengths, latents, token_pitch=contour_said,
                                                  pitch_level=predicted)[1].numpy(), atol=1e-5)


def _pitch_model(prepared_cache, pitch_variation: float):
    """A tiny pitch-conditioned model whose predictor and embedding say something (both start at zero)."""
    from myxtts.model import build_model
    from myxtts.text import Vocabulary

    vocabulary = Vocabulary.load(prepared_cache.cache_dir / "vocab.json")
    cfg = parallel_config(prepared_cache, model={"pitch_conditioning": True, "pitch_variation": pitch_variation})
    model = build_model(cfg, len(vocabulary))
    rng = np.random.default_rng(0)
    for layer in (model.pitch_predictor.output_proj, model.pitch_embedding.conv):
        layer.kernel.assign(rng.normal(0.0, 0.05, layer.kernel.shape).astype(np.float32))
    return cfg, model, vocabulary


def test_pitch_variation_scales_the_predicted_contour_in_synthesis_only(prepared_cache):
    """model.pitch_variation: the decoder hears the predicted token pitch times the key (about the utterance's mean,
    0) when it says a mel; with the recordings' pitch (training, teacher forcing) it hears them as they are."""
    cfg, model, _ = _pitch_model(prepared_cache, 1.5)
    assert model.pitch_variation == 1.5
    batch = _real_batches(cfg, count=1)[0]  # real clips of unequal lengths, with their F0
    outputs = model(batch)
    text = model.encode_text(batch["tokens"], batch["token_lengths"])
    latents = model.encode_reference(batch["reference_mel"], batch["reference_lengths"])
    hard, lengths = outputs["hard_alignment"], batch["mel_lengths"]
    predicted = model.pitch_predictor(text, batch["token_lengths"])  # [batch, tokens]
    assert float(tf.reduce_max(tf.abs(predicted))) > 0.01
    said = model.decode(text, hard, lengths, latents)[1].numpy()  # synthesis: no pitch given
    scaled = model.decode(text, hard, lengths, latents, token_pitch=1.5 * predicted)[1].numpy()
    as_predicted = model.decode(text, hard, lengths, latents, token_pitch=predicted)[1].numpy()
    np.testing.assert_allclose(said, scaled, atol=1e-5)
    assert np.abs(said - as_predicted).max() > 1e-3
    # the recordings' pitch is heard unscaled: the same mel as a model at 1
    model.pitch_variation = 1.0
    np.testing.assert_allclose(model(batch)["mel_after"].numpy(), outputs["mel_after"].numpy(), atol=1e-5)
    np.testing.assert_allclose(model.decode(text, hard, lengths, latents)[1].numpy(), as_predicted, atol=1e-5)


def test_evaluate_compares_the_said_contour_with_the_recordings(prepared_cache):
    """evaluate's pitch measures on real clips of unequal lengths: teacher forcing returns the recordings' token pitch
    and the predictor's; the spread is the said contour's (times model.pitch_variation) over the recordings'."""
    from conftest import BUNDLED_CORPUS
    from myxtts.audio import load_audio
    from myxtts.evaluation.evaluate import pitch_fit, summarize
    from myxtts.synthesis import Synthesizer
    from myxtts.synthesis.teacher_forcing import TeacherForcing

    cfg, model, vocabulary = _pitch_model(prepared_cache, 1.5)
    synthesizer = Synthesizer(cfg, model, vocabulary)
    teacher = TeacherForcing(synthesizer)
    rows = [line.split("|") for line in (BUNDLED_CORPUS / "metadata.csv").read_text().splitlines()[:2]]
    items = []
    for clip, *texts in rows:
        wave = load_audio(BUNDLED_CORPUS / "wavs" / f"{clip}.wav", cfg.audio.sample_rate)
        forced = teacher(texts[-1], synthesizer.frontend(wave).numpy(), wave, wave)
        assert forced.token_pitch.shape == forced.pitch_predictions.shape == forced.tokens.shape
        voiced = forced.token_pitch != 0
        assert voiced.sum() > len(forced.tokens) // 3  # most tokens of real speech have a voiced frame
        fit = pitch_fit(forced, model.pitch_variation)
        real, predicted = forced.token_pitch[voiced], forced.pitch_predictions[voiced]
        np.testing.assert_allclose(fit["pitch_spread"], 1.5 * predicted.std() / real.std(), rtol=1e-5)
        plain = pitch_fit(forced, 1.0)  # the key scales the spread alone
        assert fit["pitch_correlation"] == plain["pitch_correlation"]
        np.testing.assert_allclose(fit["pitch_spread"], 1.5 * plain["pitch_spread"], rtol=1e-6)
        assert -1.0 <= fit["pitch_correlation"] <= 1.0
        items.append({key: 0.0 for key in ("mcd_dtw_db", "teacher_forced_mel_l1", "duration_error",
                                           "aligner_focus_rate", "aligner_diagonality", "real_time_factor",
                                           "length_ratio", "cut_at_maximum")} | fit)
    assert items[0]["pitch_spread"] != items[1]["pitch_spread"]
    assert summarize(items)["pitch_spread"] == np.mean([item["pitch_spread"] for item in items])
    # without the clip's audio the model reads its own prediction: nothing to compare with
    assert pitch_fit(teacher(texts[-1], synthesizer.frontend(wave).numpy(), wave), 1.5) == {}

"""data.voice_warp (myxtts.data.voice_warp): a training example's target and reference mels move along the frequency
axis by one factor, on the prepared bundled corpus (real LJSpeech clips, several buckets, unequal lengths)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import tensorflow as tf

from myxtts.config import ConfigError, config_from_dict
from myxtts.data.cache import FeatureCache
from myxtts.data.pipeline import InputPipeline
from myxtts.data.voice_warp import bin_centres, warp_weights

WIDTH = 0.12
GRID = np.exp(np.linspace(-WIDTH, WIDTH, 49))  # candidate factors, 0.5 % apart


def with_data(cfg, **changes):
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, **changes))


@pytest.fixture(scope="module")
def batches(prepared_cache):
    """(plain, warped) train batches and (plain, warped) validation batches, same seed."""
    cache = FeatureCache.load(prepared_cache)
    warped_cfg = with_data(prepared_cache, voice_warp=WIDTH)

    def take(cfg, split, count, repeat):
        dataset = InputPipeline(cfg, split, cache=cache).dataset(repeat=repeat)
        return [{key: value.numpy() for key, value in batch.items()} for batch in dataset.take(count)]

    return ((take(prepared_cache, "train", 8, True), take(warped_cfg, "train", 8, True)),
            (take(prepared_cache, "validation", 4, False), take(warped_cfg, "validation", 4, False)))


@pytest.fixture(scope="module")
def grid_weights(prepared_cache) -> tuple[np.ndarray, np.ndarray]:
    """(bin centres in Hz, ``[len(GRID), n_mels, n_mels]`` warp matrices of the candidate factors)."""
    audio = prepared_cache.audio
    centres = bin_centres(audio.n_mels, audio.fmin, audio.fmax)
    return centres, np.stack([warp_weights(centres, tf.constant(alpha)).numpy() for alpha in GRID])


def estimate_factor(plain: np.ndarray, warped: np.ndarray, stats, weights: np.ndarray) -> float:
    """The factor of GRID whose warp of ``plain`` (normalised ``[frames, n_mels]``) comes nearest ``warped``."""
    candidates = stats.normalize(np.einsum("fm,gmn->gfn", stats.denormalize(plain), weights))  # [grid, frames, mels]
    return float(GRID[int(np.argmin(np.abs(candidates - warped[None]).mean(axis=(1, 2))))])


def formant_peak(normalized: np.ndarray, stats, centres: np.ndarray) -> float:
    """The frequency (Hz) of the long-term spectrum's strongest peak between 150 Hz and 1.5 kHz (the first formant
    region), refined between bins by a parabola through the log magnitudes."""
    spectrum = np.log(np.exp(stats.denormalize(normalized)).mean(axis=0))  # [n_mels]
    region = np.flatnonzero((centres >= 150) & (centres <= 1500))
    top = region[int(np.argmax(spectrum[region]))]
    before, at, after = spectrum[top - 1], spectrum[top], spectrum[top + 1]
    offset = 0.5 * (before - after) / (before - 2 * at + after)
    return float(np.interp(top + offset, np.arange(len(centres)), centres))


def test_target_and_reference_move_by_one_factor_per_example(prepared_cache, batches, grid_weights) -> None:
    (plain_train, warped_train), _ = batches
    stats = FeatureCache.load(prepared_cache).mel_stats
    centres, weights = grid_weights
    buckets, factors, peak_ratios = set(), [], []
    for plain, warped in zip(plain_train, warped_train):
        assert {key: value.shape for key, value in plain.items()} == {key: value.shape for key, value in warped.items()}
        np.testing.assert_array_equal(plain["tokens"], warped["tokens"])  # the same examples, in the same order
        buckets.add(plain["mel"].shape[1])
        for index in range(len(plain["mel"])):
            frames, reference_frames = plain["mel_lengths"][index], plain["reference_lengths"][index]
            target = estimate_factor(plain["mel"][index, :frames], warped["mel"][index, :frames], stats, weights)
            reference = estimate_factor(plain["reference_mel"][index, :reference_frames],
                                        warped["reference_mel"][index, :reference_frames], stats, weights)
            assert target == pytest.approx(reference, rel=0.006)  # one voice: the same factor, to one grid step
            np.testing.assert_array_equal(warped["mel"][index, frames:], 0.0)  # padding stays zero
            np.testing.assert_array_equal(warped["reference_mel"][index, reference_frames:], 0.0)
            factors.append(target)
            # the voice moved as far as the factor says: the first formant's peak follows it
            peak_ratios.append(formant_peak(warped["mel"][index, :frames], stats, centres)
                               / formant_peak(plain["mel"][index, :frames], stats, centres))
    assert len(buckets) >= 2
    drawn = np.array(factors)
    assert drawn.min() >= math.exp(-WIDTH) - 1e-6 and drawn.max() <= math.exp(WIDTH) + 1e-6
    assert (drawn < 0.97).any() and (drawn > 1.03).any()  # both directions are drawn
    assert len(np.unique(drawn)) >= len(drawn) // 3  # a factor per example, not one per batch
    followed = np.abs(np.array(peak_ratios) / drawn - 1.0) < 0.04
    assert followed.mean() >= 0.8, list(zip(drawn.round(3), np.round(peak_ratios, 3)))


def test_validation_hears_the_corpus_voices_unwarped(batches) -> None:
    _, (plain_validation, warped_validation) = batches
    assert plain_validation
    for plain, warped in zip(plain_validation, warped_validation):
        for key in plain:
            np.testing.assert_array_equal(plain[key], warped[key])


@pytest.mark.parametrize("width", [-0.1, 0.6, float("nan")])
def test_a_warp_outside_its_range_is_refused(tmp_path, width) -> None:
    with pytest.raises(ConfigError, match="data.voice_warp"):
        config_from_dict({"data": {"voice_warp": width}}, base_dir=tmp_path)


def test_train_vocoder_refuses_the_warp(tmp_path) -> None:
    from myxtts.training.vocoder_trainer import VocoderTrainingError, check_vocoder_keys

    with pytest.raises(VocoderTrainingError, match="data.voice_warp"):
        check_vocoder_keys(config_from_dict({"data": {"voice_warp": 0.1}}, base_dir=tmp_path))

"""The generators: the inverse-STFT head is exact, every mel length gives (frames - 1) * hop samples in one trace (both
families), the iSTFTNet family through the trainer, the magnitude prior, the magnitude taken from the mel."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from conftest import bundled_wavs
from myxtts.audio import load_audio
from myxtts.mel import MelFrontend
from myxtts.config import AudioConfig, config_from_dict
from test_neural_vocoder import held_out_mel_error, vocoder_cfg  # noqa: F401  (vocoder_cfg: the fixture)

SMALL_ISTFTNET = {"upsample_channels": 32, "resblock_kernels": (3,), "resblock_dilations": (1, 2)}


def test_inverse_stft_head_reconstructs_a_real_clip():
    """The head's inverse STFT (window-envelope normalised, centre trimmed) is exact on a real clip's STFT, edges
    included: a generator that predicts the right spectrum gives the clip back."""
    from myxtts.vocoder.istft import InverseStft

    audio_cfg = AudioConfig()
    frontend = MelFrontend(audio_cfg)
    wave = load_audio(bundled_wavs(1)[0], audio_cfg.sample_rate)[:40000]
    padded = np.pad(wave, audio_cfg.n_fft // 2, mode="reflect")
    stft = tf.signal.stft(padded[None], audio_cfg.n_fft, audio_cfg.hop_length, window_fn=frontend.window_fn)
    frames = stft.shape[1]
    rebuilt = InverseStft(audio_cfg.n_fft, audio_cfg.hop_length, frontend.window.numpy())(
        tf.math.real(stft), tf.math.imag(stft)).numpy()[0]
    assert rebuilt.shape == ((frames - 1) * audio_cfg.hop_length,)
    np.testing.assert_allclose(rebuilt, wave[:rebuilt.shape[0]], atol=2e-5)


def _istftnet(cfg):
    """``cfg`` with a small iSTFTNet generator instead of the Vocos one."""
    keys = {"family": "istftnet", "dim": None, "intermediate_dim": None, "layers": None,
            **SMALL_ISTFTNET}
    return cfg.replace(vocoder=dataclasses.replace(cfg.vocoder, **keys))


@pytest.mark.parametrize("family", ["vocos", "istftnet"])
def test_output_length_for_any_mel_length_and_one_trace(vocoder_cfg, family):
    from myxtts.vocoder.generators import build_generator
    from myxtts.vocoder.neural import NeuralVocoder

    cfg = vocoder_cfg if family == "vocos" else _istftnet(vocoder_cfg)
    vocoder = NeuralVocoder(build_generator(cfg), cfg.audio)
    assert vocoder.generator.family == family
    hop = vocoder_cfg.audio.hop_length
    for frames in (2, 37, 64, 129, 300):  # unequal lengths, several of the acoustic model's buckets
        wave = vocoder(np.full([frames, 80], -5.0, np.float32)).numpy()
        assert wave.shape == ((frames - 1) * hop,) and np.all(np.isfinite(wave))
    batch = vocoder(np.full([3, 50, 80], -5.0, np.float32)).numpy()
    assert batch.shape == (3, 49 * hop)
    assert vocoder.tracing_count() == 1  # one graph for every length and batch size
    with pytest.raises(ValueError, match="audio.n_mels"):
        vocoder(np.zeros([10, 40], np.float32))


def test_istftnet_family_trains_loads_and_learns(vocoder_cfg, tmp_path):
    """The second family through the same trainer: both steps traced once, never again; the run loads as an
    iSTFTNet; resynthesis of held-out clips beats the untrained generator."""
    from myxtts.training.vocoder_trainer import train_vocoder
    from myxtts.vocoder.generators import build_generator
    from myxtts.vocoder.neural import NeuralVocoder, load_vocoder

    cfg = _istftnet(vocoder_cfg)
    cfg = cfg.replace(training=dataclasses.replace(cfg.training, max_steps=180, validate_every=1000,
                                                   checkpoint_every=180, summary_every=0),
                      vocoder=dataclasses.replace(cfg.vocoder, adversarial_start_step=150))
    summary = train_vocoder(cfg, tmp_path / "run", progress=False, echo=lambda line: None)
    assert summary["steps"] == 180 and summary["retraces_after_warmup"] == 0
    trained = load_vocoder(tmp_path / "run", cfg.audio)
    assert trained.generator.family == "istftnet"
    untrained = NeuralVocoder(build_generator(cfg), cfg.audio)
    assert held_out_mel_error(cfg, trained) < 0.75 * held_out_mel_error(cfg, untrained)


def test_magnitude_prior_starts_from_the_mels_envelope_and_is_part_of_the_generator(vocoder_cfg, tmp_path):
    """``vocoder.magnitude_prior``: untrained, the generator's magnitude is the mel's pseudo-inverse (Griffin-Lim's),
    its head a residual starting at 0; a vocoder trained with it is refused by a config without it (the same weights
    would mean another spectrum), and the key is refused for the iSTFTNet family."""
    from myxtts.vocoder.generators import PRIOR_FLOOR, build_generator
    from myxtts.vocoder.griffin_lim import GriffinLim
    from myxtts.vocoder.neural import VocoderError, restore_generator, save_vocoder

    with_prior = vocoder_cfg.replace(vocoder=dataclasses.replace(vocoder_cfg.vocoder, magnitude_prior=True))
    prior_generator, plain_generator = build_generator(with_prior), build_generator(vocoder_cfg)
    frontend = MelFrontend(vocoder_cfg.audio)
    wave = load_audio(bundled_wavs(1)[0], vocoder_cfg.audio.sample_rate)[:30000]
    log_mel = frontend(wave)[tf.newaxis]  # [1, frames, n_mels]
    expected = np.maximum(GriffinLim(vocoder_cfg.audio).magnitude(log_mel).numpy(), PRIOR_FLOOR)
    np.testing.assert_allclose(prior_generator.spectrum(log_mel)[0].numpy(), expected, rtol=1e-4, atol=1e-7)
    phase_kernel = prior_generator.head.kernel.numpy()[:, vocoder_cfg.audio.n_fft // 2 + 1:]
    assert np.std(phase_kernel) > 0.01  # only the magnitude residual starts at zero, the phase does not
    plain = plain_generator.spectrum(log_mel)[0].numpy()
    assert np.median(np.abs(np.log(plain) - np.log(expected))) > 1.0  # without it: nowhere near the envelope
    save_vocoder(tmp_path / "prior", with_prior, prior_generator)
    with pytest.raises(VocoderError, match=r"magnitude_prior True \(this config: False\)"):
        restore_generator(tmp_path / "prior", vocoder_cfg, plain_generator)
    restore_generator(tmp_path / "prior", with_prior, build_generator(with_prior))
    raw = with_prior.to_dict()
    raw["vocoder"] = {**raw["vocoder"], "family": "istftnet", "dim": None, "intermediate_dim": None, "layers": None}
    with pytest.raises(ValueError, match="vocoder.magnitude_prior' is read only by another vocoder family"):
        config_from_dict(raw, base_dir=vocoder_cfg.base_dir)


def test_magnitude_from_mel_moves_the_output_to_the_mels_magnitude_at_any_length(vocoder_cfg, tmp_path):
    """``vocoder.magnitude_from_mel``: the generator's audio analysed again, its phase kept and its magnitude moved
    towards the mel's pseudo-inverse: the output's mel comes closer to the input's the larger the share (an untrained
    generator's is far from it), every length keeps (frames - 1) * hop samples in one trace, and a vocoder directory
    saved with the key synthesises with it."""
    from myxtts.vocoder.generators import build_generator
    from myxtts.vocoder.neural import NeuralVocoder, load_vocoder, save_vocoder

    frontend = MelFrontend(vocoder_cfg.audio)
    wave = load_audio(bundled_wavs(2)[1], vocoder_cfg.audio.sample_rate)[:40000]
    log_mel = frontend(wave).numpy()  # [frames, n_mels]
    generator = build_generator(vocoder_cfg)
    errors = {}
    for share in (0.0, 0.5, 1.0):
        audio = NeuralVocoder(generator, vocoder_cfg.audio, magnitude_from_mel=share)(log_mel).numpy()
        errors[share] = float(np.abs(frontend(audio).numpy() - log_mel).mean())
    assert errors[1.0] < errors[0.5] < errors[0.0] and errors[1.0] < 0.5 * errors[0.0], errors
    blended = vocoder_cfg.replace(vocoder=dataclasses.replace(vocoder_cfg.vocoder, magnitude_from_mel=0.5))
    vocoder = load_vocoder(save_vocoder(tmp_path / "blended", blended, generator), blended.audio)
    assert vocoder.magnitude_from_mel == 0.5
    hop = vocoder_cfg.audio.hop_length
    for frames in (1, 2, 37, 129):  # shorter than one window too: the analysis pads with zeros, not a reflection
        assert vocoder(log_mel[:frames]).numpy().shape == ((frames - 1) * hop,)
    assert vocoder(np.stack([log_mel[:50], log_mel[60:110]])).numpy().shape == (2, 49 * hop)
    assert vocoder.tracing_count() == 1
    raw = blended.to_dict()
    raw["vocoder"]["magnitude_from_mel"] = 1.5
    with pytest.raises(ValueError, match=r"vocoder.magnitude_from_mel' must be in \[0, 1\]"):
        config_from_dict(raw, base_dir=vocoder_cfg.base_dir)

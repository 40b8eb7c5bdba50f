"""model.reference_spectrum on real clips: the long-term spectrum is the mean of the frames that speak (padding and
silence left out), the conditioning carries the reference's as its last row, the decoder's mel is moved that share of
the way to it (a plain model warm-starts into it with no new variable), and synthesis carries it in the voice with
no retrace."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from test_parallel_model import parallel_config, warm_started
from test_pitch_conditioning import _real_batches
from test_reference_tokens import compiled_voices


def _expected_speech_spectrum(mel: np.ndarray, length: int, within: float) -> np.ndarray:
    """One normalised log mel ``[frames, n_mels]`` in numpy: the mean of its real frames whose mean over the bins is
    within ``within`` of the loudest real frame's."""
    real = mel[:length].astype(np.float64)
    energy = real.mean(axis=1)
    return real[energy >= energy.max() - within].mean(axis=0)


def test_the_spectrum_is_the_mean_of_the_frames_that_speak_never_of_padding_or_silence(prepared_cache):
    from myxtts.model.spectrum import SPEECH_WITHIN, speech_spectrum

    batch = _real_batches(parallel_config(prepared_cache), count=1)[0]
    reference = batch["reference_mel"].numpy()  # [B, reference_frames, n_mels] real clips, zero past each length
    lengths = batch["reference_lengths"].numpy().copy()
    lengths[0] = reference.shape[1] // 2
    assert len(set(lengths.tolist())) > 1
    frames = np.arange(reference.shape[1])[None, :, None]
    padded = np.where(frames < lengths[:, None, None], reference, 1e3)  # garbage past each length
    mask = tf.sequence_mask(lengths, reference.shape[1])
    spectrum = speech_spectrum(tf.constant(padded, tf.float32), mask).numpy()  # [B, n_mels]
    for row, length in enumerate(lengths):
        expected = _expected_speech_spectrum(reference[row], int(length), SPEECH_WITHIN)
        np.testing.assert_allclose(spectrum[row], expected, rtol=1e-4, atol=1e-4)
    # the clips' quiet frames (pauses, room noise) are left out: the spectrum is louder than the plain mean
    plain_mean = np.stack([reference[row, :length].mean(axis=0) for row, length in enumerate(lengths)])
    assert (spectrum.mean(axis=1) > plain_mean.mean(axis=1)).all()
    # silence added after the halved clip changes its plain mean, not its spectrum
    silent = reference.copy()
    length = int(lengths[0])
    silence = min(86, reference.shape[1] - length)  # up to a second
    assert silence > 20
    silent[0, length:length + silence] = reference[0, :length].min() - 1.0
    longer = lengths.copy()
    longer[0] = length + silence
    again = speech_spectrum(tf.constant(silent, tf.float32), tf.sequence_mask(longer, reference.shape[1])).numpy()
    np.testing.assert_allclose(again[0], spectrum[0], rtol=1e-5, atol=1e-5)
    assert np.abs(silent[0, :length + silence].mean(axis=0) - plain_mean[0]).max() > 0.1
    # an item with no real frame gives zeros, not NaN
    empty = speech_spectrum(tf.constant(padded[:1], tf.float32), tf.zeros([1, reference.shape[1]], tf.bool)).numpy()
    assert np.array_equal(empty, np.zeros_like(empty))


@pytest.mark.parametrize("share", [0.5])
def test_the_decoded_mel_moves_that_share_of_the_way_to_the_references_spectrum(prepared_cache, share):
    from myxtts.model.spectrum import speech_spectrum

    plain, model, cfg, fresh = warm_started(prepared_cache, {"reference_spectrum": share})
    assert fresh == []  # no variable: the plain model's weights are all it has
    batch = {key: value[:2] for key, value in _real_batches(cfg, count=1)[0].items()}  # unequal lengths, two clips
    latents = model.encode_reference(batch["reference_mel"], batch["reference_lengths"])
    k, n_mels = model.dims.num_speaker_latents, model.dims.n_mels
    rows = model.dims.spectrum_rows  # the test model's d (32) is narrower than n_mels (80): three rows
    assert rows == -(-n_mels // model.dims.d_model) and rows > 1
    assert latents.shape == (2, k + rows, model.dims.d_model)
    reference_mask = tf.sequence_mask(batch["reference_lengths"], batch["reference_mel"].shape[1])
    reference_spectrum = speech_spectrum(batch["reference_mel"], reference_mask).numpy()
    carried = latents[:, k:].numpy().reshape(2, -1)  # [2, rows * d]
    np.testing.assert_allclose(carried[:, :n_mels], reference_spectrum, rtol=1e-5, atol=1e-5)
    assert not carried[:, n_mels:].any()
    # the pooled latents are the plain model's
    plain_latents = plain.encode_reference(batch["reference_mel"], batch["reference_lengths"])
    np.testing.assert_allclose(latents[:, :k].numpy(), plain_latents.numpy(), atol=1e-6)

    hard = model(batch)["hard_alignment"]
    text = model.encode_text(batch["tokens"], batch["token_lengths"])
    mel_lengths = batch["mel_lengths"]
    own_before, _ = plain.decode(text, hard, mel_lengths, plain_latents)
    moved_before, _ = model.decode(text, hard, mel_lengths, latents)
    mask = tf.sequence_mask(mel_lengths, hard.shape[1])
    own = speech_spectrum(own_before, mask).numpy()
    moved = speech_spectrum(moved_before, mask).numpy()
    np.testing.assert_allclose(moved, own + share * (reference_spectrum - own), rtol=1e-4, atol=1e-4)
    assert np.abs(reference_spectrum - own).max() > 0.1  # an untrained decoder's spectrum is not the voice's
    # a constant shift per bin, every real frame alike, and zero past each length
    shift = moved_before.numpy() - own_before.numpy()
    for row, length in enumerate(mel_lengths.numpy()):
        np.testing.assert_allclose(shift[row, :length], np.broadcast_to(shift[row, :1], shift[row, :length].shape),
                                   atol=1e-4)
        assert not moved_before.numpy()[row, length:].any()


def test_synthesis_carries_the_spectrum_in_the_voice_without_retracing(prepared_cache):
    model, decoder, voices, (tokens, lengths), traced = compiled_voices(prepared_cache, {"reference_spectrum": 1.0})
    rows = model.dims.spectrum_rows
    assert model.dims.conditioning_vectors == model.dims.num_speaker_latents + rows
    # one sentence, two voices whose pooled latents are the same and whose spectrum is another clip's
    voice = np.stack([voices[0], np.concatenate([voices[0, :-rows], voices[1, -rows:]])])
    mel = decoder(tokens, lengths, voice)
    length = int(mel["mel_lengths"][0])
    assert length == int(mel["mel_lengths"][1]) and length > 0
    assert np.abs(mel["mel"][0, :length] - mel["mel"][1, :length]).max() > 1e-2
    assert decoder.tracing_count() == traced


@pytest.mark.parametrize("model, message", [
    ({"decoder": "autoregressive", "reference_spectrum": 0.5}, "reference_spectrum.*does nothing"),
    ({"reference_spectrum": 1.5}, "reference_spectrum' must be a share in"),
    ({"reference_spectrum": float("nan")}, "reference_spectrum' must be a share in"),
])
def test_the_share_is_checked(model, message):
    from myxtts.config import config_from_dict

    with pytest.raises(ValueError, match=message):
        config_from_dict({"model": model})

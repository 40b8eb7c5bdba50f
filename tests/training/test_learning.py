"""Learning check: the tiny autoregressive model trained briefly on 6 bundled clips lowers MCD-DTW on those clips
(teacher-forced by >= 30%, free-running by >= 20%), and its duration predictor learns speech-like lengths.

TEACHER-FORCED: the aligner's durations on the real audio, the decoder fed the true previous frames, postnet
output, Griffin-Lim, MCD-DTW against the real audio. FREE-RUNNING (the real target): the compiled synthesis
path, predicted durations, the decoder reading its own frames. Measured on 2 CPU cores, 150 steps (26 s):
teacher-forced 58.6 -> 29.2 dB (-50%), free-running 57.1 -> 34.6 dB (-39%); predicted lengths 0.75-1.48x
the recordings' per clip (1.06x in all; 1.05x after 250 steps). The alignment itself is tested in test_alignment.py.
A minimal compiled training loop (model + compute_losses, one static batch shape) keeps the test
independent of the trainer's run-directory machinery.
"""

from __future__ import annotations

import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import BUNDLED_CORPUS
from train_helpers import compiled_train_step

CLIPS = 6
STEPS = 150


def _batch(cfg, processor, entries):
    from myxtts.audio import load_audio
    from myxtts.mel import MelFrontend

    frontend = MelFrontend(cfg.audio)
    waves = [load_audio(e.audio_path, cfg.audio.sample_rate) for e in entries]
    mels = [frontend(w).numpy() for w in waves]
    tokens = [processor.encode(e.text) for e in entries]
    r, ref_frames = cfg.model.reduction_factor, cfg.data.reference_frames
    frames = max(m.shape[0] for m in mels)
    frames += (-frames) % r
    batch = {"tokens": np.zeros([len(entries), max(map(len, tokens))], np.int32),
             "token_lengths": np.array([len(t) for t in tokens], np.int32),
             "mel": np.zeros([len(entries), frames, cfg.audio.n_mels], np.float32),
             "mel_lengths": np.array([m.shape[0] for m in mels], np.int32),
             "reference_mel": np.zeros([len(entries), ref_frames, cfg.audio.n_mels], np.float32),
             "reference_lengths": np.zeros([len(entries)], np.int32), "speaker_ids": np.zeros([len(entries)], np.int32)}
    for i, (ids, mel) in enumerate(zip(tokens, mels)):
        batch["tokens"][i, : len(ids)] = ids
        batch["mel"][i, : mel.shape[0]] = mel
        other = mels[(i + 1) % len(mels)][:ref_frames]  # another clip of the speaker, like the pipeline
        batch["reference_mel"][i, : other.shape[0]] = other
        batch["reference_lengths"][i] = other.shape[0]
    return {k: tf.constant(v) for k, v in batch.items()}, waves


def _teacher_forced_mcd(model, batch, waves, vocoder, rate) -> float:
    from myxtts.evaluation.metrics import mel_cepstral_distortion

    mel = model(batch, training=False)["mel_after"].numpy()
    lengths = batch["mel_lengths"].numpy()
    return float(np.mean([mel_cepstral_distortion(wave, np.asarray(vocoder(mel[i, : lengths[i]])), rate)
                          for i, wave in enumerate(waves)]))


def _free_running_mcd(cfg, synthesizer, batch, waves, vocoder) -> tuple[float, list[bool]]:
    from myxtts.evaluation.metrics import mel_cepstral_distortion

    lengths = batch["token_lengths"].numpy()
    engine = synthesizer.engine
    voices = engine.latents(list(batch["reference_mel"].numpy()), list(batch["reference_lengths"].numpy()))
    results = engine.decode_tokens([batch["tokens"].numpy()[i, : lengths[i]] for i in range(len(waves))],
                                   list(voices), batch_size=len(waves))
    scores = [mel_cepstral_distortion(wave, np.asarray(vocoder(result.mel)), cfg.audio.sample_rate)
              for wave, result in zip(waves, results)]
    return float(np.mean(scores)), [r.frames for r in results]


@pytest.mark.slow
def test_training_lowers_mcd_on_its_clips(make_config):
    from myxtts.data.corpus import read_corpus
    from myxtts.model import build_model
    from myxtts.synthesis import Synthesizer
    from myxtts.text import TextProcessor, Vocabulary
    from myxtts.vocoder import GriffinLim

    cfg = make_config(data={"reference_frames": 96, "max_text_length": 192},
                      model={"preset": "tiny", "decoder": "autoregressive", "reduction_factor": 2, "dropout": 0.05},
                      audio={"griffin_lim_iters": 16})
    import soundfile

    entries = read_corpus(BUNDLED_CORPUS, "ljspeech").entries
    entries = sorted(entries, key=lambda e: soundfile.info(str(e.audio_path)).frames)[:CLIPS]  # shortest clips
    vocabulary = Vocabulary.for_config(cfg.text)
    batch, waves = _batch(cfg, TextProcessor(cfg.text, vocabulary), entries)
    keras.utils.set_random_seed(7)
    model = build_model(cfg, len(vocabulary))
    vocoder = GriffinLim(cfg.audio)
    rate = cfg.audio.sample_rate

    tf_before = _teacher_forced_mcd(model, batch, waves, vocoder, rate)
    # one synthesizer before and after training: its compiled functions read the model's variables
    synthesizer = Synthesizer(cfg, model, vocabulary, vocoder=vocoder)
    fr_before, _ = _free_running_mcd(cfg, synthesizer, batch, waves, vocoder)

    signature = {k: tf.TensorSpec(v.shape, v.dtype) for k, v in batch.items()}
    train_step = compiled_train_step(model, cfg, signature)

    started = time.perf_counter()
    losses = [float(train_step(batch, tf.constant([step, 0], tf.int64))) for step in range(STEPS)]
    train_seconds = time.perf_counter() - started
    assert train_step.experimental_get_tracing_count() == 1

    tf_after = _teacher_forced_mcd(model, batch, waves, vocoder, rate)
    fr_after, frames = _free_running_mcd(cfg, synthesizer, batch, waves, vocoder)
    print(f"\nlearning check ({CLIPS} clips, {STEPS} steps, {train_seconds:.0f} s): loss {losses[0]:.3f} -> "
          f"{losses[-1]:.3f}; MCD-DTW teacher-forced {tf_before:.2f} -> {tf_after:.2f} dB "
          f"({1 - tf_after / tf_before:.0%} lower); free-running {fr_before:.2f} -> {fr_after:.2f} dB "
          f"({1 - fr_after / fr_before:.0%} lower); frames predicted {frames}, real "
          f"{batch['mel_lengths'].numpy().tolist()}")
    assert losses[-1] < 0.5 * losses[0]
    # the duration predictor has learnt speech-like lengths (untrained: about one frame per token)
    real = batch["mel_lengths"].numpy()
    assert 0.8 * real.sum() <= sum(frames) <= 1.25 * real.sum(), (frames, real)
    assert tf_after <= 0.7 * tf_before, (tf_before, tf_after)
    assert fr_after <= 0.8 * fr_before, (fr_before, fr_after)

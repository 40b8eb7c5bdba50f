"""Voice cloning: a model trained on two espeak-ng voices speaks in the voice of its reference clip.

Two clearly different voices (a low male and a high female espeak-ng voice) read the same short
sentences. The tiny model (the default parallel decoder) trains on them for 120 steps (each clip's reference:
another clip of the same voice, as the pipeline does), then synthesizes held-out texts with a reference of each
voice. Asserted:
- the reference reaches the output: swapping the reference voice moves the output mel by a sizeable
  fraction of the difference between the two real voices (>= 0.5x; the old shared-softmax latents moved it by
  under 1% of it);
- the output moves towards the reference's voice: for every held-out text, the difference between the
  outputs with the low and the high voice's reference points the same way as the difference between the
  two real voices (cosine of their mean log-mel spectra, the voices' spectral envelope and pitch
  harmonics averaged over the utterance, >= 0.7).
The model learns to use the reference abruptly, between about 40 and 100 steps depending on the seed and the
CPU's arithmetic: 60 steps passed on one machine and failed on another, so the test trains past that
transition (4 seeds on an AVX2 CPU, 120 steps: >= 0.95x and cosine >= 0.86).
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import BUNDLED_CORPUS
from train_helpers import compiled_train_step

STEPS = 120
TRAIN_SENTENCES = 4  # per voice
HELD_OUT = 2
REFERENCE_FRAMES = 96


def _render(tmp_path, voices, texts):
    from myxtts.data.espeak_corpus import open_renderer

    clips = {}
    with open_renderer() as renderer:
        for voice in voices:
            for index, text in enumerate(texts):
                path = tmp_path / f"{voice.name}_{index}.wav"
                voice.write(renderer, text, path)
                clips.setdefault(voice.name, []).append(path)
    return clips


def _mean_spectrum(mel: np.ndarray) -> np.ndarray:
    """Mean log-mel over the loud frames ``[n_mels]``: a voice's average spectrum, not its words."""
    loudness = mel.max(axis=1)
    return mel[loudness > loudness.max() - 4.0].mean(axis=0)


@pytest.mark.slow
def test_reference_voice_sets_the_output_voice(make_config, tmp_path):
    from myxtts.audio import load_audio
    from myxtts.mel import MelFrontend
    from myxtts.data.espeak_corpus import VOICES
    from myxtts.model import build_model
    from myxtts.synthesis import Synthesizer
    from myxtts.text import TextProcessor, Vocabulary

    cfg = make_config(data={"reference_frames": REFERENCE_FRAMES, "max_text_length": 192},
                      model={"preset": "tiny", "dropout": 0.05})
    texts = sorted((line.split("|")[1] for line in (BUNDLED_CORPUS / "metadata.csv").read_text(
        encoding="utf-8").splitlines()), key=len)[: TRAIN_SENTENCES + HELD_OUT]
    low, high = VOICES[0], VOICES[3]  # us_m3 (pitch 35) and us_f4 (pitch 80)
    clips = _render(tmp_path, (low, high), texts)
    frontend = MelFrontend(cfg.audio)
    mels = {name: [frontend(load_audio(path, cfg.audio.sample_rate)).numpy() for path in paths]
            for name, paths in clips.items()}
    vocabulary = Vocabulary.for_config(cfg.text)
    processor = TextProcessor(cfg.text, vocabulary)
    rng = np.random.default_rng(0)

    # one static batch shape: every training clip of both voices, references re-drawn every step
    items = [(name, index) for name in mels for index in range(TRAIN_SENTENCES)]
    tokens = [processor.encode(texts[index]) for _, index in items]
    frames = max(mels[name][index].shape[0] for name, index in items)
    frames += frames % 2

    def batch():
        out = {"tokens": np.zeros([len(items), max(map(len, tokens))], np.int32),
               "token_lengths": np.array([len(t) for t in tokens], np.int32),
               "mel": np.zeros([len(items), frames, 80], np.float32),
               "mel_lengths": np.array([mels[n][i].shape[0] for n, i in items], np.int32),
               "reference_mel": np.zeros([len(items), REFERENCE_FRAMES, 80], np.float32),
               "reference_lengths": np.zeros([len(items)], np.int32), "speaker_ids": np.zeros([len(items)], np.int32)}
        for row, ((name, index), ids) in enumerate(zip(items, tokens)):
            out["tokens"][row, : len(ids)] = ids
            out["mel"][row, : mels[name][index].shape[0]] = mels[name][index]
            other = rng.choice([i for i in range(TRAIN_SENTENCES) if i != index])  # never the target itself
            start = rng.integers(max(1, mels[name][other].shape[0] - REFERENCE_FRAMES))
            crop = mels[name][other][start: start + REFERENCE_FRAMES]
            out["reference_mel"][row, : crop.shape[0]] = crop
            out["reference_lengths"][row] = crop.shape[0]
        return {key: tf.constant(value) for key, value in out.items()}

    keras.utils.set_random_seed(7)
    model = build_model(cfg, len(vocabulary))
    signature = {key: tf.TensorSpec(value.shape, value.dtype) for key, value in batch().items()}
    train_step = compiled_train_step(model, cfg, signature)

    losses = [float(train_step(batch(), tf.constant([step, 0], tf.int64))) for step in range(STEPS)]
    assert losses[-1] < 0.5 * losses[0]

    synthesizer = Synthesizer(cfg, model, vocabulary)
    references = {name: load_audio(clips[name][0], cfg.audio.sample_rate) for name in clips}
    real = {name: np.mean([_mean_spectrum(m) for m in mels[name][:TRAIN_SENTENCES]], axis=0) for name in mels}
    voice_gap = float(np.abs(real[low.name] - real[high.name]).mean())
    held_out = texts[TRAIN_SENTENCES:]
    outputs = {name: [result.mel for result in synthesizer.synthesize(held_out, reference, vocode=False)]
               for name, reference in references.items()}
    real_direction = real[low.name] - real[high.name]  # [n_mels]
    moved, cosines = [], []
    for index in range(len(held_out)):
        direction = _mean_spectrum(outputs[low.name][index]) - _mean_spectrum(outputs[high.name][index])
        moved.append(float(np.abs(direction).mean()))
        cosines.append(float(direction @ real_direction / (np.linalg.norm(direction) * np.linalg.norm(real_direction))))
    print(f"\nvoice cloning: loss {losses[0]:.2f} -> {losses[-1]:.2f}; real voices differ by {voice_gap:.3f} "
          f"(mean |log-mel|); swapping the reference moves the output by {moved}, cosine with the real voices' "
          f"difference {cosines}")
    assert min(moved) >= 0.5 * voice_gap, (moved, voice_gap)
    # measured 0.85 (60 steps), 0.96-0.98 (100); an unconditioned output points anywhere (~0)
    assert min(cosines) >= 0.7, cosines

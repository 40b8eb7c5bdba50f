"""Benchmark: compiled tf.while_loop decoding with a KV cache vs an eager Python loop without a cache.

Same weights (the tiny preset, freshly initialised: untrained, so its stop token is meaningless and
every text is decoded for a fixed number of steps = tokens x the median frames-per-token of LJSpeech /
reduction factor, identical on both paths), same texts, same reference clip.

- compiled: ``Synthesizer.decoder`` (one graph per (batch, text bucket), warmed up before timing);
- baseline: a Python loop calling the model's full decoder (teacher-forced ``model.decoder``) once per
  step on the whole prefix, eager, no cache: step s re-runs all s previous positions.

Prints JSON: machine, seconds, real-time factors (decode only; and compiled + Griffin-Lim), speed-up,
compile counts. Run: ``.venv/bin/python benchmarks/synthesis.py [--texts 4] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FRAMES_PER_TOKEN = 5.5  # median of the bundled LJSpeech clips (characters, hop 256)


def eager_uncached_decode(model, tokens, token_lengths, reference_mel, reference_lengths, steps: int) -> np.ndarray:
    """The naive loop: every step runs the full decoder over the whole prefix (no KV cache, eager)."""
    r, n_mels = model.dims.reduction_factor, model.dims.n_mels
    text = model.encode_text(tokens, token_lengths)
    latents = model.encode_reference(reference_mel, reference_lengths)
    memory, memory_mask = model.build_memory(text, token_lengths, latents)
    inputs = np.zeros([1, 1, r * n_mels], np.float32)  # [1, steps so far, r*n_mels]: step 0 sees zeros
    frames = []
    for _ in range(steps):
        mel_before, stop_logits, _ = model.decoder(tf.constant(inputs), memory, memory_mask, training=False)
        newest = mel_before.numpy()[:, -r:]  # [1, r, n_mels]: the last step's frames
        frames.append(newest)
        inputs = np.concatenate([inputs, newest.reshape(1, 1, r * n_mels)], axis=1)
    mel = np.concatenate(frames, axis=1)  # [1, steps*r, n_mels]
    return model.apply_postnet(tf.constant(mel), tf.constant([steps * r])).numpy()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=4, help="number of LJSpeech transcripts to decode")
    parser.add_argument("--json", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()

    from myxtts.audio import MelFrontend, load_audio
    from myxtts.config import config_from_dict
    from myxtts.data.mel_stats import MelStats
    from myxtts.evaluate import machine_description
    from myxtts.model import build_model
    from myxtts.synthesis import Synthesizer, save_run
    from myxtts.text import Vocabulary

    corpus = REPO / "data" / "ljspeech-bundled"
    lines = [line.split("|") for line in (corpus / "metadata.csv").read_text(encoding="utf-8").splitlines()]
    texts = [line[2] for line in lines[: args.texts]]
    reference = corpus / "wavs" / f"{lines[-1][0]}.wav"
    with tempfile.TemporaryDirectory() as root:
        cfg = config_from_dict({"data": {"corpus_path": str(corpus), "cache_dir": f"{root}/no-cache",
                                         "max_text_length": 192, "reference_frames": 96},
                                "model": {"preset": "tiny"}}, base_dir=root)
        vocabulary = Vocabulary.for_config(cfg.text)
        keras.utils.set_random_seed(0)
        frontend = MelFrontend(cfg.audio)  # no cache: the statistics of the bundled clips, as prepare computes them
        mel_stats = MelStats.from_mels(frontend(load_audio(path, cfg.audio.sample_rate)).numpy()
                                       for path in sorted((corpus / "wavs").glob("*.wav")))
        save_run(Path(root) / "run", cfg, build_model(cfg, len(vocabulary)), vocabulary, mel_stats=mel_stats)
        synthesizer = Synthesizer.from_run(Path(root) / "run")
    model, r, hop, rate = synthesizer.model, cfg.model.reduction_factor, cfg.audio.hop_length, cfg.audio.sample_rate
    reference_mel, reference_length = synthesizer.reference_mel(reference)
    token_lists = synthesizer.encode(texts)
    step_counts = [min(int(len(t) * FRAMES_PER_TOKEN / r), synthesizer.lengths.bucket_max_steps(
        synthesizer.lengths.text_bucket(len(t)))) for t in token_lists]

    def inputs(tokens: np.ndarray, steps: int):
        bucket = synthesizer.lengths.text_bucket(len(tokens))
        padded = np.zeros([1, bucket], np.int32)
        padded[0, : len(tokens)] = tokens
        return (tf.constant(padded), tf.constant([len(tokens)], tf.int32), tf.constant(reference_mel[None]),
                tf.constant([reference_length], tf.int32), tf.constant([steps], tf.int32),
                tf.constant([steps], tf.int32))

    # warm-up: one compile per text bucket used, outside the timing
    warm_started = time.perf_counter()
    for tokens in token_lists:
        synthesizer.warm_up(len(tokens), batch_size=1)
    warmup_seconds = time.perf_counter() - warm_started
    traces_after_warmup = synthesizer.tracing_count()

    compiled_seconds, vocoder_seconds, audio_seconds, compiled_mels = 0.0, 0.0, 0.0, []
    for tokens, steps in zip(token_lists, step_counts):
        started = time.perf_counter()
        outputs = synthesizer.decoder(*inputs(tokens, steps))
        mel = outputs["mel"].numpy()[0, : int(outputs["mel_lengths"][0])]
        compiled_seconds += time.perf_counter() - started
        started = time.perf_counter()
        np.asarray(synthesizer.vocoder(mel))
        vocoder_seconds += time.perf_counter() - started
        audio_seconds += steps * r * hop / rate
        compiled_mels.append(mel)

    baseline_seconds, max_difference = 0.0, 0.0
    for tokens, steps, mel in zip(token_lists, step_counts, compiled_mels):
        padded_tokens, token_lengths, ref, ref_lengths, _, _ = inputs(tokens, steps)
        started = time.perf_counter()
        baseline_mel = eager_uncached_decode(model, padded_tokens, token_lengths, ref, ref_lengths, steps)
        baseline_seconds += time.perf_counter() - started
        max_difference = max(max_difference, float(np.max(np.abs(baseline_mel - mel))))

    report = {
        "benchmark": "synthesis decoding: compiled while_loop + KV cache vs eager per-step full decoder",
        "machine": machine_description(),
        "model": "tiny preset, untrained (fresh initialisation); fixed steps per text (stop token ignored)",
        "texts": len(texts), "tokens": [len(t) for t in token_lists], "decoder_steps": step_counts,
        "audio_seconds": round(audio_seconds, 3),
        "compiled": {"decode_seconds": round(compiled_seconds, 3),
                     "rtf_decode": round(compiled_seconds / audio_seconds, 4),
                     "rtf_with_griffin_lim": round((compiled_seconds + vocoder_seconds) / audio_seconds, 4),
                     "griffin_lim_iterations": synthesizer.vocoder.iterations,
                     "warmup_seconds": round(warmup_seconds, 2),
                     "compiles": synthesizer.tracing_count(),
                     "compiles_after_warmup": synthesizer.tracing_count() - traces_after_warmup,
                     "shapes": [list(key) for key in synthesizer.decoder.functions]},
        "baseline_eager_no_cache": {"decode_seconds": round(baseline_seconds, 3),
                                    "rtf_decode": round(baseline_seconds / audio_seconds, 4), "compiles": 0},
        "speedup": round(baseline_seconds / compiled_seconds, 2),
        "max_abs_mel_difference": max_difference,  # both paths compute the same function
        "targets": {"speedup_at_least": 10, "compiles_per_shape": 1, "rtf_at_most": 1.0},
    }
    report["targets_met"] = {"speedup": report["speedup"] >= 10,
                             "one_compile_per_shape": report["compiled"]["compiles"] == len(report["compiled"]["shapes"]),
                             "rtf_with_griffin_lim": report["compiled"]["rtf_with_griffin_lim"] <= 1.0}
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())

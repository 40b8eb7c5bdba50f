"""Benchmark: the autoregressive decoder's compiled tf.while_loop with a KV cache vs an eager Python loop without one.

Same weights (the tiny preset with ``model.decoder: autoregressive``, freshly initialised, dropout 0 so both paths
compute the same function; its duration predictor's bias set to the bundled clips' median frames per token, so
every text gets a speech-like length), same texts, same reference clip, the same predicted durations.

- compiled: ``Synthesizer.decoder`` (a duration function per text bucket, a decode function per mel bucket with
  the step loop inside, all warmed up before timing);
- baseline: a Python loop calling the teacher-forced decoder once per step on the whole prefix, eager, no cache:
  step s re-runs all s previous positions.

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


def eager_uncached_decode(model, tokens, token_lengths, reference_mel, reference_lengths, durations) -> np.ndarray:
    """The naive loop: every step runs the teacher-forced decoder over the whole prefix (no KV cache, eager)."""
    from myxtts.model.durations import alignment_from_durations, length_regulate

    r, n_mels = model.dims.reduction_factor, model.dims.n_mels
    frames = int(np.sum(durations))
    frames += (-frames) % r
    text = model.encode_text(tokens, token_lengths)
    latents = model.encode_reference(reference_mel, reference_lengths)
    encodings = length_regulate(alignment_from_durations(tf.constant(durations[None]), frames), text)
    generated = np.zeros([1, frames, n_mels], np.float32)
    for step in range(frames // r):
        end = (step + 1) * r  # the prefix up to this step; its last step reads the frames generated before it
        mask = tf.ones([1, end], tf.bool)
        mel_before = model.decoder(encodings[:, :end], mask, latents, tf.constant(generated[:, :end]),
                                   training=False)
        generated[:, end - r:end] = mel_before.numpy()[:, -r:]
    return model.postnet(tf.constant(generated), tf.ones([1, frames], tf.bool)).numpy()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=4, help="number of LJSpeech transcripts to decode")
    parser.add_argument("--json", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()

    from myxtts.audio import MelFrontend, load_audio
    from myxtts.config import config_from_dict
    from myxtts.data.mel_stats import MelStats
    from myxtts.evaluation.evaluate import machine_description
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
                                "model": {"preset": "tiny", "decoder": "autoregressive", "dropout": 0.0}},
                               base_dir=root)
        vocabulary = Vocabulary.for_config(cfg.text)
        keras.utils.set_random_seed(0)
        frontend = MelFrontend(cfg.audio)  # no cache: the statistics of the bundled clips, as prepare computes them
        mel_stats = MelStats.from_mels(frontend(load_audio(path, cfg.audio.sample_rate)).numpy()
                                       for path in sorted((corpus / "wavs").glob("*.wav")))
        model = build_model(cfg, len(vocabulary))
        model.duration_predictor.output_proj.bias.assign([np.log1p(FRAMES_PER_TOKEN)])
        model.duration_predictor.output_proj.kernel.assign(tf.zeros_like(model.duration_predictor.output_proj.kernel))
        save_run(Path(root) / "run", cfg, model, vocabulary, mel_stats=mel_stats)
        synthesizer = Synthesizer.from_run(Path(root) / "run")
    model, r, hop, rate = synthesizer.model, cfg.model.reduction_factor, cfg.audio.hop_length, cfg.audio.sample_rate
    reference_mel, reference_length = synthesizer.reference_mel(reference)
    voice = synthesizer.latents_of([reference_mel], [reference_length])[0]
    token_lists = synthesizer.encode(texts)

    # warm-up: every duration and decode function, outside the timing
    warm_started = time.perf_counter()
    synthesizer.warm_up_all(batch_size=1)
    warmup_seconds = time.perf_counter() - warm_started
    traces_after_warmup = synthesizer.tracing_count()

    compiled_seconds, vocoder_seconds, audio_seconds, results = 0.0, 0.0, 0.0, []
    for tokens in token_lists:
        started = time.perf_counter()
        result = synthesizer.decode_tokens([tokens], [voice], batch_size=1)[0]
        compiled_seconds += time.perf_counter() - started
        started = time.perf_counter()
        np.asarray(synthesizer.vocoder(result.mel))
        vocoder_seconds += time.perf_counter() - started
        audio_seconds += result.frames * hop / rate
        results.append(result)

    baseline_seconds, max_difference = 0.0, 0.0
    for tokens, result in zip(token_lists, results):
        started = time.perf_counter()
        baseline = eager_uncached_decode(model, tf.constant(tokens[None]), tf.constant([len(tokens)]),
                                         tf.constant(reference_mel[None]), tf.constant([reference_length]),
                                         result.durations)
        baseline_seconds += time.perf_counter() - started
        compiled_normalised = synthesizer.mel_stats.normalize(result.mel)
        max_difference = max(max_difference, float(np.max(np.abs(baseline[: result.frames] - compiled_normalised))))

    report = {
        "benchmark": "synthesis decoding: compiled while_loop + KV cache vs eager per-step full decoder",
        "machine": machine_description(),
        "model": f"tiny preset, autoregressive decoder, untrained, {FRAMES_PER_TOKEN} frames per token",
        "texts": len(texts), "tokens": [len(t) for t in token_lists],
        "decoder_steps": [result.frames // r for result in results],
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

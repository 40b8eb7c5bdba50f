"""Benchmark: compiled synthesis of both decoders in alternated rounds, and the autoregressive decoder's compiled
tf.while_loop with a KV cache against an eager Python loop without one.

Same texts, same reference clip, for each decoder (``--decoders``, default both) a freshly initialised tiny preset
(dropout 0; its duration predictor's bias set to the bundled clips' median frames per token, so every text gets a
speech-like length and both decoders make the same number of frames):

- compiled: ``Synthesizer.synthesize(..., vocode=False)`` (a duration function per text bucket, a decode function
  per mel bucket: the parallel decoder's one pass over the expanded text, the autoregressive decoder's step loop
  inside; all warmed up before timing). ``--rounds`` rounds, each decoding every text with every decoder in turn
  (the decoders see about the same load); per decoder the median and min-max over rounds, and the decoders' ratio
  paired by round;
- baseline (autoregressive): a Python loop calling the teacher-forced decoder once per step on the whole prefix,
  eager, no cache: step s re-runs all s previous positions. Once, after the rounds.

Prints JSON: machine, seconds, real-time factors (decode only; and with Griffin-Lim), speed-up, compile counts.
Run: ``.venv/bin/python benchmarks/synthesis.py [--texts 4] [--rounds 5] [--json out.json]``.
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


def build_synthesizer(decoder: str, corpus: Path, root: Path):
    """A saved run of the untrained tiny preset with ``decoder`` (seed 0, fixed frames per token), loaded back."""
    from myxtts.audio import load_audio
    from myxtts.mel import MelFrontend
    from myxtts.config import config_from_dict
    from myxtts.data.mel_stats import MelStats
    from myxtts.model import build_model
    from myxtts.synthesis import Synthesizer, save_run
    from myxtts.text import Vocabulary

    cfg = config_from_dict({"data": {"corpus_path": str(corpus), "cache_dir": f"{root}/no-cache",
                                     "max_text_length": 192, "reference_frames": 96},
                            "model": {"preset": "tiny", "decoder": decoder, "dropout": 0.0}}, base_dir=root)
    vocabulary = Vocabulary.for_config(cfg.text)
    keras.utils.set_random_seed(0)
    frontend = MelFrontend(cfg.audio)  # no cache: the statistics of the bundled clips, as prepare computes them
    mel_stats = MelStats.from_mels(frontend(load_audio(path, cfg.audio.sample_rate)).numpy()
                                   for path in sorted((corpus / "wavs").glob("*.wav")))
    model = build_model(cfg, len(vocabulary))
    model.duration_predictor.output_proj.bias.assign([np.log1p(FRAMES_PER_TOKEN)])
    model.duration_predictor.output_proj.kernel.assign(tf.zeros_like(model.duration_predictor.output_proj.kernel))
    save_run(root / decoder, cfg, model, vocabulary, mel_stats=mel_stats)
    return cfg, Synthesizer.from_run(root / decoder)


def timed_round(synthesizer, texts, voice) -> tuple[float, float, list]:
    """Decode every text (batch 1) and vocode it: (decode seconds, Griffin-Lim seconds, results)."""
    decode_seconds, vocoder_seconds, results = 0.0, 0.0, []
    for text in texts:
        started = time.perf_counter()
        result = synthesizer.synthesize(text, voices=[voice], batch_size=1, vocode=False)[0]
        decode_seconds += time.perf_counter() - started
        started = time.perf_counter()
        np.asarray(synthesizer.vocoder(result.mel))
        vocoder_seconds += time.perf_counter() - started
        results.append(result)
    return decode_seconds, vocoder_seconds, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=4, help="number of LJSpeech transcripts to decode")
    parser.add_argument("--rounds", type=int, default=5, help="alternated rounds of compiled decoding")
    parser.add_argument("--decoders", nargs="+", choices=("parallel", "autoregressive"),
                        default=["parallel", "autoregressive"])
    parser.add_argument("--json", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()
    if args.rounds < 1:
        sys.exit("Error: --rounds must be >= 1.")
    args.decoders = list(dict.fromkeys(args.decoders))  # a decoder named twice is timed once a round

    from common import paired_ratios, spread

    from myxtts.machine import machine

    corpus = REPO / "data" / "ljspeech-bundled"
    lines = [line.split("|") for line in (corpus / "metadata.csv").read_text(encoding="utf-8").splitlines()]
    texts = [line[2] for line in lines[: args.texts]]
    reference = corpus / "wavs" / f"{lines[-1][0]}.wav"
    synthesizers, voices, tokens, warmup = {}, {}, {}, {}
    with tempfile.TemporaryDirectory() as root:
        for decoder in args.decoders:
            cfg, synthesizer = build_synthesizer(decoder, corpus, Path(root))
            voices[decoder] = synthesizer.voice(reference)
            tokens[decoder] = [len(ids) for ids in synthesizer.engine.encode(texts)]  # the token counts, for the report
            started = time.perf_counter()  # every duration and decode function, outside the timing
            synthesizer.warm_up(batch_size=1)
            warmup[decoder] = (time.perf_counter() - started, synthesizer.tracing_count())
            synthesizers[decoder] = synthesizer
    hop, rate = cfg.audio.hop_length, cfg.audio.sample_rate

    per_round = {decoder: [] for decoder in args.decoders}  # (decode s, Griffin-Lim s, audio s)
    results = {}
    for _ in range(args.rounds):
        for decoder in args.decoders:
            decode, vocode, results[decoder] = timed_round(synthesizers[decoder], texts, voices[decoder])
            per_round[decoder].append((decode, vocode, sum(r.frames for r in results[decoder]) * hop / rate))

    report = {"benchmark": "synthesis decoding: both decoders compiled, alternated rounds; the autoregressive one "
                           "against an eager per-step full decoder",
              "machine": machine(), "tensorflow": tf.__version__,
              "model": f"tiny preset, untrained, dropout 0, {FRAMES_PER_TOKEN} frames per token",
              "texts": len(texts), "rounds": args.rounds, "decoders": {}}
    for decoder, synthesizer in synthesizers.items():
        rounds = per_round[decoder]
        warm_seconds, warm_traces = warmup[decoder]
        report["decoders"][decoder] = {
            "tokens": tokens[decoder],
            "frames": [r.frames for r in results[decoder]],
            "decoder_steps": [r.frames // synthesizer.cfg.model.reduction_factor for r in results[decoder]],
            "audio_seconds": round(rounds[0][2], 3),
            "decode_seconds": spread(d for d, _, _ in rounds),
            "rtf_decode": spread(d / audio for d, _, audio in rounds),
            "rtf_with_griffin_lim": spread((d + v) / audio for d, v, audio in rounds),
            "griffin_lim_iterations": synthesizer.vocoder.iterations,
            "warmup_seconds": round(warm_seconds, 2),
            "compiles": synthesizer.tracing_count(),
            "compiles_after_warmup": synthesizer.tracing_count() - warm_traces,
            "shapes": [list(key) for key in synthesizer.decoder.functions]}
    if len(args.decoders) == 2:
        report["parallel_over_autoregressive_decode_seconds"] = paired_ratios(
            [d for d, _, _ in per_round["parallel"]], [d for d, _, _ in per_round["autoregressive"]])

    targets = {}
    if "autoregressive" in synthesizers:
        synthesizer, entry = synthesizers["autoregressive"], report["decoders"]["autoregressive"]
        model, baseline_seconds, max_difference = synthesizer.model, 0.0, 0.0
        reference_mel, reference_length = synthesizer.engine.reference_mel(reference)  # the model's own input
        for result in results["autoregressive"]:
            token_list = result.tokens
            started = time.perf_counter()
            baseline = eager_uncached_decode(model, tf.constant(token_list[None]), tf.constant([len(token_list)]),
                                             tf.constant(reference_mel[None]), tf.constant([reference_length]),
                                             result.durations)
            baseline_seconds += time.perf_counter() - started
            compiled_normalised = synthesizer.mel_stats.normalize(result.mel)
            max_difference = max(max_difference,
                                 float(np.max(np.abs(baseline[: result.frames] - compiled_normalised))))
        entry["baseline_eager_no_cache"] = {"decode_seconds": round(baseline_seconds, 3),
                                            "rtf_decode": round(baseline_seconds / entry["audio_seconds"], 4)}
        entry["speedup_over_baseline"] = round(baseline_seconds / entry["decode_seconds"]["median"], 2)
        entry["max_abs_mel_difference"] = max_difference  # both paths compute the same function
        targets["autoregressive_speedup_at_least_10"] = entry["speedup_over_baseline"] >= 10
        targets["autoregressive_rtf_with_griffin_lim_at_most_1"] = entry["rtf_with_griffin_lim"]["median"] <= 1.0
    if "parallel" in synthesizers:
        targets["parallel_rtf_decode_at_most_0.01"] = report["decoders"]["parallel"]["rtf_decode"]["median"] <= 0.01
    for decoder, entry in report["decoders"].items():
        targets[f"{decoder}_one_compile_per_shape_none_after_warmup"] = (
            entry["compiles"] == len(entry["shapes"]) and entry["compiles_after_warmup"] == 0)
    report["targets_met"] = targets
    report["machine"]["load_average_at_end"] = list(os.getloadavg())
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())

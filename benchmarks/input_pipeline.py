"""Input pipeline benchmark: throughput of three loaders and padding fill of fixed vs bucket shapes.

    python benchmarks/input_pipeline.py --data /work/shared/data/ljspeech-mini --repeat 3

Loaders (clip -> log mel, same parallelism, every clip of the corpus per pass, nothing cached
between passes):
  (a) baseline: tf.numpy_function + librosa load + librosa mel (the original design);
  (b) TF ops on the fly: tf_load_wav + MelFrontend inside Dataset.map (the pipeline's parse map);
  (c) prepared cache: read one utterance file per clip (tf.io.read_file + decode_raw; the pipeline's parse map).
Plus the full InputPipeline from the cache (batches with references, buckets, prefetch).

Fill: real / padded mel frames and text tokens for fixed padding vs buckets, on the real clips and
on all LJSpeech transcripts (``--transcripts``; frames estimated from token counts with a linear fit
on the real clips). Prints JSON with the machine description and the ratios against (a).
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

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from myxtts.config import config_from_dict  # noqa: E402
from myxtts.data.buckets import BucketParams, plan_buckets  # noqa: E402
from myxtts.data.cache import FeatureCache  # noqa: E402
from myxtts.data.pipeline import InputPipeline  # noqa: E402
from myxtts.data.sources import CacheSource, WavSource  # noqa: E402
from myxtts.data.prepare import prepare  # noqa: E402
from myxtts.machine import machine  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TARGETS = {"cache_vs_baseline": 50.0, "tf_ops_vs_baseline": 2.0, "bucket_mel_fill": 0.95,
           "bucket_text_fill": 0.80, "max_shapes": 16}


def machine_and_versions() -> dict:
    return {**machine(), "tensorflow": tf.__version__, "numpy": np.__version__,
            "gpus": len(tf.config.list_physical_devices("GPU"))}


def measure(dataset: tf.data.Dataset, repeat: int, frames_of) -> dict:
    """Clips/s and mel frames/s over ``repeat`` passes (one warm-up pass first, not timed).

    Elements are consumed inside the graph (``Dataset.reduce``), as a compiled train step would, so
    the Python per-element iteration cost (~100 us) does not cap the measurement.
    """
    counted = dataset.map(lambda element: tf.stack([1, frames_of(element)]))
    counted.reduce(tf.zeros([2], tf.int32), lambda total, x: total + x)  # warm-up pass
    started = time.perf_counter()  # all passes in one reduce: iterator start-up is paid once
    clips, frames = (int(x) for x in counted.repeat(repeat).reduce(tf.zeros([2], tf.int32),
                                                                   lambda total, x: total + x).numpy())
    seconds = time.perf_counter() - started
    return {"clips": clips, "seconds": round(seconds, 3), "clips_per_s": round(clips / seconds, 1),
            "mel_frames_per_s": round(frames / seconds, 1)}


def baseline_dataset(paths: list[str], cfg) -> tf.data.Dataset:
    import librosa

    a = cfg.audio

    def load_and_mel(path: bytes) -> np.ndarray:
        wave, _ = librosa.load(path.decode(), sr=a.sample_rate)
        mel = librosa.feature.melspectrogram(y=wave, sr=a.sample_rate, n_fft=a.n_fft, hop_length=a.hop_length,
                                             win_length=a.win_length, n_mels=a.n_mels, fmin=a.fmin, fmax=a.fmax,
                                             power=a.mel_power)
        return np.log(np.maximum(mel, a.log_floor)).T.astype(np.float32)  # [frames, n_mels]

    def parse(path: tf.Tensor) -> tf.Tensor:
        mel = tf.numpy_function(load_and_mel, [path], tf.float32)
        return tf.ensure_shape(mel, [None, a.n_mels])

    return tf.data.Dataset.from_tensor_slices(paths).map(parse, num_parallel_calls=tf.data.AUTOTUNE)


def fill(text: np.ndarray, mel: np.ndarray, params: BucketParams) -> dict:
    out = {}
    for name, fixed in (("fixed", True), ("buckets", False)):
        report = plan_buckets(text, mel, BucketParams(**{**params.__dict__, "fixed": fixed})).fill(text, mel)
        out[name] = {"shapes": report.num_shapes, "mel_fill": round(report.mel_fill, 4),
                     "text_fill": round(report.text_fill, 4), "skipped": report.num_skipped}
    return out


def transcript_lengths(path: Path, cfg, fit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from myxtts.text import TextProcessor

    texts = []
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split("|")
        if len(fields) >= 2:
            texts.append(fields[2] if len(fields) > 2 and fields[2].strip() else fields[1])
    tokens = np.array([len(t) for t in TextProcessor(cfg.text).encode_many(texts)])
    frames = np.maximum(np.round(np.polyval(fit, tokens)), 1).astype(np.int64)
    return tokens, frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=REPO / "data" / "ljspeech-bundled")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes over the corpus per loader")
    parser.add_argument("--transcripts", type=Path, default=None,
                        help="transcripts file (id|text|normalized); default DATA/transcripts_all.csv if present")
    parser.add_argument("--shapes", type=int, default=16, help="bucket shapes (data.num_buckets)")
    parser.add_argument("--output", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="myxtts-bench-"))
    cfg = config_from_dict({"data": {"corpus_path": str(args.data.resolve()), "cache_dir": str(work / "cache"),
                                     "validation_size": 0, "num_buckets": args.shapes, "max_text_length": 192,
                                     "max_mel_frames": 880, "batch_frames": 24000, "batch_size": 64,
                                     "reference_frames": 128}}, base_dir=work)
    started = time.perf_counter()
    prepared = prepare(cfg, progress=False)
    prepare_seconds = time.perf_counter() - started
    cache = FeatureCache.load(cfg)
    rows = tf.data.Dataset.from_tensor_slices(tf.range(len(cache), dtype=tf.int32))

    cached = CacheSource(cfg, cache)
    wav = WavSource(dataclass_replace_data(cfg, use_tf_native_loading=True))
    paths = [str(cfg.corpus_path / "wavs" / f"{i}.wav") for i in wav.ids]
    frames_of_mel = lambda mel: tf.shape(mel)[0]  # noqa: E731
    frames_of_dict = lambda element: tf.shape(element["mel"])[0]  # noqa: E731
    results = {
        "a_numpy_function_librosa": measure(baseline_dataset(paths, cfg), args.repeat, frames_of_mel),
        "b_tf_ops_on_the_fly": measure(rows.map(wav.parse, num_parallel_calls=tf.data.AUTOTUNE), args.repeat,
                                       frames_of_dict),
        "c_prepared_cache": measure(rows.map(cached.parse, num_parallel_calls=tf.data.AUTOTUNE), args.repeat,
                                    frames_of_dict),
    }
    pipeline = InputPipeline(cfg, cache=cache)
    batches = pipeline.dataset().take(200)
    for _ in batches.take(5):
        pass
    started = time.perf_counter()
    count = utterances = 0
    for batch in batches:
        count += 1
        utterances += int(batch["mel_lengths"].shape[0])
    seconds = time.perf_counter() - started
    results["full_pipeline_from_cache"] = {"batches": count, "batches_per_s": round(count / seconds, 1),
                                           "clips_per_s": round(utterances / seconds, 1)}
    base = results["a_numpy_function_librosa"]["clips_per_s"]
    ratios = {"cache_vs_baseline": round(results["c_prepared_cache"]["clips_per_s"] / base, 1),
              "tf_ops_vs_baseline": round(results["b_tf_ops_on_the_fly"]["clips_per_s"] / base, 2)}

    params = BucketParams.from_config(cfg.data)
    fit = np.polyfit(cache.token_lengths, cache.mel_lengths, 1)
    fills = {"real_clips": fill(cache.token_lengths, cache.mel_lengths, params)}
    transcripts = args.transcripts or (args.data / "transcripts_all.csv")
    if transcripts.is_file():
        text, mel = transcript_lengths(transcripts, cfg, fit)
        fills["transcripts"] = {"file": str(transcripts), "utterances": int(text.size),
                                "frames_per_token_fit": [round(float(x), 3) for x in fit],
                                **fill(text, mel, params)}
    judged = fills.get("transcripts", fills["real_clips"])["buckets"]
    report = {
        "machine": machine_and_versions(),
        "data": str(args.data), "clips": len(cache), "repeat": args.repeat,
        "prepare_seconds": round(prepare_seconds, 2), "rejected": prepared.manifest["counts"]["rejected"],
        "throughput": results, "ratios": ratios, "fill": fills,
        "targets": TARGETS,
        "targets_met": {
            "cache_vs_baseline": ratios["cache_vs_baseline"] >= TARGETS["cache_vs_baseline"],
            "tf_ops_vs_baseline": ratios["tf_ops_vs_baseline"] >= TARGETS["tf_ops_vs_baseline"],
            "bucket_fill": judged["mel_fill"] >= TARGETS["bucket_mel_fill"]
            and judged["text_fill"] >= TARGETS["bucket_text_fill"] and judged["shapes"] <= TARGETS["max_shapes"],
        },
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n", encoding="utf-8")


def dataclass_replace_data(cfg, **changes):
    import dataclasses

    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, **changes))


if __name__ == "__main__":
    sys.exit(main())

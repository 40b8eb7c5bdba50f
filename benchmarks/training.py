"""Training throughput: naive dynamic shapes vs reduce_retracing (+XLA) vs fixed padding vs myxtts buckets.

One process, same model preset and data, each mode for --steps steps after its own warm-up:

  (a) naive        batches padded to the batch max, tf.function without input_signature
  (b) reduce       same batches, tf.function(reduce_retracing=True); (b-xla) with jit_compile=True
  (c) fixed        data.pad_to_fixed_length: one signature (max_text_length x max_mel_frames)
  (d) buckets      myxtts: per-bucket signatures, all traced at warm-up

Prints JSON: machine, per mode traces after warm-up, warm-up seconds, step time mean/CV per shape,
real (unpadded) mel frames/s, input-wait share, and the ratio of (d) to each mode.

    python benchmarks/training.py --config configs/mini.yaml --steps 40 [--data /work/shared/data/ljspeech-mini]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections import defaultdict

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from myxtts.config import load_config  # noqa: E402


def _strip_to_batch_max(batch: dict, r: int) -> dict:
    """Re-pad a bucket batch to its own maximum lengths: the naive padded_batch shapes."""
    text = int(np.max(batch["token_lengths"]))
    frames = int(np.max(batch["mel_lengths"]))
    frames += (-frames) % r
    return {**batch, "tokens": batch["tokens"][:, :text], "mel": batch["mel"][:, :frames]}


def _measure(name, call, iterator, steps, transform=None, warmup_calls=0, counter=None):
    """Run ``steps`` steps; the first ``warmup_calls`` steps count as warm-up (naive modes)."""
    per_shape, frames, wait, traces_at_warmup = defaultdict(list), 0.0, 0.0, None
    warmup_seconds = 0.0
    started = time.perf_counter()
    for index in range(steps + warmup_calls):
        t0 = time.perf_counter()
        batch = next(iterator)
        if transform:
            batch = transform(batch)
        t1 = time.perf_counter()
        out = call(batch)
        float(out["total"])  # wait for the step
        t2 = time.perf_counter()
        if index < warmup_calls:
            warmup_seconds += t2 - t0
            if index == warmup_calls - 1:
                traces_at_warmup = counter()
                started = time.perf_counter()
            continue
        wait += t1 - t0
        frames += float(np.sum(batch["mel_lengths"]))
        per_shape[f"{tuple(batch['tokens'].shape)}/{tuple(batch['mel'].shape[:2])}"].append(t2 - t1)
    elapsed = time.perf_counter() - started
    return {"mode": name, "steps": steps, "shapes_seen": len(per_shape),
            "warmup_seconds": warmup_seconds, "traces_at_warmup": traces_at_warmup,
            "traces_after_warmup": (counter() - traces_at_warmup) if traces_at_warmup is not None else None,
            "step_time": {k: {"mean": statistics.mean(v), "cv": (statistics.pstdev(v) / statistics.mean(v))
                              if len(v) > 1 else 0.0, "n": len(v)} for k, v in per_shape.items()},
            "real_mel_frames_per_second": frames / elapsed, "input_wait_share": wait / elapsed, "seconds": elapsed}


def _setup(cfg):
    from myxtts.data.pipeline import InputPipeline
    from myxtts.model import build_model
    from myxtts.text import Vocabulary
    from myxtts.training.schedule import make_optimizer
    from myxtts.training.steps import TrainingSteps
    pipeline = InputPipeline(cfg, "train")
    vocabulary = Vocabulary.load(cfg.cache_dir / "vocab.json")
    model = build_model(cfg, len(vocabulary.symbols))
    steps = TrainingSteps(model, make_optimizer(cfg), cfg, tf.distribute.get_strategy())
    return pipeline, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/mini.yaml")
    parser.add_argument("--data", default=None, help="corpus folder (LJSpeech layout); prepared into a temp cache")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--naive-warmup", type=int, default=3, help="steps counted as warm-up for (a)/(b)")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    args = parser.parse_args()
    overrides = list(args.overrides)
    if args.data:
        overrides += [f"data.corpus_path={args.data}", f"data.cache_dir={tempfile.mkdtemp(prefix='bench-cache-')}"]
    cfg = load_config(args.config, overrides)
    from myxtts.data.prepare import prepare
    prepare(cfg, progress=False)
    r = cfg.model.reduction_factor
    results = []

    # (d) buckets: the myxtts way
    pipeline, steps = _setup(cfg)
    steps.build(pipeline.signatures(), lambda f, name: f)
    t0 = time.perf_counter()
    steps.warm_up()
    warm = time.perf_counter() - t0
    count = lambda: sum(f.experimental_get_tracing_count() for f in steps.train_functions.values())  # noqa: E731
    result = _measure("d_buckets", steps.train, iter(pipeline.dataset()), args.steps, counter=count, warmup_calls=0)
    result.update(warmup_seconds=warm, traces_at_warmup=len(steps.train_functions), traces_after_warmup=count() - len(steps.train_functions))
    results.append(result)

    # (a) naive, (b) reduce_retracing, (b-xla): same data, re-padded to the batch max
    for name, options in (("a_naive", {}), ("b_reduce_retracing", {"reduce_retracing": True}),
                          ("b_reduce_retracing_xla", {"reduce_retracing": True, "jit_compile": True})):
        pipeline, steps = _setup(cfg)
        function = tf.function(steps._train_graph, **options)
        try:
            results.append(_measure(name, function, iter(pipeline.dataset()), args.steps,
                                    transform=lambda b: _strip_to_batch_max(b, r), warmup_calls=args.naive_warmup,
                                    counter=function.experimental_get_tracing_count))
        except (TypeError, ValueError) as err:  # the model reads static dims: a None dim cannot be traced
            results.append({"mode": name, "error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}",
                            "traces_before_failure": function.experimental_get_tracing_count()})

    # (c) fixed padding: one signature
    fixed_cfg = load_config(args.config, overrides + ["data.pad_to_fixed_length=true"])
    prepare(fixed_cfg, progress=False)
    pipeline, steps = _setup(fixed_cfg)
    steps.build(pipeline.signatures(), lambda f, name: f)
    t0 = time.perf_counter()
    steps.warm_up()
    warm = time.perf_counter() - t0
    count = lambda: sum(f.experimental_get_tracing_count() for f in steps.train_functions.values())  # noqa: E731
    result = _measure("c_fixed_padding", steps.train, iter(pipeline.dataset()), args.steps, counter=count)
    result.update(warmup_seconds=warm, traces_at_warmup=1, traces_after_warmup=count() - 1)
    results.append(result)

    buckets = results[0]["real_mel_frames_per_second"]
    for result in results:
        if "real_mel_frames_per_second" in result:
            result["buckets_speedup"] = buckets / result["real_mel_frames_per_second"]
    print(json.dumps({"benchmark": "training", "config": args.config, "data": str(cfg.corpus_path),
                      "model_preset": cfg.model.preset, "steps_per_mode": args.steps,
                      "machine": {"platform": platform.platform(), "processor": platform.processor(),
                                  "cpus": os.cpu_count(), "python": platform.python_version(),
                                  "tensorflow": tf.__version__,
                                  "gpus": [d.name for d in tf.config.list_physical_devices("GPU")]},
                      "results": results}, indent=2))


if __name__ == "__main__":
    main()

"""Training throughput: naive dynamic shapes vs reduce_retracing (+XLA) vs fixed padding vs myxtts buckets.

One process, same model (same preset, same seed), same corpus, same mel-frame budget per batch:

  (c) fixed        data.pad_to_fixed_length: one signature, batch_size x max_mel_frames padded frames
  (d) buckets      myxtts: per-bucket signatures, data.batch_frames = that same budget (batch_size x
                   max_mel_frames) and the per-bucket batch cap lifted, so only the budget sizes a batch;
                   every step function traced and run once at warm-up (state restored)
  (d') buckets at the config's own data.batch_frames, reported too (--also-config-budget)
  (a) naive        (d)'s batches re-padded to their own max lengths, tf.function without input_signature
  (b) reduce       the same batches, tf.function(reduce_retracing=True); (b-xla) with jit_compile=True

Warm-up is excluded from steady-state throughput and reported apart: (c)/(d) trace + run each compiled
function once (``TrainingSteps.warm_up``); (a)/(b) count their first --naive-warmup steps as warm-up.
Prints JSON: machine (incl. load average: the 2 cores are shared), per mode: steps, traces at / after
warm-up, warm-up seconds, step time mean / CV per batch shape, real (unpadded) mel frames/s, padded
frames/s, input-wait share, and the ratio of (d) to every mode. A mode that cannot do --steps steps in
--mode-seconds (naive modes compile almost every step) stops early and says how many it did.

    python benchmarks/training.py --config configs/mini.yaml --steps 60 [--data /work/shared/data/ljspeech-mini]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import tempfile
import time
from collections import defaultdict
from typing import Any, Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from myxtts.config import load_config  # noqa: E402

INPUT_STARTUP_PAUSE = 2.0  # seconds for the pipeline's prefetch buffers to fill before timing


def _strip_to_batch_max(batch: dict, r: int) -> dict:
    """Re-pad a bucket batch to its own maximum lengths: the naive padded_batch shapes."""
    text = int(np.max(batch["token_lengths"]))
    frames = int(np.max(batch["mel_lengths"]))
    frames += (-frames) % r
    return {**batch, "tokens": batch["tokens"][:, :text], "mel": batch["mel"][:, :frames]}


def _shape_name(batch: dict) -> str:
    return f"{tuple(batch['tokens'].shape)}/{tuple(batch['mel'].shape[:2])}"


def _measure(name: str, call: Callable, iterator, steps: int, max_seconds: float, counter: Callable[[], int],
             transform: Callable | None = None, warmup_calls: int = 0) -> dict[str, Any]:
    """Run ``warmup_calls`` + ``steps`` steps; the first ``warmup_calls`` are warm-up (naive modes).

    The input pipeline is started first (one batch fetched, then a pause for its prefetch buffer to fill;
    reported as ``input_startup_seconds``): otherwise its one-time start-up (parallel map + prefetch
    threads filling their buffers) runs on the same cores as the first timed step and shows up as a slow
    first step (about +20-40% on 2 cores) that is not a property of the step.
    """
    t0 = time.perf_counter()
    iterator = itertools.chain([next(iterator)], iterator)
    time.sleep(INPUT_STARTUP_PAUSE)
    input_startup = time.perf_counter() - t0
    per_shape: dict[str, list[float]] = defaultdict(list)
    traced_steps: list[str] = []
    real_frames = padded_frames = wait = warmup_seconds = 0.0
    traces_at_warmup = counter()
    started = time.perf_counter()
    done = 0
    for index in range(steps + warmup_calls):
        t0 = time.perf_counter()
        batch = next(iterator)
        if transform:
            batch = transform(batch)
        t1 = time.perf_counter()
        traces_before = counter()
        out = call(batch)
        float(out["total"])  # wait for the step
        t2 = time.perf_counter()
        if index < warmup_calls:
            warmup_seconds += t2 - t0
            if index == warmup_calls - 1:
                traces_at_warmup, started = counter(), time.perf_counter()
            continue
        done += 1
        if counter() != traces_before:
            traced_steps.append(_shape_name(batch))
        wait += t1 - t0
        real_frames += float(np.sum(batch["mel_lengths"]))
        padded_frames += float(np.prod(batch["mel"].shape[:2]))
        per_shape[_shape_name(batch)].append(t2 - t1)
        if time.perf_counter() - started > max_seconds:
            break
    elapsed = time.perf_counter() - started
    cvs = {k: statistics.pstdev(v) / statistics.mean(v) for k, v in per_shape.items() if len(v) > 1}
    return {"mode": name, "steps": done, "stopped_early": done < steps, "shapes_seen": len(per_shape),
            "input_startup_seconds": input_startup,
            "warmup_seconds": warmup_seconds, "traces_at_warmup": traces_at_warmup,
            "traces_after_warmup": counter() - traces_at_warmup, "steps_that_traced": len(traced_steps),
            "step_time": {k: {"mean": statistics.mean(v), "cv": cvs.get(k), "n": len(v), "first": v[0], "min": min(v),
                              "max": max(v)} for k, v in per_shape.items()},
            "step_time_cv_max": max(cvs.values()) if cvs else None,
            "real_mel_frames_per_second": real_frames / elapsed,
            "padded_mel_frames_per_second": padded_frames / elapsed,
            "padding_share": 1.0 - real_frames / max(padded_frames, 1.0),
            "input_wait_share": wait / elapsed, "seconds": elapsed}


def _setup(cfg):
    from myxtts.data.pipeline import InputPipeline
    from myxtts.model import build_model
    from myxtts.text import Vocabulary
    from myxtts.training.schedule import make_optimizer
    from myxtts.training.steps import TrainingSteps
    keras.utils.set_random_seed(cfg.training.seed)  # the same initial model in every mode
    pipeline = InputPipeline(cfg, "train")
    vocabulary = Vocabulary.load(cfg.cache_dir / "vocab.json")
    model = build_model(cfg, len(vocabulary.symbols))
    steps = TrainingSteps(model, make_optimizer(cfg), cfg, tf.distribute.get_strategy())
    return pipeline, steps


def _compiled_mode(name: str, cfg, args) -> dict[str, Any]:
    """(c) / (d): the trainer's compiled per-shape steps, warmed up (trace + one run each) first."""
    pipeline, steps = _setup(cfg)
    signatures = pipeline.signatures()
    steps.build(signatures, lambda f, _name: f)
    t0 = time.perf_counter()
    per_function = steps.warm_up()
    warm = time.perf_counter() - t0
    count = lambda: sum(f.experimental_get_tracing_count() for f in steps.train_functions.values())  # noqa: E731
    result = _measure(name, steps.train, iter(pipeline.dataset()), args.steps, float("inf"), count)
    result.update(warmup_seconds=warm, warmup_per_function=per_function,
                  warmup_runs_per_function=steps.warmup_runs_seconds,
                  batch_shapes=[f"{s['tokens'].shape[0]}x{s['tokens'].shape[1]}t/{s['mel'].shape[1]}f"
                                for s in signatures],
                  frame_budget_per_batch=max(s["mel"].shape[0] * s["mel"].shape[1] for s in signatures))
    return result


def _naive_mode(name: str, cfg, args, options: dict) -> dict[str, Any]:
    pipeline, steps = _setup(cfg)
    function = tf.function(steps._train_graph, **options)
    r = cfg.model.reduction_factor
    try:
        return _measure(name, function, iter(pipeline.dataset()), args.steps, args.mode_seconds,
                        function.experimental_get_tracing_count, transform=lambda b: _strip_to_batch_max(b, r),
                        warmup_calls=args.naive_warmup)
    except (TypeError, ValueError) as err:  # e.g. a model that reads static dims cannot trace None dims
        return {"mode": name, "error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}",
                "traces_before_failure": function.experimental_get_tracing_count()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/mini.yaml")
    parser.add_argument("--data", default=None, help="corpus folder (LJSpeech layout); prepared into a temp cache")
    parser.add_argument("--steps", type=int, default=60, help="steady-state steps per mode (after warm-up)")
    parser.add_argument("--mode-seconds", type=float, default=240.0,
                        help="(a)/(b) stop after this many steady-state seconds (they compile almost every step)")
    parser.add_argument("--naive-warmup", type=int, default=3, help="steps counted as warm-up for (a)/(b)")
    parser.add_argument("--modes", default="d,c,a,b,bx", help="comma list of d, d_config, c, a, b, bx")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    args = parser.parse_args()
    overrides = list(args.overrides)
    if args.data:
        overrides += [f"data.corpus_path={args.data}", f"data.cache_dir={tempfile.mkdtemp(prefix='bench-cache-')}"]
    cfg = load_config(args.config, overrides)
    from myxtts.data.prepare import prepare
    prepare(cfg, progress=False)
    modes = args.modes.split(",")
    load_before = os.getloadavg()

    # the fixed mode's padded frames per batch is the budget every bucket batch gets too
    budget = cfg.data.batch_size * cfg.data.max_mel_frames
    bucket_cfg = load_config(args.config, overrides + [f"data.batch_frames={budget}",
                                                       f"data.batch_size={budget // cfg.data.bucket_multiple}"])
    fixed_cfg = load_config(args.config, overrides + ["data.pad_to_fixed_length=true"])
    results = []
    if "d" in modes:
        results.append(_compiled_mode("d_buckets", bucket_cfg, args))
    if "d_config" in modes:
        results.append(_compiled_mode("d_buckets_config_budget", cfg, args))
    if "c" in modes:
        results.append(_compiled_mode("c_fixed_padding", fixed_cfg, args))
    # (a) naive, (b) reduce_retracing, (b-xla): (d)'s batches re-padded to the batch max
    for key, name, options in (("a", "a_naive", {}), ("b", "b_reduce_retracing", {"reduce_retracing": True}),
                               ("bx", "b_reduce_retracing_xla", {"reduce_retracing": True, "jit_compile": True})):
        if key in modes:
            results.append(_naive_mode(name, bucket_cfg, args, options))

    reference = next((r for r in results if r["mode"] == "d_buckets"), None)
    if reference is not None:
        for result in results:
            if "real_mel_frames_per_second" in result:
                result["d_buckets_speedup"] = (reference["real_mel_frames_per_second"] /
                                               result["real_mel_frames_per_second"])
    print(json.dumps({"benchmark": "training", "config": args.config, "data": str(cfg.corpus_path),
                      "model_preset": cfg.model.preset, "steps_per_mode": args.steps,
                      "frame_budget_per_batch": budget, "overrides": args.overrides,
                      "machine": {"platform": platform.platform(), "processor": platform.processor(),
                                  "cpus": os.cpu_count(), "python": platform.python_version(),
                                  "tensorflow": tf.__version__,
                                  "gpus": [d.name for d in tf.config.list_physical_devices("GPU")],
                                  "load_average_before": load_before, "load_average_after": os.getloadavg()},
                      "results": results}, indent=2))


if __name__ == "__main__":
    main()

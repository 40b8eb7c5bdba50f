"""Training throughput in alternating rounds: naive dynamic shapes vs reduce_retracing vs fixed padding vs buckets.

Same model (same preset, same seed), same corpus, same mel-frame budget per batch in every mode:

  (c) fixed        data.pad_to_fixed_length: one signature, batch_size x max_mel_frames padded frames
  (d) buckets      myxtts: per-bucket signatures, data.batch_frames = that same budget (batch_size x
                   max_mel_frames) and the per-bucket batch cap lifted, so only the budget sizes a batch;
                   every step function traced and run once at warm-up (state restored)
  (d') buckets at the config's own data.batch_frames (--modes d_config)
  (d_ar) (d) with the autoregressive decoder (model.decoder=autoregressive, reduction_factor 2) where the config
                   has the parallel one (the default): the two decoders at the same frame budget
  (dk) (d) with training.steps_per_execution = K (--steps-per-execution, default 4): K steps of one bucket
                   per compiled call (--modes d,dk measures what one Python dispatch per K steps buys)
  (a) naive        (d)'s batches re-padded to their own max lengths, tf.function without input_signature
  (b) reduce       the same batches, tf.function(reduce_retracing=True); (bx) with jit_compile=True

Method (the 2 cores are shared with other jobs whose load changes by the minute; one run per mode, one
mode after the other, compared different loads and moved ratios by 30-50% between runs):

- one child process per mode, kept alive for the whole benchmark. A fresh process per round would redo
  the warm-up each round (a minute or more per mode here) and turn most of the budget into tracing; one
  process running all modes would share one TF runtime (thread pools, oneDNN / grappler caches) between
  modes. The children warm up one after the other (warm-up seconds are then not inflated by each other),
  and each starts its input pipeline and lets its prefetch buffers fill before its first round.
- rounds: round i runs --steps steady-state steps of every mode in turn (a, b, c, d, a, b, c, d ...), so
  each round's modes see about the same load; ratios are taken pair by pair (round i of (d) over round i
  of (b)) and reported as median and min-max, as is every per-mode figure. A naive mode that cannot do
  --steps steps in --mode-seconds in a round (it compiles almost every step) stops early and says so.
- warm-up is excluded and reported apart: (c)/(d) trace + run each compiled function once
  (``TrainingSteps.warm_up``); (a)/(b) count their first --naive-warmup steps as warm-up.
- each child imports myxtts before TensorFlow, as the trainer does, so ``TF_ENABLE_ONEDNN_OPTS`` is what
  the user chose (or TF's default) (recorded per mode with ``myxtts.runtime.describe_environment()``).

With ``training.gradient_accumulation_steps`` N > 1 a step is a cycle of N micro-batches
(``TrainingSteps.train_cycle``; the naive modes pass the cycle's real counts the same way).

    python benchmarks/training.py --config configs/mini.yaml --steps 20 --rounds 3 [--data DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import PersistentChild, emit_result, paired_ratios, spread, write_report  # noqa: E402
from myxtts.machine import machine  # noqa: E402

INPUT_STARTUP_PAUSE = 2.0  # seconds for the pipeline's prefetch buffers to fill before the first round
MODES = {"a": "a_naive", "b": "b_reduce_retracing", "bx": "b_reduce_retracing_xla", "c": "c_fixed_padding",
         "d": "d_buckets", "d_config": "d_buckets_config_budget", "dk": "dk_buckets_steps_per_execution",
         "d_ar": "d_buckets_autoregressive"}
NAIVE_OPTIONS = {"a": {}, "b": {"reduce_retracing": True}, "bx": {"reduce_retracing": True, "jit_compile": True}}
TARGETS = {"d_over_b": 1.0, "d_over_a": 2.0, "d_over_c": 1.4, "d_traces_after_warmup": 0, "d_input_wait_share": 0.01,
           "d_over_d_ar": 1.0, "d_real_mel_frames_per_second": 12000.0}


def _strip_to_batch_max(batch: dict, r: int) -> dict:
    """Re-pad a bucket batch to its own maximum lengths: the naive padded_batch shapes."""
    import numpy as np
    text = int(np.max(batch["token_lengths"]))
    frames = int(np.max(batch["mel_lengths"]))
    frames += (-frames) % r
    return {**batch, "tokens": batch["tokens"][:, :text], "mel": batch["mel"][:, :frames]}


def _shape_name(batches: list[dict]) -> str:
    return "+".join(f"{tuple(b['tokens'].shape)}/{tuple(b['mel'].shape[:2])}" for b in batches)


class _ModeRunner:
    """In a child: one mode's step function and input iterator, warmed up once, then run round by round."""

    def __init__(self, key: str, cfg):
        import keras
        import tensorflow as tf

        from myxtts.data.pipeline import InputPipeline
        from myxtts.model import add_normalizers, build_model
        from myxtts.text import Vocabulary
        from myxtts.training.schedule import make_optimizer
        from myxtts.training.steps import TrainingSteps
        keras.utils.set_random_seed(cfg.training.seed)  # the same initial model in every mode
        self.key, self.accumulation = key, cfg.training.gradient_accumulation_steps
        self.steps_per_call = cfg.training.steps_per_execution  # (dk): one call = a block of K steps
        pipeline = InputPipeline(cfg, "train")
        model = build_model(cfg, len(Vocabulary.load(cfg.cache_dir / "vocab.json").symbols))
        self.steps = steps = TrainingSteps(model, make_optimizer(cfg), cfg, tf.distribute.get_strategy())
        self.transform: Callable = lambda batch: batch
        self.warmup: dict[str, Any] = {}
        started = time.perf_counter()
        if key in NAIVE_OPTIONS:
            function = tf.function(steps.train_graph, **NAIVE_OPTIONS[key])
            r = cfg.model.reduction_factor
            self.transform = lambda batch: _strip_to_batch_max(batch, r)
            self.count = function.experimental_get_tracing_count

            def cycle(batches: list[dict]) -> dict:
                if self.accumulation == 1:
                    return function(batches[0])
                normalizers = add_normalizers([steps.batch_normalizers(b) for b in batches])
                return [function(b, normalizers) for b in batches][-1]
            self.cycle = cycle
        else:
            signatures = pipeline.signatures()
            steps.build(signatures, lambda f, _name: f)
            self.warmup["per_function_seconds"] = steps.warm_up()
            self.warmup["batch_shapes"] = [f"{s['tokens'].shape[0]}x{s['tokens'].shape[1]}t/{s['mel'].shape[1]}f"
                                           for s in signatures]
            self.count = lambda: sum(f.experimental_get_tracing_count() for f in steps.train_functions.values())
            self.cycle = steps.train_cycle
        self.iterator = iter(pipeline.dataset())
        self.iterator = itertools.chain([next(self.iterator)], self.iterator)  # start the input pipeline
        self.warmup_steps = 0
        self.warmup["seconds"] = time.perf_counter() - started

    def naive_warmup(self, steps: int) -> None:
        """(a)/(b): the first steps trace; they count as warm-up, not throughput."""
        started = time.perf_counter()
        for _ in range(steps):
            self.run_cycle()
        self.warmup_steps = steps
        self.warmup["seconds"] += time.perf_counter() - started

    def run_cycle(self) -> tuple[list[dict], float, float]:
        """One optimizer update; returns its batches, the seconds waiting for input, and the step seconds."""
        t0 = time.perf_counter()
        batches = [self.transform(next(self.iterator)) for _ in range(self.accumulation)]
        t1 = time.perf_counter()
        float(self.cycle(batches)["total"])  # wait for the step
        return batches, t1 - t0, time.perf_counter() - t1

    def run_round(self, steps: int, max_seconds: float) -> dict[str, Any]:
        import numpy as np
        traces_before = self.count()
        per_shape: dict[str, list[float]] = defaultdict(list)
        real = padded = wait = 0.0
        traced_steps = done = 0
        started = time.perf_counter()
        while done < steps and time.perf_counter() - started < max_seconds:
            before = self.count()
            batches, waited, seconds = self.run_cycle()
            done += self.steps_per_call
            traced_steps += self.count() != before
            wait += waited
            real += sum(float(np.sum(b["mel_lengths"])) for b in batches)  # a block: all K batches
            padded += sum(float(np.prod(b["mel"].shape[:-1])) for b in batches)
            per_shape[_shape_name(batches)].append(seconds / self.steps_per_call)
        elapsed = time.perf_counter() - started
        return {"steps": done, "stopped_early": done < steps, "seconds": elapsed,
                "real_mel_frames_per_second": real / elapsed, "padded_mel_frames_per_second": padded / elapsed,
                "padding_share": 1.0 - real / max(padded, 1.0), "input_wait_share": wait / elapsed,
                "traces": self.count() - traces_before, "steps_that_traced": traced_steps,
                "step_seconds_per_shape": dict(per_shape)}


def _child(args) -> None:
    """A mode's process: warm up, report ready, then one round per stdin line ("<steps> <max seconds>")."""
    # before TensorFlow, as the trainer: TF_ENABLE_ONEDNN_OPTS as the user set it, or TF's default
    import myxtts  # noqa: F401

    from common import tensorflow_environment
    from myxtts.config import load_config
    runner = _ModeRunner(args.child, load_config(args.config, args.overrides))
    if args.child in NAIVE_OPTIONS:
        runner.naive_warmup(args.naive_warmup)
    time.sleep(INPUT_STARTUP_PAUSE)  # prefetch buffers fill outside any timing
    emit_result({"ready": True, "warmup": runner.warmup, "warmup_steps": runner.warmup_steps,
                 "traces_at_warmup": runner.count(), "environment": tensorflow_environment()})
    for line in sys.stdin:
        steps, max_seconds = line.split()
        emit_result(runner.run_round(int(steps), float(max_seconds)))


def _summarise(name: str, ready: dict, rounds: list[dict]) -> dict[str, Any]:
    """Per-mode figures over rounds: medians and ranges; step time per shape over every timed step."""
    if "error" in ready or any("error" in r for r in rounds):
        return {"mode": name, "error": ready.get("error") or next(r["error"] for r in rounds if "error" in r),
                "ready": ready, "rounds": rounds}
    shapes: dict[str, list[float]] = defaultdict(list)
    for r in rounds:
        for shape, seconds in r["step_seconds_per_shape"].items():
            shapes[shape].extend(seconds)
    step_time = {s: {"mean": statistics.mean(v), "cv": statistics.pstdev(v) / statistics.mean(v) if len(v) > 1
                     else None, "n": len(v), "min": min(v), "max": max(v)} for s, v in shapes.items()}
    return {"mode": name, "rounds": len(rounds), "steps_per_round": [r["steps"] for r in rounds],
            "stopped_early_rounds": sum(r["stopped_early"] for r in rounds),
            "real_mel_frames_per_second": spread(r["real_mel_frames_per_second"] for r in rounds),
            "real_mel_frames_per_second_per_round": [r["real_mel_frames_per_second"] for r in rounds],
            "padded_mel_frames_per_second": spread(r["padded_mel_frames_per_second"] for r in rounds),
            "padding_share": spread(r["padding_share"] for r in rounds),
            "input_wait_share": spread(r["input_wait_share"] for r in rounds),
            "traces_at_warmup": ready["traces_at_warmup"], "warmup_steps": ready["warmup_steps"],
            "traces_after_warmup": sum(r["traces"] for r in rounds),
            "steps_that_traced_after_warmup": sum(r["steps_that_traced"] for r in rounds),
            "warmup": ready["warmup"], "shapes_seen": len(step_time), "step_time_per_shape": step_time,
            "step_time_cv_max": max((t["cv"] for t in step_time.values() if t["cv"] is not None), default=None),
            "onednn": ready["environment"]["onednn"], "onednn_source": ready["environment"]["onednn_source"]}


def _targets(summaries: dict[str, dict], ratios: dict[str, dict]) -> dict[str, Any]:
    """The issue's targets, reported (not asserted): met / not met on the medians."""
    out = {}
    for key, mode in (("d_over_b", "b"), ("d_over_a", "a"), ("d_over_c", "c"), ("d_over_d_ar", "d_ar")):
        median = ratios.get(MODES[mode], {}).get("median")
        out[key] = {"target": f">= {TARGETS[key]}x", "median": median,
                    "met": None if median is None else median >= TARGETS[key]}
    d = summaries.get("d_buckets", {})
    if "traces_after_warmup" in d:
        out["d_traces_after_warmup"] = {"target": 0, "value": d["traces_after_warmup"],
                                        "met": d["traces_after_warmup"] == 0}
        wait = d["input_wait_share"]["max"]
        out["d_input_wait_share"] = {"target": "< 1%", "max_over_rounds": wait,
                                     "met": wait < TARGETS["d_input_wait_share"]}
        rate = d["real_mel_frames_per_second"]["median"]
        out["d_real_mel_frames_per_second"] = {"target": f">= {TARGETS['d_real_mel_frames_per_second']:,.0f}",
                                               "median": rate, "met": rate >= TARGETS["d_real_mel_frames_per_second"]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/mini.yaml")
    parser.add_argument("--data", default=None, help="corpus folder (LJSpeech layout); prepared into a temp cache")
    parser.add_argument("--steps", type=int, default=20, help="steady-state steps per mode per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each runs every mode in turn")
    parser.add_argument("--mode-seconds", type=float, default=60.0,
                        help="a mode's round stops after this many seconds ((a)/(b) compile almost every step)")
    parser.add_argument("--naive-warmup", type=int, default=2,
                        help="steps counted as warm-up for (a)/(b) ((b) traces exactly, then with None dims)")
    parser.add_argument("--modes", default="a,b,c,d", help=f"comma list of {', '.join(MODES)}")
    parser.add_argument("--steps-per-execution", type=int, default=4, help="K of mode (dk)")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    parser.add_argument("--json", default=None, help="also write the JSON here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    import myxtts  # noqa: F401  (the parent prepares the cache: TensorFlow, configured like the children)
    from myxtts.config import load_config
    from myxtts.data.prepare import prepare
    overrides = list(args.overrides)
    if args.data:
        overrides += [f"data.corpus_path={os.path.abspath(args.data)}",
                      f"data.cache_dir={tempfile.mkdtemp(prefix='bench-cache-')}"]
    cfg = load_config(args.config, overrides)
    prepare(cfg, progress=False)
    machine_record = machine()
    machine_record["load_average_at_start"] = machine_record.pop("load_average")
    # the fixed mode's padded frames per batch is the budget every bucket batch gets too
    budget = cfg.data.batch_size * cfg.data.max_mel_frames
    bucket = [f"data.batch_frames={budget}", f"data.batch_size={budget // cfg.data.bucket_multiple}"]
    mode_overrides = {"a": bucket, "b": bucket, "bx": bucket, "d": bucket, "d_config": [],
                      "d_ar": bucket + ["model.decoder=autoregressive", "model.reduction_factor=2"],
                      "c": ["data.pad_to_fixed_length=true"],
                      "dk": bucket + [f"training.steps_per_execution={args.steps_per_execution}",
                                      f"training.max_steps={1000 * args.steps_per_execution}"]}
    modes = args.modes.split(",")
    children, ready = {}, {}
    log_dir = tempfile.mkdtemp(prefix="bench-training-")
    try:
        for key in modes:  # warm up one after the other: each warm-up has the cores to itself (and the others)
            print(f"warming up {MODES[key]} ...", file=sys.stderr, flush=True)
            command = [os.path.abspath(__file__), "--child", key, "--config", os.path.abspath(args.config),
                       "--naive-warmup", str(args.naive_warmup)]
            for item in overrides + mode_overrides[key]:
                command += ["--set", item]
            children[key] = PersistentChild(command, stderr_path=os.path.join(log_dir, f"{key}.stderr"))
            ready[key] = children[key].read_result()
        rounds: dict[str, list[dict]] = {key: [] for key in modes}
        for index in range(args.rounds):
            print(f"round {index + 1}/{args.rounds}", file=sys.stderr, flush=True)
            for key in modes:
                if "error" not in ready[key]:
                    rounds[key].append(children[key].request(f"{args.steps} {args.mode_seconds}"))
    finally:
        for child in children.values():
            child.close()
    summaries = {MODES[k]: _summarise(MODES[k], ready[k], rounds.get(k, [])) for k in modes}
    ratios = {}
    if "d" in modes and "error" not in summaries["d_buckets"]:
        reference = summaries["d_buckets"]["real_mel_frames_per_second_per_round"]
        ratios = {name: paired_ratios(reference, s["real_mel_frames_per_second_per_round"])
                  for name, s in summaries.items() if name != "d_buckets" and "error" not in s}
    dk = summaries.get(MODES["dk"], {})
    if "d" in modes and "dk" in modes and "error" not in dk and "error" not in summaries["d_buckets"]:
        ratios["steps_per_execution_gain_dk_over_d"] = paired_ratios(
            dk["real_mel_frames_per_second_per_round"], summaries["d_buckets"]["real_mel_frames_per_second_per_round"])
    environment = next((r["environment"] for r in ready.values() if "environment" in r), None)
    report = {"benchmark": "training", "method": "alternating rounds, one persistent process per mode",
              "config": args.config, "data": str(cfg.corpus_path), "model_preset": cfg.model.preset,
              "rounds": args.rounds, "steps_per_round": args.steps, "mode_seconds": args.mode_seconds,
              "frame_budget_per_batch": budget, "overrides": args.overrides,
              "machine": {**machine_record, "load_average_at_end": list(os.getloadavg())},
              "environment": environment, "child_logs": log_dir,
              "d_buckets_over_mode_paired_by_round": ratios, "targets": _targets(summaries, ratios),
              "results": summaries}
    write_report(report, args.json)


if __name__ == "__main__":
    main()

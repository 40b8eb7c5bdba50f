"""Why oneDNN made the static-shape train step slow: per-op profile, oneDNN on / off, static / None dims.

Each variant runs in its own child process, because TensorFlow reads ``TF_ENABLE_ONEDNN_OPTS`` once, at
import: the parent puts it in the child's environment before the child starts (myxtts' runtime.py keeps a
value the user set). Grappler options (``tf.config.optimizer.set_experimental_options``) are set in the
child before any function runs, since grappler rewrites a graph at its first call.

In a child: the tiny model + ``TrainingSteps`` on synthetic batches of two bucket shapes (batch 2 x text
160 x mel 840 and batch 7 x text 64 x mel 336), each compiled twice: with the trainer's static
``input_signature`` (``TrainingSteps.build``) and with ``None`` dims (one generic function). Each function
is warmed up (trace + first calls), then the two compilations are timed in alternating rounds (static,
None, static, None ...) so the other jobs on the shared cores load both alike, and the static / None ratio
is taken round by round. Then one call of each is profiled with ``tf.profiler.experimental`` and the
trace (``*.xplane.pb``, parsed with TF's own ``xplane_pb2``) is summed per op type: executor events are
named ``<op name>:<op type>``, so the oneDNN rewrites (``_MklFusedBatchMatMulV2``, ``_MklTranspose`` ...)
show by name. Variants compare across children, so read them as ratios inside each child first.

    .venv/bin/python benchmarks/onednn_profile.py --variants onednn_on,onednn_off,onednn_on_no_remapping \
        --warmup 2 --calls 2 --rounds 2 --attention-check --json docs/benchmarks/onednn_profile.json

Finding (docs/training.md, "CPU performance"): with static shapes the remapper fuses the decoder's causal
attention logits (BatchMatMulV2 -> Mul -> AddV2 of a [1, 1, T, T] bias) into ``_MklFusedBatchMatMulV2``, for
which oneDNN runs its reference matmul (``ONEDNN_VERBOSE=1``: ``matmul,ref:any``); ``--attention-check`` times
that pattern alone against two equivalent forms that do not match it.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
import tempfile
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import REPO, emit_result, paired_ratios, run_child, spread, write_report  # noqa: E402
from myxtts.machine import machine  # noqa: E402

# name -> (TF_ENABLE_ONEDNN_OPTS, grappler options set in the child)
VARIANTS = {
    "onednn_on": ("1", {}),
    "onednn_off": ("0", {}),
    "onednn_on_no_remapping": ("1", {"remapping": False}),
    "onednn_on_no_layout_optimizer": ("1", {"layout_optimizer": False}),
}
SHAPES = ((2, 160, 840), (7, 64, 336))  # (batch, text, mel frames): a long and a short bucket
REFERENCE_FRAMES = 96
VOCABULARY = 40
OP_EVENT = re.compile(r"^([^ :]+):([A-Za-z_][A-Za-z0-9_]*)$")  # executor op events: "<op name>:<op type>"


def _op_times(logdir: str) -> dict[str, dict[str, float]]:
    """Milliseconds per op type and per op (name:type) in the host plane of the profile under ``logdir``."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    by_type: dict[str, float] = defaultdict(float)
    by_op: dict[str, float] = defaultdict(float)
    for path in glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True):
        space = xplane_pb2.XSpace()
        with open(path, "rb") as handle:
            space.ParseFromString(handle.read())
        for plane in space.planes:
            if not plane.name.startswith("/host:CPU"):
                continue
            for line in plane.lines:
                for event in line.events:
                    match = OP_EVENT.match(plane.event_metadata[event.metadata_id].name)
                    if match:
                        by_type[match.group(2)] += event.duration_ps / 1e9
                        by_op[match.group(0)] += event.duration_ps / 1e9
    return {"by_type": dict(by_type), "by_op": dict(by_op)}


def _top(table: dict[str, float], count: int) -> list[list]:
    return [[name, round(ms, 2)] for name, ms in sorted(table.items(), key=lambda item: -item[1])[:count]]


def _child(args) -> None:
    """One variant: build, warm up, time static vs None dims in alternating rounds, profile one call each."""
    import myxtts  # noqa: F401  (before TensorFlow: runtime.py keeps the value the parent set)
    import tensorflow as tf

    sys.path.insert(0, str(REPO / "tests"))
    from common import tensorflow_environment
    from myxtts.config import config_from_dict
    from myxtts.model import build_model
    from myxtts.training.schedule import make_optimizer
    from myxtts.training.shape_keys import shape_key
    from myxtts.training.steps import TrainingSteps
    from train_helpers import batch_spec, synthetic_batch

    grappler = json.loads(args.grappler)
    if grappler:
        tf.config.optimizer.set_experimental_options(grappler)
    cfg = config_from_dict({"model": {"preset": "tiny", "dropout": 0.05}, "training": {"seed": 1}})
    model = build_model(cfg, VOCABULARY)
    steps = TrainingSteps(model, make_optimizer(cfg), cfg, tf.distribute.get_strategy())
    specs = [batch_spec(b, t, m, REFERENCE_FRAMES) for b, t, m in SHAPES]
    steps.build(specs, lambda function, _name: function)
    # the same signature with every dim None but the mel channels: one generic graph for every shape
    generic = {key: tf.TensorSpec([None] * (spec.shape.rank - 1) + [spec.shape[-1]] if key.endswith("mel")
                                  else [None] * spec.shape.rank, spec.dtype) for key, spec in specs[0].items()}
    dynamic = tf.function(steps.train_graph, input_signature=[generic])
    batches = {shape: synthetic_batch(*shape, REFERENCE_FRAMES, vocab_size=VOCABULARY, seed=i)
               for i, shape in enumerate(SHAPES)}
    functions = {"static": lambda b: steps.train_functions[shape_key(b)](b), "dynamic": dynamic}

    def call(mode: str, batch: dict) -> float:
        started = time.perf_counter()
        float(functions[mode](batch)["total"])  # waits for the step
        return time.perf_counter() - started

    warmup = {f"{mode} {shape}": [call(mode, batches[shape]) for _ in range(args.warmup)]
              for mode in functions for shape in SHAPES}
    seconds: dict[str, list[list[float]]] = {f"{mode} {shape}": [] for mode in functions for shape in SHAPES}
    for _ in range(args.rounds):
        for mode in functions:  # static, dynamic, static, dynamic ...
            for shape in SHAPES:
                seconds[f"{mode} {shape}"].append([call(mode, batches[shape]) for _ in range(args.calls)])
    step_time = {key: spread(sum(rounds, [])) for key, rounds in seconds.items()}
    round_means = {key: [sum(r) / len(r) for r in rounds] for key, rounds in seconds.items()}
    static_over_dynamic = {str(shape): paired_ratios(round_means[f"static {shape}"], round_means[f"dynamic {shape}"])
                           for shape in SHAPES}
    profiles = {}
    for mode in functions:
        logdir = tempfile.mkdtemp(prefix=f"onednn-{mode}-")
        tf.profiler.experimental.start(logdir)
        wall = sum(call(mode, batches[shape]) for shape in SHAPES)
        tf.profiler.experimental.stop()
        times = _op_times(logdir)
        profiles[mode] = {"wall_seconds_profiled_calls": wall, "op_ms_total": sum(times["by_type"].values()),
                          "top_op_types_ms": _top(times["by_type"], 15), "top_ops_ms": _top(times["by_op"], 10),
                          "onednn_ops_ms": round(sum(ms for op_type, ms in times["by_type"].items()
                                                     if op_type.startswith("_Mkl")), 2)}
    emit_result({"environment": tensorflow_environment(), "grappler_options": grappler,
                 "warmup_seconds": warmup, "step_seconds": step_time,
                 "step_seconds_per_round_mean": round_means, "static_over_dynamic": static_over_dynamic,
                 "profile": profiles})


ATTENTION_SHAPE = (2, 2, 420, 64)  # batch, heads, decoder steps (840 frames / r=2), head dim: the tiny preset


def _attention_child(args) -> None:
    """Micro-check on the decoder's causal self-attention logits alone (forward + backward, static shapes):
    ``logits * scale + bias`` (the model's form: BatchMatMulV2 -> Mul(scalar) -> AddV2([1, 1, T, T]), the
    pattern the oneDNN remapper fuses into ``_MklFusedBatchMatMulV2``) against two forms that compute the
    same softmax without that pattern: the scale on q before the matmul, and ``tf.where`` instead of the add."""
    import myxtts  # noqa: F401
    import tensorflow as tf

    from common import tensorflow_environment
    batch, heads, steps, head_dim = ATTENTION_SHAPE
    scale = head_dim ** -0.5
    causal = tf.linalg.band_part(tf.ones([steps, steps], tf.bool), -1, 0)[None, None]
    bias = tf.where(causal, 0.0, -1e9)
    forms = {"matmul_mul_add": lambda q, k: tf.matmul(q, k, transpose_b=True) * scale + bias,
             "scaled_q_matmul_add": lambda q, k: tf.matmul(q * scale, k, transpose_b=True) + bias,
             "matmul_mul_where": lambda q, k: tf.where(causal, tf.matmul(q, k, transpose_b=True) * scale, -1e9)}
    spec = tf.TensorSpec([batch, heads, steps, head_dim], tf.float32)

    def compiled(form):
        @tf.function(input_signature=[spec, spec])
        def step(q, k):
            with tf.GradientTape() as tape:
                tape.watch([q, k])
                weights = tf.nn.softmax(form(q, k), axis=-1)
                loss = tf.reduce_sum(weights * tf.range(steps, dtype=tf.float32))
            return loss, tape.gradient(loss, [q, k])
        return step
    functions = {name: compiled(form) for name, form in forms.items()}
    q, k = tf.random.normal(spec.shape, seed=1), tf.random.normal(spec.shape, seed=2)
    values = {name: float(function(q, k)[0]) for name, function in functions.items()}  # warm-up and agreement
    seconds: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(args.rounds):
        for name, function in functions.items():
            started = time.perf_counter()
            for _ in range(args.calls):
                float(function(q, k)[0])
            seconds[name].append((time.perf_counter() - started) / args.calls)
    emit_result({"environment": tensorflow_environment(), "shape_batch_heads_steps_head_dim": ATTENTION_SHAPE,
                 "loss_per_form": values, "seconds_per_call": {n: spread(v) for n, v in seconds.items()},
                 "over_matmul_mul_add": {n: paired_ratios(v, seconds["matmul_mul_add"]) for n, v in seconds.items()}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--warmup", type=int, default=2, help="calls per function before timing (1st traces)")
    parser.add_argument("--calls", type=int, default=3, help="timed calls per function per round")
    parser.add_argument("--rounds", type=int, default=2, help="alternating static / None-dims rounds per child")
    parser.add_argument("--attention-check", action="store_true",
                        help="also time the attention-logits forms alone (oneDNN on / off)")
    parser.add_argument("--json", default=None, help="also write the JSON here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--grappler", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "attention":
        _attention_child(args)
        return
    if args.child:
        _child(args)
        return
    started = machine()
    results = {}
    for name in [n for n in args.variants.split(",") if n]:
        flag, grappler = VARIANTS[name]
        print(f"variant {name} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        results[name] = run_child([os.path.abspath(__file__), "--child", name, "--grappler", json.dumps(grappler),
                                   "--warmup", str(args.warmup), "--calls", str(args.calls),
                                   "--rounds", str(args.rounds)], {"TF_ENABLE_ONEDNN_OPTS": flag}, timeout=1800.0)
        results[name]["child_seconds"] = time.perf_counter() - t0
    attention = {}
    if args.attention_check:
        for flag in ("1", "0"):  # the logits pattern alone, oneDNN on / off
            print(f"attention check, TF_ENABLE_ONEDNN_OPTS={flag} ...", file=sys.stderr, flush=True)
            attention[f"onednn_{'on' if flag == '1' else 'off'}"] = run_child(
                [os.path.abspath(__file__), "--child", "attention", "--calls", str(args.calls * 3),
                 "--rounds", str(max(args.rounds, 3))], {"TF_ENABLE_ONEDNN_OPTS": flag})
    report = {"benchmark": "onednn_profile", "attention_logits_check": attention,
              "shapes_batch_text_mel": SHAPES, "reference_frames": REFERENCE_FRAMES,
              "model_preset": "tiny", "machine_at_start": started, "load_average_at_end": list(os.getloadavg()),
              "variants": results}
    write_report(report, args.json)


if __name__ == "__main__":
    main()

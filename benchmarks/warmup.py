"""Benchmark: the trainer's warm-up as shipped against AutoGraph on and against the shared work it traced again.

Every compiled function of myxtts (train / validate steps, the summary forward, synthesis, export) is built with
``tf.function(..., autograph=False)``: its control flow is written as ``tf.while_loop`` / ``tf.cond``, so AutoGraph's
source conversion of every layer's Python buys nothing and costs tracing time. Mode "autograph" puts it back (each
``tf.function`` call in the child gets ``autograph=True``, also the mel front end's and the vocoder's, which the
warm-up does not trace); mode "plain" runs the code as shipped. The optimizer update does not depend on the batch's
shape, so every bucket's train step calls one update function (``TrainingSteps.apply_function``, traced once); mode
"per_bucket_update" traces the update into each bucket's step instead, as the trainer did before. A validate step is
built only for the buckets the validation split fills (no other shape reaches it); mode "validate_every_bucket"
builds one for every bucket, as before.

Each round starts one fresh process per mode (tracing caches are per process), order alternated, and times the
trainer on the bundled corpus from the start of its compile stage (a parallel or autoregressive tiny model,
``--buckets`` length buckets, 2 steps): the warm-up's seconds (trace + first run of every function) and the first
training loss, which must be the same in both modes (the same graph is built). Medians, min-max, ratios pair by pair.

Run: ``.venv/bin/python benchmarks/warmup.py [--rounds 3] [--decoder parallel] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, emit_result, paired_ratios, run_child, spread, write_report  # noqa: E402
from myxtts.machine import machine  # noqa: E402

MODES = ("plain", "autograph", "per_bucket_update", "validate_every_bucket")


def config(root: str, decoder: str, buckets: int):
    from myxtts.config import config_from_dict

    return config_from_dict({
        "data": {"corpus_path": str(REPO / "data" / "ljspeech-bundled"), "cache_dir": f"{root}/cache",
                 "max_text_length": 192, "max_mel_frames": 880, "batch_frames": 2400, "batch_size": 8,
                 "num_buckets": buckets, "validation_size": 2, "reference_frames": 96},
        "model": {"preset": "tiny", "decoder": decoder, "reduction_factor": 2 if decoder == "autoregressive" else 1},
        "training": {"listen_sentences": 0, "max_steps": 2, "validate_every": 2, "log_every": 1, "deterministic": True},
    }, base_dir=root)


def child(mode: str, root: str, decoder: str, buckets: int) -> None:
    """One mode in this process: prepare is done by the parent; time the trainer's warm-up."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import myxtts  # noqa: F401  (first: records the environment before TensorFlow is imported)
    import tensorflow as tf

    if mode == "autograph":
        shipped = tf.function

        def with_autograph(*args, **kwargs):
            kwargs["autograph"] = True
            return shipped(*args, **kwargs)

        tf.function = with_autograph
    if mode == "per_bucket_update":
        from myxtts.training.steps import TrainingSteps

        shipped_init = TrainingSteps.__init__

        def update_in_every_bucket(self, *args, **kwargs):
            shipped_init(self, *args, **kwargs)
            self.apply_function = self._apply_graph  # a plain method: traced again inside each bucket's train step

        TrainingSteps.__init__ = update_in_every_bucket
    if mode == "validate_every_bucket":
        from myxtts.training.steps import TrainingSteps

        shipped_build = TrainingSteps.build

        def validate_steps_for_every_bucket(self, signatures, wrap, validate_buckets=None):
            shipped_build(self, signatures, wrap, None)  # None: a validate step for every signature

        TrainingSteps.build = validate_steps_for_every_bucket
    from myxtts.training import run

    started = time.perf_counter()
    summary = run(config(root, decoder, buckets), Path(root) / f"run-{mode}-{time.time_ns()}", progress=False,
                  echo=lambda _: None)
    emit_result({"warmup_seconds": summary["warmup_seconds"], "process_seconds": time.perf_counter() - started,
                 "functions": summary["warmup_traces"], "retraces_after_warmup": summary["retraces_after_warmup"],
                 "loss_first": summary["loss_first"], "loss_last": summary["loss_last"]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--decoder", choices=("parallel", "autoregressive"), default="parallel")
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--json", default=None, help="also write the JSON here")
    parser.add_argument("--child", choices=MODES, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--root", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.root, args.decoder, args.buckets)

    from common import tensorflow_environment
    from myxtts.data.prepare import prepare

    results: dict[str, list] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as root:
        prepare(config(root, args.decoder, args.buckets), progress=False)
        for index in range(args.rounds):
            for mode in (MODES if index % 2 == 0 else MODES[::-1]):  # order alternated
                outcome = run_child([__file__, "--child", mode, "--root", root, "--decoder", args.decoder,
                                     "--buckets", str(args.buckets)], nice=0)
                print(f"round {index + 1} {mode}: {outcome}", file=sys.stderr)
                results[mode].append(outcome)
    warmups = {mode: [r.get("warmup_seconds") for r in rounds] for mode, rounds in results.items()}
    report = {
        "benchmark": "trainer warm-up as shipped vs AutoGraph on, the update traced per bucket, every bucket validated",
        "machine": machine(), "environment": tensorflow_environment(),
        "setup": {"decoder": args.decoder, "buckets": args.buckets, "rounds": args.rounds, "corpus": "bundled"},
        "warmup_seconds": {mode: spread(values) for mode, values in warmups.items()},
        "plain_over_autograph": paired_ratios(warmups["plain"], warmups["autograph"]),
        "plain_over_per_bucket_update": paired_ratios(warmups["plain"], warmups["per_bucket_update"]),
        "plain_over_validate_every_bucket": paired_ratios(warmups["plain"], warmups["validate_every_bucket"]),
        "same_first_loss": len({r.get("loss_first") for rounds in results.values() for r in rounds}) == 1,
        # the second step's loss follows the first update: the same in every mode if the update is the same
        "same_last_loss": len({r.get("loss_last") for rounds in results.values() for r in rounds}) == 1,
        "rounds": results,
    }
    write_report(report, args.json)


if __name__ == "__main__":
    sys.exit(main())

"""`myxtts diagnose retracing`: check that a configured training setup never retraces after warm-up.

It runs the production trainer, so it lives with training (above ``myxtts.diagnostics``, whose explainer, monitor and
report it uses).

Three checks, each producing findings (severity, key path, message, fix):

1. **config**: the shape policy (length buckets or fixed padding) gives a plan whose every bucket has a
   concrete batch size, every signature is fully static, and no setting defeats the compiled steps
   (``training.enable_eager_debug``, ``training.enable_graph_mode: false``, XLA with ``None`` dims);
2. **pipeline shapes**: batches of ``InputPipeline.dataset()`` (train, and the whole validation split)
   compared key by key with ``InputPipeline.signatures()``: a batch whose shapes / dtypes are none of the
   declared signatures is an error naming the key, the expected and the actual shape;
3. **training**: N real steps through ``myxtts.training.Trainer`` (so the exact production step functions,
   warm-up and trace accounting are what is checked) in a temporary run directory; every trace after
   warm-up is reported with the explainer's cause / path / before -> after / suggestion.

``RetracingReport.exit_code`` is 1 when anything retraced after warm-up or a shape mismatch was found
(any error finding), else 0, so CI can gate on it.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from myxtts.config import Config
from myxtts.data.pipeline import InputPipeline
from myxtts.diagnostics.retracing_report import ERROR, INFO, WARNING, Finding, RetracingReport, brief
from myxtts.errors import InputError
from myxtts.run_dir import RunDir
from myxtts.training.shape_keys import UnknownShapeError
from myxtts.training.trainer import Trainer

# ---- check 1: config --------------------------------------------------------------------------------

def describe_signature(signature: dict[str, tf.TensorSpec]) -> str:
    tokens, mel = signature["tokens"].shape.as_list(), signature["mel"].shape.as_list()
    return f"batch {tokens[0]} x text {tokens[1]} x mel {mel[1]}"


def check_config(cfg: Config, plan: Any, signatures: list[dict[str, tf.TensorSpec]]) -> list[Finding]:
    d, t = cfg.data, cfg.training
    findings: list[Finding] = []
    size_key = "data.batch_size" if d.pad_to_fixed_length else "data.batch_frames"
    for index, bucket in enumerate(plan.buckets):
        size = bucket.batch_size
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            findings.append(Finding(ERROR, "config", size_key, f"bucket {index} has no concrete batch size "
                                    f"({size!r}): its batches cannot have one static shape",
                                    f"give every bucket a fixed batch size ({size_key}, data.min_batch_size)"))
    dynamic = []
    for index, signature in enumerate(signatures):
        for key, spec in signature.items():
            if not spec.shape.is_fully_defined():
                dynamic.append(f"signatures()[{index}]['{key}'] = {spec.shape}")
    if dynamic:
        xla = " and training.enable_xla_compilation recompiles on every new concrete shape" \
            if t.enable_xla_compilation else ""
        findings.append(Finding(ERROR, "config", "InputPipeline.signatures()",
                                f"signature(s) with None dims: {'; '.join(dynamic[:4])}{xla}",
                                "declare one fully static signature per bucket (padded_batch to the bucket shape "
                                "with drop_remainder=True)", count=len(dynamic)))
    if t.enable_eager_debug:
        findings.append(Finding(WARNING, "config", "training.enable_eager_debug",
                                "every tf.function runs eagerly (tf.config.run_functions_eagerly): nothing is "
                                "compiled, so this check cannot see retraces and training runs Python per op",
                                "set training.enable_eager_debug: false outside debugging"))
    if not t.enable_graph_mode:
        findings.append(Finding(WARNING, "config", "training.enable_graph_mode",
                                "the steps run eagerly: no compiled graph, nothing traced",
                                "set training.enable_graph_mode: true"))
    if t.enable_xla_compilation and not dynamic:
        findings.append(Finding(INFO, "config", "training.enable_xla_compilation",
                                f"XLA compiles each of the {len(signatures)} static shapes once, at its first call "
                                "(no retrace; the first step of each bucket is slower)", ""))
    if not t.strict_retracing:
        findings.append(Finding(INFO, "config", "training.strict_retracing",
                                "training runs do not stop at an unexpected retrace",
                                "set training.strict_retracing: true in CI runs to stop at the first one"))
    return findings


# ---- check 2: pipeline batches vs signatures ----------------------------------------------------------

def _actual(value: Any) -> tuple[list[int], str]:
    return list(value.shape), tf.as_dtype(value.dtype).name


def _expected(spec: tf.TensorSpec) -> tuple[list[int | None], str]:
    return spec.shape.as_list(), spec.dtype.name


def batch_differences(batch: dict[str, Any], signature: dict[str, tf.TensorSpec]) -> list[tuple[str, str, str]]:
    """(key, expected, actual) for every key whose shape or dtype differs (missing / extra keys too)."""
    differences = []
    for key in sorted(set(signature) | set(batch)):
        if key not in batch:
            differences.append((key, _text(*_expected(signature[key])), "missing"))
        elif key not in signature:
            differences.append((key, "absent from the signature", _text(*_actual(batch[key]))))
        else:
            expected, actual = _expected(signature[key]), _actual(batch[key])
            if expected != actual:
                differences.append((key, _text(*expected), _text(*actual)))
    return differences


def _text(shape: list, dtype: str) -> str:
    return f"{shape} {dtype}"


def _closest(batch: dict[str, Any], signatures: list[dict[str, tf.TensorSpec]]) -> int:
    """The signature this batch was most likely meant to have: fewest differing keys, then nearest dims."""
    def distance(signature: dict[str, tf.TensorSpec]) -> tuple[int, int]:
        dims = 0
        for key in set(signature) & set(batch):
            expected, actual = signature[key].shape.as_list(), list(batch[key].shape)
            if len(expected) == len(actual):
                dims += sum(abs((e or 0) - a) for e, a in zip(expected, actual))
        return len(batch_differences(batch, signature)), dims
    return min(range(len(signatures)), key=lambda i: distance(signatures[i]))


def check_pipeline_shapes(datasets: list[tuple[str, tf.data.Dataset, int | None]],
                          signatures: list[dict[str, tf.TensorSpec]]) -> tuple[list[Finding], int, Counter]:
    """Iterate each (split, dataset, max_batches) and compare every batch with the declared signatures."""
    names = [describe_signature(s) for s in signatures]
    seen: Counter = Counter()
    mismatches: dict[tuple[str, str, str], Counter] = {}  # (key, expected, actual) -> batches per split
    checked = 0
    for split, dataset, limit in datasets:
        for batch in dataset.take(limit) if limit is not None else dataset:
            checked += 1
            index = _closest(batch, signatures)
            differences = batch_differences(batch, signatures[index])
            if not differences:
                seen[names[index]] += 1
                continue
            for key, expected, actual in differences:
                mismatches.setdefault((key, expected, actual), Counter())[split] += 1
    findings = []
    for (key, expected, actual), splits in mismatches.items():
        where = " and ".join(f"{count} {split}" for split, count in splits.items())
        findings.append(Finding(
            ERROR, "pipeline_shapes", key, f"{where} batch(es) have '{key}' {actual} but the closest declared "
            f"signature expects {expected}; the compiled step for that shape does not exist (an unknown shape "
            "error, or a retrace without input_signature)",
            "make InputPipeline.dataset() emit exactly the signatures() shapes: padded_batch to the bucket shape "
            "with drop_remainder=True, the same batch size per bucket as the plan, and cast to the declared dtype",
            count=sum(splits.values())))
    return findings, checked, seen


# ---- check 3: N real training steps ------------------------------------------------------------------

def _training_config(cfg: Config, steps: int) -> Config:
    """The user's config with max_steps = N, a metrics record every step, non-strict (collect every event)."""
    training = dataclasses.replace(cfg.training, max_steps=steps, log_every=1, strict_retracing=False)
    return cfg.replace(training=training)


def run_training(cfg: Config, steps: int, workdir: Path, echo: Callable[[str], None]) -> dict[str, Any]:
    """Train N steps through the production Trainer; return its trace accounting, events and step times."""
    shapes: list[str] = []  # the batch shape of each step (observed, the batch passes unchanged)

    def observe(step: int, batch: dict) -> dict:
        shapes.append(describe_signature(batch))
        return batch

    trainer = Trainer(_training_config(cfg, steps), workdir, progress=False, echo=echo, batch_filter=observe)
    eager_before = tf.config.functions_run_eagerly()
    error: str | None = None
    try:
        trainer.run()
    except UnknownShapeError as err:  # a batch outside the signatures reached the step dispatch
        error = str(err)
    finally:
        tf.config.run_functions_eagerly(eager_before)  # the trainer sets it process-wide from the config
        if getattr(trainer, "traces", None) is not None:
            trainer.traces.close()  # the trainer closes it in its loop; a failure before the loop would leak it
    traces = getattr(trainer, "traces", None)
    if traces is None:  # failed before compiling: nothing to account
        return {"error": error, "functions": {}, "warmup_seconds": 0.0, "retraces": 0, "events": [], "step_times": [],
                "step_shapes": []}
    now, warmup_counts = traces.counts(), traces.warmup_counts
    functions = {name: {"warmup_traces": warmup_counts.get(name, 0), "traces": count,
                        "after_warmup": count - warmup_counts.get(name, 0),
                        "warmup_seconds": float(trainer.warmup_seconds_of(name))}
                 for name, count in now.items()}
    monitor = traces.monitor
    unexpected = [event for event in monitor.events if event.unexpected] if monitor is not None else []
    records = []
    metrics = RunDir(workdir).metrics
    if metrics.is_file():
        records = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
    step_times = [float(r["step_time"]) for r in records if r.get("split") == "train" and "step_time" in r]
    return {"error": error, "functions": functions, "warmup_seconds": float(getattr(trainer, "warmup_total", 0.0)),
            "retraces": max(traces.retraces_after_warmup(), len(unexpected)),
            "events": [event.to_dict() for event in unexpected], "step_times": step_times,
            "step_shapes": shapes[:len(step_times)]}


def _event_findings(events: list[dict[str, Any]]) -> list[Finding]:
    grouped: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for event in events:
        grouped.setdefault((event["cause"], event.get("path") or "", event["suggestion"]), []).append(event)
    findings = []
    for (cause, path, suggestion), members in grouped.items():
        functions = sorted({e["function"] for e in members})
        where = f" at {path}" if path else ""
        first = members[0]
        findings.append(Finding(
            ERROR, "training", path or functions[0],
            f"retrace after warm-up, cause {cause}{where} in {', '.join(functions)}: {brief(first.get('before'))} "
            f"-> {brief(first.get('after'))} (call site {first['call_site']})", suggestion, count=len(members)))
    return findings


# ---- entry point ----------------------------------------------------------------------------------------

def diagnose_retracing(cfg: Config, steps: int = 20, workdir: str | Path | None = None,
                       check_batches: int | None = None,
                       echo: Callable[[str], None] = lambda line: None) -> RetracingReport:
    """Run the three checks on ``cfg``; ``workdir`` None: a temporary run directory, removed afterwards."""
    if steps < 1:
        raise InputError(f"diagnose retracing: --steps must be >= 1, got {steps}.")
    train = InputPipeline(cfg, "train")  # CacheError (a ValueError) names `myxtts prepare`
    signatures = train.signatures()
    policy = ("fixed padding (data.pad_to_fixed_length: true)" if cfg.data.pad_to_fixed_length
              else f"length buckets (data.num_buckets: {cfg.data.num_buckets})")
    report = RetracingReport(policy, [describe_signature(s) for s in signatures], steps_requested=steps)
    report.findings.extend(check_config(cfg, train.plan, signatures))

    datasets = [("train", train.dataset(repeat=True), check_batches or max(steps, 4 * len(signatures)))]
    if cfg.data.validation_size:
        datasets.append(("validation", InputPipeline(cfg, "validation").dataset(repeat=False), None))
    started = time.perf_counter()
    shape_findings, report.batches_checked, seen = check_pipeline_shapes(datasets, signatures)
    report.signatures_seen = dict(seen)
    report.findings.extend(shape_findings)
    echo(f"checked {report.batches_checked} pipeline batches in {time.perf_counter() - started:.1f} s")

    if shape_findings:  # the steps would stop at the first such batch: fix the pipeline first
        report.findings.append(Finding(INFO, "training", None, "training steps not run: the pipeline emits shapes "
                                       "outside signatures(), so the step dispatch would fail on them", ""))
        return report
    temporary = workdir is None
    run_dir = Path(tempfile.mkdtemp(prefix="myxtts-diagnose-")) if temporary else Path(workdir)
    try:
        result = run_training(cfg, steps, run_dir, echo)
    finally:
        if temporary:
            shutil.rmtree(run_dir, ignore_errors=True)
    report.run_dir = None if temporary else str(run_dir)
    report.functions, report.warmup_seconds = result["functions"], result["warmup_seconds"]
    report.step_times, report.steps_run = result["step_times"], len(result["step_times"])
    report.step_shapes = result["step_shapes"]
    report.retraces_after_warmup, report.events = result["retraces"], result["events"]
    report.findings.extend(_event_findings(result["events"]))
    if result["error"]:
        report.findings.append(Finding(ERROR, "training", "batch shape", result["error"].rstrip("."),
                                       "fix the pipeline shape mismatch reported above"))
    return report

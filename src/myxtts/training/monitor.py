"""Monitoring off the hot path: trace accounting, TensorBoard, metrics.jsonl, progress bar, summary.

Trace accounting goes through ``TraceAccounting``: the retrace explainer (``myxtts.diagnostics``
``RetraceMonitor``) watches every compiled function (explains, logs to retraces.jsonl, raises when strict);
``experimental_get_tracing_count()`` on each gives the per-function counts of the summary.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from myxtts.diagnostics import RetraceError, RetraceMonitor  # RetraceError: re-exported for the CLI


class TraceAccounting:
    """Watch compiled functions; count traces during and after warm-up; strict: the monitor raises with the
    explanation at the first trace after warm-up."""

    def __init__(self, strict: bool, json_path: Path | None = None):
        self.strict = strict
        self.functions: dict[str, Any] = {}
        self.warmup_counts: dict[str, int] = {}
        self.monitor = RetraceMonitor(strict=strict, json_path=json_path)

    def watch(self, function: Any, name: str) -> Callable:
        """Call the returned wrapper (also at warm-up): calls are what the monitor sees and explains."""
        self.functions[name] = function
        return self.monitor.watch(function, name=name)

    def end_warmup(self) -> None:
        self.warmup_counts = self.counts()
        self.monitor.end_warmup()

    def counts(self) -> dict[str, int]:
        return {name: int(f.experimental_get_tracing_count()) for name, f in self.functions.items()}

    def retraces_after_warmup(self) -> int:
        now = self.counts()
        return sum(now[name] - self.warmup_counts.get(name, 0) for name in now)

    def explanations(self) -> list[str]:
        return [str(getattr(event, "cause", "")) + ": " + str(getattr(event, "suggestion", ""))
                for event in self.monitor.events if getattr(event, "unexpected", True)]

    def close(self) -> None:
        self.monitor.close()


class MetricsLog:
    """metrics.jsonl (one JSON object per line, flushed) + TensorBoard scalars, on the chief only."""

    def __init__(self, run_dir: Path, enabled: bool = True):
        self.enabled = enabled
        self.path = run_dir / "metrics.jsonl"
        if enabled:
            self.file = open(self.path, "a", encoding="utf-8")
            self.train_writer = tf.summary.create_file_writer(str(run_dir / "tensorboard" / "train"))
            self.validation_writer = tf.summary.create_file_writer(str(run_dir / "tensorboard" / "validation"))

    def write(self, record: dict[str, Any], split: str = "train") -> None:
        if not self.enabled:
            return
        clean = {k: (float(v) if isinstance(v, (float, np.floating)) else v) for k, v in record.items()}
        self.file.write(json.dumps({"split": split, **clean}) + "\n")
        self.file.flush()
        writer = self.train_writer if split == "train" else self.validation_writer
        with writer.as_default(step=int(record["step"])):
            for key, value in clean.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    tf.summary.scalar(key, value)

    def images_and_audio(self, step: int, mel: np.ndarray, target: np.ndarray, alignment: np.ndarray,
                         audio: np.ndarray | None, sample_rate: int) -> None:
        if not self.enabled:
            return
        with self.validation_writer.as_default(step=step):
            tf.summary.image("mel_predicted_vs_target", _to_image(np.concatenate([mel, target], axis=1)))
            tf.summary.image("alignment", _to_image(alignment))
            if audio is not None:
                tf.summary.audio("teacher_forced_griffin_lim", audio[None, :, None].astype(np.float32), sample_rate)

    def close(self) -> None:
        if self.enabled:
            self.file.close()
            self.train_writer.close()
            self.validation_writer.close()


def _to_image(matrix: np.ndarray) -> np.ndarray:
    """[time, bins] -> [1, bins, time, 1] in [0, 1], low bins at the bottom."""
    matrix = np.asarray(matrix, np.float32).T[::-1]
    lo, hi = float(matrix.min()), float(matrix.max())
    return ((matrix - lo) / max(hi - lo, 1e-6))[None, :, :, None]


class StepTimer:
    """Step time and input wait (time blocked in next(iterator)) per step."""

    def __init__(self) -> None:
        self.input_wait = 0.0
        self.compute = 0.0

    def next_batch(self, iterator) -> Any:
        started = time.perf_counter()
        batch = next(iterator)
        self.input_wait += time.perf_counter() - started
        return batch


def format_summary(summary: dict[str, Any]) -> str:
    lines = ["Training summary", f"  steps: {summary['steps']} (updates applied: {summary['updates']}, "
                                 f"skipped non-finite: {summary['nonfinite_total']})"]
    lines.append(f"  warm-up: {summary['warmup_seconds']:.1f} s for {len(summary['traces'])} functions")
    for name, info in summary["traces"].items():
        lines.append(f"    {name}: {info['traces']} trace(s), compile {info['warmup_seconds']:.2f} s")
    lines.append(f"  retraces after warm-up: {summary['retraces_after_warmup']}")
    if summary.get("loss_first") is not None:
        lines.append(f"  loss: {summary['loss_first']:.4f} -> {summary['loss_last']:.4f}")
    lines.append(f"  mel frames/s (real): {summary['mel_frames_per_second']:.0f}; steps/s: "
                 f"{summary['steps_per_second']:.2f}; input wait: {100 * summary['input_wait_share']:.1f}% of step time")
    if summary.get("validation_loss") is not None:
        lines.append(f"  validation loss: {summary['validation_loss']:.4f}")
    lines.append(f"  run dir: {summary['run_dir']}")
    return "\n".join(lines)

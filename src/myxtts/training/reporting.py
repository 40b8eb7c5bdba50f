"""Monitoring off the hot path: trace accounting, TensorBoard, metrics.jsonl, progress bar, summary.

Trace accounting goes through ``TraceAccounting``: the retrace explainer (``myxtts.diagnostics``
``RetraceMonitor``) watches every compiled function (explains, logs to retraces.jsonl, raises when strict);
``experimental_get_tracing_count()`` on each gives the per-function counts of the summary.
"""

from __future__ import annotations

import collections
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from myxtts.diagnostics import RetraceMonitor
from myxtts.diagnostics.pipeline_timing import baseline_iterator, excess_lower_bound
from myxtts.run_dir import RunDir


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
        self.path = RunDir(run_dir).metrics
        self.run_dir = run_dir
        self.writers: dict[str, Any] = {}
        if enabled:
            self.file = open(self.path, "a", encoding="utf-8")
            self.train_writer = self.writer("train")
            self.validation_writer = self.writer("validation")

    def writer(self, split: str) -> Any:
        """The TensorBoard writer of ``split`` (``tensorboard/<split>``), created at its first use."""
        if split not in self.writers:
            self.writers[split] = tf.summary.create_file_writer(str(RunDir(self.run_dir).tensorboard / split))
        return self.writers[split]

    def write(self, record: dict[str, Any], split: str = "train") -> None:
        if not self.enabled:
            return
        clean = {k: (float(v) if isinstance(v, (float, np.floating)) else v) for k, v in record.items()}
        self.file.write(json.dumps({"split": split, **clean}) + "\n")
        self.file.flush()
        with self.writer(split).as_default(step=int(record["step"])):
            for key, value in clean.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    tf.summary.scalar(key, value)

    def images_and_audio(self, step: int, mel: np.ndarray, target: np.ndarray, alignment: np.ndarray,
                         audio: np.ndarray | None, sample_rate: int) -> None:
        if not self.enabled:
            return
        with self.validation_writer.as_default(step=step):
            tf.summary.image("mel_predicted_vs_target", summary_image(np.concatenate([mel, target], axis=1)))
            tf.summary.image("alignment", summary_image(alignment))
            if audio is not None:
                tf.summary.audio("teacher_forced_griffin_lim", audio[None, :, None].astype(np.float32), sample_rate)

    def close(self) -> None:
        if self.enabled:
            self.file.close()
            for writer in self.writers.values():
                writer.close()


def summary_image(matrix: np.ndarray) -> np.ndarray:
    """A matrix ``[time, bins]`` (a mel, an alignment) -> the ``tf.summary.image`` of it, ``[1, bins, time, 1]`` in
    [0, 1], low bins at the bottom (the trainer's summaries and the listener's)."""
    matrix = np.asarray(matrix, np.float32).T[::-1]
    lo, hi = float(matrix.min()), float(matrix.max())
    return ((matrix - lo) / max(hi - lo, 1e-6))[None, :, :, None]


class _Moments:
    """Running mean and variance (Welford): no list grows with the number of steps."""

    def __init__(self) -> None:
        self.count, self.mean, self._squares = 0, 0.0, 0.0

    def add(self, value: float) -> None:
        self.count += 1
        delta = value - self.mean
        self.mean += delta / self.count
        self._squares += delta * (value - self.mean)

    @property
    def variance(self) -> float:
        return self._squares / (self.count - 1) if self.count > 1 else 0.0


class StepTimer:
    """Step time and input wait (time blocked in next(iterator)) per step.

    `input_wait` is the raw time in next(). Part of it is the cost of next() on *any* tf.data iterator
    (more right after a step released the CPU), which is not a starved device; reporting it would make a
    healthy pipeline look "moderately input-bound". So every `sample_every` steps the timer also
    calls next() on an in-memory iterator with the batch's element spec (built from the first batch,
    ending in a prefetch like the training pipeline), just before the real call so it sees the same cold
    start. `input_wait_share(elapsed)` keeps only the excess per call that the noise cannot explain:
    mean wait - median in-memory cost (the median: one descheduled sample must not set the cost) - 2
    standard errors of the mean wait (a few calls descheduled on a busy machine are not a starved
    device), times the calls. It is the principle of `diagnose pipeline`'s correction (subtract what next()
    costs on an in-memory iterator, keep only what the noise cannot explain), made cheap enough for every
    step: `diagnose` pairs each real call with a baseline call and pools per-run excesses, the trainer
    samples the baseline every `sample_every` calls and compares the mean wait with its median.
    The first call (iterator start-up) is left out of the corrected wait; `input_wait` keeps it.
    """

    def __init__(self, sample_every: int = 8, final_prefetch: bool = True) -> None:
        if sample_every < 1:
            raise ValueError(f"StepTimer: sample_every must be >= 1, got {sample_every}.")
        self.input_wait = 0.0
        self.compute = 0.0
        self.calls = 0
        self.sample_every = sample_every
        self.final_prefetch = final_prefetch
        self.correction_note = ""  # why no correction is applied, when it cannot be
        self._waits = _Moments()
        self._baseline_waits: collections.deque[float] = collections.deque(maxlen=1024)
        self._baseline: Any = None

    def next_batch(self, iterator) -> Any:
        if self._baseline is not None and self.calls % self.sample_every == 0:
            started = time.perf_counter()
            next(self._baseline)
            self._baseline_waits.append(time.perf_counter() - started)
        started = time.perf_counter()
        batch = next(iterator)
        wait = time.perf_counter() - started
        self.input_wait += wait
        self.calls += 1
        if self.calls == 1:  # the first call starts the pipeline's threads: start-up, not a starved step
            self._calibrate(batch)
        else:
            self._waits.add(wait)
        return batch

    def _calibrate(self, batch: Any) -> None:
        try:
            self._baseline = baseline_iterator(batch, self.final_prefetch)
        except (TypeError, ValueError, tf.errors.OpError) as err:  # e.g. per-replica values of a strategy
            self.correction_note = f"input wait not corrected: no in-memory iterator for this batch ({err})"

    @property
    def baseline_samples(self) -> int:
        return len(self._baseline_waits)

    @property
    def iterator_call_seconds(self) -> float:
        """Median cost of next() on the in-memory iterator (last 1024 samples; 0 until sampled)."""
        return statistics.median(self._baseline_waits) if self._baseline_waits else 0.0

    @property
    def corrected_input_wait(self) -> float:
        """Seconds waited beyond next()'s own cost, lower ~95% bound; the raw wait when not calibrated."""
        if not self._baseline_waits or self._waits.count < 2:
            return self.input_wait
        error = math.sqrt(self._waits.variance / self._waits.count)
        return self._waits.count * excess_lower_bound(self._waits.mean - self.iterator_call_seconds, error)

    def input_wait_share(self, elapsed: float) -> float:
        """Input-bound share of `elapsed` seconds without the iterator's own per-call cost."""
        return min(self.corrected_input_wait / max(elapsed, 1e-9), 1.0)

    def raw_input_wait_share(self, elapsed: float) -> float:
        return self.input_wait / max(elapsed, 1e-9)


def format_summary(summary: dict[str, Any]) -> str:
    lines = ["Training summary", f"  steps: {summary['steps']} (updates applied: {summary['updates']}, "
                                 f"skipped non-finite: {summary['nonfinite_total']})"]
    lines.append(f"  warm-up: {summary['warmup_seconds']:.1f} s for {len(summary['traces'])} functions")
    for name, info in summary["traces"].items():
        lines.append(f"    {name}: {info['traces']} trace(s), compile {info['warmup_seconds']:.2f} s")
    lines.append(f"  retraces after warm-up: {summary['retraces_after_warmup']}")
    if summary.get("stopped") not in (None, "max_steps"):
        by = f" ({summary['interrupted_by']})" if summary.get("interrupted_by") else ""
        lines.append(f"  stopped: {summary['stopped']}{by} at step {summary['steps']}")
    if summary.get("loss_first") is not None:
        lines.append(f"  loss: {summary['loss_first']:.4f} -> {summary['loss_last']:.4f}")
    lines.append(f"  mel frames/s (real): {summary['mel_frames_per_second']:.0f}; steps/s: "
                 f"{summary['steps_per_second']:.2f}; input wait: {100 * summary['input_wait_share']:.1f}% of step time")
    if summary.get("input_wait_note"):  # the raw share, and why it could not be corrected
        lines.append(f"    ({summary['input_wait_note']}; raw share {100 * summary['input_wait_share_raw']:.1f}%)")
    if summary.get("validation_loss") is not None:
        lines.append(f"  validation loss: {summary['validation_loss']:.4f}")
    if summary.get("weight_average_decay"):
        lines.append(f"  weight average: decay {summary['weight_average_decay']:g}, checkpointed; synthesis, export, "
                     "pack and warm starts read it (validation reads the weights)")
    lines.append(f"  run dir: {summary['run_dir']}")
    return "\n".join(lines)

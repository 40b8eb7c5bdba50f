"""The report of `myxtts diagnose retracing` (``myxtts.training.retracing_check.diagnose_retracing``): findings
with a severity, key path, message and fix; traces per function; step-time statistics; text and JSON forms; the exit
code CI gates on.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ERROR, WARNING, INFO = "error", "warning", "info"
_SEVERITY_RANK = {ERROR: 0, WARNING: 1, INFO: 2}


@dataclass
class Finding:
    severity: str  # error (exit 1) | warning | info
    check: str  # config | pipeline_shapes | training
    key: str | None  # config key path, batch key or function name
    message: str
    fix: str
    count: int = 1

    def format(self) -> str:
        where = f" [{self.key}]" if self.key else ""
        times = f" (x{self.count})" if self.count > 1 else ""
        fix = f" Fix: {self.fix}" if self.fix else ""
        return f"{self.severity.upper()} {self.check}{where}{times}: {self.message}.{fix}"


@dataclass
class RetracingReport:
    shape_policy: str
    signatures: list[str]  # one readable line per declared signature
    batches_checked: int = 0
    signatures_seen: dict[str, int] = field(default_factory=dict)  # signature line -> batches of that shape
    findings: list[Finding] = field(default_factory=list)
    steps_requested: int = 0
    steps_run: int = 0
    functions: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> traces / warm-up seconds
    warmup_seconds: float = 0.0
    step_times: list[float] = field(default_factory=list)  # seconds per training step, in order
    step_shapes: list[str] = field(default_factory=list)  # the batch shape of each of those steps
    retraces_after_warmup: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)  # explainer events after warm-up (JSON fields)
    run_dir: str | None = None

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def exit_code(self) -> int:
        return 1 if self.errors or self.retraces_after_warmup else 0

    def step_time_stats(self) -> dict[str, Any]:
        return step_time_stats(self.step_times, self.step_shapes)

    def ranked_fixes(self) -> list[str]:
        """Errors first, then warnings, then hints; within a severity the most frequent first; no duplicates."""
        ordered = sorted((f for f in self.findings if f.fix),
                         key=lambda f: (_SEVERITY_RANK[f.severity], -f.count))
        fixes: list[str] = []
        for finding in ordered:
            line = f"{finding.key}: {finding.fix}" if finding.key else finding.fix
            if line not in fixes:
                fixes.append(line)
        return fixes

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.exit_code == 0, "exit_code": self.exit_code, "shape_policy": self.shape_policy,
            "signatures": self.signatures, "batches_checked": self.batches_checked,
            "signatures_seen": self.signatures_seen, "steps_requested": self.steps_requested,
            "steps_run": self.steps_run, "functions": self.functions, "warmup_seconds": self.warmup_seconds,
            "step_time": self.step_time_stats(), "step_times": self.step_times, "step_shapes": self.step_shapes,
            "retraces_after_warmup": self.retraces_after_warmup, "events": self.events,
            "findings": [dataclasses.asdict(f) for f in self.findings], "fixes": self.ranked_fixes(),
            "run_dir": self.run_dir,
        }

    def format(self) -> str:
        lines = [f"Retracing check: {'PASSED' if self.exit_code == 0 else 'FAILED'}",
                 f"  shape policy: {self.shape_policy}, {len(self.signatures)} declared signature(s)"]
        for line in self.signatures:
            lines.append(f"    {line}: {self.signatures_seen.get(line, 0)} batch(es) seen")
        lines.append(f"  pipeline batches checked against signatures(): {self.batches_checked}")
        if self.functions:
            lines.append(f"  training steps run: {self.steps_run} of {self.steps_requested}; warm-up "
                         f"{self.warmup_seconds:.1f} s")
        else:
            lines.append(f"  training steps run: none of {self.steps_requested} (see findings)")
        if self.functions:
            lines.append("  traces per function (warm-up / after warm-up, compile seconds):")
            for name, info in self.functions.items():
                lines.append(f"    {name}: {info['warmup_traces']} / {info['after_warmup']}, "
                             f"{info['warmup_seconds']:.2f} s")
        stats = self.step_time_stats()
        if stats["count"]:
            cv = f"{stats['cv']:.2f}" if stats["cv"] is not None else "n/a"
            lines.append(f"  step time ({stats['count']} steady steps, input wait included): mean "
                         f"{stats['mean'] * 1e3:.1f} ms, std {stats['std'] * 1e3:.1f} ms, CV {cv}, "
                         f"p95 {stats['p95'] * 1e3:.1f} ms")
            if stats["first_call_mean"] is not None:
                lines.append(f"  first call per shape ({stats['first_calls']}): mean "
                             f"{stats['first_call_mean'] * 1e3:.1f} ms (graph instantiation, not a retrace)")
        lines.append(f"  retraces after warm-up: {self.retraces_after_warmup}")
        for event in self.events:
            where = f" at {event['path']}" if event.get("path") else ""
            lines.append(f"    {event['function']}: cause {event['cause']}{where}: {brief(event.get('before'))} -> "
                         f"{brief(event.get('after'))} (call site {event['call_site']})")
        if self.findings:
            lines.append("  findings:")
            lines.extend(f"    {f.format()}" for f in sorted(self.findings, key=lambda f: _SEVERITY_RANK[f.severity]))
        fixes = self.ranked_fixes()
        if fixes:
            lines.append("  ranked fixes:")
            lines.extend(f"    {rank}. {fix}" for rank, fix in enumerate(fixes, 1))
        if self.run_dir:
            lines.append(f"  run dir: {self.run_dir}")
        return "\n".join(lines)


def brief(description: Any) -> str:
    if isinstance(description, dict):
        return "{" + ", ".join(f"{k}={v}" for k, v in description.items() if v is not None) + "}"
    return "none" if description is None else str(description)


# ---- statistics -------------------------------------------------------------------------------------

def step_time_stats(step_times: list[float], step_shapes: list[str] | None = None) -> dict[str, Any]:
    """Mean / std / CV / p95 of the steady steps.

    The first call of each batch shape is reported apart (``first_call_mean``): TF instantiates and
    optimises a concrete function's graph at its first execution, not at tracing, so that call is slow
    whether or not anything retraces. Without shapes, only the very first step is set apart.
    """
    shapes = step_shapes if step_shapes and len(step_shapes) == len(step_times) else ["?"] * len(step_times)
    seen: set[str] = set()
    first, steady = [], []
    for seconds, shape in zip(step_times, shapes):
        (steady if shape in seen else first).append(seconds)
        seen.add(shape)
    if not steady:  # every step was a first call: better these than nothing
        steady = first
    first_mean = float(np.mean(first)) if first else None
    values = np.asarray(steady, np.float64)
    if values.size == 0:
        return {"count": 0, "mean": None, "std": None, "cv": None, "p95": None, "first_call_mean": first_mean,
                "first_calls": len(first)}
    mean, std = float(values.mean()), float(values.std())
    return {"count": int(values.size), "mean": mean, "std": std, "cv": std / mean if mean > 0 else None,
            "p95": float(np.percentile(values, 95)), "first_call_mean": first_mean, "first_calls": len(first)}

"""Summary of a monitoring session: traces per function, causes, what they cost; and its text table.

Functions are ranked by time lost (tracing + XLA compile of every trace after the expected ones),
as JAX's cache-miss log does: the first row is the retrace worth fixing first.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from myxtts.diagnostics.events import FIRST_TRACE, RetraceEvent


def summary(records: list, events: list[RetraceEvent], first_traces: list[RetraceEvent]) -> dict[str, Any]:
    grouped: dict[tuple[str, str], dict[str, Any]] = {}  # one row per (label, definition): wrappers merged
    for record in records:
        if not record.traces and not record.xla_compiles:
            continue
        row = grouped.setdefault((record.label, record.identity.defined_at), {
            "function": record.label, "defined_at": record.identity.defined_at, "traces": 0, "retraces": 0,
            "xla_compiles": None, "causes": Counter(), "tracing_seconds": 0.0, "compile_seconds": None,
            "lost_seconds": 0.0, "tf_function_objects": 0})
        row["traces"] += record.traces
        row["retraces"] += sum(n for cause, n in record.causes.items() if cause != FIRST_TRACE)
        if record.jit:
            row["xla_compiles"] = (row["xla_compiles"] or 0) + record.xla_compiles
            row["compile_seconds"] = (row["compile_seconds"] or 0.0) + record.compile_seconds
        row["lost_seconds"] += record.lost_seconds
        row["causes"].update(record.causes)
        row["tracing_seconds"] += record.tracing_seconds
        row["tf_function_objects"] += 1
    functions = []
    for row in grouped.values():
        row["causes"] = dict(row["causes"])
        for key in ("tracing_seconds", "compile_seconds", "lost_seconds"):
            row[key] = round(row[key], 4) if row[key] is not None else None
        functions.append(row)
    functions.sort(key=lambda row: (-row["lost_seconds"], -(row["tracing_seconds"] + (row["compile_seconds"] or 0.0))))
    causes = Counter(event.cause for event in events)
    return {
        "functions": functions,
        "total_traces": sum(f["traces"] for f in functions),
        "retraces": len([e for e in events if e.cause != FIRST_TRACE]),
        "unexpected": len([e for e in events if e.unexpected]),
        "causes": dict(causes),
        "total_tracing_seconds": round(sum(f["tracing_seconds"] for f in functions), 4),
        "total_compile_seconds": round(sum(f["compile_seconds"] or 0.0 for f in functions), 4),
        "total_lost_seconds": round(sum(f["lost_seconds"] for f in functions), 4),
        "first_traces": len(first_traces),
    }


def format_summary(data: dict[str, Any]) -> str:
    """A fixed-width table: one row per function, most time lost first, then the totals."""
    rows = [("function", "traces", "retraces", "causes", "lost s", "tracing s", "xla s", "defined at")]
    for item in data["functions"]:
        causes = ", ".join(f"{cause}x{n}" for cause, n in sorted(item["causes"].items()) if cause != FIRST_TRACE)
        compiled = item.get("compile_seconds")
        rows.append((item["function"], str(item["traces"]), str(item["retraces"]), causes or "-",
                     f"{item.get('lost_seconds', 0.0):.3f}", f"{item['tracing_seconds']:.3f}",
                     "-" if compiled is None else f"{compiled:.3f}", item["defined_at"]))
    widths = [min(max(len(row[i]) for row in rows), 60) for i in range(len(rows[0]))]
    lines = ["Retracing summary"]
    for index, row in enumerate(rows):
        lines.append("  ".join(cell[:60].ljust(width) for cell, width in zip(row, widths)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    causes = ", ".join(f"{cause}: {n}" for cause, n in sorted(data["causes"].items())) or "none"
    lines.append(f"total: {data['total_traces']} traces, {data['retraces']} retraces "
                 f"({data['unexpected']} unexpected), {data['total_tracing_seconds']:.3f} s tracing, "
                 f"{data.get('total_compile_seconds', 0.0):.3f} s XLA compile, "
                 f"{data.get('total_lost_seconds', 0.0):.3f} s lost to retraces; "
                 f"causes: {causes}")
    return "\n".join(lines)

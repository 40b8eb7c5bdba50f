"""Retrace events: the record of one trace of a `tf.function`, its JSON form and the strict-mode error.

Every event carries exactly the JSON fields of the contract (``JSON_FIELDS``), including what the
trace cost (tracing seconds; XLA compile seconds for `jit_compile` functions, None otherwise); a few
extra attributes (whether the trace was unexpected, the wall time of the call) live on the dataclass
for the summary but are never written to JSON.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from myxtts.errors import ExpectedError

# Causes, most specific first; `unknown` only when nothing else explains a trace.
CAUSES = (
    "shape", "rank", "dtype", "python_value", "new_object", "unhashable", "structure", "new_function",
    "variable", "context", "variable_creation", "xla_recompile", "unknown",
)
FIRST_TRACE = "first_trace"  # the first trace of a function: recorded, never flagged

JSON_FIELDS = ("function", "defined_at", "call_site", "trace", "cause", "path", "before", "after", "suggestion",
               "tracing_seconds", "compile_seconds")


@dataclass
class RetraceEvent:
    """One trace of a function (after its first, or an unexpected first trace after warm-up)."""

    function: str  # qualified name (or the name given to RetraceMonitor.watch)
    defined_at: str  # file:line of the Python function
    call_site: str  # file:line of the user's call (first frame outside TF / Keras / myxtts.diagnostics)
    trace: int  # tracing count of the function after this call (XLA: the compilation number)
    cause: str  # one of CAUSES, or FIRST_TRACE
    path: str | None  # argument path, e.g. batch['audio']['mel'], lr, self
    before: Any  # description of the argument at the closest earlier trace (dict) or None
    after: Any  # description of the argument at this trace (dict) or None
    suggestion: str  # a concrete fix
    # not part of the JSON record
    unexpected: bool = field(default=False, compare=False)
    seconds: float = field(default=0.0, compare=False)  # wall time of the call that traced
    tracing_seconds: float | None = field(default=None, compare=False)  # building the graph (trace_cost)
    compile_seconds: float | None = field(default=None, compare=False)  # XLA estimate; None without jit_compile

    @property
    def cost_seconds(self) -> float:
        """Time this trace cost: tracing plus XLA compilation."""
        return (self.tracing_seconds or 0.0) + (self.compile_seconds or 0.0)

    def to_dict(self) -> dict[str, Any]:
        record = {name: getattr(self, name) for name in JSON_FIELDS}
        for name in ("tracing_seconds", "compile_seconds"):
            if record[name] is not None:
                record[name] = round(record[name], 6)
        return record

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), default=str, sort_keys=False)

    def describe(self) -> str:
        """One readable line (plus the fix) for logs and error messages."""
        where = f" at {self.path}" if self.path else ""
        change = ""
        if self.before is not None or self.after is not None:
            change = f": {_brief(self.before)} -> {_brief(self.after)}"
        if self.cause == FIRST_TRACE:
            return (f"{self.function} (defined at {self.defined_at}) traced for the first time from "
                    f"{self.call_site} after warm-up")
        return (f"{self.function} (defined at {self.defined_at}) traced again [trace {self.trace}] "
                f"from {self.call_site}, cause {self.cause}{where}{change}{self._cost()}. Fix: {self.suggestion}")

    def _cost(self) -> str:
        if self.tracing_seconds is None and self.compile_seconds is None:
            return ""
        text = f" (cost {self.tracing_seconds or 0.0:.3f} s tracing"
        if self.compile_seconds is not None:
            text += f" + ~{self.compile_seconds:.3f} s XLA compile"
        return text + ")"


def _brief(description: Any) -> str:
    if not isinstance(description, dict):
        return "none" if description is None else str(description)
    parts = []
    for key in ("shape", "dtype", "value", "type", "identity", "keys", "length", "note"):
        if key in description and description[key] is not None:
            value = description[key]
            parts.append(f"{key}={value}" if key not in ("shape",) else f"shape={list(value) if isinstance(value, (list, tuple)) else value}")
    return "{" + ", ".join(parts) + "}"


class RetraceError(ExpectedError, RuntimeError):
    """Raised in strict mode at the first unexpected trace; the message is the explanation."""

    def __init__(self, event: RetraceEvent):
        super().__init__(event.describe())
        self.event = event


class JsonLinesSink:
    """Appends one JSON object per line to a file (flushed after each event so a crash keeps the log)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO | None = self.path.open("w", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, event: RetraceEvent) -> None:
        with self._lock:
            if self._file is None:
                return
            self._file.write(event.to_json() + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

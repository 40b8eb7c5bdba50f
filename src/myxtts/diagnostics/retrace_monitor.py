"""RetraceMonitor: watch `tf.function`s, detect every trace, explain it, log it, optionally raise.

Detection uses the public `experimental_get_tracing_count()` before and after each call, so a call
that does not trace costs two counter reads; arguments are summarised only when a trace happened
(and, for `jit_compile` functions, their shapes on every call to see XLA recompilations).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import tensorflow as tf

from myxtts.diagnostics import explainer, report, trace_cost
from myxtts.diagnostics.events import FIRST_TRACE, JsonLinesSink, RetraceError, RetraceEvent
from myxtts.diagnostics.trace_types import (FunctionIdentity, argument_names, call_site, dataclass_fix, function_identity,
                                            parameters_of, summarize_call)

logger = logging.getLogger("myxtts.diagnostics")
_LOCAL = threading.local()  # .depth > 0 while a monitored call runs (nested calls are not re-monitored)


@dataclass
class FunctionRecord:
    """What the monitor knows about one `tf.function` object."""

    label: str
    identity: FunctionIdentity
    snapshots: list = field(default_factory=list)  # explainer.Snapshot of every traced call
    traces: int = 0
    tracing_seconds: float = 0.0  # building graphs, all traces (trace_cost)
    compile_seconds: float = 0.0  # XLA compile estimate, jit_compile functions only
    lost_seconds: float = 0.0  # tracing + compile of every trace after the expected ones (retraces, recompiles)
    steady: list = field(default_factory=list)  # wall times of recent calls that neither traced nor compiled
    causes: Counter = field(default_factory=Counter)
    jit: bool = False
    xla_shapes: set = field(default_factory=set)
    xla_compiles: int = 0
    signature: str | None = None  # repr of an explicit input_signature (None: traced from the arguments)
    parameters: list | None = None  # inspect.Parameter of the called Python function (self excluded), if known


class RetraceMonitor:
    """Explains every trace of the functions it watches (or, under `explain_retracing`, of every one).

    During warm-up (until `end_warmup()`), traces are recorded but expected; afterwards every trace is
    unexpected and, with `strict=True`, raises `RetraceError` after the call that traced.
    """

    def __init__(self, strict: bool = False, json_path: str | Path | None = None, *, warmup: bool = True,
                 log_level: int = logging.WARNING):
        self.strict = strict
        self.in_warmup = warmup
        self._first_traces_unexpected = False  # only after end_warmup(): a new function tracing then is a bug
        self.log_level = log_level
        self.events: list[RetraceEvent] = []  # every trace after a function's first (and unexpected firsts)
        self.first_traces: list[RetraceEvent] = []
        self.warmup_seconds: float | None = None
        self._records: "weakref.WeakKeyDictionary[Any, FunctionRecord]" = weakref.WeakKeyDictionary()
        self._by_code: dict[Any, list[FunctionRecord]] = {}  # code object -> records (new_function)
        self._all_records: list[FunctionRecord] = []
        self._sink = JsonLinesSink(json_path) if json_path is not None else None
        self._lock = threading.RLock()
        self._started = time.perf_counter()
        # optional: an object with before_call(function, args, kwargs) -> (args, kwargs), after_call(function,
        # result) and call_failed(function, error), for top-level eager calls (explain-retracing --verify)
        self.call_hooks: Any = None
        trace_cost.install()  # times TF's graph building; a no-op after the first monitor

    # ---- public API ------------------------------------------------------------------------------
    def watch(self, function: Any, name: str | None = None) -> "WatchedFunction":
        if not callable(getattr(function, "experimental_get_tracing_count", None)):
            raise TypeError(f"RetraceMonitor.watch needs a tf.function (something with "
                            f"experimental_get_tracing_count()), got {type(function).__name__}; wrap it with "
                            f"tf.function first.")
        self._record(function, name)
        return WatchedFunction(self, function, name)

    def end_warmup(self) -> None:
        """From now on every trace is unexpected (strict mode raises)."""
        self.in_warmup = False
        self._first_traces_unexpected = True
        self.warmup_seconds = time.perf_counter() - self._started

    @property
    def records(self) -> list[FunctionRecord]:
        """Every tf.function object seen, in the order first seen (wrappers of one Python function apart)."""
        return list(self._all_records)

    @property
    def unexpected(self) -> list[RetraceEvent]:
        return [event for event in self.events if event.unexpected]

    def summary(self) -> dict[str, Any]:
        return report.summary(self._all_records, self.events, self.first_traces)

    def format_summary(self) -> str:
        return report.format_summary(self.summary())

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()

    # ---- the call path -------------------------------------------------------------------------
    def call(self, function: Any, args: tuple, kwargs: dict, label: str | None = None,
             invoke: Callable | None = None) -> Any:
        """Call `function` (through `invoke` if given) and explain the trace if it traced.

        This is the hot path: without a trace it costs two tracing-count reads.
        """
        invoke = invoke or function
        if getattr(_LOCAL, "depth", 0) or tf.inside_function():
            return invoke(*args, **kwargs)  # nested in a graph or in a monitored call: the outer explains
        hooks = self.call_hooks
        if hooks is not None:
            args, kwargs = hooks.before_call(function, args, kwargs)
        before = function.experimental_get_tracing_count()
        tracing_mark = trace_cost.mark()
        started = time.perf_counter()
        _LOCAL.depth = 1
        try:
            result = invoke(*args, **kwargs)
        except TypeError as err:
            self._maybe_unhashable(function, args, kwargs, label, err)
            if hooks is not None:
                hooks.call_failed(function, err)
            raise
        except Exception as err:
            if hooks is not None:
                hooks.call_failed(function, err)
            raise
        finally:
            _LOCAL.depth = 0
        after = function.experimental_get_tracing_count()
        if after != before:
            seconds = time.perf_counter() - started
            self._on_trace(function, args, kwargs, label, before, after, seconds,
                           trace_cost.tracing_seconds(tracing_mark, seconds))
        else:
            record = self._records.get(function)
            if record is not None and record.jit:
                self._check_xla(function, record, args, kwargs, time.perf_counter() - started)
        if hooks is not None:
            hooks.after_call(function, result)
        return result

    # ---- internals -----------------------------------------------------------------------------
    def _record(self, function: Any, label: str | None) -> FunctionRecord:
        record = self._records.get(function)
        if record is None:
            identity = function_identity(function)
            signature = getattr(function, "input_signature", None)
            record = FunctionRecord(label or identity.qualname, identity,
                                    jit=bool(getattr(function, "_jit_compile", False)),  # private, guarded
                                    signature=repr(signature) if signature is not None else None,
                                    parameters=parameters_of(getattr(function, "python_function", None)))
            self._records[function] = record
            self._all_records.append(record)
            self._by_code.setdefault(identity.code, []).append(record)
        elif label and record.label == record.identity.qualname:
            record.label = label
        return record

    def _snapshot(self, function: Any, args: tuple, kwargs: dict, trace: int) -> explainer.Snapshot:
        python_function = getattr(function, "python_function", None)
        leaves = summarize_call(python_function, args, kwargs)
        return explainer.Snapshot(leaves, explainer.call_context(), argument_names(python_function, len(args)),
                                  trace)

    def _on_trace(self, function: Any, args: tuple, kwargs: dict, label: str | None, before: int, after: int,
                  seconds: float, traced: float | None = None) -> None:
        with self._lock:
            record = self._record(function, label)
            snapshot = self._snapshot(function, args, kwargs, after)
            site = call_site(2)
            traced = seconds if traced is None else traced
            compiled = trace_cost.compile_estimate(seconds, traced, record.steady) if record.jit else None
            cost = (traced, compiled)
            record.tracing_seconds += traced
            record.compile_seconds += compiled or 0.0
            new_traces = after - before
            record.traces += new_traces
            if not record.snapshots:
                self._first_trace(record, snapshot, site, before, seconds, cost)
                if new_traces > 1 and before == 0:  # variables created on the first call: TF traces twice
                    self._emit(record, site, after, explainer.Explanation(
                        "variable_creation", None, None, None,
                        "expected: the function created variables on its first call, so TF traced it a second "
                        "time without variable creation. To avoid it, create the variables before the first "
                        "call (build the model / optimizer first)."), seconds, expected=True,
                        cost=(0.0, 0.0 if record.jit else None))  # its cost is in the first trace's
            else:
                explanation = explainer.explain(record.snapshots, snapshot, record.label)
                self._emit(record, site, after, explanation, seconds, cost=cost)
            record.snapshots.append(snapshot)
            if record.jit:
                record.xla_shapes.add(_shape_key(snapshot))
                record.xla_compiles += 1

    def _first_trace(self, record: FunctionRecord, snapshot: explainer.Snapshot, site: str, before: int,
                     seconds: float, cost: tuple[float, float | None]) -> None:
        """A first trace of this tf.function object: new_function if its code was traced before."""
        # a wrapper with its own, different input_signature (one compiled function per bucket) is deliberate
        siblings = [r for r in self._by_code.get(record.identity.code, []) if r is not record and r.snapshots
                    and not (r.signature and record.signature and r.signature != record.signature)]
        if siblings:
            previous = siblings[-1]
            total = sum(r.traces for r in self._by_code[record.identity.code])
            self._emit(record, site, total, _new_function_explanation(previous, record), seconds, cost=cost)
            return
        event = RetraceEvent(record.label, record.identity.defined_at, site, max(before + 1, 1), FIRST_TRACE,
                             None, None, _signature_description(snapshot), "none: the first trace is expected",
                             unexpected=self._first_traces_unexpected, seconds=seconds, tracing_seconds=cost[0],
                             compile_seconds=cost[1])
        self.first_traces.append(event)
        record.causes[FIRST_TRACE] += 1
        self._write(event)
        if event.unexpected:  # a brand-new function traced after warm-up is still an unexpected trace
            self.events.append(event)
            self._log(event)
            if self.strict:
                raise RetraceError(event)

    def _emit(self, record: FunctionRecord, site: str, trace: int, explanation: explainer.Explanation,
              seconds: float, expected: bool = False, cost: tuple[float | None, float | None] = (None, None)) -> None:
        event = RetraceEvent(record.label, record.identity.defined_at, site, trace, explanation.cause,
                             explanation.path, explanation.before, explanation.after, explanation.suggestion,
                             unexpected=not expected and not self.in_warmup, seconds=seconds,
                             tracing_seconds=cost[0], compile_seconds=cost[1])
        if not expected:  # a retrace or recompile: time the expected traces would not have cost
            record.lost_seconds += event.cost_seconds
        record.causes[event.cause] += 1
        self.events.append(event)
        self._write(event)
        self._log(event)
        if self.strict and event.unexpected:
            raise RetraceError(event)

    def _write(self, event: RetraceEvent) -> None:
        if self._sink is not None:
            self._sink.write(event)

    def _log(self, event: RetraceEvent) -> None:
        prefix = "unexpected retrace" if event.unexpected else "retrace"
        logger.log(self.log_level, "%s: %s", prefix, event.describe())

    def _check_xla(self, function: Any, record: FunctionRecord, args: tuple, kwargs: dict, seconds: float) -> None:
        """jit_compile with None dims: a new concrete shape is an XLA compilation without a retrace."""
        if not record.snapshots:
            return
        snapshot = self._snapshot(function, args, kwargs, record.traces)
        key = _shape_key(snapshot)
        if key in record.xla_shapes:
            record.steady.append(seconds)  # a typical run, for the compile estimate of the next new shape
            del record.steady[:-trace_cost.STEADY_SAMPLES]
            return
        with self._lock:
            compiled = trace_cost.compile_estimate(seconds, 0.0, record.steady)
            record.compile_seconds += compiled
            record.xla_shapes.add(key)
            record.xla_compiles += 1
            closest = explainer.explain(record.snapshots, snapshot, record.label)
            explanation = explainer.Explanation(
                "xla_recompile", closest.path, closest.before, closest.after,
                f"{record.label} has jit_compile=True and a signature with None dims, so XLA compiles once per "
                f"new concrete shape (compilation {record.xla_compiles}) without any retrace: feed a finite set "
                f"of static shapes (length buckets with drop_remainder=True, one input_signature per bucket) or "
                f"drop jit_compile for this function.")
            self._emit(record, call_site(2), record.xla_compiles, explanation, seconds, cost=(0.0, compiled))

    def _maybe_unhashable(self, function: Any, args: tuple, kwargs: dict, label: str | None,
                          err: TypeError) -> None:
        """TF raised TypeError: name the unhashable argument (if one is) before the error propagates."""
        snapshot = self._snapshot(function, args, kwargs, function.experimental_get_tracing_count() + 1)
        bad = [(path, leaf) for path, leaf in snapshot.leaves.items() if leaf.kind == "unhashable"]
        if not bad:
            return
        path, leaf = bad[0]
        value_type = _type_at(args, kwargs, snapshot, path)
        record = self._record(function, label)
        explanation = explainer.Explanation("unhashable", path, None, leaf.describe(),
                                            f"{path}: " + dataclass_fix(leaf.type_name, value_type) +
                                            f" (TF raised: {str(err).splitlines()[0][:160]})")
        previous_strict, self.strict = self.strict, False  # the TypeError itself propagates, not RetraceError
        try:
            self._emit(record, call_site(3), snapshot.trace, explanation, 0.0)
        finally:
            self.strict = previous_strict


class WatchedFunction:
    """A watched tf.function: same call semantics; the rest of the Function API passes through."""

    def __init__(self, monitor: RetraceMonitor, function: Any, name: str | None):
        self._monitor = monitor
        self._function = function
        self._name = name
        self.__wrapped__ = function

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._monitor.call(self._function, args, kwargs, self._name)

    def get_concrete_function(self, *args: Any, **kwargs: Any) -> Any:
        """Traces like a call does (when the arguments are new), so the monitor sees and explains it too."""
        return self._monitor.call(self._function, args, kwargs, self._name,
                                  invoke=self._function.get_concrete_function)

    def experimental_get_tracing_count(self) -> int:
        return self._function.experimental_get_tracing_count()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._function, name)

    def __repr__(self) -> str:
        return f"<watched {self._name or getattr(self._function, '__name__', 'tf.function')}>"


def _shape_key(snapshot: explainer.Snapshot) -> tuple:
    return tuple((path, leaf.shape, leaf.dtype) for path, leaf in snapshot.leaves.items()
                 if leaf.kind in ("tensor", "composite"))


def _signature_description(snapshot: explainer.Snapshot) -> dict:
    return {"arguments": {path: leaf.describe() for path, leaf in list(snapshot.leaves.items())[:16]}}


def _type_at(args: tuple, kwargs: dict, snapshot: explainer.Snapshot, path: str) -> type | None:
    roots = snapshot.positional
    root = path.split("[")[0].split(".")[0]
    if root in roots and roots.index(root) < len(args) and path == root:
        return type(args[roots.index(root)])
    if path in kwargs:
        return type(kwargs[path])
    return None


def _new_function_explanation(previous: FunctionRecord, record: FunctionRecord) -> explainer.Explanation:
    old, new = previous.identity, record.identity
    if new.instance_type is not None:
        return explainer.Explanation(
            "new_function", "self",
            {"type": old.instance_type, "identity": hex(old.instance_id) if old.instance_id else None},
            {"type": new.instance_type, "identity": hex(new.instance_id) if new.instance_id else None},
            f"{record.identity.qualname} is a tf.function method of a new {new.instance_type} instance: each "
            f"instance gets its own tf.function and traces again. Reuse one instance across steps, or make "
            f"the step a module-level tf.function that takes the tensors it needs.")
    return explainer.Explanation(
        "new_function", None, {"note": "an earlier tf.function wrapping of this Python function"},
        {"note": "a new tf.function wrapping of the same Python function"},
        f"the same Python function {record.identity.qualname} was wrapped by tf.function again (each wrapper "
        f"has its own trace cache): define the tf.function once, outside the loop or the function called "
        f"repeatedly, and reuse it.")

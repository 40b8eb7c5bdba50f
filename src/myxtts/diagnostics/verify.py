"""`explain-retracing --verify`: apply each proposed fix in a second run of the program and measure it.

The second run is the same program, in-process, with the same seeds.  While it runs, `Function.__init__`
(the class every `tf.function` creates, ``patching.function_class``) is wrapped: a function whose Python
definition (qualified name + file:line, the same in both runs) has a mechanical fix gets the proposed
`input_signature` / `reduce_retracing=True`, and its calls get the proposed Python arguments converted to
tensors before TF sees them (`CallRecorder`, the monitor's call hooks).  Both runs record the outputs of the
first calls of every function (NumPy copies, bounded), so a fix is verified only when its retraces are gone,
it was called as often as before, and it returned what the first run returned (rtol 1e-5, atol 1e-6).
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import logging
import re
import sys
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import tensorflow as tf

from myxtts.diagnostics import fixes, patching, runner
from myxtts.diagnostics.events import FIRST_TRACE
from myxtts.diagnostics.trace_types import function_identity

VERIFIED, NOT_VERIFIED, NOT_APPLICABLE = "verified", "not verified", "not mechanically applicable"
OUTPUT_CALLS = 20  # outputs recorded per function and run
_LARGE = 1 << 16  # outputs with more elements are kept as a fingerprint (shape, head, sums)
RTOL, ATOL = 1e-5, 1e-6
_PATH_TOKEN = re.compile(r"\[(-?\d+|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\]|\.(\w+)")


def function_key(function: Any) -> fixes.FunctionKey:
    identity = function_identity(function)
    return identity.qualname, identity.defined_at


@dataclass
class Verification:
    status: str  # verified | not verified | not mechanically applicable
    traces_before: int
    traces_after: int | None
    calls_before: int
    calls_after: int
    still_retraced: list[str] = field(default_factory=list)  # "cause at path: before -> after" of the second run
    outputs: str = "not compared"
    outputs_equal: bool | None = None
    applied: str | None = None
    reason: str = ""
    note: str = ""  # e.g. that one of the traces after is TF's variable-creation trace

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class CallRecorder:
    """Monitor call hooks: convert proposed arguments, copy the first outputs, keep the first error per function."""

    def __init__(self, conversions: dict[fixes.FunctionKey, dict[str, str]] | None = None,
                 limit: int = OUTPUT_CALLS):
        self.conversions = conversions or {}
        self.limit = limit
        self.outputs: dict[fixes.FunctionKey, list] = {}
        self.calls: Counter = Counter()
        self.errors: dict[fixes.FunctionKey, str] = {}
        self._keys: "weakref.WeakKeyDictionary[Any, fixes.FunctionKey]" = weakref.WeakKeyDictionary()

    def key(self, function: Any) -> fixes.FunctionKey:
        try:
            return self._keys[function]
        except (KeyError, TypeError):
            key = function_key(function)
            with contextlib.suppress(TypeError):
                self._keys[function] = key
            return key

    def before_call(self, function: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        convert = self.conversions.get(self.key(function))
        if not convert:
            return args, kwargs
        return convert_arguments(getattr(function, "python_function", function), args, kwargs, convert)

    def after_call(self, function: Any, result: Any) -> None:
        key = self.key(function)
        self.calls[key] += 1
        kept = self.outputs.setdefault(key, [])
        if len(kept) < self.limit:
            kept.append(copy_outputs(result))

    def call_failed(self, function: Any, error: BaseException) -> None:
        self.errors.setdefault(self.key(function), runner.describe_error(error))


def convert_arguments(python_function: Any, args: tuple, kwargs: dict, convert: dict[str, str]) -> tuple[tuple, dict]:
    """The call's arguments with every Python number at a path in `convert` made a tensor of that dtype."""
    try:
        bound = inspect.signature(python_function).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return args, kwargs  # TF raises its own error for a call that does not bind
    bound.apply_defaults()

    def to_tensor(value: Any, dtype: str) -> Any:
        return tf.constant(value, tf.as_dtype(dtype)) if isinstance(value, (bool, int, float)) else value

    for path, dtype in convert.items():
        match = re.match(r"\w+", path)
        if match is None or match.group(0) not in bound.arguments:
            continue
        root = match.group(0)
        tokens = [(int(index) if index.lstrip("-").isdigit() else ast.literal_eval(index)) if index else name
                  for index, name in _PATH_TOKEN.findall(path[len(root):])]
        bound.arguments[root] = _replace(bound.arguments[root], tokens, lambda v: to_tensor(v, dtype))
    return bound.args, bound.kwargs


def _replace(value: Any, tokens: list, convert: Any) -> Any:
    if not tokens:
        return convert(value)
    head, rest = tokens[0], tokens[1:]
    try:
        if isinstance(value, dict):
            return {**value, head: _replace(value[head], rest, convert)}
        if isinstance(value, tuple) and hasattr(type(value), "_fields") and isinstance(head, str):
            return value._replace(**{head: _replace(getattr(value, head), rest, convert)})
        if isinstance(value, (list, tuple)) and isinstance(head, int):
            items = list(value)
            items[head] = _replace(items[head], rest, convert)
            return type(value)(items)
    except (KeyError, IndexError, TypeError, AttributeError):
        pass
    return value


def copy_outputs(result: Any) -> list:
    """NumPy copies of every leaf a call returned (large ones as a fingerprint), so later steps cannot change them."""
    copies = []
    for leaf in tf.nest.flatten(result, expand_composites=True):
        try:
            array = np.array(leaf.numpy() if hasattr(leaf, "numpy") else leaf)
        except Exception:
            copies.append(("object", type(leaf).__name__))
            continue
        if array.dtype == object:
            copies.append(("object", type(leaf).__name__))
        elif array.size > _LARGE:
            flat = array.reshape(-1)
            numeric = np.issubdtype(array.dtype, np.number)
            copies.append(("large", array.shape, flat[:4096].copy(),
                           float(np.sum(flat, dtype=np.float64)) if numeric else None,
                           float(np.sum(np.abs(flat), dtype=np.float64)) if numeric else None))
        else:
            copies.append(array)
    return copies


def compare_outputs(first: list, second: list) -> tuple[bool, int, str]:
    """(equal, calls compared, what differed first) over the calls both runs recorded."""
    count = min(len(first), len(second))
    for index in range(count):
        problem = _compare_call(first[index], second[index])
        if problem:
            return False, index, f"call {index + 1}: {problem}"
    return True, count, ""


def _compare_call(first: list, second: list) -> str:
    if len(first) != len(second):
        return f"returned {len(first)} values, now {len(second)}"
    for index, (old, new) in enumerate(zip(first, second)):
        where = f"output [{index}]" if len(first) > 1 else "the output"
        if isinstance(old, tuple) or isinstance(new, tuple):
            if type(old) is not type(new) or old[0] != new[0]:
                return f"{where} changed kind"
            if old[0] == "large":
                if old[1] != new[1]:
                    return f"{where} shape {list(old[1])} -> {list(new[1])}"
                same = _close(old[2], new[2]) and all(
                    a == b or (a is not None and b is not None and np.isclose(a, b, rtol=RTOL, atol=ATOL * old[2].size))
                    for a, b in zip(old[3:], new[3:]))
                if not same:
                    return f"{where} differs"
            continue
        if old.shape != new.shape:
            return f"{where} shape {list(old.shape)} -> {list(new.shape)}"
        if not _close(old, new):
            if np.issubdtype(old.dtype, np.number) and np.issubdtype(new.dtype, np.number):
                difference = float(np.max(np.abs(old.astype(np.float64) - new.astype(np.float64)))) if old.size else 0.0
                return f"{where} differs by up to {difference:.3g}"
            return f"{where} differs"
    return ""


def _close(old: np.ndarray, new: np.ndarray) -> bool:
    numeric = (np.issubdtype(old.dtype, np.number) or old.dtype == bool) and \
        (np.issubdtype(new.dtype, np.number) or new.dtype == bool)
    if numeric:
        return bool(np.allclose(old.astype(np.float64), new.astype(np.float64), rtol=RTOL, atol=ATOL, equal_nan=True))
    return bool(np.array_equal(old, new))


@contextlib.contextmanager
def fixes_applied(patches: dict[fixes.FunctionKey, fixes.Patch]) -> Iterator[dict[fixes.FunctionKey, str]]:
    """While active, a tf.function created for a Python function with a patch gets its signature / options.

    Yields key -> "applied" or "could not be applied: <TF's error>" (the function is then created as written).
    """
    function_class = patching.function_class()
    original = function_class.__init__
    signature = inspect.signature(original)
    outcomes: dict[fixes.FunctionKey, str] = {}

    def patched_init(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            bound = signature.bind(self, *args, **kwargs)
            key = function_key(bound.arguments.get("python_function"))
        except (TypeError, ValueError, AttributeError):
            return original(self, *args, **kwargs)
        patch = patches.get(key)
        if patch is None:
            return original(self, *args, **kwargs)
        changed = dict(bound.arguments)
        try:
            if patch.input_signature is not None:
                changed["input_signature"] = patch.specs()
            if patch.reduce_retracing:
                changed["reduce_retracing"] = True
            original(**changed)
        except (TypeError, ValueError) as err:
            outcomes[key] = f"could not be applied: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
            return original(self, *args, **kwargs)
        outcomes.setdefault(key, "applied")
        return None

    function_class.__init__ = patched_init
    try:
        yield outcomes
    finally:
        function_class.__init__ = original


def verify_proposals(command: list[str], proposals: list[fixes.Proposal], first: runner.RunResult,
                     first_calls: CallRecorder) -> tuple[list[Verification], runner.RunResult | None]:
    """Run the program again with every mechanical fix applied; one Verification per proposal (and the last
    run, None when no proposal could be applied mechanically).

    A fix that makes its own function raise stops the program, so the others would go unmeasured: the program
    then runs once more without the fixes that raised (at most one extra run), and each function is judged by
    the run that measured it.
    """
    patches = {p.key: p.patch for p in proposals if p.patch is not None}
    if not patches:  # nothing to apply: a second run would only repeat the first
        return [Verification(NOT_APPLICABLE, p.traces, None, first_calls.calls[p.key], 0,
                             reason=f"change {', '.join(p.lines_to_change)} by hand") for p in proposals], None
    judged: dict[fixes.FunctionKey, tuple] = {}
    for _ in range(2):
        recorder, outcomes, run = _run_with(command, patches, first)
        groups = {group.key: group for group in fixes.function_groups(run.monitor)}
        raised = {key for key in patches if key in recorder.errors}
        for proposal in proposals:
            if proposal.key not in judged and (proposal.key in raised or not raised or proposal.key not in patches):
                judged[proposal.key] = (groups.get(proposal.key), recorder, outcomes.get(proposal.key), run)
        patches = {key: patch for key, patch in patches.items() if key not in judged}
        if not patches:
            break
    results = []
    for proposal in proposals:
        group, recorder, outcome, measured_by = judged.get(proposal.key, (None, CallRecorder(), None, run))
        results.append(_verdict(proposal, group, first_calls, recorder, outcome, measured_by))
    return results, run


def _run_with(command: list[str], patches: dict, first: runner.RunResult) -> tuple:
    runner.forget_program_modules(first.imported_modules)
    keras = sys.modules.get("keras")
    with contextlib.suppress(Exception):
        if keras is not None:
            keras.backend.clear_session()
    recorder = CallRecorder({key: patch.convert for key, patch in patches.items() if patch.convert})
    with fixes_applied(patches) as outcomes:
        run = runner.run_script(command, hooks=recorder, seed=0, catch_errors=True, log_level=logging.DEBUG)
    return recorder, outcomes, run


def _verdict(proposal: fixes.Proposal, group: fixes.FunctionGroup | None, first: CallRecorder,
             second: CallRecorder, outcome: str | None, run: runner.RunResult) -> Verification:
    traces_after = group.traces if group is not None else 0
    result = Verification(NOT_VERIFIED, proposal.traces, traces_after, first.calls[proposal.key],
                          second.calls[proposal.key], applied=proposal.patch.describe() if proposal.patch else None)
    events = [e for e in group.events if e.cause not in (FIRST_TRACE, "variable_creation")] if group else []
    result.still_retraced = _retrace_lines(events)
    if group is not None and any(e.cause == "variable_creation" for e in group.events):
        result.note = "one of the traces after is TF's variable-creation trace (variables made on the first call)"
    equal, compared, difference = compare_outputs(first.outputs.get(proposal.key, []),
                                                  second.outputs.get(proposal.key, []))
    if compared:
        result.outputs_equal = equal
        result.outputs = f"equal on {compared} call(s)" if equal else f"differ at {difference}"
    if proposal.patch is None:
        result.status, result.reason = NOT_APPLICABLE, f"change {', '.join(proposal.lines_to_change)} by hand"
        return result
    allowed = proposal.patch.allowed_retraces
    if outcome and outcome.startswith("could not"):
        result.reason = f"the fix {outcome}"
    elif proposal.key in second.errors:
        result.reason = f"with the fix the function raised {second.errors[proposal.key]}"
    elif group is None or not traces_after:
        result.reason = "not called in the second run" + (f" (the program stopped: {run.error_text})"
                                                           if run.error_text else "")
    elif len([e for e in events if e.cause != "xla_recompile"]) > allowed:
        result.reason = "still retraced: " + "; ".join(result.still_retraced)
    elif result.calls_after < result.calls_before:
        result.reason = (f"called {result.calls_after} time(s) in the second run, {result.calls_before} in the "
                         f"first" + (f" (the program stopped: {run.error_text})" if run.error_text else ""))
    elif result.outputs_equal is False:
        result.reason = f"the outputs {result.outputs}"
    else:
        result.status = VERIFIED
    return result


def _retrace_lines(events: list) -> list[str]:
    lines: list[str] = []
    for event in events:
        where = f" at {event.path}" if event.path else ""
        change = ""
        if isinstance(event.before, dict) and isinstance(event.after, dict):
            key = {"dtype": "dtype", "python_value": "value", "structure": "length"}.get(event.cause, "shape")
            change = f": {_brief(event.before, key)} -> {_brief(event.after, key)}"
        line = f"{event.cause}{where}{change}"
        if line not in lines:
            lines.append(line)
    return lines[:4]


def _brief(description: dict, preferred: str) -> str:
    for key in (preferred, "shape", "dtype", "value", "length", "keys", "type"):
        if key in description:
            return f"{key} {description[key]}"
    return "?"

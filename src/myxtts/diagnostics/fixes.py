"""One retrace fix per function, derived at the end of a run from every call TF traced.

The per-event suggestions are written at the first retrace, from the calls seen so far; a proposal is
written once the program has finished, from all of them (`signature_plan`): an `input_signature` that covers
every traced call, `reduce_retracing=True` when no signature can be declared, Python numbers passed as
tensors, or a change to the program that cannot be patched in (an object or tf.function created per call,
a list whose length varies, a Python string that changes), with the line to change (`fix_sites`).  A
proposal that can be applied mechanically carries a `Patch`; `verify` applies it in a second run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from myxtts.diagnostics import fix_sites
from myxtts.diagnostics.events import FIRST_TRACE, RetraceEvent
from myxtts.diagnostics.signature_plan import (DictNode, OpaqueNode, PythonNode, TensorNode, VaryingStructure,
                                               describe_blocker, is_last_partial_batch, plan_arguments, render, to_spec,
                                               varying_axes, walk)

NOT_RETRACES = (FIRST_TRACE, "variable_creation", "xla_recompile")  # expected traces, or no trace at all
FunctionKey = tuple  # (qualified name, defined at): the same Python function in every run of the program


@dataclass
class FunctionGroup:
    """Every tf.function object wrapping one Python function (wrappers created in a loop are one group)."""

    key: FunctionKey
    label: str
    records: list  # retrace_monitor.FunctionRecord
    events: list[RetraceEvent]

    @property
    def snapshots(self) -> list:
        return [snapshot for record in self.records for snapshot in record.snapshots]

    @property
    def traces(self) -> int:
        return sum(record.traces for record in self.records)

    @property
    def causes(self) -> Counter:
        total: Counter = Counter()
        for record in self.records:
            total.update(record.causes)
        return total


def function_groups(monitor: Any) -> list[FunctionGroup]:
    groups: dict[FunctionKey, FunctionGroup] = {}
    for record in monitor.records:
        key = (record.identity.qualname, record.identity.defined_at)
        group = groups.setdefault(key, FunctionGroup(key, record.label, [], []))
        group.records.append(record)
    for event in monitor.events + monitor.first_traces:
        for group in groups.values():
            if event.defined_at == group.key[1] and event.function in {r.label for r in group.records}:
                group.events.append(event)
                break
    return list(groups.values())


@dataclass
class Patch:
    """What `--verify` changes in the second run: the tf.function's options and arguments converted at the call."""

    input_signature: list | None = None  # signature_plan nodes, one per covered argument
    reduce_retracing: bool = False
    convert: dict[str, str] = field(default_factory=dict)  # argument path -> dtype of the tensor it becomes
    allowed_retraces: int = 0  # reduce_retracing: TF traces the first call exactly, generalises on the next miss

    def specs(self) -> list:
        return [to_spec(node) for node in self.input_signature or []]

    def describe(self) -> str:
        parts = (["input_signature"] if self.input_signature is not None else []) + \
                (["reduce_retracing=True"] if self.reduce_retracing else []) + \
                [f"{path} as a tf.{dtype} tensor" for path, dtype in self.convert.items()]
        return ", ".join(parts) or "nothing (no mechanical change covers this)"


@dataclass
class Proposal:
    function: str
    defined_at: str
    key: FunctionKey
    kind: str  # input_signature | reduce_retracing | tensor_argument | no_signature | create_once | restructure |
    #            keep_constant | make_hashable | call_consistently | unknown
    text: str
    code: str
    lines_to_change: list[str]
    varying: list[str]
    traces: int
    retraces: int
    causes: dict[str, int]
    patch: Patch | None = None  # None: not mechanically applicable

    @property
    def mechanical(self) -> bool:
        return self.patch is not None

    def to_dict(self) -> dict[str, Any]:
        return {"function": self.function, "defined_at": self.defined_at, "kind": self.kind, "text": self.text,
                "code": self.code, "lines_to_change": self.lines_to_change, "varying": self.varying,
                "traces": self.traces, "retraces": self.retraces, "causes": self.causes,
                "mechanical": self.mechanical, "applied": self.patch.describe() if self.patch else None}


def propose_all(monitor: Any) -> list[Proposal]:
    """One proposal per function that retraced (expected traces such as variable creation do not count)."""
    return [proposal for group in function_groups(monitor) if (proposal := propose(group)) is not None]


def propose(group: FunctionGroup) -> Proposal | None:
    causes = Counter({cause: n for cause, n in group.causes.items() if cause not in NOT_RETRACES})
    if not causes or not group.snapshots:
        return None
    plan = plan_arguments(group.snapshots)
    varying = varying_axes(plan) + [f"{node.path}: Python {type(node.values[0]).__name__} "
                                    f"({', '.join(map(_show, _distinct(node.values)[:6]))})"
                                    for node in plan.nodes() if isinstance(node, PythonNode) and node.varies]
    base = dict(function=group.label, defined_at=group.key[1], key=group.key, varying=varying,
                traces=group.traces, retraces=sum(causes.values()), causes=dict(causes))
    for builder in (_object_fix, _structure_fix, _context_fix, _python_text_fix, _mechanical_fix):
        found = builder(group, plan, causes)
        if found is not None:
            kind, text, code, lines, patch = found
            return Proposal(kind=kind, text=text, code=code, lines_to_change=lines, patch=patch, **base)
    return None


# ---- fixes that change the program ------------------------------------------------------------------

def _object_fix(group: FunctionGroup, plan: Any, causes: Counter) -> tuple | None:
    cause = next((c for c in ("new_function", "new_object", "unhashable") if c in causes), None)
    if cause is None:
        return None
    event = next((e for e in group.events if e.cause == cause), None)
    call_site = event.call_site if event else group.key[1]
    if cause == "unhashable":
        return "make_hashable", event.suggestion if event else "make the argument hashable", "", [call_site], None
    names = {group.key[0].rsplit(".", 1)[-1]}
    parameter = position = None
    if cause == "new_object" and event is not None and event.path:
        parameter = event.path.split("[")[0].split(".")[0]
        positional = group.snapshots[-1].positional
        position = positional.index(parameter) if parameter in positional else None
    found = fix_sites.creation_site(call_site, names, parameter, position)
    type_name = ((event.after if event and isinstance(event.after, dict) else None) or {}).get("type", "object")
    if cause == "new_object":
        what = f"the {type_name} passed as {event.path if event else 'an argument'}"
    elif event is not None and event.path == "self":
        what = f"the {type_name} whose tf.function method is called"
    else:
        what = "the tf.function"
    if found is None:
        return ("create_once", f"{what} is created anew for every call (each new one traces again): create it "
                f"once and reuse it.", "", [call_site], None)
    line, loop = found
    where = f" on every pass of the loop at {loop.site} (`{loop.text}`)" if loop else " for every call"
    if line.site == call_site and parameter is not None:  # created inside the call's argument list
        created = fix_sites.argument_source(call_site, names, parameter, position)
        reused = fix_sites.wrapped_argument_call(call_site, names, parameter, position, parameter)
        code = (f"{parameter} = {created}  # once, before `{loop.text if loop else 'the loop'}`\n{reused}"
                if created and reused else "")
        text = (f"{what} is created in the call at {line.site} (`{line.text}`){where}; tf.function keys such "
                f"objects by identity, so each new one traces again: create it once before the loop and pass the "
                f"same object (or make its class hashable by value / give it __tf_tracing_type__).")
        return "create_once", text, code, [line.site], None
    text = (f"{what} is created at {line.site} (`{line.text}`){where}, and each new one traces again: move that "
            f"line before the loop and reuse the object.")
    return "create_once", text, f"{line.text}  # once, before `{loop.text if loop else 'the loop'}`", [line.site], None


def _structure_fix(group: FunctionGroup, plan: Any, causes: Counter) -> tuple | None:
    node = next((n for n in plan.nodes() if isinstance(n, VaryingStructure)), None)
    if node is None:
        return None
    site = _call_site(group, node.path)
    if node.change == "length":
        element = _element_spec(plan, node.path)
        name = node.path
        code = (f"{name} = tf.ragged.stack({name})  # one tensor instead of a list; declare it with "
                f"{element}" if element else f"{name} = tf.stack({name})  # or a padded tensor plus lengths")
        text = (f"{node.path} is {node.description}: a Python list is unrolled into the graph, so every length "
                f"is its own trace, and neither an input_signature (it fixes the length) nor reduce_retracing "
                f"(it cannot merge lists of different lengths) removes that. Pass one tensor instead: a ragged "
                f"tensor (tf.ragged.stack) or a padded tensor with the lengths.")
        return "restructure", text, code, [site], None
    text = (f"{node.path}: {node.description}: pass the same structure on every call (the same keys, absent "
            f"entries as zero tensors plus a mask; always pass the argument, or never).")
    return "restructure", text, "", [site], None


def _element_spec(plan: Any, path: str) -> str | None:
    shapes, dtypes = [], set()
    for snapshot in plan.snapshots:
        for leaf_path, leaf in snapshot.leaves.items():
            if leaf_path.startswith(path + "[") and leaf_path[len(path) + 1:-1].isdigit():
                if leaf.kind != "tensor" or leaf.shape is None:
                    return None
                shapes.append(leaf.shape)
                dtypes.add(leaf.dtype)
    if not shapes or len(dtypes) != 1 or len({len(s) for s in shapes}) != 1:
        return None
    dims = ["None"] + ["None" if len(set(d)) > 1 else str(d[0]) for d in zip(*shapes)]
    return f"tf.RaggedTensorSpec([{', '.join(dims)}], tf.{dtypes.pop()}, ragged_rank=1)"


def _context_fix(group: FunctionGroup, plan: Any, causes: Counter) -> tuple | None:
    cause = next((c for c in ("context", "variable") if c in causes), None)
    if cause is None:
        return None
    event = next((e for e in group.events if e.cause == cause), None)
    return ("call_consistently", event.suggestion if event else f"the {cause} changed between calls", "",
            [event.call_site if event else group.key[1]], None)


def _python_text_fix(group: FunctionGroup, plan: Any, causes: Counter) -> tuple | None:
    node = next((n for n in plan.nodes() if isinstance(n, PythonNode) and n.varies and not n.numeric), None)
    if node is None:
        return None
    values = ", ".join(map(_show, _distinct(node.values)[:6]))
    text = (f"{node.path} is a Python {type(node.values[-1]).__name__} that takes {values}: each value is baked "
            f"into its own graph. Keep it constant for the run, or hoist the choice out of the function: one "
            f"tf.function per value, created once (e.g. a dict of them), picked in Python.")
    return "keep_constant", text, "", [_call_site(group, node.path)], None


# ---- fixes applied mechanically -------------------------------------------------------------------

def _mechanical_fix(group: FunctionGroup, plan: Any, causes: Counter) -> tuple | None:
    nodes = list(plan.nodes())
    convert = {n.path: n.dtype for n in nodes if isinstance(n, PythonNode) and n.varies and n.numeric}
    tensors = [n for n in nodes if isinstance(n, TensorNode)]
    convert.update({n.path: n.dtypes[0] for n in tensors if n.python_values and len(n.dtypes) == 1})
    conflicts = [n for n in tensors if len(n.dtypes) > 1]
    shapes_vary = any(n.dims is None or None in n.dims for n in tensors)
    call_code = _conversion_code(group, plan, convert)
    record = group.records[-1]
    if conflicts:
        node = conflicts[0]
        shown = node.path.replace("[i]", "[...]")
        text = (f"no input_signature removes these retraces: {node.path} arrives as {' and '.join(node.dtypes)}, "
                f"and a spec has one dtype" + (" (reduce_retracing=True merges the shape and rank changes, not "
                f"the dtype)" if shapes_vary else "") + f". Cast it once before the call, e.g. tf.cast({shown}, "
                f"tf.{node.dtypes[0]}) or np.asarray(..., np.{node.dtypes[0]}), then declare the signature.")
        covered, _ = _signature_roots(plan, record.parameters, allow_conflicts=True)
        site = _call_site(group, node.path, "dtype")
        cast = (f"{shown} = tf.cast({shown}, tf.{node.dtypes[0]})  # before the call at {site}"
                if "[" not in node.path and "." not in node.path else "")
        code = "\n".join(filter(None, [cast, _decorator(group, covered) if covered is not None else ""]))
        patch = Patch(reduce_retracing=shapes_vary, convert=convert, allowed_retraces=1 if shapes_vary else 0)
        return "no_signature", text, "\n".join(filter(None, [code, call_code])), [site], patch
    if shapes_vary:
        covered, blocker = _signature_roots(plan, record.parameters)
        axes = "; ".join(varying_axes(plan)) or "dims"
        if covered is not None:
            text = ("one input_signature covers every traced call: None on each dim that varies"
                    + (", and the Python numbers become tensors" if convert else "") + ".")
            if is_last_partial_batch(plan.snapshots):
                text += (" Axis 0 is the batch and only the last batch is smaller: batching with "
                         "drop_remainder=True removes that retrace too, at the cost of the last partial batch.")
            return ("input_signature", text, "\n".join(filter(None, [_decorator(group, covered), call_code])),
                    [group.key[1]] + ([_call_site(group, next(iter(convert)))] if convert else []),
                    Patch(input_signature=covered, convert=convert))
        text = (f"no input_signature can be declared ({blocker}), so let TF generalise the varying dims ({axes}) "
                f"itself: reduce_retracing=True traces the first call exactly and one generic graph on the next "
                f"miss.")
        code = "\n".join(filter(None, [_decorator(group, None, reduce_retracing=True), call_code]))
        return "reduce_retracing", text, code, [group.key[1]], Patch(reduce_retracing=True, convert=convert,
                                                                     allowed_retraces=1)
    if convert:
        node = next((n for n in nodes if isinstance(n, PythonNode) and n.path in convert), None)
        if node is None:  # a Python number in some calls, a tensor in others
            text = (f"{', '.join(convert)}: a Python number in some calls and a tensor in others, and TF keys "
                    f"the two apart (and every Python value by value): always pass a tensor.")
        else:
            flag = " A mode flag with two values costs at most two traces; as a tensor, `if` on it becomes " \
                   "tf.cond." if node.dtype == "bool" else ""
            text = (f"{', '.join(convert)}: a Python {type(node.values[-1]).__name__} that changes between calls "
                    f"({', '.join(map(_show, _distinct(node.values)[:6]))}), and every new value traces a new "
                    f"graph: pass a tensor instead (tf.constant / tf.convert_to_tensor), or keep it constant.{flag}")
        return "tensor_argument", text, call_code, [_call_site(group, path) for path in convert], Patch(convert=convert)
    event = next((e for e in group.events if e.cause not in NOT_RETRACES), None)
    return "unknown", event.suggestion if event else "no modelled difference explains the retraces", "", \
        [event.call_site if event else group.key[1]], None


def _signature_roots(plan: Any, parameters: list | None, allow_conflicts: bool = False) -> tuple[list | None, str]:
    """The arguments an input_signature covers (trailing Python constants equal to their defaults left out)."""
    if parameters and any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
        return None, "the function takes *args / **kwargs"
    defaults = {p.name: p.default for p in parameters or [] if p.default is not p.empty}
    roots = list(plan.roots)
    while roots and isinstance(roots[-1], PythonNode) and not roots[-1].varies and roots[-1].path in defaults \
            and _equal(roots[-1].values[0], defaults[roots[-1].path]):
        roots.pop()
    for root in roots:
        for node in walk(root):
            if isinstance(node, PythonNode) and not (node.varies and node.numeric):
                return None, f"{node.path} is {describe_blocker(node)}"
            if isinstance(node, (OpaqueNode, VaryingStructure)) or (isinstance(node, DictNode) and node.keys is None):
                return None, f"{node.path} is {describe_blocker(node)}"
            if isinstance(node, TensorNode) and len(node.dtypes) > 1 and not allow_conflicts:
                return None, f"{node.path} has several dtypes"
    if not allow_conflicts:
        try:
            for root in roots:
                to_spec(root)
        except ValueError as err:
            return None, str(err)
    return roots, ""


def _decorator(group: FunctionGroup, covered: list | None, reduce_retracing: bool = False) -> str:
    options = []
    if covered is not None:
        items = [render(node) for node in covered]
        one_line = "input_signature=[" + ", ".join(items) + "]"
        options.append(one_line if len(one_line) < 90 else
                       "input_signature=[\n" + "".join(f"    {item},\n" for item in items) + "]")
    if reduce_retracing:
        options.append("reduce_retracing=True")
    if any(record.jit for record in group.records):
        options.append("jit_compile=True")
    name = group.key[0].rsplit(".", 1)[-1]
    if fix_sites.is_decorator_line(group.key[1]):
        return f"@tf.function({', '.join(options)})  # at {group.key[1]}"
    return f"{name} = tf.function({name}, {', '.join(options)})  # where {name} is wrapped"


def _conversion_code(group: FunctionGroup, plan: Any, convert: dict[str, str]) -> str:
    lines = []
    names = {group.key[0].rsplit(".", 1)[-1]} | {record.label.rsplit(".", 1)[-1] for record in group.records}
    for path, dtype in convert.items():
        site = _call_site(group, path)
        positional = plan.snapshots[-1].positional
        rewritten = (fix_sites.wrapped_argument_call(site, names, path, positional.index(path) if path in
                                                     positional else None, f"tf.constant({{}}, tf.{dtype})")
                     if "[" not in path and "." not in path else None)
        lines.append(f"{rewritten}  # at {site}" if rewritten else f"# at {site}: pass {path} as "
                                                                   f"tf.constant(..., tf.{dtype})")
    return "\n".join(lines)


def _call_site(group: FunctionGroup, path: str, cause: str | None = None) -> str:
    """Where the function was called when `path` (preferably with `cause`) made it retrace."""
    events = [e for e in group.events if e.cause not in NOT_RETRACES]
    event = next((e for e in events if e.path == path and cause in (None, e.cause)),
                 next((e for e in events if e.path == path), events[0] if events else None))
    return event.call_site if event else group.key[1]


def _equal(first: Any, second: Any) -> bool:
    try:
        return bool(first == second)
    except Exception:
        return False


def _show(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else repr(value)


def _distinct(values: list) -> list:
    seen: list = []
    for value in values:
        if not any(_equal(value, other) for other in seen):
            seen.append(value)
    return seen

"""One generalised spec per argument from every traced call of a function: the signature that covers them all.

`plan_arguments(snapshots)` turns the argument leaves of every call TF traced (``trace_types.Snapshot``) into one
node per argument: a tensor keeps each dim equal in every call and gets None on the others (unknown rank when
the rank varies); the elements of a list or tuple that play the same role (same dtype and rank, and equal
wherever each is constant) are generalised together, so a list of per-image box tensors gets one
``[None, 4]`` spec for every element even when only element [1] changed so far.  What a signature cannot
express (a dtype that varies, a list whose length varies, a Python object) is kept as such, so the caller
can say which fix applies.  Only `to_spec` calls TensorFlow: it builds the real specs.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Iterator

import tensorflow as tf

from myxtts.diagnostics.trace_types import Leaf, Snapshot

_NUMERIC_PYTHON = (bool, int, float)


@dataclass
class TensorNode:
    path: str  # e.g. boxes[i] for elements generalised together
    dtypes: list[str]  # distinct dtypes in call order (one unless the dtype varies)
    dims: list[int | None] | None  # None: the rank varies
    shapes: list[tuple]  # every observed shape (all calls, all merged elements), in order
    python_values: bool = False  # a Python number in some calls: TF keys those by value, so they become tensors


@dataclass
class PythonNode:
    path: str
    values: list[Any]  # one per call

    @property
    def varies(self) -> bool:
        return any(not _same_value(value, self.values[0]) for value in self.values[1:])

    @property
    def numeric(self) -> bool:
        return all(isinstance(value, _NUMERIC_PYTHON) for value in self.values)

    @property
    def dtype(self) -> str:
        """The tensor dtype it becomes: bool, int32 (int64 beyond int32's range), float32 when any is a float."""
        if all(isinstance(value, bool) for value in self.values):
            return "bool"
        if any(isinstance(value, float) for value in self.values):
            return "float32"
        return "int64" if any(abs(int(value)) >= 2 ** 31 for value in self.values) else "int32"


@dataclass
class SequenceNode:
    path: str
    type_name: str  # list | tuple
    items: list  # one node per element
    merged: Any = None  # one node for every element (they play the same role), or None


@dataclass
class DictNode:
    path: str
    keys: list[Any] | None  # the real keys (literals), None when a key is not a literal
    items: list  # one node per key, in key order


@dataclass
class OpaqueNode:
    """Something no TensorSpec describes: an object, a variable, a composite tensor, a namedtuple, a mix."""

    path: str
    kind: str
    type_name: str


@dataclass
class VaryingStructure:
    """The structure itself changes between calls (list length, dict keys, an argument passed or omitted)."""

    path: str
    description: str
    change: str  # length | keys | presence


@dataclass
class ArgumentPlan:
    roots: list  # one node per argument, in parameter order
    snapshots: list[Snapshot] = field(default_factory=list)

    def nodes(self) -> Iterator:
        for root in self.roots:
            yield from walk(root)


def plan_arguments(snapshots: list[Snapshot]) -> ArgumentPlan:
    """One node per argument covering every snapshot (at least one)."""
    if not snapshots:
        raise ValueError("plan_arguments needs at least one traced call.")
    roots: list[str] = []
    for snapshot in snapshots:
        for path in snapshot.leaves:
            if _parent(path) not in snapshot.leaves and path not in roots:
                roots.append(path)
    return ArgumentPlan([_build(root, snapshots) for root in roots], list(snapshots))


def _build(path: str, snapshots: list[Snapshot]) -> Any:
    leaves = [snapshot.leaves.get(path) for snapshot in snapshots]
    if any(leaf is None for leaf in leaves):
        return VaryingStructure(path, "passed in some calls and not in others", "presence")
    kinds = {leaf.kind for leaf in leaves}
    if kinds == {"tensor"}:
        return _tensor_node(path, leaves)
    if kinds == {"python"}:
        return PythonNode(path, [leaf.value for leaf in leaves])
    if kinds == {"python", "tensor"}:  # a Python number one call, a tensor the other: both become tensors
        tensors = [leaf for leaf in leaves if leaf.kind == "tensor"]
        node = _tensor_node(path, tensors)
        node.shapes += [() for leaf in leaves if leaf.kind == "python"]
        node.dims = _generalise(node.shapes)
        node.python_values = True
        return node
    if kinds == {"sequence"}:
        first = leaves[0]
        if any(leaf.length != first.length or leaf.type_name != first.type_name for leaf in leaves):
            lengths = sorted({leaf.length for leaf in leaves if leaf.length is not None})
            return VaryingStructure(path, f"a {first.type_name} of {_join(lengths)} elements in different calls",
                                    "length")
        if first.keys:  # a namedtuple: its class is not in the summary, so no spec can be rebuilt here
            return OpaqueNode(path, "namedtuple", first.type_name)
        items = [_build(f"{path}[{index}]", snapshots) for index in range(first.length or 0)]
        return SequenceNode(path, first.type_name, items, _merge_elements(path, items))
    if kinds == {"dict"}:
        first = leaves[0]
        if any(leaf.keys != first.keys for leaf in leaves):
            return VaryingStructure(path, "its keys differ between calls", "keys")
        items = [_build(f"{path}[{key}]", snapshots) for key in first.keys or ()]
        return DictNode(path, _literal_keys(first.keys or ()), items)
    if len(kinds) > 1:
        return OpaqueNode(path, "mixed", "/".join(sorted(kinds)))
    return OpaqueNode(path, leaves[0].kind, leaves[0].type_name)


def _tensor_node(path: str, leaves: list[Leaf]) -> TensorNode:
    dtypes: list[str] = []
    for leaf in leaves:
        if leaf.dtype not in dtypes:
            dtypes.append(leaf.dtype)
    shapes = [leaf.shape for leaf in leaves]
    return TensorNode(path, dtypes, _generalise(shapes), list(shapes))


def _generalise(shapes: list) -> list[int | None] | None:
    """Dims equal in every shape stay; the others become None; None (unknown rank) when ranks differ."""
    if not shapes or any(shape is None for shape in shapes) or len({len(shape) for shape in shapes}) != 1:
        return None
    return [dims[0] if len(set(dims)) == 1 else None for dims in zip(*shapes)]


def _merge_elements(path: str, items: list) -> Any:
    """One node for every element when all play the same role and at least one of them varies, else None."""
    if len(items) < 2 or not any(_varies(item) for item in items):
        return None
    return _merge(f"{path}[i]", items)


def _merge(path: str, nodes: list) -> Any:
    if all(isinstance(node, TensorNode) for node in nodes):
        dtypes = {tuple(node.dtypes) for node in nodes}
        if len(dtypes) != 1 or len(next(iter(dtypes))) != 1 or any(node.dims is None for node in nodes):
            return None
        if len({len(node.dims) for node in nodes}) != 1:
            return None
        for axis in range(len(nodes[0].dims)):  # an axis constant in every element must be the same constant
            constants = [node.dims[axis] for node in nodes]
            if None not in constants and len(set(constants)) > 1:
                return None
        shapes = [shape for node in nodes for shape in node.shapes]
        return TensorNode(path, list(nodes[0].dtypes), _generalise(shapes), shapes)
    same_keys = len({tuple(map(repr, getattr(node, "keys", None) or [])) for node in nodes}) == 1
    if all(isinstance(node, DictNode) for node in nodes) and same_keys:
        keys = nodes[0].keys
        if keys is None:
            return None
        children = [_merge(f"{path}[{key!r}]", [node.items[index] for node in nodes]) for index, key in enumerate(keys)]
        return None if any(child is None for child in children) else DictNode(path, keys, children)
    return None


def _varies(node: Any) -> bool:
    return any((isinstance(n, TensorNode) and (n.dims is None or None in n.dims or len(n.dtypes) > 1))
               or (isinstance(n, PythonNode) and n.varies) for n in walk(node))


def walk(node: Any) -> Iterator:
    """The node and every node inside it (merged elements once, as the merged node)."""
    yield node
    if isinstance(node, SequenceNode):
        for child in ([node.merged] if node.merged is not None else node.items):
            yield from walk(child)
    elif isinstance(node, DictNode):
        for child in node.items:
            yield from walk(child)


# ---- code and specs ------------------------------------------------------------------------------

def render(node: Any) -> str:
    """The node as code: `tf.TensorSpec([None, 4], tf.float32)`, `[spec] * 2`, `{'mel': spec}`."""
    if isinstance(node, TensorNode):
        return _render_spec(node.dims, node.dtypes[0])
    if isinstance(node, PythonNode):
        return _render_spec([], node.dtype) if node.numeric else f"<{node.path}: not a tensor>"
    if isinstance(node, SequenceNode):
        if node.merged is not None:
            element = render(node.merged)
            count = len(node.items)
            return f"[{element}] * {count}" if node.type_name == "list" else f"({element},) * {count}"
        items = ", ".join(render(item) for item in node.items)
        return f"[{items}]" if node.type_name == "list" else f"({items}{',' if len(node.items) == 1 else ''})"
    if isinstance(node, DictNode):
        keys = node.keys if node.keys is not None else [f"<key {i}>" for i in range(len(node.items))]
        return "{" + ", ".join(f"{key!r}: {render(item)}" for key, item in zip(keys, node.items)) + "}"
    return f"<{node.path}: not a tensor>"


def _render_spec(dims: list[int | None] | None, dtype: str) -> str:
    shape = "None" if dims is None else "[" + ", ".join("None" if d is None else str(d) for d in dims) + "]"
    return f"tf.TensorSpec({shape}, tf.{dtype})"


def to_spec(node: Any) -> Any:
    """The real TensorSpec structure of a node; ValueError for what a signature cannot hold."""
    if isinstance(node, TensorNode):
        if len(node.dtypes) != 1:
            raise ValueError(f"{node.path}: its dtype varies ({', '.join(node.dtypes)}); one spec has one dtype.")
        return tf.TensorSpec(node.dims, tf.as_dtype(node.dtypes[0]))
    if isinstance(node, PythonNode) and node.numeric:
        return tf.TensorSpec([], tf.as_dtype(node.dtype))
    if isinstance(node, SequenceNode):
        items = [to_spec(node.merged if node.merged is not None else item) for item in node.items]
        return items if node.type_name == "list" else tuple(items)
    if isinstance(node, DictNode) and node.keys is not None:
        return {key: to_spec(item) for key, item in zip(node.keys, node.items)}
    raise ValueError(f"{node.path}: {describe_blocker(node)}")


def describe_blocker(node: Any) -> str:
    """Why a node cannot be part of an input_signature."""
    if isinstance(node, VaryingStructure):
        return node.description
    if isinstance(node, PythonNode):
        return f"a Python {type(node.values[0]).__name__} ({_join(_distinct(node.values))})"
    if isinstance(node, DictNode):
        return "a dict whose keys are not literals"
    if isinstance(node, OpaqueNode):
        return {"variable": "a tf.Variable (a spec would read its value, not the variable)",
                "composite": f"a {node.type_name} (composite tensor)",
                "namedtuple": f"a namedtuple {node.type_name}"}.get(node.kind, f"a {node.type_name} object")
    return "not a tensor"


# ---- naming the axes -----------------------------------------------------------------------------

def varying_axes(plan: ArgumentPlan) -> list[str]:
    """`boxes[i] axis 0 (3, 5, 2)` for every dim that varies; `the batch` only for the last-partial-batch pattern."""
    batch = is_last_partial_batch(plan.snapshots)
    lines = []
    for node in plan.nodes():
        if not isinstance(node, TensorNode):
            continue
        if len(node.dtypes) > 1:
            lines.append(f"{node.path} dtype ({', '.join(node.dtypes)})")
        if node.dims is None:
            ranks = _distinct([len(shape) for shape in node.shapes if shape is not None])
            lines.append(f"{node.path} rank ({_join(ranks)})")
            continue
        for axis, dim in enumerate(node.dims):
            if dim is None:
                values = _join(sorted(_distinct([shape[axis] for shape in node.shapes]), key=_order))
                name = " (the batch: the last batch is partial)" if batch and axis == 0 else ""
                lines.append(f"{node.path} axis {axis} ({values}){name}")
    return lines


def is_last_partial_batch(snapshots: list[Snapshot]) -> bool:
    """Axis 0 is the batch only when it is the leading dim of every tensor argument in each call, every call but
    the last shares one value and the last is smaller (a dataset's partial final batch)."""
    leading = []
    for snapshot in snapshots:
        dims = {leaf.shape[0] for leaf in snapshot.leaves.values()
                if leaf.kind == "tensor" and leaf.shape is not None and len(leaf.shape) > 0}
        if len(dims) != 1:
            return False
        leading.append(dims.pop())
    if len(leading) < 2 or len(set(leading[:-1])) != 1:
        return False
    return leading[-1] is not None and leading[0] is not None and leading[-1] < leading[0]


# ---- helpers -------------------------------------------------------------------------------------

def _parent(path: str) -> str | None:
    """`boxes[1]` -> `boxes`, `batch['mel']` -> `batch`, `point.x` -> `point`; a root has no parent."""
    depth, cut = 0, None
    for index, char in enumerate(path):
        if char == "[":
            if depth == 0:
                cut = index
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "." and depth == 0:
            cut = index
    return path[:cut] if cut else None


def _literal_keys(keys: tuple[str, ...]) -> list[Any] | None:
    try:
        return [ast.literal_eval(key) for key in keys]
    except (ValueError, SyntaxError):
        return None


def _same_value(first: Any, second: Any) -> bool:
    try:
        return bool(first == second)  # TF matches Python literals by ==, so 1, 1.0 and True are one value
    except Exception:
        return False


def _distinct(values: list) -> list:
    seen: list = []
    for value in values:
        if not any(_same_value(value, other) for other in seen):
            seen.append(value)
    return seen


def _order(value: Any) -> tuple:
    return (0, value) if isinstance(value, (int, float)) else (1, str(value))


def _join(values: list, limit: int = 6) -> str:
    shown = ", ".join(repr(v) if isinstance(v, str) else str(v) for v in values[:limit])
    return shown + (f", ... {len(values)} values" if len(values) > limit else "")

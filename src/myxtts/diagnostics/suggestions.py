"""Concrete fixes for each retrace cause, including the exact `input_signature` to declare."""

from __future__ import annotations

from typing import Any

from myxtts.diagnostics.signature_plan import (DictNode, SequenceNode, TensorNode, is_last_partial_batch,
                                               plan_arguments, render, walk)
from myxtts.diagnostics.trace_types import Difference, Leaf, Snapshot


def unknown(closest_trace: int) -> str:
    return (f"no difference in arguments, structure, device or strategy explains this trace (the arguments "
            f"match trace {closest_trace}); the cause is outside what the explainer models (for example a "
            "concrete function that was garbage-collected, or a cache key of a TF version newer than 2.21). "
            "Inspect fn.pretty_printed_concrete_signatures() and declare an input_signature.")


def input_signature(current: "Snapshot", history: list["Snapshot"]) -> tuple[str, list[str]]:
    """`input_signature=[...]` for the positional arguments, covering every call in `history` (which holds
    `current`): None only on dims seen to vary, and the elements of a list that play the same role
    generalised together (`[tf.TensorSpec([None, 4], tf.float32)] * 2`), see `signature_plan`.

    Returns the code and the paths that are not tensors yet (they must become tensors first).
    """
    plan = plan_arguments(_with_current(history, current))
    by_path = {node.path: node for node in plan.roots}
    python_paths = [node.path for root in current.positional if root in by_path for node in walk(by_path[root])
                    if not isinstance(node, (TensorNode, SequenceNode, DictNode))]
    specs = [render(by_path[root]) for root in current.positional if root in by_path]
    return "input_signature=[" + ", ".join(specs) + "]", python_paths


def _with_current(history: list["Snapshot"], current: "Snapshot") -> list["Snapshot"]:
    return history if any(snapshot is current for snapshot in history) else history + [current]


def _signature_hint(current: "Snapshot", history: list["Snapshot"]) -> str:
    code, python_paths = input_signature(current, history)
    hint = f"@tf.function({code})"
    if python_paths:
        hint += f" (after passing {', '.join(python_paths)} as tensors)"
    return hint


def for_difference(difference: "Difference", history: list["Snapshot"], current: "Snapshot",
                   function_label: str) -> str:
    cause, path = difference.cause, difference.path
    before, after = difference.before, difference.after
    if cause == "shape":
        return _shape_fix(path, before, after, history, current)
    if cause == "rank":
        return (f"{path} changed rank ({_shape(before)} -> {_shape(after)}): feed one rank (reshape or "
                f"tf.expand_dims before the call), or declare an unknown-rank spec: {_signature_hint(current, history)}.")
    if cause == "dtype":
        target = before.dtype if isinstance(before, Leaf) else "float32"
        return (f"{path} changed dtype ({_attr(before, 'dtype')} -> {_attr(after, 'dtype')}; NumPy defaults to "
                f"float64): cast once before the call, e.g. tf.cast({_leaf_name(path)}, tf.{target}) or "
                f"np.asarray(..., np.{target}), and pin it with {_signature_hint(current, history)}.")
    if cause == "python_value":
        return _python_value_fix(path, before, after, difference.note)
    if cause == "new_object":
        return _new_object_fix(path, after, difference.note)
    if cause == "unhashable":
        type_name = _attr(after, "type_name") or "the argument"
        return (f"{path} is an unhashable {type_name} (a plain @dataclass sets __hash__ = None) and TF "
                f"cannot key its cache on it: declare it @dataclass(frozen=True) and reuse one instance, "
                f"give the class __tf_tracing_type__, or pass its tensors as a dict.")
    if cause == "structure":
        return _structure_fix(path, before, after)
    if cause == "variable":
        return (f"tf.function keys variables by shape, dtype and aliasing (which argument is the same "
                f"variable), so {path or 'the variables'} traced again ({difference.note}): pass variables of "
                "one shape in one aliasing pattern, or capture the variable (self.v / a closure) instead of "
                "passing it as an argument.")
    if cause == "context":
        return (f"the call context changed ({path}: {_value(before)} -> {_value(after)}): call "
                f"{function_label} under one device scope / distribution strategy, or expect one trace per "
                "context (create the function inside strategy.scope() and call it through strategy.run).")
    return unknown(0)


def _shape_fix(path: str, before: Any, after: Any, history: list["Snapshot"], current: "Snapshot") -> str:
    old, new = _attr(before, "shape") or (), _attr(after, "shape") or ()
    varying = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]
    hint = _signature_hint(current, history)
    if varying == [0] and is_last_partial_batch(_with_current(history, current)):
        return (f"the batch dimension of {path} changed ({old[0]} -> {new[0]}): the last batch is partial (axis "
                f"0 is the leading dim of every argument): use dataset.batch(..., drop_remainder=True) (or "
                f"padded_batch(..., drop_remainder=True)); or accept one graph for every batch size with {hint}.")
    dims = ", ".join(f"axis {i}: {old[i]} -> {new[i]}" for i in varying)
    parent = _list_parent(path, current)
    if parent is not None:
        return (f"{path} changed shape ({dims}); {parent} is a Python {current.leaves[parent].type_name} unrolled "
                f"into the graph whose elements play the same role, so declare every element generic, not only "
                f"this one: {hint}; or pass one ragged / padded tensor instead of the list.")
    return (f"{path} changed shape ({dims}): pad to a fixed set of lengths (length buckets, e.g. "
            f"tf.data.Dataset.bucket_by_sequence_length(..., pad_to_bucket_boundary=True) or padded_batch "
            f"with fixed padded_shapes) so each bucket traces once, or trace one generic graph with {hint}.")


def _list_parent(path: str, current: "Snapshot") -> str | None:
    """`boxes` for `boxes[1]` when boxes is a list or tuple (not a namedtuple) of several elements."""
    if not path.endswith("]") or "[" not in path:
        return None
    parent = path[:path.rindex("[")]
    leaf = current.leaves.get(parent)
    index = path[path.rindex("[") + 1:-1]
    if leaf is None or leaf.kind != "sequence" or leaf.keys or not index.isdigit() or (leaf.length or 0) < 2:
        return None
    return parent


def _python_value_fix(path: str, before: Any, after: Any, note: str) -> str:
    old, new = _attr(before, "value"), _attr(after, "value")
    if note:
        return (f"{path} was {_value(before)} and is now {_value(after)} ({note}): always pass the same kind, "
                f"preferably a tensor (tf.convert_to_tensor).")
    if isinstance(new, bool) or isinstance(old, bool):
        return (f"{path} is a Python control-flow flag ({old!r} -> {new!r}): every value traces its own graph. "
                f"That is expected once per value of a mode flag such as training=; if it changes from step to "
                f"step pass tf.constant({new!r}) and branch with tf.cond (AutoGraph converts `if` on a tensor).")
    if isinstance(new, (int, float)) and not isinstance(new, bool):
        dtype = "tf.int32" if isinstance(new, int) else "tf.float32"
        return (f"{path} is a Python scalar ({old!r} -> {new!r}) and every new value traces a new graph: "
                f"pass a tensor instead, e.g. tf.constant({new!r}, {dtype}), or keep it in a tf.Variable and "
                f"assign() it.")
    return (f"{path} is a Python value ({old!r} -> {new!r}) baked into the graph: pass a tensor "
            f"(tf.constant(...)) or make it a constant of the function.")


def _new_object_fix(path: str, after: Any, note: str) -> str:
    type_name = _attr(after, "type_name") or "object"
    if type_name in ("function", "lambda", "method", "partial"):
        return (f"{path} is a new {type_name} object on every call (TF keys callables by identity): define it "
                f"once outside the loop and pass the same object, or close over it inside the tf.function.")
    why = f" ({note})" if note else ""
    return (f"{path} is a new {type_name} instance{why}; tf.function keys ordinary objects by identity "
            f"through a weak reference: create it once outside the loop and keep it alive, or make the class "
            f"hashable by value (@dataclass(frozen=True), or __eq__/__hash__) or give it __tf_tracing_type__; "
            f"tensors inside it are better passed as arguments.")


def _structure_fix(path: str, before: Any, after: Any) -> str:
    old_keys, new_keys = _attr(before, "keys"), _attr(after, "keys")
    if old_keys is not None and new_keys is not None and old_keys != new_keys:
        added = sorted(set(new_keys) - set(old_keys))
        removed = sorted(set(old_keys) - set(new_keys))
        return (f"the keys of {path} changed (added {added or 'none'}, removed {removed or 'none'}): pass the "
                f"same keys every call (fill absent entries with zero tensors and a mask).")
    old_length, new_length = _attr(before, "length"), _attr(after, "length")
    if old_length is not None and new_length is not None and old_length != new_length:
        return (f"{path} changed length ({old_length} -> {new_length}) and a Python list is unrolled into the "
                f"graph: stack it into one tensor (tf.stack / a padded tensor) or keep the length fixed.")
    return (f"the nesting at {path} changed ({_attr(before, 'type_name') or 'absent'} -> "
            f"{_attr(after, 'type_name') or 'absent'}): pass the same structure every call.")


def _attr(leaf: Any, name: str) -> Any:
    return getattr(leaf, name, None) if isinstance(leaf, Leaf) else None


def _shape(leaf: Any) -> str:
    shape = _attr(leaf, "shape")
    return "unknown rank" if shape is None else str(list(shape))


def _value(description: Any) -> str:
    if isinstance(description, Leaf):
        return repr(description.value) if description.kind == "python" else f"{description.kind} {description.type_name}"
    if isinstance(description, dict) and len(description) == 1:
        return repr(next(iter(description.values())))
    return repr(description)


def _leaf_name(path: str | None) -> str:
    return path or "x"

"""Compare a call that traced with the closest earlier traced call and name the cause.

`Snapshot` (trace_types) is one traced call (argument leaves + call context).  `explain()` diffs it against every
earlier snapshot of the same function, picks the closest (fewest differences, latest on a tie), and
returns the most specific difference as (cause, path, before, after, suggestion).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from myxtts.diagnostics import suggestions
from myxtts.diagnostics.trace_types import Difference, Leaf, Snapshot

# Most specific first: the first difference in this order names the cause.
_PRIORITY = {"structure": 0, "unhashable": 1, "variable": 2, "dtype": 3, "rank": 4, "shape": 5,
             "python_value": 6, "new_object": 7, "context": 8}
_CONTAINERS = ("dict", "sequence")


@dataclass
class Explanation:
    cause: str
    path: str | None
    before: dict | None
    after: dict | None
    suggestion: str


def call_context() -> dict[str, Any]:
    """The parts of TF's cache-key context a user can change between calls: device scope, strategy."""
    context: dict[str, Any] = {}
    try:
        from tensorflow.python.eager import context as eager_context  # private, present in TF 2.16-2.21

        context["device"] = eager_context.context().device_name or ""
    except (ImportError, AttributeError):
        context["device"] = None
    if tf.distribute.has_strategy():
        strategy = tf.distribute.get_strategy()
        context["strategy"] = f"{type(strategy).__name__}@{id(strategy):#x}"
    else:
        context["strategy"] = None
    return context


def _alias_pattern(leaves: dict[str, Leaf]) -> list[tuple[str, str]]:
    """For each variable, the first path holding the same variable (TF keys variables by aliasing)."""
    first: dict[int, str] = {}
    pattern = []
    for path, leaf in leaves.items():
        if leaf.kind == "variable" and leaf.identity is not None:
            pattern.append((path, first.setdefault(leaf.identity, path)))
    return pattern


def _is_under(path: str, parents: set[str]) -> bool:
    return any(path != parent and path.startswith(parent) and path[len(parent)] in "[." for parent in parents)


def compare(before: Snapshot, after: Snapshot) -> list[Difference]:
    """Every difference between two calls that would give them different TF cache keys."""
    differences: list[Difference] = []
    changed_containers: set[str] = set()
    for path, new in after.leaves.items():
        old = before.leaves.get(path)
        if _is_under(path, changed_containers):
            continue
        if old is None:  # a parent that changed was skipped above: this is a new top-level argument
            differences.append(Difference("structure", path, None, new, "argument not passed before"))
            changed_containers.add(path)
            continue
        difference = _compare_leaf(path, old, new)
        if difference is not None:
            differences.append(difference)
            if difference.cause == "structure":
                changed_containers.add(path)
    for path, old in before.leaves.items():
        if path not in after.leaves and not _is_under(path, changed_containers):
            differences.append(Difference("structure", path, old, None, "argument no longer passed"))
            changed_containers.add(path)
    if _alias_pattern(before.leaves) != _alias_pattern(after.leaves):
        differences.append(Difference("variable", None, {"aliasing": _alias_pattern(before.leaves)},
                                      {"aliasing": _alias_pattern(after.leaves)}, "variable aliasing changed"))
    for key in sorted(set(before.context) | set(after.context)):
        if before.context.get(key) != after.context.get(key):
            differences.append(Difference("context", key, {key: before.context.get(key)},
                                          {key: after.context.get(key)}))
    return differences


def _compare_leaf(path: str, old: Leaf, new: Leaf) -> Difference | None:
    if old.kind != new.kind:
        if old.kind in _CONTAINERS or new.kind in _CONTAINERS:
            return Difference("structure", path, old, new, "container changed type")
        if {old.kind, new.kind} == {"python", "tensor"}:
            return Difference("python_value", path, old, new, "a Python value one call, a tensor the other")
        if new.kind == "unhashable":
            return Difference("unhashable", path, old, new)
        return Difference("new_object", path, old, new, "argument changed kind")
    kind = new.kind
    if kind in _CONTAINERS:
        if old.keys != new.keys or old.length != new.length or old.type_name != new.type_name:
            return Difference("structure", path, old, new)
        return None
    if kind in ("tensor", "composite"):
        if old.dtype != new.dtype:
            return Difference("dtype", path, old, new)
        if old.shape is None or new.shape is None or len(old.shape) != len(new.shape):
            if old.shape != new.shape:
                return Difference("rank", path, old, new)
            return None
        if old.shape != new.shape or (kind == "composite" and old.value != new.value):
            return Difference("shape", path, old, new)
        return None
    if kind == "variable":
        if old.dtype != new.dtype or old.shape != new.shape:
            return Difference("variable", path, old, new, "variable shape or dtype changed")
        return None
    if kind == "python":
        try:
            equal = bool(old.value == new.value) and (old.value is None) == (new.value is None)
        except Exception:
            equal = False
        return None if equal else Difference("python_value", path, old, new)
    if kind == "unhashable":
        return Difference("unhashable", path, old, new)
    if kind == "object":
        if old.identity != new.identity or not old.alive():
            return Difference("new_object", path, old, new)
        return None
    if kind == "hashable":
        if old.value_hash != new.value_hash or old.type_name != new.type_name:
            return Difference("new_object", path, old, new, "not equal to the earlier value")
        if not old.alive():
            return Difference("new_object", path, old, new, "equal by value, but the earlier instance was "
                              "freed and TF only keeps a weak reference to it")
        try:
            equal = old.ref() == new.ref()
        except Exception:
            equal = False
        return None if equal else Difference("new_object", path, old, new, "not equal to the earlier value")
    if kind == "traced":
        if old.trace_type is not None and new.trace_type is not None:
            try:
                same = old.trace_type == new.trace_type
            except Exception:
                same = False
            return None if same else Difference("new_object", path, old, new, "__tf_tracing_type__ differs")
        return None
    return None


def _rank(differences: list[Difference]) -> tuple[int, int, int]:
    """Closeness: argument differences first (a device scope alone does not always retrace), then context."""
    arguments = [d for d in differences if d.cause != "context"]
    best = min((_PRIORITY.get(d.cause, 99) for d in differences), default=99)
    return len(arguments), len(differences) - len(arguments), best


def explain(history: list[Snapshot], current: Snapshot, function_label: str) -> Explanation:
    """Name the cause of `current`'s trace from the closest snapshot in `history` (never empty)."""
    best_snapshot, best_differences = history[-1], compare(history[-1], current)
    for snapshot in reversed(history[:-1]):
        differences = compare(snapshot, current)
        if _rank(differences) < _rank(best_differences):
            best_snapshot, best_differences = snapshot, differences
    if not best_differences:
        return Explanation("unknown", None, None, None, suggestions.unknown(best_snapshot.trace))
    best_differences.sort(key=lambda d: _PRIORITY.get(d.cause, 99))
    main = best_differences[0]
    text = suggestions.for_difference(main, history + [current], current, function_label)
    others = [f"{d.path} ({d.cause})" for d in best_differences[1:4] if d.path != main.path]
    if others:
        text += f" Also changed since trace {best_snapshot.trace}: {', '.join(others)}."
    return Explanation(main.cause, main.path, _describe(main.before, main.note if main.before is None else ""),
                       _describe(main.after, main.note), text)


def _describe(leaf: Leaf | dict | None, note: str = "") -> dict | None:
    if leaf is None:
        return {"note": note} if note else None
    description = leaf.describe() if isinstance(leaf, Leaf) else dict(leaf)
    if note:
        description["note"] = note
    return description

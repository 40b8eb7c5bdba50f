"""Summaries of a call's arguments (path -> leaf) and of the function being traced.

A summary mirrors what `tf.function` keys its cache on (tensors by shape and dtype,
Python literals by ``==``, ordinary objects by identity through a weak reference, containers by
structure) so two summaries can be compared to name what made TF trace again.  Summaries never hold
a strong reference to a user object: that would keep it alive and change TF's own behaviour.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import sys
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import tensorflow as tf

_MAX_LEAVES = 512  # a call with more leaves is summarised up to this many (keeps tracing cheap)
_LITERALS = (bool, int, float, complex, str, bytes, type(None))


@dataclass
class Leaf:
    """One argument (or container) at a path, reduced to what TF's cache key depends on."""

    kind: str  # tensor, variable, composite, python, object, hashable, unhashable, traced, dict, sequence
    type_name: str
    shape: tuple[int | None, ...] | None = None
    dtype: str | None = None
    value: Any = None  # python literals (small), or repr for hashable objects
    identity: int | None = None  # id() for objects matched by identity
    ref: Any = None  # weakref.ref to the object (objects / hashables), or None
    value_hash: int | None = None
    trace_type: Any = None  # TF's own TraceType (traced kind)
    keys: tuple[str, ...] | None = None  # dict keys (sorted reprs)
    length: int | None = None  # sequence length

    def alive(self) -> bool:
        return self.ref is not None and self.ref() is not None

    def describe(self) -> dict[str, Any]:
        """JSON-friendly description used as `before` / `after`."""
        out: dict[str, Any] = {"kind": self.kind, "type": self.type_name}
        if self.shape is not None:
            out["shape"] = list(self.shape)
        if self.dtype is not None:
            out["dtype"] = self.dtype
        if self.kind == "python":
            out["value"] = self.value
        elif self.kind in ("hashable", "traced") and self.value is not None:
            out["value"] = self.value
        if self.identity is not None:
            out["identity"] = hex(self.identity)
        if self.keys is not None:
            out["keys"] = list(self.keys)
        if self.length is not None:
            out["length"] = self.length
        return out


@dataclass
class Snapshot:
    """One traced call: its argument leaves and call context (``explainer.call_context``)."""

    leaves: dict[str, Leaf]
    context: dict[str, Any]
    positional: list[str] = dataclasses.field(default_factory=list)  # root names of the positional arguments
    trace: int = 0


@dataclass
class Difference:
    """One way a call differs from an earlier traced one (``explainer.compare``)."""

    cause: str
    path: str | None
    before: Leaf | dict | None
    after: Leaf | dict | None
    note: str = ""


def _weak(value: Any) -> Any:
    try:
        return weakref.ref(value)
    except TypeError:
        return None


def _short_repr(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not break the explainer
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def _key_path(key: Any) -> str:
    return f"[{key!r}]"


def summarize_value(value: Any, path: str, out: dict[str, Leaf]) -> None:
    """Add the leaves of `value` (and its containers) under `path` to `out`, in call order."""
    if len(out) >= _MAX_LEAVES:
        return
    type_name = type(value).__name__
    if isinstance(value, tf.Variable):
        out[path] = Leaf("variable", type_name, tuple(value.shape.as_list()) if value.shape.rank is not None
                         else None, value.dtype.name, identity=id(value), ref=_weak(value))
    elif isinstance(value, (tf.Tensor, np.ndarray, np.generic)):
        shape = value.shape
        dims = tuple(shape.as_list()) if isinstance(shape, tf.TensorShape) and shape.rank is not None else (
            tuple(shape) if not isinstance(shape, tf.TensorShape) else None)
        dtype = value.dtype.name if isinstance(value.dtype, tf.dtypes.DType) else tf.as_dtype(value.dtype).name
        out[path] = Leaf("tensor", type_name, dims, dtype)
    elif isinstance(value, tf.__internal__.CompositeTensor):
        spec = getattr(value, "_type_spec", None)
        shape = getattr(value, "shape", None)
        dims = tuple(shape.as_list()) if isinstance(shape, tf.TensorShape) and shape.rank is not None else None
        dtype = getattr(getattr(value, "dtype", None), "name", None)
        out[path] = Leaf("composite", type_name, dims, dtype, value=_short_repr(spec, 200))
    elif isinstance(value, _LITERALS):
        out[path] = Leaf("python", type_name, value=value if not isinstance(value, (str, bytes)) or len(value) < 200
                         else _short_repr(value))
    elif isinstance(value, dict):
        keys = tuple(sorted(_short_repr(k) for k in value))
        out[path] = Leaf("dict", type_name, keys=keys)
        for key in sorted(value, key=_short_repr):
            summarize_value(value[key], path + _key_path(key), out)
    elif _is_namedtuple(value):
        out[path] = Leaf("sequence", type_name, length=len(value), keys=tuple(type(value)._fields))
        for name in type(value)._fields:
            summarize_value(getattr(value, name), f"{path}.{name}", out)
    elif isinstance(value, (list, tuple)):
        out[path] = Leaf("sequence", type_name, length=len(value))
        for index, item in enumerate(value):
            summarize_value(item, f"{path}[{index}]", out)
    elif hasattr(type(value), "__tf_tracing_type__"):
        out[path] = Leaf("traced", type_name, value=_short_repr(value), trace_type=_trace_type(value),
                         ref=_weak(value), identity=id(value))
    elif type(value).__hash__ is None:
        out[path] = Leaf("unhashable", type_name, value=_short_repr(value))
    elif type(value).__hash__ is object.__hash__ and type(value).__eq__ is object.__eq__:
        out[path] = Leaf("object", type_name, identity=id(value), ref=_weak(value))
    else:
        try:
            value_hash = hash(value)
        except TypeError:
            out[path] = Leaf("unhashable", type_name, value=_short_repr(value))
            return
        out[path] = Leaf("hashable", type_name, value=_short_repr(value), value_hash=value_hash,
                         ref=_weak(value), identity=id(value))


def _trace_type(value: Any) -> Any:
    """TF's own TraceType for an object implementing the tracing protocol (private API, guarded)."""
    try:
        from tensorflow.core.function.trace_type import from_value  # private: present in TF 2.16-2.21
    except ImportError:
        return None
    try:
        return from_value(value)
    except Exception:  # the object's protocol failed: TF itself will raise at the call
        return None


def summarize_call(function: Callable | None, args: tuple, kwargs: dict) -> dict[str, Leaf]:
    """Summaries of every argument named by parameter (`batch['mel']`, `lr`), defaults included.

    Defaults are part of TF's cache key (`f(x)` and `f(x, training=True)` share a trace when the default
    is True), so the call is bound to the signature and its defaults applied before summarising.
    """
    out: dict[str, Leaf] = {}
    bound = _bind(function, args, kwargs)
    if bound is None:
        names = argument_names(function, len(args))
        for index, value in enumerate(args):
            summarize_value(value, names[index], out)
        for key in sorted(kwargs):
            summarize_value(kwargs[key], key, out)
        return out
    for name, value in bound.arguments.items():
        parameter = bound.signature.parameters[name]
        if parameter.kind == parameter.VAR_POSITIONAL:
            for index, item in enumerate(value):
                summarize_value(item, f"{name}[{index}]", out)
        elif parameter.kind == parameter.VAR_KEYWORD:
            for key in sorted(value):
                summarize_value(value[key], key, out)
        else:
            summarize_value(value, name, out)
    return out


def _bind(function: Callable | None, args: tuple, kwargs: dict) -> inspect.BoundArguments | None:
    if function is None:
        return None
    try:
        bound = inspect.signature(function).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    bound.apply_defaults()
    return bound


def parameters_of(function: Callable | None) -> list[inspect.Parameter] | None:
    """The parameters of the called Python function (a bound method's without self), or None."""
    if function is None:
        return None
    try:
        return list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return None


def argument_names(function: Callable | None, count: int) -> list[str]:
    """Names of the first `count` positional parameters (varargs as `args[i]`)."""
    if function is None:
        return [f"args[{i}]" for i in range(count)]
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return [f"args[{i}]" for i in range(count)]
    names: list[str] = []
    for parameter in parameters:
        if parameter.kind == parameter.VAR_POSITIONAL:
            names.extend(f"{parameter.name}[{i}]" for i in range(count - len(names)))
            break
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            names.append(parameter.name)
    names.extend(f"args[{i}]" for i in range(len(names), count))
    return names[:count]


# ---- the function itself ----------------------------------------------------------------------

@dataclass(frozen=True)
class FunctionIdentity:
    qualname: str
    defined_at: str  # file:line
    code: Any  # the code object shared by every wrapping of the same Python function
    instance_ref: Any  # weakref to the bound instance (methods), or None
    instance_type: str | None
    instance_id: int | None


def unwrap_function(function: Any) -> tuple[Callable, Any]:
    """The innermost Python function of a (tf.function / decorator / bound) callable, and its instance."""
    instance = None
    current = getattr(function, "python_function", function)
    for _ in range(32):  # decorator chains are short; the bound guards a cycle
        if inspect.ismethod(current):
            target = current.__self__
            # tf.function methods bind a TfMethodTarget holding a weak reference to the instance
            instance = getattr(target, "target", target) if instance is None else instance
            current = current.__func__
            continue
        wrapped = getattr(current, "__wrapped__", None)
        if wrapped is None or wrapped is current:
            break
        current = wrapped
    current = getattr(current, "python_function", current)
    return current, instance


def function_identity(function: Any) -> FunctionIdentity:
    inner, instance = unwrap_function(function)
    code = getattr(inner, "__code__", None)
    qualname = getattr(inner, "__qualname__", None) or getattr(function, "__name__", None) or repr(function)
    defined_at = f"{_short_path(code.co_filename)}:{code.co_firstlineno}" if code is not None else "<unknown>"
    return FunctionIdentity(qualname, defined_at, code if code is not None else id(inner),
                            _weak(instance) if instance is not None else None,
                            type(instance).__name__ if instance is not None else None,
                            id(instance) if instance is not None else None)


_SKIP_PARTS = (os.sep + "tensorflow" + os.sep, os.sep + "keras" + os.sep, os.sep + "tf_keras" + os.sep,
               os.sep + "myxtts" + os.sep + "diagnostics" + os.sep, os.sep + "contextlib.py",
               os.sep + "runpy.py", os.sep + "absl" + os.sep)


def call_site(skip: int = 1) -> str:
    """file:line of the first frame outside TF, Keras and this package's diagnostics."""
    frame = sys._getframe(skip)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not any(part in filename for part in _SKIP_PARTS) and not filename.startswith("<frozen"):
            return f"{_short_path(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


def _short_path(filename: str) -> str:
    try:
        relative = os.path.relpath(filename)
    except ValueError:
        return filename
    return relative if not relative.startswith(".." + os.sep + "..") else filename


def dataclass_fix(type_name: str, value_type: type | None) -> str:
    if value_type is not None and dataclasses.is_dataclass(value_type):
        return (f"{type_name} is a plain @dataclass (eq=True sets __hash__ = None): declare it "
                f"@dataclass(frozen=True) and keep one instance alive, or pass its tensors as a dict")
    return (f"make {type_name} hashable by value (__eq__ and __hash__ over immutable fields) or give it "
            f"__tf_tracing_type__, or pass its tensors as a dict")

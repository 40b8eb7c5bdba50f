"""AST rules of `myxtts lint`: patterns that retrace or stall a TF input pipeline, each with a fix."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterator

_DATASET_METHODS = {"batch", "padded_batch", "shuffle", "prefetch", "repeat", "map", "filter", "interleave",
                    "cache", "take", "skip", "from_tensor_slices", "from_generator", "from_tensors", "range",
                    "zip", "unbatch", "rebatch", "bucket_by_sequence_length", "with_options", "apply"}
_PY_FUNCS = {"numpy_function", "py_function", "py_func"}
_SIDE_EFFECT_MODULES = {"random": "random", "time": "time"}


@dataclass(frozen=True)
class Finding:
    rule: str
    path: str
    line: int
    column: int
    message: str
    fix: str

    def format(self) -> str:
        return f"{self.path}:{self.line}:{self.column}: {self.rule}: {self.message} Fix: {self.fix}"


def dotted(node: ast.AST) -> str:
    """`tf.data.Dataset.map` for an attribute chain, '' for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def is_tf_function_expr(node: ast.AST) -> bool:
    """`tf.function`, `tensorflow.function`, `function` (imported from tensorflow) or a call of them."""
    if isinstance(node, ast.Call):
        node = node.func
    name = dotted(node)
    return name in ("tf.function", "tensorflow.function", "function", "tf.compat.v2.function")


def tf_function_call(node: ast.AST) -> ast.Call | None:
    """The decorator call `tf.function(...)` if `node` is one (for its keywords), else None."""
    return node if isinstance(node, ast.Call) and is_tf_function_expr(node.func) else None


def decorated_tf_function(node: ast.AST) -> ast.AST | None:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for decorator in node.decorator_list:
            if is_tf_function_expr(decorator):
                return decorator
    return None


def looks_like_dataset(node: ast.AST) -> bool:
    """A receiver that is plausibly a tf.data.Dataset (a chain of dataset methods, or a *dataset* name)."""
    while True:
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr in _DATASET_METHODS:
                return True
            node = node.func
        elif isinstance(node, ast.Attribute):
            if "data" in dotted(node).split(".") or "Dataset" in dotted(node):
                return True
            if "dataset" in node.attr.lower() or node.attr in ("ds",):
                return True
            node = node.value
        elif isinstance(node, ast.Name):
            return "dataset" in node.id.lower() or node.id in ("ds", "Dataset")
        else:
            return False


def keyword(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


def is_true(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def signature_specs(decorator: ast.AST) -> list[list | None] | None:
    """The shapes of `input_signature=[tf.TensorSpec([...]), ...]` (None for a non-literal entry)."""
    call = tf_function_call(decorator)
    if call is None:
        return None
    signature = keyword(call, "input_signature")
    if signature is None or not isinstance(signature.value, (ast.List, ast.Tuple)):
        return None
    specs: list[list | None] = []
    for element in signature.value.elts:
        shape = None
        if isinstance(element, ast.Call) and dotted(element.func).endswith("TensorSpec"):
            node = element.args[0] if element.args else (keyword(element, "shape").value
                                                         if keyword(element, "shape") else None)
            if isinstance(node, (ast.List, ast.Tuple)):
                shape = [d.value if isinstance(d, ast.Constant) else None for d in node.elts]
        specs.append(shape)
    return specs


def walk_body(node: ast.AST, skip_nested: bool = True) -> Iterator[ast.AST]:
    """ast.walk over a function body, not descending into nested function definitions."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        yield child
        if skip_nested and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(child))


class ModuleLinter(ast.NodeVisitor):
    """Runs every rule over one parsed module."""

    def __init__(self, path: str, tree: ast.Module):
        self.path = path
        self.tree = tree
        self.findings: list[Finding] = []
        self.functions: dict[str, ast.AST] = {}
        self.tf_functions: dict[str, ast.AST] = {}  # name -> decorator (or the tf.function(...) call)
        self.static_batch = False  # some tf.function signature fixes its batch size
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.setdefault(node.name, node)
                decorator = decorated_tf_function(node)
                if decorator is not None:
                    self.tf_functions[node.name] = decorator
                    specs = signature_specs(decorator) or []
                    if any(shape and isinstance(shape[0], int) for shape in specs):
                        self.static_batch = True
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and is_tf_function_expr(node.value.func):
                for target in node.targets:
                    name = dotted(target)
                    if name:
                        self.tf_functions[name.split(".")[-1]] = node.value

    def add(self, rule: str, node: ast.AST, message: str, fix: str) -> None:
        self.findings.append(Finding(rule, self.path, getattr(node, "lineno", 0), getattr(node, "col_offset", 0) + 1,
                                     message, fix))

    def run(self) -> list[Finding]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                self._check_call(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                decorator = decorated_tf_function(node)
                if decorator is not None:
                    self._check_tf_function_body(node, decorator)
            elif isinstance(node, (ast.For, ast.While, ast.AsyncFor)):
                self._check_loop(node)
        self.findings.sort(key=lambda f: (f.line, f.column, f.rule))
        return self.findings

    # ---- dataset calls --------------------------------------------------------------------------
    def _check_call(self, call: ast.Call) -> None:
        if not isinstance(call.func, ast.Attribute) or not looks_like_dataset(call.func.value):
            return
        method = call.func.attr
        if method == "map":
            if keyword(call, "num_parallel_calls") is None and len(call.args) < 2:
                self.add("map-sequential", call, "Dataset.map without num_parallel_calls runs one element at a "
                         "time.", "pass num_parallel_calls=tf.data.AUTOTUNE (and deterministic=False if order "
                         "does not matter).")
            if call.args:
                self._check_map_function(call, call.args[0])
        elif method in ("batch", "padded_batch") and self.static_batch:
            if not is_true(getattr(keyword(call, "drop_remainder"), "value", None)) and not (
                    len(call.args) >= (2 if method == "batch" else 4) and is_true(call.args[-1])):
                self.add("batch-remainder", call, f"Dataset.{method} without drop_remainder=True yields a "
                         "smaller last batch, but a tf.function in this module fixes the batch size in its "
                         "input_signature (a TypeError, or a retrace without the signature).",
                         f"pass drop_remainder=True to {method}().")

    def _check_map_function(self, call: ast.Call, function: ast.AST) -> None:
        body = function if isinstance(function, ast.Lambda) else self.functions.get(dotted(function).split(".")[-1])
        if body is None:
            return
        for node in walk_body(body, skip_nested=False):
            if isinstance(node, ast.Call) and dotted(node.func).split(".")[-1] in _PY_FUNCS and (
                    dotted(node.func).startswith(("tf.", "tensorflow.")) or dotted(node.func) in _PY_FUNCS):
                self.add("py-function-in-map", node, f"{dotted(node.func)} inside Dataset.map (line "
                         f"{call.lineno}) holds the GIL: the map runs one element at a time whatever "
                         "num_parallel_calls says.", "compute the features once into a cache (myxtts prepare), "
                         "or rewrite the function with TF ops (tf.io, tf.audio, tf.signal).")

    # ---- inside a tf.function -------------------------------------------------------------------
    def _check_tf_function_body(self, function: ast.AST, decorator: ast.AST) -> None:
        specs = signature_specs(decorator)
        parameters = [a.arg for a in function.args.args]
        if parameters and parameters[0] == "self":
            parameters = parameters[1:]
        static = {name: shape for name, shape in zip(parameters, specs or []) if shape is not None}
        for node in walk_body(function):
            if not isinstance(node, (ast.Call, ast.Subscript)):
                continue
            if isinstance(node, ast.Call):
                name = dotted(node.func)
                root = name.split(".")[0]
                if name == "print" or root in _SIDE_EFFECT_MODULES or name.startswith(("np.random.", "numpy.random.")):
                    what = "print" if name == "print" else name
                    self.add("python-side-effect", node, f"{what}() inside tf.function {function.name} runs once, "
                             "at trace time: its result is a constant of the graph (it neither varies per step nor "
                             "causes a retrace).", _side_effect_fix(what))
                continue
            # tf.shape(x)[i] where the signature makes dim i of x static
            value = node.value
            if isinstance(value, ast.Call) and dotted(value.func) in ("tf.shape", "tensorflow.shape") and value.args:
                argument = dotted(value.args[0])
                index = node.slice.value if isinstance(node.slice, ast.Constant) else None
                shape = static.get(argument)
                if shape is not None and isinstance(index, int) and -len(shape) <= index < len(shape) and isinstance(
                        shape[index], int):
                    self.add("dynamic-shape-of-static-dim", node, f"tf.shape({argument})[{index}] in "
                             f"{function.name}: the input_signature fixes that dim to {shape[index]}, so a dynamic "
                             "shape op only hides a constant from XLA and shape inference.",
                             f"use {argument}.shape[{index}] (a Python int at trace time).")

    # ---- loops --------------------------------------------------------------------------------
    def _check_loop(self, loop: ast.AST) -> None:
        makers = {name for name, node in self.functions.items() if self._creates_tf_function(node)}
        loop_names = _assigned_numeric_names(loop)
        for node in walk_body(loop):
            if not isinstance(node, ast.Call):
                continue
            name = dotted(node.func)
            if is_tf_function_expr(node.func) and node.args and self._called_in_loop(node, loop):
                self.add("tf-function-in-loop", node, "tf.function(...) created inside a loop: every wrapper has "
                         "its own trace cache, so every iteration traces again.",
                         "create the tf.function once, before the loop, and call it inside.")
            elif name.split(".")[-1] in makers and name.split(".")[-1] not in self.tf_functions:
                self.add("tf-function-in-loop", node, f"{name}() creates a tf.function and is called in a loop: a "
                         "new function (and a new trace) per call.", f"call {name}() once before the loop and "
                         "reuse the function it returns.")
            if name.split(".")[-1] in self.tf_functions and not is_tf_function_expr(node.func):
                for argument in list(node.args) + [k.value for k in node.keywords]:
                    if _is_python_scalar(argument, loop_names):
                        self.add("python-scalar-argument", argument, f"a Python {_kind(argument)} passed to "
                                 f"tf.function {name} inside a loop: each new value traces a new graph.",
                                 "pass a tensor (tf.constant(value) / tf.convert_to_tensor) or a tf.Variable.")

    def _called_in_loop(self, creation: ast.Call, loop: ast.AST) -> bool:
        """The new wrapper is called in the same loop (immediately, or through the plain name it is bound to).

        Storing one function per signature in a dict (`functions[key] = tf.function(fn, input_signature=..)`)
        is a deliberate table of compiled functions, not a retrace.
        """
        names: set[str] = set()
        for node in walk_body(loop):
            if isinstance(node, ast.Call) and node.func is creation:
                return True
            if isinstance(node, ast.Assign) and node.value is creation:
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names
                   for node in walk_body(loop))

    def _creates_tf_function(self, function: ast.AST) -> bool:
        """A function that returns a new tf.function per call. One that stores the wrapper into a cache entry
        (``self.functions[key] = tf.function(...)``) memoises it: calling it in a loop reuses the trace."""
        memoised = {id(node.value) for node in walk_body(function) if isinstance(node, ast.Assign)
                    and all(isinstance(target, ast.Subscript) for target in node.targets)}
        for node in walk_body(function):
            if isinstance(node, ast.Call) and is_tf_function_expr(node.func) and node.args \
                    and id(node) not in memoised:
                return True
            if decorated_tf_function(node) is not None:
                return True
        return False


def _side_effect_fix(what: str) -> str:
    if what == "print":
        return "use tf.print(...) to print at every step."
    if what.startswith(("np.random", "numpy.random", "random")):
        return "use tf.random (a stateless op with a seed, or a tf.random.Generator) inside the function."
    return "read the time outside the function, or use tf.timestamp() inside it."


def _assigned_numeric_names(loop: ast.AST) -> set[str]:
    """Loop targets over range() and names assigned Python arithmetic inside the loop body."""
    names: set[str] = set()
    if isinstance(loop, (ast.For, ast.AsyncFor)) and isinstance(loop.iter, ast.Call) and dotted(loop.iter.func) in (
            "range", "enumerate"):
        targets = loop.target.elts if isinstance(loop.target, ast.Tuple) else [loop.target]
        if dotted(loop.iter.func) == "range" or targets:
            names.add(dotted(targets[0]))
    for node in walk_body(loop):
        if isinstance(node, ast.Assign) and _is_python_scalar(node.value, names):
            names.update(dotted(t) for t in node.targets if dotted(t))
    return names


def _is_python_scalar(node: ast.AST, names: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, (ast.List, ast.ListComp)):
        return True
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.BinOp):
        return _is_python_scalar(node.left, names) and _is_python_scalar(node.right, names) or (
            _is_python_scalar(node.left, names) and isinstance(node.right, ast.Constant)) or (
            isinstance(node.left, ast.Constant) and _is_python_scalar(node.right, names))
    if isinstance(node, ast.UnaryOp):
        return _is_python_scalar(node.operand, names)
    return False


def _kind(node: ast.AST) -> str:
    return "list" if isinstance(node, (ast.List, ast.ListComp)) else "scalar"

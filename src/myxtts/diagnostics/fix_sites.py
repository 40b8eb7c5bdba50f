"""The source lines a retrace fix changes, read from the program's own files (`ast`, never executed).

A fix that cannot be patched in mechanically still names the line to change: for an object or a
`tf.function` created anew on every pass of a loop, the assignment inside the loop that creates it
(`model = Model()`), found from the call site the monitor recorded; for a Python number passed as an
argument, the call with that argument wrapped in `tf.constant(...)`; for a signature, whether the
function is decorated (`@tf.function(...)` at that line) or wrapped by a call (`tf.function(fn, ...)`).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_LIBRARIES = {"tf", "tensorflow", "np", "numpy", "keras"}  # calls into these are never the traced function


@dataclass(frozen=True)
class SourceSite:
    site: str  # file:line
    text: str  # the statement at that line, stripped (first line of it)


def split_site(site: str | None) -> tuple[Path, int] | None:
    """`dir/script.py:12` -> (path, 12) when the file exists, else None (`<unknown>`, a frozen module)."""
    if not site or ":" not in site:
        return None
    filename, _, line = site.rpartition(":")
    if not line.isdigit() or not Path(filename).is_file():
        return None
    return Path(filename), int(line)


@functools.lru_cache(maxsize=32)
def _parse(filename: str, modified: float) -> tuple[ast.Module, tuple[str, ...]] | None:
    try:
        source = Path(filename).read_text(encoding="utf-8")
        return ast.parse(source, filename=filename), tuple(source.splitlines())
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def _module(path: Path) -> tuple[ast.Module, tuple[str, ...]] | None:
    try:
        return _parse(str(path), path.stat().st_mtime)
    except OSError:
        return None


def source_line(site: str | None) -> str | None:
    located = split_site(site)
    parsed = _module(located[0]) if located else None
    if parsed is None or not 0 < located[1] <= len(parsed[1]):
        return None
    return parsed[1][located[1] - 1].strip()


def is_decorator_line(site: str | None) -> bool:
    """True when the line a function is defined at is a decorator (`co_firstlineno` of a decorated function)."""
    line = source_line(site)
    return bool(line) and line.startswith("@")


def _statement_at(tree: ast.AST, line: int) -> ast.stmt | None:
    """The innermost statement spanning `line` (the shortest one; the later on a tie)."""
    spanning = [node for node in ast.walk(tree)
                if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno)]
    return min(reversed(spanning), key=lambda node: (node.end_lineno or node.lineno) - node.lineno, default=None)


def _innermost_loop(tree: ast.AST, line: int) -> ast.stmt | None:
    loops = [node for node in ast.walk(tree) if isinstance(node, _LOOPS)
             and node.lineno < line <= (node.end_lineno or node.lineno)]
    return max(loops, key=lambda node: node.lineno, default=None)


def creation_site(call_site: str | None, function_names: set[str], parameter: str | None = None,
                  position: int | None = None) -> tuple[SourceSite, SourceSite | None] | None:
    """Where the object (or tf.function) used at `call_site` is created anew, and the loop around it.

    `parameter` / `position` name the argument that is new on every call; without them the callee itself is
    (a tf.function created in the loop, or a method of an instance created in the loop). Returned: the
    assignment inside the innermost loop enclosing the call that binds that name from a call
    (`model = Model()`, `compiled = tf.function(loss)`), else the call line itself (an argument such as
    `StepOptions(scale=2.0)` created in the call).
    """
    located = split_site(call_site)
    parsed = _module(located[0]) if located else None
    if parsed is None:
        return None
    tree, lines = parsed
    filename, line = call_site.rpartition(":")[0], located[1]
    statement = _statement_at(tree, line)
    if statement is None:
        return None
    call = _find_call(statement, function_names, parameter, position)
    if call is None:
        names = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    else:
        operand = _argument(call, parameter, position) if parameter is not None else _receiver(call.func)
        names = {operand.id} if isinstance(operand, ast.Name) else set()
    loop = _innermost_loop(tree, line)
    loop_site = SourceSite(f"{filename}:{loop.lineno}", lines[loop.lineno - 1].strip()) if loop else None
    assignments = sorted((node for node in ast.walk(loop) if isinstance(node, ast.Assign) and node.lineno <= line
                          and isinstance(node.value, (ast.Call, ast.Lambda))), key=lambda node: -node.lineno) \
        if loop is not None else []
    for node in assignments:  # the nearest assignment before the call wins
        if {t.id for t in node.targets if isinstance(t, ast.Name)} & names:
            return SourceSite(f"{filename}:{node.lineno}", lines[node.lineno - 1].strip()), loop_site
    return SourceSite(call_site, lines[statement.lineno - 1].strip()), loop_site


def wrapped_argument_call(call_site: str | None, function_names: set[str], parameter: str, position: int | None,
                          wrapper: str) -> str | None:
    """The call at `call_site` with one argument wrapped: `step(x, tf.constant(epoch, tf.int32))`.

    `wrapper` holds `{}` where the argument's source goes (without `{}` it replaces the argument). The call is
    the one on that line whose callee's last name is in `function_names` (else the first call passing that
    argument); None when not found.
    """
    located = _located_argument(call_site, function_names, parameter, position)
    if located is None:
        return None
    call_text, argument_text, start = located
    return call_text[:start] + wrapper.format(argument_text) + call_text[start + len(argument_text):]


def argument_source(call_site: str | None, function_names: set[str], parameter: str,
                    position: int | None) -> str | None:
    """The source of one argument of the call at `call_site` (`StepOptions(scale=2.0)`), or None."""
    located = _located_argument(call_site, function_names, parameter, position)
    return located[1] if located else None


def _located_argument(call_site: str | None, function_names: set[str], parameter: str,
                      position: int | None) -> tuple[str, str, int] | None:
    located = split_site(call_site)
    parsed = _module(located[0]) if located else None
    if parsed is None:
        return None
    tree, lines = parsed
    source = "\n".join(lines)
    statement = _statement_at(tree, located[1])
    call = _find_call(statement, function_names, parameter, position) if statement is not None else None
    argument = _argument(call, parameter, position) if call is not None else None
    if argument is None:
        return None
    call_text = ast.get_source_segment(source, call)
    argument_text = ast.get_source_segment(source, argument)
    if call_text is None or argument_text is None:
        return None
    start = _offset(lines, argument.lineno, argument.col_offset) - _offset(lines, call.lineno, call.col_offset)
    return call_text, argument_text, start


def _find_call(statement: ast.stmt, function_names: set[str], parameter: str | None,
               position: int | None) -> ast.Call | None:
    """The call of the traced function in a statement: by callee name, else the first that has the argument."""
    calls = sorted((node for node in ast.walk(statement) if isinstance(node, ast.Call)),
                   key=lambda node: (node.lineno, node.col_offset))
    calls = [call for call in calls if _root_name(call.func) not in _LIBRARIES]
    named = [call for call in calls if _callee_name(call) in function_names]
    if named:
        return named[0]
    if parameter is None:
        return calls[0] if calls else None
    return next((call for call in calls if _argument(call, parameter, position) is not None), None)


def _argument(call: ast.Call, parameter: str | None, position: int | None) -> ast.expr | None:
    keyword = next((k.value for k in call.keywords if k.arg == parameter), None)
    if keyword is not None:
        return keyword
    if position is not None and position < len(call.args) and \
            not any(isinstance(a, ast.Starred) for a in call.args[:position + 1]):
        return call.args[position]
    return None


def _root_name(expression: ast.expr) -> str | None:
    while isinstance(expression, (ast.Attribute, ast.Call, ast.Subscript)):
        expression = expression.func if isinstance(expression, ast.Call) else expression.value
    return expression.id if isinstance(expression, ast.Name) else None


def _receiver(function: ast.expr) -> ast.expr:
    """`model` of `model(x)` and of `model.step(x)`."""
    return function.value if isinstance(function, ast.Attribute) else function


def _callee_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def _offset(lines: tuple[str, ...], lineno: int, col: int) -> int:
    """Character offset of (line, column) in the source; columns are UTF-8 byte offsets in `ast`."""
    return sum(len(line) + 1 for line in lines[:lineno - 1]) + len(lines[lineno - 1].encode("utf-8")[:col].decode(
        "utf-8", errors="ignore"))

"""No module of myxtts uses an underscore name another myxtts module defines: each module's surface is its public names.

Pure AST (no import of myxtts or TensorFlow). A module's definitions are its module-level functions, classes and
assignments, the methods and class attributes of its classes, and the ``self._x`` / ``cls._x`` attributes it assigns.
A use is an attribute ``x._name`` on anything but ``self`` / ``cls`` whose name is defined in another myxtts module and
not in the using module itself (a class's helper called on another instance of it in its own module is fine), or a
``from M import _name`` out of a myxtts module. Third-party private names (``sys._getframe``, a namedtuple's
``_fields``, Keras' ``_flatten_layers``) are defined in no myxtts module and are out of scope here.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "myxtts"

# Third-party private names that share their spelling with a myxtts definition (the scan goes by name, not type), as
# (path under src/myxtts, name): what each one is.
THIRD_PARTY = {("espeak.py", "_handle"): "ctypes.CDLL's handle of the loaded library (elsewhere: a class's own file or handler)"}


def is_private(name: str) -> bool:
    """``_name``, not a dunder (``__init__``, ``__wrapped__``: Python's protocol names, public by design)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_paths() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def assigned_names(targets: list[ast.expr]) -> set[str]:
    """Plain names bound by assignment targets (``a = ...``, ``a, b = ...``)."""
    names = set()
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def scope_definitions(body: list[ast.stmt]) -> set[str]:
    """Names a module or class body binds directly: functions, classes, assignments (and those of classes inside)."""
    names = set()
    for statement in body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(statement.name)
        elif isinstance(statement, ast.ClassDef):
            names.add(statement.name)
            names |= scope_definitions(statement.body)  # methods and class attributes
        elif isinstance(statement, ast.Assign):
            names |= assigned_names(statement.targets)
        elif isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
            names |= assigned_names([statement.target])
        elif isinstance(statement, (ast.If, ast.Try)):  # definitions under a version check or an import guard
            for block in (statement.body, statement.orelse, *[handler.body for handler in
                                                              getattr(statement, "handlers", [])]):
                names |= scope_definitions(block)
    return names


def is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def definitions(tree: ast.Module) -> set[str]:
    """The underscore names a module defines (see the module docstring)."""
    names = scope_definitions(tree.body)
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute) and is_self(part.value):
                    names.add(part.attr)  # self._x = ...
    return {name for name in names if is_private(name)}


def imported_module(node: ast.ImportFrom, path: Path) -> str | None:
    """The module a ``from ... import`` reads, when it is a myxtts module (absolute or relative), else None."""
    if node.level:
        package = ["myxtts", *path.relative_to(PACKAGE).parent.parts]
        base = package[:len(package) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))
    if node.module and (node.module == "myxtts" or node.module.startswith("myxtts.")):
        return node.module
    return None


def foreign_private_uses() -> list[str]:
    """Every use of another myxtts module's underscore name, as ``path:line: name (what)``."""
    trees = {path: ast.parse(path.read_text(encoding="utf-8"), filename=str(path)) for path in module_paths()}
    defined_in: dict[str, set[str]] = defaultdict(set)  # underscore name -> the modules (relative paths) defining it
    own: dict[Path, set[str]] = {}
    for path, tree in trees.items():
        own[path] = definitions(tree)
        for name in own[path]:
            defined_in[name].add(relative(path))
    found: list[tuple[str, int, str]] = []  # (path, line, message): sorted at the end, file by file, line by line
    for path, tree in trees.items():
        where = relative(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and is_private(node.attr) and not is_self(node.value):
                if (node.attr in own[path] or node.attr not in defined_in
                        or (where, node.attr) in THIRD_PARTY):
                    continue
                homes = ", ".join(sorted(defined_in[node.attr]))
                found.append((where, node.lineno, f"{node.attr} ({ast.unparse(node)}; defined in {homes})"))
            elif isinstance(node, ast.ImportFrom) and (source := imported_module(node, path)) is not None:
                for alias in node.names:
                    if is_private(alias.name):
                        found.append((where, node.lineno, f"{alias.name} (from {source} import {alias.name})"))
    return [f"src/myxtts/{where}:{line}: {message}" for where, line, message in sorted(found)]


def test_no_module_uses_another_modules_private_names():
    uses = foreign_private_uses()
    assert not uses, ("A module uses an underscore name another myxtts module defines; make it public there (a "
                      "documented name) or move it where it is used:\n" + "\n".join(uses))


def test_the_scan_sees_a_foreign_use_and_ignores_own_and_third_party_names(tmp_path, monkeypatch):
    """The rule on a small package: another module's ``_helper`` is found, with file and line; a module's own
    ``_step`` on another instance, ``self._x`` and a third-party ``sys._getframe`` are not."""
    package = tmp_path / "myxtts"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "home.py").write_text("def _helper():\n    pass\n\n\nclass Thing:\n    def __init__(self):\n"
                                     "        self._state = 1\n\n    def _step(self, other):\n"
                                     "        return other._step(self)\n")
    (package / "sub" / "user.py").write_text("import sys\nfrom myxtts import home\nfrom ..home import _helper\n\n\n"
                                             "def use(thing):\n    sys._getframe()\n    home._helper()\n"
                                             "    return thing._state\n")
    monkeypatch.setitem(globals(), "PACKAGE", package)
    uses = foreign_private_uses()
    assert uses == ["src/myxtts/sub/user.py:3: _helper (from myxtts.home import _helper)",
                    "src/myxtts/sub/user.py:8: _helper (home._helper; defined in home.py)",
                    "src/myxtts/sub/user.py:9: _state (thing._state; defined in home.py)"], uses

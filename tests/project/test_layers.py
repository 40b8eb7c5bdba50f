"""Dependencies point one way: every import of a myxtts module names its own package or a lower layer.

Pure AST (nothing of myxtts or TensorFlow is imported). Every ``import myxtts.X`` / ``from myxtts.X import ...`` counts,
at the top of a file or inside a function (so a lazy import cannot hide an arrow pointing up), and so does
``importlib.import_module("myxtts.X")``. The layers are docs/architecture.md's "Layers" list, which must say the same.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "myxtts"

# lowest first: a package or top-level module of src/myxtts imports only itself and the names before it;
# ``myxtts`` is the package's own __init__ (``__version__``)
LAYERS = ["errors", "durable", "machine", "runtime",
          "myxtts",
          "config",
          "f0", "text_numbers", "espeak", "text", "audio", "spectral", "mel",
          "cache_files", "run_dir",
          "locks", "outputs",
          "diagnostics",
          "data",
          "model",
          "vocoder",
          "synthesis", "litert_voice",
          "evaluation",
          "training",
          "cli", "__main__"]
RANK = {name: rank for rank, name in enumerate(LAYERS)}


def layer_of_file(path: Path) -> str:
    """The layer of a file under src/myxtts: its package, its own name for a top-level module, ``myxtts`` for the
    package's __init__."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if len(parts) > 1:
        return parts[0]
    return "myxtts" if parts[0] == "__init__" else parts[0]


def layer_of_module(module: str, names: list[str] = ()) -> str | None:
    """The layer a dotted module name lies in (``from myxtts import espeak``: the names imported decide); None for a
    module outside myxtts."""
    parts = module.split(".")
    if parts[0] != "myxtts":
        return None
    if len(parts) > 1:
        return parts[1]
    # ``from myxtts import X``: a top-level module or package X, else a name of the package's __init__
    submodules = [name for name in names if name in RANK and name != "myxtts"]
    return submodules[0] if submodules else "myxtts"


def imports_of(tree: ast.Module) -> list[tuple[int, str, str | None, str]]:
    """(line, statement as written, imported layer, problem) of every myxtts import anywhere in ``tree``; problem is
    "" or why the import cannot be checked (a relative import)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names = [alias.name for alias in node.names]
            if node.level:
                found.append((node.lineno, f"from {'.' * node.level}{node.module or ''} import {', '.join(names)}",
                              None, "a relative import: write it from myxtts so its layer can be checked"))
                continue
            if node.module:
                for name in names if node.module == "myxtts" else [None]:
                    target = layer_of_module(node.module, [name] if name else [])
                    if target is not None:
                        found.append((node.lineno, f"from {node.module} import {', '.join(names)}", target, ""))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                target = layer_of_module(alias.name)
                if target is not None:
                    found.append((node.lineno, f"import {alias.name}", target, ""))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) and \
                isinstance(node.args[0].value, str):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called in ("import_module", "__import__"):
                target = layer_of_module(node.args[0].value)
                if target is not None:
                    found.append((node.lineno, f"{called}({node.args[0].value!r})", target, ""))
    return sorted(found, key=lambda item: item[0])


def violations(path: Path, source: str) -> list[str]:
    """One message per import of ``source`` (the file ``path``) that points at a higher layer or at no layer."""
    own = layer_of_file(path)
    where = path.relative_to(REPO).as_posix()
    found = []
    for line, statement, target, problem in imports_of(ast.parse(source)):
        if problem:
            found.append(f"{where}:{line}: `{statement}`: {problem}")
        elif target not in RANK:
            found.append(f"{where}:{line}: `{statement}` imports {target}, which is in no layer: add it to LAYERS "
                         "and docs/architecture.md")
        elif RANK[target] > RANK[own]:
            found.append(f"{where}:{line}: `{statement}`: layer {own} imports layer {target}, which lies above it "
                         "(LAYERS): move what it needs down, or this code up")
    return found


def test_every_package_and_module_has_a_layer():
    present = {layer_of_file(path) for path in PACKAGE.rglob("*.py")}
    assert sorted(present - set(RANK)) == [], "packages / modules in no layer: add them to LAYERS"
    assert sorted(set(RANK) - present) == [], "layers naming nothing under src/myxtts"
    assert len(RANK) == len(LAYERS)


def test_imports_point_down_or_within_the_package():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += violations(path, path.read_text(encoding="utf-8"))
    assert found == [], "imports against the layers (docs/architecture.md, Layers):\n" + "\n".join(found)


def test_the_check_sees_imports_inside_functions_and_names_both_layers():
    source = ("from myxtts.errors import InputError\n"
              "def f():\n"
              "    from myxtts.training import Trainer\n"
              "    import myxtts.synthesis.run_files\n"
              "    from myxtts import espeak, __version__\n"
              "    return importlib.import_module('myxtts.evaluation')\n")
    found = violations(PACKAGE / "outputs" / "markers.py", source)
    assert len(found) == 3 and all(message.startswith("src/myxtts/outputs/markers.py:") for message in found)
    assert ":3: `from myxtts.training import Trainer`: layer outputs imports layer training, which lies above" in \
        found[0]
    assert ":4: `import myxtts.synthesis.run_files`" in found[1]
    assert ":6: `import_module('myxtts.evaluation')`" in found[2]
    # the package's own __init__ and lower top-level modules are allowed; a relative import is refused
    assert violations(PACKAGE / "outputs" / "markers.py", "from . import names\n")[0].endswith(
        "a relative import: write it from myxtts so its layer can be checked")
    assert violations(PACKAGE / "data" / "cache.py", "from myxtts.data.mel_stats import MelStats\n") == []


def test_the_architecture_document_states_the_same_layers():
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    listed = []
    for line in section.splitlines():
        match = re.match(r"\d+\. (.+?):", line)
        if match:
            listed += re.findall(r"`([^`]+)`", match.group(1))
    assert listed == LAYERS

"""The package's modules import each other without cycles (read from the source, nothing imported)."""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "src"


def _import_graph() -> dict[str, set[str]]:
    """module -> the myxtts modules it imports anywhere in its file (top level or inside a function)."""
    files = {}
    for path in (SOURCE / "myxtts").rglob("*.py"):
        parts = path.relative_to(SOURCE).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for module, path in files.items():
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            # a package's own __init__ importing its submodules is how packages re-export; not an edge back
            imported |= {name for name in names if name in files and name != module
                         and not name.startswith(module + ".")}
        graph[module] = imported
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    graph = _import_graph()
    assert len(graph) > 50 and graph["myxtts.model.build"] >= {"myxtts.model.parallel_decoder", "myxtts.config"}
    assert _cycles(graph) == []


def _crossing(graph: dict[str, set[str]], source: str, target: str) -> set[tuple[str, str]]:
    return {(module, imported) for module, imports in graph.items() if module.startswith(source)
            for imported in imports if imported.startswith(target)}


def test_training_and_synthesis_do_not_import_each_other():
    """Both read runs through myxtts.run_dir (and myxtts.data.run_features) and build models through myxtts.model;
    neither imports the other. Where training runs a trained acoustic model (the listener that synthesises validation
    sentences, the teacher-forced mels a vocoder fine-tunes on), the commands hand it the synthesis code it runs. The
    layers (test_layers.py) keep it that way."""
    graph = _import_graph()
    assert _crossing(graph, "myxtts.synthesis", "myxtts.training") == set()
    assert _crossing(graph, "myxtts.training", "myxtts.synthesis") == set()
    assert graph["myxtts.cli.train_commands"] >= {"myxtts.synthesis", "myxtts.training"}
    assert graph["myxtts.training.warm_start"] >= {"myxtts.run_dir", "myxtts.data.run_features",
                                                   "myxtts.model.restore"}

"""`myxtts lint PATHS`: static checks for retracing and input-stall patterns in TF code."""

from __future__ import annotations

import ast
from pathlib import Path

from myxtts.diagnostics.lint_rules import Finding, ModuleLinter
from myxtts.errors import InputError

RULES = {
    "py-function-in-map": "tf.numpy_function / tf.py_function inside Dataset.map",
    "map-sequential": "Dataset.map without num_parallel_calls",
    "python-side-effect": "Python random / time / np.random / print inside a tf.function",
    "tf-function-in-loop": "a tf.function created inside a loop or a function called in a loop",
    "python-scalar-argument": "a Python scalar or list passed to a tf.function inside a loop",
    "dynamic-shape-of-static-dim": "tf.shape(x)[i] where the input_signature makes dim i static",
    "batch-remainder": "batch / padded_batch without drop_remainder=True feeding a fixed-batch signature",
}
NOQA = "myxtts: noqa"  # a line holding this comment is not reported


def lint_source(source: str, path: str = "<string>") -> list[Finding]:
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as err:
        return [Finding("syntax-error", path, err.lineno or 0, err.offset or 0, f"cannot parse: {err.msg}.",
                        "fix the syntax error.")]
    lines = source.splitlines()
    findings = ModuleLinter(path, tree).run()
    return [f for f in findings if not (0 < f.line <= len(lines) and NOQA in lines[f.line - 1])]


def python_files(paths: list[str | Path]) -> list[Path]:
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            files.extend(p for p in sorted(path.rglob("*.py")) if ".venv" not in p.parts and "__pycache__" not in p.parts)
        elif path.is_file():
            files.append(path)
        else:
            raise InputError(f"lint: path not found: {path}")
    return files


def lint_paths(paths: list[str | Path]) -> list[Finding]:
    findings: list[Finding] = []
    for file in python_files(paths):
        findings.extend(lint_source(file.read_text(encoding="utf-8"), str(file)))
    return findings

"""Run an unmodified script (or module) in-process under `explain_retracing`.

`run_script(["python", "train.py", "--flag"])` behaves like `python train.py --flag` (sys.argv,
sys.path[0], __main__) while every tf.function it calls is monitored.
"""

from __future__ import annotations

import os
import runpy
import sys
from dataclasses import dataclass
from pathlib import Path

from myxtts.diagnostics.events import RetraceError
from myxtts.diagnostics.retrace_monitor import RetraceMonitor
from myxtts.diagnostics.patching import explain_retracing


@dataclass
class RunResult:
    monitor: RetraceMonitor
    exit_code: int
    error: RetraceError | None = None  # strict mode: the first unexpected retrace


def _parse_command(command: list[str]) -> tuple[str, str, list[str]]:
    """-> (kind 'path' | 'module', target, argv) from `python script.py ...`, `script.py ...`, `python -m m`."""
    if not command:
        raise ValueError("explain-retracing needs a command, e.g. `myxtts explain-retracing -- python train.py`.")
    parts = list(command)
    if Path(parts[0]).name.startswith("python"):
        parts = parts[1:]
        while parts and parts[0].startswith("-") and parts[0] != "-m":
            parts = parts[1:]  # interpreter flags such as -u have no meaning in-process
    if not parts:
        raise ValueError(f"No script in command {' '.join(command)!r}.")
    if parts[0] == "-m":
        if len(parts) < 2:
            raise ValueError("`python -m` needs a module name.")
        return "module", parts[1], [parts[1]] + parts[2:]
    script = parts[0]
    if not Path(script).is_file():
        raise ValueError(f"Script not found: {script}")
    return "path", script, parts


def run_script(command: list[str], strict: bool = False, json_path: str | os.PathLike | None = None) -> RunResult:
    kind, target, argv = _parse_command(command)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = argv
    if kind == "path":
        sys.path.insert(0, str(Path(target).resolve().parent))
    exit_code, error = 0, None
    with explain_retracing(strict=strict, json_path=json_path) as monitor:
        try:
            if kind == "path":
                runpy.run_path(target, run_name="__main__")
            else:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
        except SystemExit as stop:
            exit_code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        except RetraceError as err:
            exit_code, error = 1, err
        finally:
            sys.argv, sys.path[:] = saved_argv, saved_path
    return RunResult(monitor, exit_code, error)

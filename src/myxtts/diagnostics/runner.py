"""Run an unmodified script (or module) in-process under `explain_retracing`.

`run_script(["python", "train.py", "--flag"])` behaves like `python train.py --flag` (sys.argv,
sys.path[0], __main__) while every tf.function it calls is monitored.  `explain-retracing --verify` runs the
same program twice: `seed` seeds Python, NumPy, TF (and Keras, when loaded) before each run so both see the
same randomness where the program sets none of its own, and `forget_program_modules` drops the modules the
first run imported from the program's own files, so the second run creates its tf.functions afresh.
"""

from __future__ import annotations

import logging
import os
import random
import re
import runpy
import sys
import sysconfig
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from myxtts.diagnostics.events import RetraceError
from myxtts.diagnostics.retrace_monitor import RetraceMonitor
from myxtts.diagnostics.patching import explain_retracing
from myxtts.errors import InputError


@dataclass
class RunResult:
    monitor: RetraceMonitor
    exit_code: int
    error: RetraceError | None = None  # strict mode: the first unexpected retrace
    error_text: str | None = None  # catch_errors: the exception that ended the program, with where it was raised
    imported_modules: list[str] = field(default_factory=list)  # modules first imported while the program ran
    # the program's uncaught exception as Python would print it (its own frames only), exit code 1 as Python's
    program_traceback: str | None = None


def _parse_command(command: list[str]) -> tuple[str, str, list[str]]:
    """-> (kind 'path' | 'module', target, argv) from `python script.py ...`, `script.py ...`, `python -m m`."""
    if not command:
        raise InputError("explain-retracing needs a command, e.g. `myxtts explain-retracing -- python train.py`.")
    parts = list(command)
    if Path(parts[0]).name.startswith("python"):
        parts = parts[1:]
        while parts and parts[0].startswith("-") and parts[0] != "-m":
            parts = parts[1:]  # interpreter flags such as -u have no meaning in-process
    if not parts:
        raise InputError(f"No script in command {' '.join(command)!r}.")
    if parts[0] == "-m":
        if len(parts) < 2:
            raise InputError("`python -m` needs a module name.")
        return "module", parts[1], [parts[1]] + parts[2:]
    script = parts[0]
    if not Path(script).is_file():
        raise InputError(f"Script not found: {script}")
    return "path", script, parts


def run_script(command: list[str], strict: bool = False, json_path: str | os.PathLike | None = None, *,
               hooks: Any = None, seed: int | None = None, catch_errors: bool = False,
               log_level: int = logging.WARNING) -> RunResult:
    """Run the program in-process under explain_retracing.

    `hooks` become the monitor's `call_hooks`. An exception of the program ends the run with exit code 1 (Python's
    for an uncaught exception) and ``error_text``; without ``catch_errors`` (the first run) also with
    ``program_traceback``, which the command prints as Python would; with it (the second run of --verify), quietly.
    """
    kind, target, argv = _parse_command(command)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    modules_before = set(sys.modules)
    sys.argv = argv
    if kind == "path":
        sys.path.insert(0, str(Path(target).resolve().parent))
    if seed is not None:
        seed_everything(seed)
    exit_code, error, error_text, program_traceback = 0, None, None, None
    monitor = RetraceMonitor(strict=strict, json_path=json_path, warmup=False, log_level=log_level)
    monitor.call_hooks = hooks
    with explain_retracing(monitor=monitor):
        try:
            if kind == "path":
                runpy.run_path(target, run_name="__main__")
            else:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
        except SystemExit as stop:
            exit_code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        except RetraceError as err:
            exit_code, error = 1, err
        except Exception as err:  # noqa: BLE001 - the program's own error, reported by the caller
            exit_code, error_text = 1, describe_error(err)
            if not catch_errors:  # as `python script.py` would end: its traceback, exit code 1
                program_traceback = program_traceback_text(err)
        finally:
            sys.argv, sys.path[:] = saved_argv, saved_path
    return RunResult(monitor, exit_code, error, error_text, sorted(set(sys.modules) - modules_before),
                     program_traceback)


def program_traceback_text(error: BaseException) -> str:
    """The traceback Python prints for an uncaught exception of the program, without the frames of this runner
    and runpy that ran it (the program's own frames first, as with `python script.py`)."""
    frames = error.__traceback__
    while frames is not None and (Path(frames.tb_frame.f_code.co_filename).name in ("runner.py", "runpy.py")
                                  or frames.tb_frame.f_code.co_filename.startswith("<frozen runpy")):
        frames = frames.tb_next
    return "".join(traceback.format_exception(type(error), error, frames))


def seed_everything(seed: int) -> None:
    """Seed Python's random, NumPy and TF's global generator (and Keras' when it is loaded)."""
    random.seed(seed)
    np.random.seed(seed)
    tf.random.set_seed(seed)
    keras = sys.modules.get("keras")
    utils = getattr(keras, "utils", None)
    if utils is not None and hasattr(utils, "set_random_seed"):
        utils.set_random_seed(seed)


def forget_program_modules(names: list[str]) -> list[str]:
    """Drop from sys.modules the modules the program imported from its own files (not the standard library,
    installed packages or myxtts' diagnostics), so a second run re-creates their tf.functions. Returns them."""
    library_roots = {os.path.realpath(sysconfig.get_paths()[key]) for key in ("stdlib", "platstdlib", "purelib",
                                                                               "platlib")}
    own = Path(__file__).resolve().parents[1]  # src/myxtts: diagnostics and the CLI stay loaded
    forgotten = []
    for name in names:
        filename = getattr(sys.modules.get(name), "__file__", None)
        if not filename:
            continue
        real = os.path.realpath(filename)
        if any(real.startswith(root + os.sep) for root in library_roots) or real.startswith(
                (str(own / "diagnostics") + os.sep, str(own / "cli") + os.sep)):
            continue
        del sys.modules[name]
        forgotten.append(name)
    return forgotten


def describe_error(error: BaseException) -> str:
    """`TypeError: message (at file:line)`: the message's last line (TF puts the cause there, after "in user
    code:" and the traced frames) and the innermost frame of the program's own files."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    message = lines[-1][:300] if lines else ""
    if message.startswith(type(error).__name__ + ":"):
        message = message[len(type(error).__name__) + 1:].strip()
    traced = re.findall(r'File "([^"]+)", line (\d+)', str(error))  # frames of a traced function's source
    frames = [(frame.filename, frame.lineno) for frame in traceback.extract_tb(error.__traceback__)] + \
        [(filename, int(line)) for filename, line in traced]
    own = [(filename, line) for filename, line in frames if "site-packages" not in filename and
           "myxtts/diagnostics" not in filename and "__autograph_generated" not in filename
           and not filename.startswith("<")]
    where = f" (at {own[-1][0]}:{own[-1][1]})" if own else ""
    return f"{type(error).__name__}: {message}{where}"

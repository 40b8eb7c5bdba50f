"""Helpers shared by the benchmarks: rounds on a shared machine, medians and ranges, the environment record.

The development machine has 2 CPU cores shared with other jobs, whose load changes by the minute. A mode
measured once, after another mode, compares two different loads: we saw ratios move by 30-50% between
runs. So benchmarks alternate their modes in rounds (A B A B ...), compare round i of one mode with round
i of another (both saw about the same load), and report medians and min-max ranges, never a single run.

This module imports no TensorFlow, so a parent process can use it to drive children that import
TensorFlow with their own ``TF_ENABLE_ONEDNN_OPTS`` (TensorFlow reads it once, at import).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

REPO = Path(__file__).resolve().parents[1]
ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"
# the user's own value (myxtts leaves the variable alone, myxtts.runtime): children get exactly this one, so they
# run in the environment a user's fresh process gets and report the same source
USER_ONEDNN_VALUE = os.environ.get(ONEDNN_VARIABLE)
RESULT_MARKER = "BENCHMARK_RESULT_JSON "  # a child prints its result on one line after this marker


def spread(values: Iterable[float]) -> dict[str, Any]:
    """Median, min, max and count of some per-round figures (None when there are none)."""
    values = [float(v) for v in values if v is not None]
    if not values:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def paired_ratios(numerator: Sequence[float | None], denominator: Sequence[float | None]) -> dict[str, Any]:
    """Round i of one mode over round i of another: the pairs saw about the same load on the shared cores."""
    ratios = [a / b for a, b in zip(numerator, denominator) if a is not None and b]
    return {**spread(ratios), "per_round": ratios}


def tensorflow_environment() -> dict[str, Any]:
    """TF version, oneDNN state and who set it (TF's default or the user), thread settings. Imports TensorFlow."""
    import tensorflow as tf

    from myxtts.runtime import describe_environment
    return {"tensorflow": tf.__version__, "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
            **describe_environment(),
            "intra_op_parallelism": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_parallelism": tf.config.threading.get_inter_op_parallelism_threads(),
            "gpus": [d.name for d in tf.config.list_physical_devices("GPU")]}


def emit_result(result: Any) -> None:
    """A child's result: one marked JSON line on stdout (TF and the model may print other lines)."""
    print(RESULT_MARKER + json.dumps(result), flush=True)


def child_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A child's environment: this one with the user's ``TF_ENABLE_ONEDNN_OPTS`` (not what myxtts set here),
    quiet TF logging, the checkout's src and benchmarks on the path, then ``extra``."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO / "src"), str(REPO / "benchmarks"), os.environ.get("PYTHONPATH")) if p)}
    env.pop(ONEDNN_VARIABLE, None)
    if USER_ONEDNN_VALUE is not None:
        env[ONEDNN_VARIABLE] = USER_ONEDNN_VALUE
    env.update(extra or {})
    return env


def run_child(arguments: list[str], environment: dict[str, str] | None = None, timeout: float = 900.0,
              nice: int = 5, python: str = sys.executable) -> dict[str, Any]:
    """Run ``python <arguments>`` niced, with extra environment variables; return its marked JSON result.
    ``python``: this interpreter, or another one (a peer's own environment).

    The variables go into the child's environment before it starts, so they are set before the child
    imports TensorFlow. On failure returns ``{"error": ...}`` with the tail of stderr instead of raising:
    one failed child should not lose the other rounds.
    """
    env = child_environment(environment)
    command = ["nice", "-n", str(nice), python, *arguments]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER):])
    return {"error": f"exit code {done.returncode}", "stderr_tail": done.stderr[-2000:]}


class PersistentChild:
    """A child process kept alive across rounds: it warms up once, then runs one round per request.

    For benchmarks whose warm-up (tracing + first runs of every compiled function, a minute or more per mode
    on 2 shared cores) costs more than the measurement: a fresh process per round would redo it every time.
    Protocol: the child prints a marked JSON line (``emit_result``) when ready, then reads one request line
    from stdin per round and answers with one marked JSON line. Its stderr goes to a file, so TensorFlow's
    logging can never fill a pipe and block it.
    """

    def __init__(self, arguments: list[str], environment: dict[str, str] | None = None, nice: int = 5,
                 stderr_path: str | None = None):
        env = child_environment(environment)
        self.stderr_path = stderr_path or os.devnull
        self._stderr = open(self.stderr_path, "w")
        self.process = subprocess.Popen(["nice", "-n", str(nice), sys.executable, *arguments], env=env, cwd=REPO,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                        text=True, bufsize=1)

    def read_result(self) -> dict[str, Any]:
        """The next marked JSON line; ``{"error": ...}`` if the child exits first."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(RESULT_MARKER):
                return json.loads(line[len(RESULT_MARKER):])
        return {"error": f"child exited (code {self.process.wait()}); stderr in {self.stderr_path}"}

    def request(self, line: str) -> dict[str, Any]:
        """Send one request line and wait for the child's answer."""
        if self.process.poll() is not None:
            return {"error": f"child already exited (code {self.process.returncode})"}
        assert self.process.stdin is not None
        self.process.stdin.write(line.rstrip("\n") + "\n")
        self.process.stdin.flush()
        return self.read_result()

    def close(self) -> None:
        """Ask the child to quit (closing stdin ends its request loop); kill it if it does not."""
        try:
            if self.process.stdin:
                self.process.stdin.close()
            self.process.wait(timeout=60)
        except (subprocess.TimeoutExpired, BrokenPipeError):
            self.process.kill()
        self._stderr.close()


def write_report(report: dict[str, Any], path: str | None) -> None:
    """Print the report as JSON and, with ``path``, also write it there."""
    text = json.dumps(report, indent=2)
    print(text)
    if path:
        with open(path, "w") as handle:
            handle.write(text + "\n")

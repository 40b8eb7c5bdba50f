"""`myxtts explain-retracing -- python script.py`: the classic scripts in tests/diagnostics/examples, run unmodified.

The explainer names the cause at the FIRST retrace (trace 2); TF's own warning needs five tracing calls.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from myxtts.cli import main

EXAMPLES = Path(__file__).parent / "examples"


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def tf_log():
    """Records of TF's own logger (where its 'triggered tf.function retracing' warning goes)."""
    logger = logging.getLogger("tensorflow")
    handler = _Capture()
    logger.addHandler(handler)
    yield handler.messages
    logger.removeHandler(handler)


def _run(tmp_path, script, *extra):
    json_path = tmp_path / f"{script}.jsonl"
    result = CliRunner().invoke(main, ["explain-retracing", "--json", str(json_path), *extra, "--", "python",
                                       str(EXAMPLES / f"{script}.py")])
    lines = [json.loads(line) for line in json_path.read_text().splitlines()] if json_path.exists() else []
    events = [line for line in lines if line.get("record") != "fix"]  # fix lines follow the events
    return result, [e for e in events if e["cause"] != "first_trace"]


def _tf_warning_index(messages):
    """How many of TF's tracing calls it took before TF warned (parsed from its own message)."""
    warnings = [m for m in messages if "triggered tf.function retracing" in m]
    return int(warnings[0].split(" out of")[0]) if warnings else None


@pytest.mark.parametrize("script, cause, path", [
    ("variable_length", "shape", "batch['tokens']"),
    ("python_scalar", "python_value", "learning_rate"),
    ("new_object", "new_object", "options"),
    ("function_in_loop", "new_function", None),
])
def test_classic_scripts_explained_at_first_retrace_while_tf_needs_five(tmp_path, tf_log, script, cause, path):
    result, events = _run(tmp_path, script)
    assert result.exit_code == 0, result.output
    first = events[0]
    assert first["trace"] == 2 and first["cause"] == cause and first["path"] == path
    assert first["call_site"].endswith(f"{script}.py:" + first["call_site"].rsplit(":", 1)[1])
    assert first["suggestion"]
    assert all(event["cause"] == cause for event in events)
    assert _tf_warning_index(tf_log) == 5  # TF's generic warning came only at the fifth tracing call
    assert "Retracing summary" in result.output and f"{cause}x{len(events)}" in result.output


def test_dtype_and_flag_scripts_name_their_cause(tmp_path, tf_log):
    result, events = _run(tmp_path, "numpy_float64")
    assert result.exit_code == 0
    assert [(e["cause"], e["path"], e["before"]["dtype"], e["after"]["dtype"]) for e in events] == [
        ("dtype", "features", "float32", "float64")]
    result, events = _run(tmp_path, "python_flag")
    assert [(e["cause"], e["path"], e["before"]["value"], e["after"]["value"]) for e in events] == [
        ("python_value", "apply_noise", True, False)]
    assert _tf_warning_index(tf_log) is None  # two traces: TF says nothing at all


def test_no_retrace_script_reports_nothing(tmp_path):
    result, events = _run(tmp_path, "no_retrace")
    assert result.exit_code == 0 and events == []
    assert "0 retraces" in result.output


def test_strict_stops_at_first_unexpected_retrace(tmp_path):
    result, events = _run(tmp_path, "python_scalar", "--strict")
    assert result.exit_code == 1
    assert len(events) == 1 and "Error (strict)" in result.output and "learning_rate" in result.output


def test_script_exit_code_and_argv_pass_through(tmp_path):
    result = CliRunner().invoke(main, ["explain-retracing", "--", "python", str(EXAMPLES / "exits_with_code.py"),
                                       "2.0"])
    assert result.exit_code == 3


def test_a_scripts_own_error_keeps_its_traceback_and_exit_code(tmp_path):
    """A ValueError of the user's script is the script's, not bad input to myxtts: its traceback as Python prints
    it (its own frames), exit code 1, and the retraces it made before are still explained."""
    script = tmp_path / "bad.py"
    script.write_text("import tensorflow as tf\n\n@tf.function\ndef double(x):\n    return x * 2\n\n"
                      "for n in (1, 2):\n    double(tf.zeros([n]))\n\ndef load():\n"
                      "    raise ValueError('the script own bug')\n\nload()\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["explain-retracing", "--", "python", str(script)])
    assert result.exit_code == 1, result.output
    assert "Traceback (most recent call last):" in result.output and "ValueError: the script own bug" in result.output
    assert f'File "{script}", line 13, in <module>' in result.output and "in load" in result.output
    assert "runpy" not in result.output and "\nError: the script own bug" not in result.output
    assert "double" in result.output and "retraces" in result.output  # still explained


def test_missing_script_is_a_clean_error(tmp_path):
    result = CliRunner().invoke(main, ["explain-retracing", "--", "python", str(tmp_path / "absent.py")])
    assert result.exit_code == 2 and "Script not found" in result.output

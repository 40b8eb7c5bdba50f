"""`explain-retracing --verify`: one fix per function from every traced call, applied in a second run and measured.

Each case is a small real TF script run unmodified through the CLI (twice: as written, then with the fixes);
the assertions are on traces counted by TF, outputs compared call by call, and the lines named. No timing.
"""

from __future__ import annotations

import os

import json
import textwrap
from pathlib import Path

from click.testing import CliRunner

from myxtts.cli import main
from myxtts.diagnostics.signature_plan import is_last_partial_batch, plan_arguments, render
from myxtts.diagnostics.trace_types import Leaf, Snapshot

EXAMPLES = Path(__file__).parent / "examples"


def _explain(tmp_path, script: Path, *options):
    json_path = tmp_path / "traces.jsonl"
    result = CliRunner().invoke(main, ["explain-retracing", "--json", str(json_path), *options, "--", "python",
                                       str(script)])
    lines = [json.loads(line) for line in json_path.read_text().splitlines()] if json_path.exists() else []
    events = [line for line in lines if line.get("record") != "fix" and line["cause"] != "first_trace"]
    return result, events, [line for line in lines if line.get("record") == "fix"]


def _script(tmp_path, source: str) -> Path:
    path = tmp_path / "program.py"
    path.write_text(textwrap.dedent(source))
    return path


def _line_of(path: Path, statement: str) -> int:
    return next(number for number, line in enumerate(path.read_text().splitlines(), 1) if line.strip() == statement)


def test_box_lists_one_signature_for_every_element_verified_from_six_traces_to_one(tmp_path):
    script = EXAMPLES / "box_lists.py"
    result, events, (fix,) = _explain(tmp_path, script, "--verify")
    assert result.exit_code == 0, result.output
    first = events[0]  # only element [1] changed so far, and already every element is loosened
    assert (first["trace"], first["cause"], first["path"]) == (2, "shape", "boxes[1]")
    assert "[tf.TensorSpec([None, 4], tf.float32)] * 2" in first["suggestion"]
    assert "batch" not in first["suggestion"] and "drop_remainder" not in first["suggestion"]
    assert fix["kind"] == "input_signature" and fix["mechanical"]
    assert ("input_signature=[\n    tf.TensorSpec([2, 8, 8, 3], tf.float32),\n"
            "    [tf.TensorSpec([None, 4], tf.float32)] * 2,\n    [tf.TensorSpec([None, 1], tf.float32)] * 2,\n]"
            in fix["code"])
    assert [line.split(" (")[0] for line in fix["varying"]] == ["boxes[i] axis 0", "labels[i] axis 0"]
    assert not any("batch" in line for line in fix["varying"])
    verification = fix["verification"]
    assert verification["status"] == "verified", verification
    assert (verification["traces_before"], verification["traces_after"]) == (6, 1)
    assert verification["outputs_equal"] is True and verification["calls_after"] == verification["calls_before"] == 6
    assert "VERIFIED: traces 6 -> 1, outputs equal on 6 call(s)" in result.output


def test_python_int_epoch_becomes_a_tensor_verified(tmp_path):
    script = _script(tmp_path, """\
        import tensorflow as tf

        features = tf.ones([4, 8])


        @tf.function
        def train_step(features, epoch):
            return tf.reduce_sum(features) * tf.cast(epoch + 1, tf.float32)


        for epoch in range(4):
            train_step(features, epoch)
        """)
    result, events, (fix,) = _explain(tmp_path, script, "--verify", "--strict")
    assert result.exit_code == 0, result.output  # strict: every fix verified
    assert fix["kind"] == "tensor_argument" and fix["mechanical"]
    assert "train_step(features, tf.constant(epoch, tf.int32))" in fix["code"]
    assert _absolute(fix["lines_to_change"]) == [f"{script}:{_line_of(script, 'train_step(features, epoch)')}"]
    verification = fix["verification"]
    assert verification["status"] == "verified" and verification["applied"] == "epoch as a tf.int32 tensor"
    assert (verification["traces_before"], verification["traces_after"], verification["outputs_equal"]) == (4, 1, True)


def test_model_rebuilt_in_the_loop_is_not_mechanically_applicable_and_names_the_line(tmp_path):
    script = _script(tmp_path, """\
        import tensorflow as tf


        class Model(tf.Module):
            def __init__(self):
                super().__init__()
                self.weight = tf.Variable(tf.ones([4, 2]))

            @tf.function
            def __call__(self, x):
                return tf.matmul(x, self.weight)


        x = tf.ones([3, 4])
        for step in range(3):
            model = Model()
            model(x)
        """)
    result, events, (fix,) = _explain(tmp_path, script, "--verify")
    assert result.exit_code == 0, result.output
    line = f"{script}:{_line_of(script, 'model = Model()')}"
    assert fix["kind"] == "create_once" and not fix["mechanical"]
    assert _absolute(fix["lines_to_change"]) == [line] and "`model = Model()`" in fix["text"]
    verification = fix["verification"]
    assert verification["status"] == "not mechanically applicable" and verification["traces_before"] == 3
    assert verification["traces_after"] is None  # nothing to apply: the program is not run again
    assert "NOT MECHANICALLY APPLICABLE: 3 traces" in result.output and Path(line).name in result.output
    assert "[explain-retracing] running the program again" not in result.output


def test_changing_rank_and_dtype_is_not_verified_and_strict_fails(tmp_path):
    script = _script(tmp_path, """\
        import tensorflow as tf


        @tf.function
        def total(x):
            return tf.reduce_sum(x)


        total(tf.ones([3]))
        total(tf.ones([3, 2]))
        total(tf.ones([3], tf.float64))
        total(tf.ones([3, 2], tf.float64))
        """)
    result, events, (fix,) = _explain(tmp_path, script, "--verify", "--strict")
    assert result.exit_code == 1, result.output
    assert fix["kind"] == "no_signature" and "no input_signature removes these retraces" in fix["text"]
    verification = fix["verification"]
    assert verification["status"] == "not verified"
    assert verification["traces_after"] > 1 and any(line.startswith("dtype at x") for line in
                                                    verification["still_retraced"])
    assert "NOT VERIFIED" in result.output and "still retraced: " in result.output


def test_without_verify_the_fixes_are_proposed_not_run(tmp_path):
    result, events, fixes = _explain(tmp_path, EXAMPLES / "python_scalar.py")
    assert result.exit_code == 0
    assert [fix["kind"] for fix in fixes] == ["tensor_argument"] and fixes[0]["verification"] is None
    assert "--verify applies each" in result.output


# ---- the plan behind the signatures (no TF run) -------------------------------------------------

def _tensor(shape, dtype="float32"):
    return Leaf("tensor", "EagerTensor", tuple(shape), dtype)


def _call(**arguments):
    leaves = {}
    for name, value in arguments.items():
        if isinstance(value, list):
            leaves[name] = Leaf("sequence", "list", length=len(value))
            leaves.update({f"{name}[{i}]": _tensor(shape) for i, shape in enumerate(value)})
        else:
            leaves[name] = _tensor(value)
    return Snapshot(leaves, {}, list(arguments))


def test_list_elements_of_one_role_are_generalised_together_and_different_roles_are_not():
    plan = plan_arguments([_call(boxes=[(3, 4), (3, 4)]), _call(boxes=[(3, 4), (5, 4)])])
    assert render(plan.roots[0]) == "[tf.TensorSpec([None, 4], tf.float32)] * 2"
    plan = plan_arguments([_call(pair=[(4, 8, 3), (4, 8, 1)]), _call(pair=[(2, 8, 3), (2, 8, 1)])])
    assert render(plan.roots[0]) == "[tf.TensorSpec([None, 8, 3], tf.float32), tf.TensorSpec([None, 8, 1], tf.float32)]"


def test_batch_only_for_the_shared_leading_dim_with_a_smaller_last_batch():
    assert is_last_partial_batch([_call(x=(4, 5), y=(4, 1)), _call(x=(2, 5), y=(2, 1))])
    assert not is_last_partial_batch([_call(x=(4, 5), y=(4, 1)), _call(x=(2, 5), y=(4, 1))])  # not shared
    assert not is_last_partial_batch([_call(x=(4, 5)), _call(x=(2, 5)), _call(x=(8, 5))])  # not the last batch


def test_the_fixed_box_program_traces_once():
    result = CliRunner().invoke(main, ["explain-retracing", "--", "python", str(EXAMPLES / "box_lists_fixed.py")])
    assert result.exit_code == 0, result.output
    assert "total: 1 traces, 0 retraces" in result.output and "Fixes: none needed" in result.output


def test_method_with_lazy_variables_and_an_object_argument(tmp_path):
    script = _script(tmp_path, """\
        import tensorflow as tf


        class Scorer(tf.Module):
            def __init__(self):
                super().__init__()
                self.weight = None

            @tf.function
            def score(self, x, training=False):
                if self.weight is None:
                    self.weight = tf.Variable(tf.ones([4, 1]))
                return tf.reduce_sum(tf.matmul(x, self.weight))


        class Config:
            scale = 2.0


        @tf.function
        def scaled(x, config):
            return tf.reduce_sum(x) * config.scale


        scorer, config = Scorer(), Config()
        for rows in (2, 3, 5, 2):
            scorer.score(tf.ones([rows, 4]))
            scaled(tf.ones([rows, 4]), config)
        """)
    result, events, fixes = _explain(tmp_path, script, "--verify", "--strict")
    assert result.exit_code == 0, result.output
    method, scaled = sorted(fixes, key=lambda fix: fix["function"])
    # the default training=False stays out of the signature; TF's variable-creation trace is the one extra
    assert method["kind"] == "input_signature" and "input_signature=[tf.TensorSpec([None, 4], tf.float32)]" in \
        method["code"]
    assert (method["verification"]["traces_before"], method["verification"]["traces_after"]) == (4, 2)
    assert "variable-creation" in method["verification"]["note"] and method["verification"]["status"] == "verified"
    # an object argument: no signature, so TF generalises the dims itself
    assert scaled["kind"] == "reduce_retracing" and "config is a Config object" in scaled["text"]
    assert (scaled["verification"]["traces_before"], scaled["verification"]["traces_after"]) == (3, 2)
    assert scaled["verification"]["status"] == "verified" and scaled["verification"]["outputs_equal"] is True


def test_a_fix_that_raises_is_not_verified_and_the_others_are_still_measured(tmp_path):
    script = _script(tmp_path, """\
        import tensorflow as tf


        @tf.function
        def scaled(x, epoch):
            return x * epoch  # a Python int adapts to float32; an int32 tensor does not


        @tf.function
        def step(x, learning_rate):
            return x * learning_rate


        for epoch in range(3):
            scaled(tf.ones([2]), epoch)
            step(tf.ones([2]), 0.1 * (epoch + 1))
        """)
    result, events, fixes = _explain(tmp_path, script, "--verify", "--strict")
    assert result.exit_code == 1, result.output
    by_function = {fix["function"]: fix["verification"] for fix in fixes}
    assert by_function["scaled"]["status"] == "not verified"
    assert by_function["scaled"]["reason"].startswith("with the fix the function raised TypeError")
    assert by_function["step"]["status"] == "verified"  # measured in a run without the fix that raised
    assert (by_function["step"]["traces_before"], by_function["step"]["traces_after"]) == (3, 1)


def _absolute(sites: list[str]) -> list[str]:
    """``file:line`` sites with the file made absolute (the report shortens paths near the working folder)."""
    return [f"{os.path.abspath(site.rsplit(':', 1)[0])}:{site.rsplit(':', 1)[1]}" for site in sites]

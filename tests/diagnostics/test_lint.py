"""`myxtts lint`: each rule on a positive and a negative example; the package itself is clean."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from myxtts.cli import main
from myxtts.diagnostics.lint import RULES, lint_paths, lint_source

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "myxtts"


def _rules(source: str) -> list[tuple[str, int]]:
    return [(f.rule, f.line) for f in lint_source(textwrap.dedent(source), "example.py")]


CASES = {
    "py-function-in-map": (
        """
        import tensorflow as tf
        def load(path):
            return tf.numpy_function(read, [path], tf.float32)
        dataset = tf.data.Dataset.from_tensor_slices(paths).map(load, num_parallel_calls=4)
        """, 4,
        """
        import tensorflow as tf
        def load(path):
            return tf.audio.decode_wav(tf.io.read_file(path)).audio
        dataset = tf.data.Dataset.from_tensor_slices(paths).map(load, num_parallel_calls=4)
        """),
    "map-sequential": (
        """
        import tensorflow as tf
        dataset = tf.data.Dataset.range(10).map(lambda x: x * 2)
        """, 3,
        """
        import tensorflow as tf
        dataset = tf.data.Dataset.range(10).map(lambda x: x * 2, num_parallel_calls=tf.data.AUTOTUNE)
        squares = list(map(lambda x: x * x, range(3)))
        labels = table.map(str)
        """),
    "python-side-effect": (
        """
        import random
        import tensorflow as tf
        @tf.function
        def step(x):
            return x + random.random()
        """, 6,
        """
        import random
        import tensorflow as tf
        noise = random.random()
        @tf.function
        def step(x):
            tf.print(x)
            return x + tf.random.uniform([])
        """),
    "tf-function-in-loop": (
        """
        import tensorflow as tf
        def loss(x):
            return x
        for step in range(10):
            compiled = tf.function(loss)
            compiled(x)
        """, 6,
        """
        import tensorflow as tf
        def loss(x):
            return x
        compiled = tf.function(loss)
        for step in range(10):
            compiled(x)
        table = {}
        for spec in signatures:  # one compiled function per signature, stored: deliberate
            table[str(spec)] = tf.function(loss, input_signature=[spec])
        """),
    "python-scalar-argument": (
        """
        import tensorflow as tf
        @tf.function
        def train_step(x, lr):
            return x * lr
        for step in range(10):
            lr = 0.1 * 0.9 ** step
            train_step(x, lr)
        """, 8,
        """
        import tensorflow as tf
        @tf.function
        def train_step(x, lr):
            return x * lr
        for step in range(10):
            train_step(x, tf.constant(0.1 * 0.9 ** step))
        """),
    "dynamic-shape-of-static-dim": (
        """
        import tensorflow as tf
        @tf.function(input_signature=[tf.TensorSpec([None, 80], tf.float32)])
        def step(mel):
            return tf.zeros([tf.shape(mel)[1]])
        """, 5,
        """
        import tensorflow as tf
        @tf.function(input_signature=[tf.TensorSpec([None, 80], tf.float32)])
        def step(mel):
            return tf.zeros([tf.shape(mel)[0], mel.shape[1]])
        """),
    "batch-remainder": (
        """
        import tensorflow as tf
        @tf.function(input_signature=[tf.TensorSpec([32, 80], tf.float32)])
        def step(mel):
            return mel
        dataset = tf.data.Dataset.from_tensor_slices(mels).batch(32)
        """, 6,
        """
        import tensorflow as tf
        @tf.function(input_signature=[tf.TensorSpec([32, 80], tf.float32)])
        def step(mel):
            return mel
        dataset = tf.data.Dataset.from_tensor_slices(mels).batch(32, drop_remainder=True)
        """),
}


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_positive_and_negative(rule):
    positive, line, negative = CASES[rule]
    assert (rule, line) in _rules(positive)
    assert [r for r, _ in _rules(negative) if r == rule] == []


def test_every_rule_has_a_case():
    assert set(CASES) == set(RULES)


def test_function_called_in_loop_that_builds_a_tf_function():
    source = """
    import tensorflow as tf
    def make_step():
        @tf.function
        def step(x):
            return x
        return step
    for epoch in range(3):
        make_step()(x)
    step = make_step()
    """
    assert ("tf-function-in-loop", 9) in _rules(source)
    assert [line for rule, line in _rules(source) if rule == "tf-function-in-loop"] == [9]


def test_memoised_tf_function_maker_called_in_loop_is_not_flagged():
    source = """
    import tensorflow as tf
    class Compiled:
        def function_for(self, key):
            if key not in self.functions:
                self.functions[key] = tf.function(self.body)
            return self.functions[key]
        def fresh(self, key):
            return tf.function(self.body)
        def warm_up(self, keys):
            for key in keys:
                self.function_for(key)(1)
                self.fresh(key)(1)
    """
    assert [line for rule, line in _rules(source) if rule == "tf-function-in-loop"] == [13]


def test_noqa_and_syntax_error():
    assert _rules("import tensorflow as tf\nd = tf.data.Dataset.range(3).map(f)  # myxtts: noqa\n") == []
    assert _rules("def broken(:\n")[0][0] == "syntax-error"


def test_cli_exit_codes_and_format(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import tensorflow as tf\nds = tf.data.Dataset.range(3).map(lambda x: x)\n")
    good = tmp_path / "good.py"
    good.write_text("x = 1\n")
    result = CliRunner().invoke(main, ["lint", str(bad)])
    assert result.exit_code == 1
    assert f"{bad}:2:" in result.output and "map-sequential" in result.output and "Fix:" in result.output
    assert CliRunner().invoke(main, ["lint", str(good)]).exit_code == 0
    assert CliRunner().invoke(main, ["lint", str(tmp_path / "missing.py")]).exit_code == 2


def test_example_scripts_are_flagged(tmp_path):
    examples = Path(__file__).parent / "examples"
    rules = {(Path(f.path).name, f.rule) for f in lint_paths([examples])}
    assert ("python_scalar.py", "python-scalar-argument") in rules
    assert ("function_in_loop.py", "tf-function-in-loop") in rules
    assert ("no_retrace.py", "python-side-effect") in rules


def test_package_source_is_clean():
    findings = lint_paths([PACKAGE])
    assert findings == [], "\n".join(f.format() for f in findings)


def test_signature_list_given_to_tf_function_in_loop_is_not_a_scalar_argument():
    # a table of compiled functions, one per signature, built in a loop: no finding at all
    found = _rules("""
        import tensorflow as tf

        def step(x):
            return x * 2

        table = {}
        for spec in [tf.TensorSpec([2, 3]), tf.TensorSpec([4, 3])]:
            function = tf.function(step, input_signature=[spec])  # a variable named like the decorator
            table[tuple(spec.shape)] = function
            table[("validate",) + tuple(spec.shape)] = tf.function(step, input_signature=[spec])
    """)
    assert found == []

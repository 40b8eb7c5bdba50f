"""`myxtts diagnose retracing` on the prepared bundled corpus (CliRunner): a clean setup passes; a
pipeline off its signatures, a step that retraces after warm-up and a bad config key fail with names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tensorflow as tf
from click.testing import CliRunner

from myxtts.cli import main
from myxtts.config import config_from_dict, load_config, save_config

from test_train import TINY_TINY  # the tiny preset cut to one layer per stack: warm-up traces every bucket's step


def write_config(prepared, path: Path, data=None, training=None) -> Path:
    raw = prepared.to_dict()
    raw["data"].update(corpus_path=str(prepared.corpus_path), cache_dir=str(prepared.cache_dir), **(data or {}))
    raw["model"].update(TINY_TINY)
    raw["training"].update({"summary_every": 0, "validate_every": 100, "checkpoint_every": 100, **(training or {})})
    save_config(config_from_dict(raw, base_dir=prepared.base_dir), path)
    return path


def invoke(*args: str):
    result = CliRunner().invoke(main, ["diagnose", "retracing", *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a crash is not a diagnosis (CliRunner would report it as exit code 1)
    return result


@pytest.mark.slow
def test_clean_setup_passes_with_one_trace_per_shape(prepared_cache, tmp_path):
    config = write_config(prepared_cache, tmp_path / "config.yaml", data={"num_buckets": 2})
    report_path = tmp_path / "report.json"
    result = invoke("--config", str(config), "--steps", "4", "--json", str(report_path))
    assert result.exit_code == 0, result.output
    assert "Retracing check: PASSED" in result.output and "retraces after warm-up: 0" in result.output
    report = json.loads(report_path.read_text())
    assert report["passed"] and report["retraces_after_warmup"] == 0 and report["events"] == []
    assert report["steps_run"] == 4 and len(report["step_times"]) == 4
    shapes = len(report["signatures"])
    assert shapes == 2
    train_steps = [name for name in report["functions"] if name.startswith("train_step[")]
    assert len(train_steps) == shapes  # one compiled train step per declared shape ...
    for info in report["functions"].values():  # ... each traced exactly once, at warm-up
        assert info["warmup_traces"] == 1 and info["after_warmup"] == 0 and info["traces"] == 1
    assert report["warmup_seconds"] > 0
    assert report["batches_checked"] >= 8 and sum(report["signatures_seen"].values()) == report["batches_checked"]
    assert not [f for f in report["findings"] if f["severity"] == "error"]
    stats = report["step_time"]
    assert stats["mean"] > 0 and stats["p95"] >= stats["mean"] * 0.5 and stats["cv"] >= 0
    assert "step time" in result.output and "ranked fixes" in result.output  # strict_retracing hint


def test_pipeline_off_its_signatures_names_key_expected_and_actual(prepared_cache, tmp_path, monkeypatch):
    from myxtts.data.pipeline import InputPipeline

    original = InputPipeline.signatures

    def signatures_with_wrong_mel(self):
        # declared mel frames 8 more than the bucket really pads to: every batch of bucket 0 is off
        out = original(self)
        mel = out[0]["mel"].shape.as_list()
        out[0] = {**out[0], "mel": tf.TensorSpec([mel[0], mel[1] + 8, mel[2]], tf.float32)}
        return out

    monkeypatch.setattr(InputPipeline, "signatures", signatures_with_wrong_mel)
    config = write_config(prepared_cache, tmp_path / "config.yaml", data={"num_buckets": 1})
    report_path = tmp_path / "report.json"
    result = invoke("--config", str(config), "--steps", "2", "--json", str(report_path))
    assert result.exit_code == 1, result.output
    report = json.loads(report_path.read_text())
    (finding,) = [f for f in report["findings"] if f["check"] == "pipeline_shapes"]
    declared = original(InputPipeline(load_config(config), "train"))[0]["mel"].shape.as_list()
    assert finding["key"] == "mel" and finding["severity"] == "error"
    assert f"{declared} float32" in finding["message"]  # the actual shape the pipeline yields
    assert f"{[declared[0], declared[1] + 8, declared[2]]} float32" in finding["message"]  # the declared one
    assert "'mel'" in result.output and "FAILED" in result.output
    assert report["steps_run"] == 0  # training is not started on a pipeline that breaks the dispatch


@pytest.mark.slow
def test_step_retracing_after_warmup_names_function_path_and_cause(prepared_cache, tmp_path, monkeypatch):
    from myxtts.training.shape_keys import describe_key, shape_key
    from myxtts.training.steps import TrainingSteps

    class PythonStepArgument:
        """The classic bug: the step counter passed as a Python int to a tf.function without input_signature."""

        def __init__(self, steps, function, spec):
            self.steps, self.function, self.spec = steps, function, spec

        def get_concrete_function(self, batch=None):  # warm-up traces it with step 0
            return self.function.get_concrete_function(self.spec if batch is None else batch, 0)

        def __call__(self, batch):  # 0 at warm-up and at the first step (warm-up restores it), 1 at the next
            return self.function(batch, int(self.steps.micro_step.numpy()))

    def build(self, signatures, wrap, validate_buckets=None):
        for index, spec in enumerate(signatures):
            key = shape_key(spec)
            if isinstance(getattr(self, "signatures", None), dict):  # warm-up runs each step on a batch of its spec
                self.signatures[key] = self.train_signatures[key] = spec
            label = f"bucket {index}: {describe_key(key)}"
            function = tf.function(lambda batch, step: self.train_graph(batch), autograph=False)  # as myxtts
            self.train_functions[key] = PythonStepArgument(self, wrap(function, f"train_step[{label}]"), spec)
            validate = tf.function(self.validate_graph, input_signature=[spec],  # myxtts: noqa (one per bucket)
                                   autograph=False)
            self.validate_functions[key] = wrap(validate, f"validate_step[{label}]")

    monkeypatch.setattr(TrainingSteps, "build", build)
    config = write_config(prepared_cache, tmp_path / "config.yaml", data={"num_buckets": 1})
    report_path = tmp_path / "report.json"
    result = invoke("--config", str(config), "--steps", "2", "--json", str(report_path))
    assert result.exit_code == 1, result.output
    report = json.loads(report_path.read_text())
    assert report["retraces_after_warmup"] == 1  # step 0 matches the warm-up trace, step 1 does not
    (event,) = report["events"]
    assert event["function"].startswith("train_step[bucket 0") and event["cause"] == "python_value"
    assert event["path"] == "step"
    assert "cause python_value at step" in result.output and "Retracing check: FAILED" in result.output
    (finding,) = [f for f in report["findings"] if f["check"] == "training"]
    assert finding["key"] == "step" and finding["fix"] == event["suggestion"]
    assert report["fixes"][0].startswith("step: ")  # the retrace's fix ranks first


def test_bad_config_key_exits_2_naming_the_key_path(prepared_cache, tmp_path):
    config = write_config(prepared_cache, tmp_path / "config.yaml")
    result = invoke("--config", str(config), "--set", "training.max_stepz=3")
    assert result.exit_code == 2 and "training.max_stepz" in result.output and "max_steps" in result.output


def test_config_check_flags_settings_that_defeat_compiled_steps(prepared_cache):
    from myxtts.data.pipeline import InputPipeline
    from myxtts.training.retracing_check import check_config

    training = prepared_cache.training.__class__(**{**prepared_cache.training.__dict__, "enable_eager_debug": True})
    cfg = prepared_cache.replace(training=training)
    pipeline = InputPipeline(cfg, "train")
    findings = check_config(cfg, pipeline.plan, pipeline.signatures())
    assert [f.key for f in findings if f.severity == "warning"] == ["training.enable_eager_debug"]
    assert not [f for f in findings if f.severity == "error"]  # the real plan: concrete sizes, static shapes
    dynamic = [{**s, "tokens": tf.TensorSpec([s["tokens"].shape[0], None], tf.int32)} for s in pipeline.signatures()]
    (error,) = [f for f in check_config(cfg, pipeline.plan, dynamic) if f.severity == "error"]
    assert "None dims" in error.message and "['tokens']" in error.message

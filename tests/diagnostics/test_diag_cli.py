"""`myxtts diagnose pipeline` on the prepared bundled corpus (CliRunner)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from myxtts.cli import main
from myxtts.config import save_config


def test_diagnose_pipeline_against_targets(prepared_cache, tmp_path):
    config_path = tmp_path / "config.yaml"
    save_config(prepared_cache, config_path)
    report_path = tmp_path / "report.json"
    fed = CliRunner().invoke(main, ["diagnose", "pipeline", "--config", str(config_path), "--steps", "10",
                                    "--target-steps-per-second", "0.5", "--json", str(report_path)])
    assert fed.exit_code == 0, fed.output
    assert "producer alone" in fed.output and "fed by this pipeline" in fed.output
    report = json.loads(report_path.read_text())
    assert report["producer_batches_per_second"] > 0.5 and report["py_functions"] == []
    assert report["final_prefetch"] is True
    starved = CliRunner().invoke(main, ["diagnose", "pipeline", "--config", str(config_path), "--steps", "10",
                                        "--model-flops", "1e12", "--device-peak-tflops", "1e6"])
    assert starved.exit_code == 1 and "NOT fed" in starved.output


def test_diagnose_pipeline_without_cache_is_a_clean_error(make_config, tmp_path):
    config_path = tmp_path / "config.yaml"
    save_config(make_config(), config_path)
    result = CliRunner().invoke(main, ["diagnose", "pipeline", "--config", str(config_path)])
    assert result.exit_code == 2 and "myxtts prepare" in result.output

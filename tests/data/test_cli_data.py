"""`myxtts prepare` and `myxtts stats` through click's CliRunner: output and exit codes."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from myxtts.cli import main


def write_config(tmp_path: Path, corpus: Path, **data) -> Path:
    path = tmp_path / "config.yaml"
    raw = {"data": {"corpus_path": str(corpus), "cache_dir": "cache", "validation_size": 1, "num_buckets": 3,
                    "batch_frames": 2400, "batch_size": 8, **data}}
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def small_corpus(corpus_copy: Path, lines: int = 6) -> Path:
    metadata = corpus_copy / "metadata.csv"
    kept = metadata.read_text(encoding="utf-8").splitlines()[:lines]
    kept.append("broken line without fields")
    metadata.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return corpus_copy


def test_prepare_then_stats(tmp_path: Path, corpus_copy: Path) -> None:
    config = write_config(tmp_path, small_corpus(corpus_copy))
    runner = CliRunner()
    result = runner.invoke(main, ["prepare", "--config", str(config), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "accepted: 6 utterances" in result.output and "wrong_field_count: 1" in result.output
    assert "rejected.csv" in result.output and (tmp_path / "cache" / "manifest.json").is_file()
    assert "6 processed (6 new, 0 changed" in result.output and "clips/s" in result.output
    again = runner.invoke(main, ["prepare", "--config", str(config), "--no-progress", "--workers", "1"])
    assert again.exit_code == 0 and "up to date" in again.output and "reused" in again.output
    changed = runner.invoke(main, ["prepare", "--config", str(config), "--no-progress", "--set", "audio.fmax=7000"])
    assert changed.exit_code == 2 and "audio.fmax: 8000.0 -> 7000" in changed.output and "--rebuild" in \
        changed.output and "never replaces it unasked" in changed.output, changed.output  # the other cache is kept
    changed = runner.invoke(main, ["prepare", "--config", str(config), "--no-progress", "--set", "audio.fmax=7000",
                                   "--rebuild"])
    assert changed.exit_code == 0 and "feature hash changed" in changed.output and "audio.fmax" in changed.output
    stats = runner.invoke(main, ["stats", "--config", str(config), "--set", "audio.fmax=7000", "--shapes", "2"])
    assert stats.exit_code == 0, stats.output
    assert "p99" in stats.output and "suggested data.max_mel_frames" in stats.output
    assert "buckets: 2 shape(s)" in stats.output or "buckets: 1 shape(s)" in stats.output
    as_json = runner.invoke(main, ["stats", "--config", str(config), "--set", "audio.fmax=7000", "--json"])
    assert as_json.exit_code == 0 and '"mel_frames"' in as_json.output


def test_stats_on_a_stale_cache_says_to_prepare(tmp_path: Path, corpus_copy: Path) -> None:
    config = write_config(tmp_path, small_corpus(corpus_copy))
    result = CliRunner().invoke(main, ["stats", "--config", str(config)])
    assert result.exit_code == 2 and "myxtts prepare" in result.output


def test_bad_config_exits_2_naming_the_key(tmp_path: Path, bundled_corpus: Path) -> None:
    config = write_config(tmp_path, bundled_corpus, batch_sise=4)
    for command in ("prepare", "stats"):
        result = CliRunner().invoke(main, [command, "--config", str(config)])
        assert result.exit_code == 2 and "data.batch_sise" in result.output and "batch_size" in result.output
    bad_value = write_config(tmp_path, bundled_corpus, min_duration=-1.0)
    result = CliRunner().invoke(main, ["prepare", "--config", str(bad_value)])
    assert result.exit_code == 2 and "data.min_duration" in result.output


def test_missing_corpus_exits_2(tmp_path: Path) -> None:
    config = write_config(tmp_path, tmp_path / "nowhere")
    result = CliRunner().invoke(main, ["prepare", "--config", str(config), "--no-progress"])
    assert result.exit_code == 2 and "metadata.csv not found" in result.output


def test_data_service_refuses_to_listen_on_every_interface_unless_told():
    """TensorFlow's tf.data service servers have no bind address: without the explicit flag nothing starts, and the
    refusal says what a reachable dispatcher allows."""
    from click.testing import CliRunner

    from myxtts.cli import main

    result = CliRunner().invoke(main, ["data-service", "dispatcher", "--port", "0"])
    assert result.exit_code == 2
    assert "every network interface" in result.output and "--listen-on-all-interfaces" in result.output
    assert "listening" not in result.output  # nothing was started

"""One owner for the run directory: only ``myxtts.run_dir`` spells a run file's name (read from the source)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from myxtts.run_dir import RunDir, RunError, checkpoint_step, latest_checkpoint

SRC = Path(__file__).resolve().parents[2] / "src" / "myxtts"
# other layouts that reuse a name: the prepared cache's vocabulary, the SavedModel's assets
OWN_LAYOUTS = {("cache_files.py", "vocab.json"), ("synthesis/export.py", "vocab.json"),
               ("synthesis/export.py", "mel_stats.json")}


def test_no_module_but_run_dir_names_a_run_file():
    # "listening" is also a metrics split, "vocoder" (a run's own vocoder) also a record's key and a config section
    names = {value for key, value in vars(RunDir).items() if key.isupper()} - {"listening", "vocoder"}
    assert {"config.yaml", "checkpoints", "mel_stats.json", "run.lock", "vocoder.json"} <= names
    spelled = []
    for path in SRC.rglob("*.py"):
        relative = path.relative_to(SRC).as_posix()
        if relative == "run_dir.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in names and (relative, node.value) not in OWN_LAYOUTS:
                spelled.append(f"{relative}:{node.lineno} {node.value!r}")
    assert not spelled, spelled


def test_newest_checkpoint_and_its_step(tmp_path):
    import tensorflow as tf

    run = RunDir(tmp_path / "run")
    with pytest.raises(RunError, match="Run directory not found"):
        latest_checkpoint(run.path)
    run.path.mkdir()
    with pytest.raises(RunError, match="train first .* or pass --checkpoint"):
        run.latest_checkpoint()
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), str(run.checkpoints), 3)
    for step in (5, 12):
        manager.save(checkpoint_number=step)
    assert run.has_checkpoint() and checkpoint_step(run.latest_checkpoint()) == 12
    assert checkpoint_step("no-number") is None and run.checkpoint_bytes() > 0

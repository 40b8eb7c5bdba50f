"""Runs and caches cannot be trampled: real processes on one run directory and on one cache, a prepare
killed mid-way and rerun, and a CLI whose stderr carries no TensorFlow start-up chatter."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from myxtts.locks import (CACHE_READ_LOCK, DirectoryBusyError, DirectoryLock, Holder, lock_cache_for_reading,
                          lock_run_directory)
from myxtts.runtime import is_startup_chatter

REPO_ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "myxtts"]
CHATTER_MARKERS = ("absl::InitializeLog", "oneDNN custom operations", "cpu_feature_guard")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "MYXTTS_TF_LOG")}
    return {**env, **extra}


def _wait_for(predicate, seconds: float = 120.0, what: str = "") -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _journal_lines(cache_dir: Path) -> int:
    path = cache_dir / "prepare-journal.jsonl"
    if not path.is_file():
        return 0
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines()[1:] if line.endswith("}"))


def _list_corpus(tmp_path: Path, bundled_corpus: Path, copies: int) -> Path:
    """A list-layout corpus of the bundled clips, each listed ``copies`` times (symbolic links)."""
    wavs = tmp_path / "wavs"
    wavs.mkdir(exist_ok=True)
    lines = []
    for row in (bundled_corpus / "metadata.csv").read_text(encoding="utf-8").splitlines():
        clip_id, text = row.split("|")[0], row.split("|")[-1]
        for copy in range(copies):
            link = wavs / f"{clip_id}-{copy}.wav"
            if not link.exists():
                link.symlink_to(bundled_corpus / "wavs" / f"{clip_id}.wav")
            lines.append(f"wavs/{link.name}|{text}|ljs")
    path = tmp_path / "list.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _prepare_args(corpus: Path, cache_dir: Path, workers: int = 1) -> list[str]:
    return [*CLI, "prepare", "--config", str(REPO_ROOT / "configs" / "mini.yaml"), "--no-progress",
            "--workers", str(workers), "--set", f"data.corpus_path={corpus}", "--set", "data.corpus_format=list",
            "--set", f"data.cache_dir={cache_dir}"]


# ---- the locks themselves -------------------------------------------------------------------------

def test_holder_is_recorded_and_a_second_writer_is_refused(tmp_path):
    lock = lock_run_directory(tmp_path / "run")
    record = Holder.read(tmp_path / "run" / "run.lock")
    assert record is not None and record.pid == os.getpid() and record.host and record.started
    with pytest.raises(DirectoryBusyError, match="being written by another process"):
        lock_run_directory(tmp_path / "run")  # another open file description: flock refuses it
    lock.release()
    assert (tmp_path / "run" / "run.lock").read_text() == ""  # released: no record of a holder left
    lock_run_directory(tmp_path / "run").release()


def test_a_reader_waits_for_a_rebuild_and_is_told_why(tmp_path):
    rebuilding = DirectoryLock(tmp_path, CACHE_READ_LOCK).acquire()  # what prepare holds while it writes
    said: list[str] = []
    acquired = threading.Event()

    def reader() -> None:
        lock_cache_for_reading(tmp_path, said.append).release()
        acquired.set()

    thread = threading.Thread(target=reader)
    thread.start()
    _wait_for(lambda: said, 30, "the reader's message")
    assert not acquired.is_set() and "being rebuilt by `myxtts prepare`" in said[0]
    rebuilding.release()
    thread.join(30)
    assert acquired.is_set()


def test_startup_chatter_lines_are_recognised():
    assert is_startup_chatter("WARNING: All log messages before absl::InitializeLog() is called are written to "
                              "STDERR\n")
    assert is_startup_chatter("I0000 00:00:1795513443.777744   23042 port.cc:153] oneDNN custom operations are on.")
    assert not is_startup_chatter("Traceback (most recent call last):")
    assert not is_startup_chatter("E0000 00:00:1795513443.777744   23042 op_kernel.cc:1] Out of memory")


# ---- real processes ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_second_train_on_a_workdir_fails_naming_the_first_and_ctrl_c_stops_the_first_at_a_checkpoint(
        prepared_cache, tmp_path):
    """(That kill -9 leaves no stale lock: test_train_resume resumes into the directory of a run killed so.)"""
    from test_train import trainer_config, write_config

    # the trainer tests' smallest model on one bucket: what is under test is the lock and the stop, not the model
    config = write_config(trainer_config(prepared_cache, data={"num_buckets": 1}, training={
        "max_steps": 100000, "log_every": 1, "validate_every": 100000, "summary_every": 0}), tmp_path / "config.yaml")
    workdir = tmp_path / "run"
    first_log = tmp_path / "first.log"
    with open(first_log, "w") as log:
        # Ctrl-C as in a terminal: pytest-xdist's workers ignore SIGINT, and an ignored signal is inherited (and,
        # by design, stays ignored by myxtts), so the child starts with the default disposition
        first = subprocess.Popen([*CLI, "train", "--config", str(config), "--workdir", str(workdir),
                                  "--no-progress"], stdout=log, stderr=subprocess.STDOUT, env=_env(),
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _wait_for(lambda: Holder.read(workdir / "run.lock") is not None or first.poll() is not None, 180,
                  "the first training to lock its run directory")
        assert first.poll() is None, first_log.read_text()
        second = subprocess.run([*CLI, "train", "--config", str(config), "--workdir", str(workdir), "--resume",
                                 "--no-progress"], capture_output=True, text=True, env=_env(), timeout=300)
        assert second.returncode == 2, second.stderr
        assert f"pid {first.pid}" in second.stderr and "being written by another process" in second.stderr
        assert "--workdir" in second.stderr  # what to do
        assert not any(marker in second.stderr for marker in CHATTER_MARKERS), second.stderr  # a quiet start
        assert first.poll() is None  # the first one goes on
        # Ctrl-C once it trains: the step running finishes, a checkpoint is saved there, the exit status says so
        _wait_for(lambda: _train_steps(workdir) or first.poll() is not None, 180, "the first training step")
        first.send_signal(signal.SIGINT)
        status = first.wait(120)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(60)
    output = first_log.read_text()
    assert status == -signal.SIGINT, output[-3000:]  # died by SIGINT after saving: a shell sees 130 and stops too
    assert "stopping after this step" in output and "SIGINT at step " in output, output[-3000:]
    assert "stopped: interrupted (SIGINT)" in output, output[-3000:]  # the summary says so
    step = int(output.split("SIGINT at step ")[1].split(":")[0])
    assert step >= max(_train_steps(workdir))
    saved = [int(p.name[len("ckpt-"):-len(".index")]) for p in (workdir / "checkpoints").glob("ckpt-*.index")]
    assert max(saved) == step, saved  # the newest checkpoint is the step it stopped at
    lock = lock_run_directory(workdir)  # released on the way out
    lock.release()


def _train_steps(workdir: Path) -> list[int]:
    """Steps of the training records in a run's metrics.jsonl (complete lines only)."""
    path = workdir / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True) if path.is_file() else []
    return [record["step"] for record in (json.loads(line) for line in lines if line.endswith("\n"))
            if record["split"] == "train"]


@pytest.mark.slow
def test_two_prepares_on_one_cache_the_second_waits_then_reuses(bundled_corpus, tmp_path):
    corpus, cache_dir = _list_corpus(tmp_path, bundled_corpus, copies=2), tmp_path / "cache"
    first = subprocess.Popen(_prepare_args(corpus, cache_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=_env())
    _wait_for(lambda: _journal_lines(cache_dir) >= 2 or first.poll() is not None, 180, "the first prepare's clips")
    os.kill(first.pid, signal.SIGSTOP)  # frozen while it holds the lock: the second one must meet it
    try:
        second = subprocess.Popen(_prepare_args(corpus, cache_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=_env())
        waiting = second.stdout.readline()
        assert waiting.startswith("waiting: another `myxtts prepare` is writing the cache"), waiting
        assert f"pid {first.pid}" in waiting
    finally:
        os.kill(first.pid, signal.SIGCONT)
    first_out, first_err = first.communicate(timeout=300)
    second_out, second_err = second.communicate(timeout=300)
    assert first.returncode == 0 and second.returncode == 0, first_err + second_err
    assert "Built cache" in first_out and "clips: 64 processed" in first_out
    assert "Cache is up to date" in second_out  # it waited, then found the first one's work
    for err in (first_err, second_err):
        assert not any(marker in err for marker in CHATTER_MARKERS), err


@pytest.mark.slow
def test_prepare_refuses_to_rebuild_a_cache_a_training_reads(prepared_cache, tmp_path):
    from myxtts.config import save_config

    config = tmp_path / "config.yaml"
    save_config(prepared_cache, config)
    manifest = (prepared_cache.cache_dir / "manifest.json").read_bytes()
    with lock_cache_for_reading(prepared_cache.cache_dir):  # what a running training holds
        result = subprocess.run([*CLI, "prepare", "--config", str(config), "--force", "--no-progress"],
                                capture_output=True, text=True, env=_env(), timeout=300)
    assert result.returncode == 2
    assert "being read by a training" in result.stderr and f"pid {os.getpid()}" in result.stderr
    assert (prepared_cache.cache_dir / "manifest.json").read_bytes() == manifest  # nothing touched


@pytest.mark.slow
def test_prepare_killed_midway_keeps_finished_clips_and_equals_a_clean_build(bundled_corpus, tmp_path):
    """Also: with MYXTTS_TF_LOG=1 the TensorFlow start-up lines a default start hides (the tests above) show."""
    from myxtts.config import load_config
    from myxtts.data.cache import read_utterance
    from myxtts.data.prepare import prepare

    corpus, cache_dir = _list_corpus(tmp_path, bundled_corpus, copies=1), tmp_path / "cache"
    with open(tmp_path / "killed.err", "wb") as errors:
        killed = subprocess.Popen(_prepare_args(corpus, cache_dir), stdout=subprocess.DEVNULL, stderr=errors,
                                  env=_env(MYXTTS_TF_LOG="1"))
    _wait_for(lambda: _journal_lines(cache_dir) >= 6 or killed.poll() is not None, 180, "six finished clips")
    os.kill(killed.pid, signal.SIGSTOP)
    finished = _journal_lines(cache_dir)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(60)
    assert 6 <= finished < 32, "the prepare ended before it could be killed mid-way"
    assert "absl::InitializeLog" in (tmp_path / "killed.err").read_text(errors="replace")
    records = [json.loads(line) for line in (cache_dir / "prepare-journal.jsonl").read_text().splitlines()[1:]
               if line.endswith("}")]
    damaged = cache_dir / records[0]["file"]
    damaged.write_bytes(damaged.read_bytes()[:-100])  # a clip whose file was cut short: redone, not reused

    def config(cache: Path):
        return load_config(REPO_ROOT / "configs" / "mini.yaml", [f"data.corpus_path={corpus}",
                                                                 "data.corpus_format=list", f"data.cache_dir={cache}"])

    resumed = prepare(config(cache_dir), progress=False, workers=1)
    update = resumed.manifest["update"]
    assert update["resumed"] == finished - 1 and update["processed"] == 32 - (finished - 1)
    assert "resumed (finished by a prepare that was stopped)" in resumed.summary()
    assert not (cache_dir / "prepare-journal.jsonl").exists()  # superseded by the manifest

    clean = prepare(config(tmp_path / "clean"), progress=False, workers=1)
    assert clean.manifest["splits"] == resumed.manifest["splits"]
    assert clean.manifest["mel_stats"]["mean"] == resumed.manifest["mel_stats"]["mean"]
    for utterance_id, entry in clean.manifest["clips"].items():
        clean_file = read_utterance(tmp_path / "clean" / entry["file"])
        resumed_file = read_utterance(cache_dir / resumed.manifest["clips"][utterance_id]["file"])
        for clean_part, resumed_part in zip(clean_file, resumed_file):  # tokens, mel, F0 track
            np.testing.assert_array_equal(clean_part, resumed_part)
        assert entry["samples"] == resumed.manifest["clips"][utterance_id]["samples"]

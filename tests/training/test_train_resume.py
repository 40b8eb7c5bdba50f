"""Resume after SIGKILL: the next steps are bit-identical to an uninterrupted run (CPU, deterministic), also
through the device-feed path (batches copied to a device one step ahead, as on a GPU: here a CPU device); which data
settings a resume may change."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from test_train import trainer_config, write_config

DRIVER = r"""
import os, sys, time
from pathlib import Path
from myxtts.config import load_config
from myxtts.training import run
config, workdir, resume, stall_at = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
feed_device = sys.argv[5] or None
def stall(step, batch):
    if step == stall_at:  # the checkpoint of the previous step is on disk: wait to be killed
        Path(workdir, "STALLED").write_text("1")
        time.sleep(600)
    return batch
run(load_config(config), workdir, resume=resume, progress=False, batch_filter=stall if stall_at >= 0 else None,
    feed_device=feed_device)
"""


def _launch(tmp_path, config, workdir, resume=False, stall_at=-1, feed_device=""):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONHASHSEED="0")
    return subprocess.Popen([sys.executable, str(driver), str(config), str(workdir), "1" if resume else "0",
                             str(stall_at), feed_device], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(process, timeout=240):
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output[-3000:]
    return output


def _train_records(workdir: Path) -> dict[int, dict]:
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in records if r["split"] == "train"}


@pytest.mark.slow
def test_resume_after_sigkill_is_bit_identical(prepared_cache, tmp_path):
    """The uninterrupted run feeds from the host; the killed run fed its batches through the device feed (copied
    to a device one step ahead, as on a GPU) and is resumed from the host: the checkpoint written under the
    device feed holds the exact iterator position, and both feeds give the same steps bit for bit. With the mel
    discriminator on: it and its optimizer resume exactly too."""
    adversarial = {"mel_adversarial_weight": 0.5, "mel_feature_matching_weight": 1.0, "mel_discriminator_channels": 4}
    # no validation split: the training steps are what is compared (three processes trace less)
    cfg = trainer_config(prepared_cache, data={"num_buckets": 2, "validation_size": 0},
                         model={"dropout": 0.1, **adversarial}, training={
        "max_steps": 6, "checkpoint_every": 3, "log_every": 1, "validate_every": 100, "summary_every": 0,
        "deterministic": True, "warmup_steps": 2})
    config = write_config(cfg, tmp_path / "resume.yaml")
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    reference = _launch(tmp_path, config, straight)
    victim = _launch(tmp_path, config, killed, stall_at=3, feed_device="/cpu:0")
    deadline = time.time() + 240
    while not (killed / "STALLED").exists():
        assert victim.poll() is None, victim.communicate()[0][-3000:]
        assert time.time() < deadline, "the run never reached step 3"
        time.sleep(0.2)
    victim.send_signal(signal.SIGKILL)
    victim.communicate()  # reap it and close its pipe
    assert tf.train.latest_checkpoint(str(killed / "checkpoints")).endswith("ckpt-3")
    _finish(reference)
    _finish(_launch(tmp_path, config, killed, resume=True))

    expected, resumed = _train_records(straight), _train_records(killed)
    for step in (4, 5, 6):
        for key in ("total", "mel_l1_before", "mel_l1_after", "forward_sum", "duration", "grad_norm",
                    "learning_rate", "mel_adversarial", "mel_discriminator"):
            assert resumed[step][key] == expected[step][key], (step, key)  # bit-identical, not approximately
    a = tf.train.load_checkpoint(str(straight / "checkpoints" / "ckpt-6"))
    b = tf.train.load_checkpoint(str(killed / "checkpoints" / "ckpt-6"))
    names = [n for n, _ in tf.train.list_variables(str(straight / "checkpoints" / "ckpt-6"))
             if n.startswith(("model/", "optimizer/", "mel_discriminator"))]
    assert len(names) > 10 and any(n.startswith("mel_discriminator_optimizer/") for n in names)
    for name in names:
        assert np.array_equal(a.get_tensor(name), b.get_tensor(name)), name


def test_a_resume_may_move_the_corpora_but_not_reweigh_them(tmp_path):
    """Each corpus's path may change (the files moved); its weight, format or filters say which batches come."""
    from myxtts.config import config_from_dict, save_config
    from myxtts.training.checkpoint import WorkdirError, check_data_resumable

    def corpora(folder, weight):
        return config_from_dict({"data": {"corpora": [
            {"path": str(tmp_path / folder / "list.txt"), "weight": weight},
            {"path": str(tmp_path / folder / "cv"), "format": "commonvoice", "held_out_speakers": 2}]}})

    save_config(corpora("before", 1.0), tmp_path / "config.yaml")
    check_data_resumable(tmp_path / "config.yaml", corpora("moved", 1.0), tmp_path, "ckpt-6", tmp_path)
    with pytest.raises(WorkdirError, match=r"data.corpora: .*'weight': 1.0.* -> .*'weight': 3.0"):
        check_data_resumable(tmp_path / "config.yaml", corpora("moved", 3.0), tmp_path, "ckpt-6", tmp_path)

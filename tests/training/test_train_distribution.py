"""Distribution on CPU: MirroredStrategy over two logical devices (one update == the single-device
update; the trainer runs), and MultiWorkerMirroredStrategy with two local worker processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from test_train import TINY_TINY_AR, trainer_config, write_config

MIRRORED = r"""
import os, sys
import myxtts  # first: records the environment before TensorFlow is imported
import numpy as np, tensorflow as tf, keras
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
sys.path.insert(0, sys.argv[2])
if sys.argv[4].startswith("trainer"):  # a fresh process: two strategies would share collective keys
    from myxtts.config import load_config
    from myxtts.training import run
    overrides = ["training.distribution=mirrored"]
    if sys.argv[4] == "trainer_mixed_xla_blocks":  # the GPU-node combination, on 2 logical CPUs
        overrides += ["training.mixed_precision=bfloat16", "training.enable_xla_compilation=true",
                      "training.steps_per_execution=2"]
    cfg = load_config(sys.argv[1], overrides)
    summary = run(cfg, sys.argv[3], progress=False)
    assert summary["steps"] == cfg.training.max_steps and summary["retraces_after_warmup"] == 0, summary
    assert summary["replicas"] == 2, summary
    import json, pathlib
    records = [json.loads(line) for line in pathlib.Path(sys.argv[3], "metrics.jsonl").read_text().splitlines()]
    assert all(np.isfinite(r["total"]) for r in records), records
    print("MIRRORED_OK", summary["batch_shapes"])
    sys.exit(0)
from train_helpers import batch_spec, batch_with_lengths
from myxtts.config import load_config
from myxtts.model import build_model
from myxtts.training.steps import TrainingSteps
mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
assert mirrored.num_replicas_in_sync == 2
for config in sys.argv[1].split(os.pathsep):  # each decoder's config, one strategy (one process start)
    cfg = load_config(config, ["training.ema_decay=0.5"])  # with a weight average: updated on every replica
    # the single device's reference: the same code, eagerly
    eager = load_config(config, ["training.enable_graph_mode=false", "training.ema_decay=0.5"])
    models = []
    for strategy in (tf.distribute.get_strategy(), mirrored):
        with strategy.scope():
            model = build_model(cfg, 40)
            if models:
                model.set_weights(models[0][0].get_weights())
            steps = TrainingSteps(model, keras.optimizers.SGD(0.05), cfg if strategy is mirrored else eager, strategy,
                                  keras.optimizers.SGD(0.05))
            if models and steps.discriminator is not None:
                steps.discriminator.set_weights(models[0][1].discriminator.get_weights())
        steps.build([batch_spec(4, 10, 24, 16)], lambda f, name: f, validate_buckets=[])  # the update only
        if strategy is mirrored:  # warm-up runs the mirrored step once and restores every replica's copy exactly
            before = steps.snapshot_state()
            assert sum(len(copies) for copies in before) > len(before)  # per-replica copies are really compared
            steps.warm_up()
            after = steps.snapshot_state()
            assert all(np.array_equal(a, b) for x, y in zip(before, after) for a, b in zip(x, y))
            assert all(f.experimental_get_tracing_count() == 1 for f in steps.train_functions.values())
        models.append((model, steps))
    # unequal lengths: replica 0 takes the two long rows, replica 1 the two short ones; each divides its sums by
    # the global batch's real counts, so the update is the single device's (per-replica means / 2 were not)
    frames = [24, 22, 7, 8]  # the aligner needs at least a frame per token
    batch = batch_with_lengths([10, 9, 6, 4], frames, 10, 24, 16, vocab_size=40, seed=3)
    # the model's variables, then the mel discriminator's (where the config has one: trained in the same step)
    owned = [[*m.trainable_variables, *(steps.discriminator.trainable_variables if steps.discriminator else [])]
             for m, steps in models]
    start = [v.numpy() for v in owned[0]]
    outs = [steps.train(batch) for _, steps in models]
    deltas = [np.concatenate([(v.numpy() - s).ravel() for v, s in zip(variables, start)]) for variables in owned]
    np.testing.assert_allclose(deltas[1], deltas[0], atol=1e-6 + 1e-4 * np.abs(deltas[0]).max())
    assert abs(float(outs[0]["total"]) - float(outs[1]["total"])) < 1e-4
    # the weight average after one update: half the start, half the new weights, in every replica's copy
    for model, steps in models:
        averages = steps.weight_average.averages  # the model's variables: the first of `start`
        for average, weight, first in zip(averages, model.trainable_variables, start, strict=False):
            for copy in steps.strategy.experimental_local_results(average):
                np.testing.assert_allclose(copy.numpy(), 0.5 * first + 0.5 * weight.numpy(), rtol=1e-5, atol=1e-7)
    print("MIRRORED_OK", cfg.model.decoder, "mel discriminator" if models[0][1].discriminator else "")
"""

WORKER = r"""
import sys
from myxtts.config import load_config
from myxtts.training import run
summary = run(load_config(sys.argv[1], ["training.distribution=multi_worker"]), sys.argv[2], progress=False)
assert summary["retraces_after_warmup"] == 0 and summary["batch_shapes"] == 2, summary
print("WORKER_OK", summary["steps"], summary["loss_last"])
"""


def _config(prepared, tmp_path, buckets=False, model=None):
    # fixed padding: one signature, batch 4, divisible by 2 replicas; buckets: the mini plan's frame budget, whose
    # single-device batch sizes (7, 5, 3, 2) do not divide by 2: per-replica sizes from budget / 2 do
    # (2 buckets: the point is budget-sized, unequal-length buckets on replicas, not how many; each costs a warm-up)
    data = {"num_buckets": 2, "batch_frames": 2400, "batch_size": 8} if buckets else \
        {"pad_to_fixed_length": True, "batch_size": 4, "max_mel_frames": 880}
    cfg = trainer_config(prepared, data=data, model={**(model or {}), "dropout": 0.0},
                         training={"max_steps": 4 if buckets else 2, "validate_every": 100, "summary_every": 0,
                                   "checkpoint_every": 2, "log_every": 1})
    return write_config(cfg, tmp_path / "dist.yaml")


@pytest.mark.slow
# the trainer over budget-sized, unequal-length buckets on 2 replicas: test_multi_worker_two_local_processes (the
# same bucket sizing and replica slicing); here its mirrored run with bfloat16, XLA and step blocks
@pytest.mark.parametrize("mode", ["update_equals_single_device", "trainer_mixed_xla_blocks"])
def test_mirrored_two_logical_devices(prepared_cache, tmp_path, mode):
    script = tmp_path / "mirrored.py"
    script.write_text(MIRRORED)
    tests_dir = os.path.dirname(__file__)
    # mixed/XLA: one fixed shape; the single-device comparison checks both decoders
    config = _config(prepared_cache, tmp_path, model=TINY_TINY_AR if mode == "update_equals_single_device" else None)
    if mode == "update_equals_single_device":  # both decoders, the parallel one with the mel discriminator
        from test_parallel_model import parallel_config
        adversarial = {"mel_adversarial_weight": 0.5, "mel_feature_matching_weight": 1.0,
                       "mel_discriminator_channels": 4}
        parallel = write_config(parallel_config(prepared_cache, model={"dropout": 0.0, **adversarial}),
                                tmp_path / "parallel.yaml")
        config = os.pathsep.join([str(config), str(parallel)])
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    if mode == "trainer_mixed_xla_blocks":  # the same XLA clusters, without LLVM's optimisation of the CPU code
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()
    result = subprocess.run([sys.executable, str(script), str(config), tests_dir,
                             str(tmp_path / "run"), mode], capture_output=True, text=True, timeout=400, env=env)
    assert "MIRRORED_OK" in result.stdout, (result.stdout + result.stderr)[-4000:]
    if mode == "update_equals_single_device":
        assert "MIRRORED_OK autoregressive" in result.stdout
        assert "MIRRORED_OK parallel mel discriminator" in result.stdout


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("localhost", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@pytest.mark.slow
def test_multi_worker_two_local_processes(prepared_cache, tmp_path):
    try:
        ports = _free_ports(2)
    except OSError as err:
        pytest.skip(f"cannot bind localhost ports for the workers: {err}")
    config = _config(prepared_cache, tmp_path, buckets=True)  # budget-sized buckets of real, unequal lengths
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    cluster = {"worker": [f"localhost:{port}" for port in ports]}
    processes = []
    for index in range(2):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
                   TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}))
        processes.append(subprocess.Popen([sys.executable, str(script), str(config), str(tmp_path / "run")],
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=400)[0])
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    for output in outputs:
        assert "WORKER_OK 4" in output, output[-4000:]
    losses = {line.split()[-1] for output in outputs for line in output.splitlines() if line.startswith("WORKER_OK")}
    assert len(losses) == 1  # both workers took the same synchronous steps
    assert (tmp_path / "run" / "checkpoints").is_dir()

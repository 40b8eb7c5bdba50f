"""Distribution strategy from `training.distribution` and the per-replica batch rule.

Every replica of every worker sees the same global batch shape (a bucket's batch size: replicas x the
per-replica batch from the frame budget, `data.buckets.batch_size_for`); replica i
takes rows ``[i * batch / replicas, (i + 1) * batch / replicas)`` inside the compiled step, so the
per-replica shapes are static too. Every worker runs the same input pipeline (same seed, same
order), so all workers call the same compiled function at every step (collectives need that).
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from myxtts.config import Config
from myxtts.errors import InputError


class DistributionError(InputError):
    pass


def make_strategy(cfg: Config) -> tf.distribute.Strategy:
    kind = cfg.training.distribution
    if kind == "none":
        return tf.distribute.get_strategy()  # the default (no-op) strategy
    if kind == "mirrored":
        # every GPU; without GPUs every logical CPU device (tests split the CPU into two)
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
        return tf.distribute.MirroredStrategy(devices)
    if kind == "multi_worker":
        raw = os.environ.get("TF_CONFIG")
        if not raw:
            raise DistributionError("training.distribution is 'multi_worker' but TF_CONFIG is not set; set it on "
                                    "every worker (see docs/training.md).")
        try:
            json.loads(raw)
        except json.JSONDecodeError as err:
            raise DistributionError(f"TF_CONFIG is not valid JSON: {err}") from None
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise DistributionError(f"Config key 'training.distribution': unknown value {kind!r}.")


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True on the worker that writes checkpoints, summaries and metrics."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    return resolver.task_type == "chief" or (resolver.task_type == "worker" and resolver.task_id == 0)


def check_divisible(signatures: list[dict], replicas: int, accumulation: int = 1) -> None:
    """Every bucket's batch size must split evenly across the replicas."""
    if replicas <= 1:
        return
    bad = sorted({spec["tokens"].shape[0] for spec in signatures if spec["tokens"].shape[0] % replicas})
    if bad:
        raise DistributionError(
            f"Batch sizes {bad} do not divide by the {replicas} replicas: each replica takes batch / replicas rows "
            "with a static shape. Bucket plans already give every bucket replicas x a per-replica batch; with "
            "data.pad_to_fixed_length set data.batch_size to a multiple of the replica count.")


def replica_slice(batch: dict, replicas: int) -> dict:
    """Inside ``strategy.run``: this replica's rows of the global batch (static per-replica shape)."""
    if replicas == 1:
        return batch
    context = tf.distribute.get_replica_context()
    replica = tf.cast(context.replica_id_in_sync_group, tf.int32)
    out = {}
    for key, value in batch.items():
        size = value.shape[0] // replicas
        begin = [0] * value.shape.rank
        out[key] = tf.slice(value, tf.stack([replica * size] + begin[1:]), [size] + value.shape.as_list()[1:])
    return out

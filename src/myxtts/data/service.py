"""Distributed input on a tf.data service cluster (``data.service_address``).

With ``data.service_address: grpc://HOST:PORT`` the InputPipeline's dataset (read, parse, references,
bucket + pad) runs on the workers of a tf.data service cluster; the trainer only receives finished
batches and prefetches them. ``processing_mode="distributed_epoch"``: the dispatcher hands the
shuffled row indices out to the workers dynamically, so each utterance is produced by one worker per
epoch (no duplicates, however many workers).

Requirements and limits:
- every worker must read the cache at the same absolute path (``data.cache_dir``; a shared or
  copied filesystem): the dataset graph sent to the workers names the utterance files;
- the order in which workers answer is not deterministic, and a tf.data service iterator cannot be
  saved (``SaveInternal is not yet supported``): ``InputPipeline.checkpointable`` is False and a
  resumed run restarts the data stream instead of continuing it exactly.

Run a cluster (``myxtts data-service``): one dispatcher, then any number of workers, on any machines:

    myxtts data-service dispatcher --port 5050
    myxtts data-service worker --dispatcher HOST:5050 --port 5051
"""

from __future__ import annotations

import tensorflow as tf

PROCESSING_MODE = "distributed_epoch"


def distribute(dataset: tf.data.Dataset, address: str) -> tf.data.Dataset:
    """``dataset`` produced by the tf.data service at ``address`` (grpc://host:port or host:port)."""
    target = address if "://" in address else f"grpc://{address}"
    return dataset.apply(tf.data.experimental.service.distribute(processing_mode=PROCESSING_MODE, service=target))


def start_dispatcher(port: int = 0) -> tf.data.experimental.service.DispatchServer:
    """A dispatcher in this process (port 0: any free port); ``.target`` is its grpc:// address."""
    return tf.data.experimental.service.DispatchServer(tf.data.experimental.service.DispatcherConfig(port=port))


def start_worker(dispatcher: str, port: int = 0) -> tf.data.experimental.service.WorkerServer:
    """A worker in this process registered with ``dispatcher`` (host:port or grpc://host:port)."""
    address = dispatcher.split("://", 1)[-1]
    return tf.data.experimental.service.WorkerServer(
        tf.data.experimental.service.WorkerConfig(dispatcher_address=address, port=port))

"""data.service_address: the input pipeline runs on a tf.data service cluster (dispatcher + two workers,
in-process on localhost) and the compiled train steps train on its batches."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from myxtts.config import config_from_dict
from myxtts.data.cache import FeatureCache
from myxtts.data.pipeline import InputPipeline
from myxtts.data.service import start_dispatcher, start_worker

TINY_TINY = {"preset": "tiny", "decoder": "autoregressive", "d_model": 32, "num_heads": 2, "ff_dim": 32, "text_layers": 1, "decoder_layers": 1,
             "conditioning_layers": 1, "prenet_dim": 32, "postnet_channels": 32, "postnet_layers": 2, "dropout": 0.0}


def _check_validation_pass(prepared_cache, cluster) -> None:
    """A finite validation pass through the service yields every validation utterance.

    Run before the endless training job: with in-process servers, a later job of the same process
    came back empty (TF 2.21), so both checks share one cluster in this order."""
    cfg = dataclasses.replace(prepared_cache, data=dataclasses.replace(prepared_cache.data,
                                                                       service_address=cluster.target))
    cache = FeatureCache.load(cfg)
    lookup = {tuple(cache.utterance_tokens(i).tolist()): i for i in range(len(cache))}
    seen = set()
    for batch in InputPipeline(cfg, split="validation").dataset(repeat=False):
        for tokens, length in zip(batch["tokens"].numpy(), batch["token_lengths"].numpy()):
            seen.add(cache.ids[lookup[tuple(tokens[:length].tolist())]])
    assert seen == set(cache.manifest["splits"]["validation"])




@pytest.fixture
def cluster():
    """A fresh dispatcher + two workers per test: a job left running by an earlier test (an endless training
    iterator) must not share the workers with the next one."""
    dispatcher = start_dispatcher()
    workers = [start_worker(dispatcher.target) for _ in range(2)]
    yield dispatcher
    for worker in workers:
        worker.stop()
    dispatcher.stop()


@pytest.mark.slow
def test_pipeline_on_a_tf_data_service_validates_and_trains(prepared_cache, cluster) -> None:
    from myxtts.model import build_model
    from myxtts.training.steps import TrainingSteps

    _check_validation_pass(prepared_cache, cluster)
    cfg = dataclasses.replace(prepared_cache, data=dataclasses.replace(prepared_cache.data,
                                                                       service_address=cluster.target))
    pipeline = InputPipeline(cfg)
    assert not pipeline.checkpointable and InputPipeline(prepared_cache).checkpointable
    graph = pipeline.dataset()._as_serialized_graph().numpy()
    assert b"DataServiceDataset" in graph
    cache = FeatureCache.load(cfg)
    lookup = {tuple(cache.utterance_tokens(i).tolist()): i for i in range(len(cache))}
    allowed = [{k: tuple(v.shape) for k, v in s.items()} for s in pipeline.signatures()]
    model_cfg = config_from_dict({"model": TINY_TINY})
    model = build_model(model_cfg, int(cache.manifest["vocab_size"]))
    steps = TrainingSteps(model, tf.keras.optimizers.Adam(1e-3), model_cfg, tf.distribute.get_strategy())
    steps.build(pipeline.signatures(), lambda function, name: function)
    before = [v.numpy().copy() for v in model.trainable_variables]
    iterator = iter(pipeline.dataset())
    losses = []
    for index in range(3):
        batch = next(iterator)
        assert {k: tuple(v.shape) for k, v in batch.items()} in allowed
        for tokens, length, mel_length in zip(batch["tokens"].numpy(), batch["token_lengths"].numpy(),
                                              batch["mel_lengths"].numpy()):
            row = lookup[tuple(tokens[:length].tolist())]  # real cached utterances, served by the workers
            assert mel_length == cache.mel_lengths[row]
        if index == 0:  # one update shows the served batch trains (each new shape would cost a trace)
            losses.append(float(steps.train(batch)["total"]))
    del iterator  # ends the endless job before the cluster stops (a live job leaves the next test's empty)
    assert all(np.isfinite(losses))
    assert any(not np.array_equal(b, v.numpy()) for b, v in zip(before, model.trainable_variables))


def test_bad_service_address_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="data.service_address"):
        config_from_dict({"data": {"service_address": "not an address"}})

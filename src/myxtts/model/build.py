"""Building the model a config asks for: ``build_model(cfg, vocab_size)`` -> a ``TTSModel`` (model/tts.py) with
the parallel decoder (model/parallel_decoder.py, the default) or the autoregressive one
(model/autoregressive_decoder.py), every variable created."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from myxtts.config import Config
from myxtts.model.autoregressive_decoder import AutoregressiveTTSModel
from myxtts.model.parallel_decoder import ParallelTTSModel
from myxtts.model.presets import ModelDims, resolve_dims
from myxtts.model.tts import TTSModel

MODEL_CLASSES = {"parallel": ParallelTTSModel, "autoregressive": AutoregressiveTTSModel}


def dummy_batch(dims: ModelDims, batch: int = 1, text_len: int = 5, steps: int = 2, ref_frames: int = 8) -> dict:
    """A tiny valid batch (numpy) used to build the variables eagerly before any tracing."""
    frames = steps * dims.reduction_factor
    rng = np.random.default_rng(0)
    return {"tokens": np.ones([batch, text_len], np.int32), "token_lengths": np.full([batch], text_len, np.int32),
            "mel": rng.normal(size=[batch, frames, dims.n_mels]).astype(np.float32),
            "mel_lengths": np.full([batch], frames, np.int32),
            "reference_mel": rng.normal(size=[batch, ref_frames, dims.n_mels]).astype(np.float32),
            "reference_lengths": np.full([batch], ref_frames, np.int32),
            "speaker_ids": np.zeros([batch], np.int32)}


MIXED_PRECISION_POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}


def build_model(cfg: Config, vocab_size: int) -> TTSModel:
    """Build the model for this config and create every variable (an eager call on a tiny batch), so no
    compiled step ever creates variables (which would make it trace twice).

    ``training.mixed_precision`` picks the Keras dtype policy (variables stay float32, compute in
    bfloat16/float16); it is set only while the layers are constructed, so the process-wide policy is
    left as it was.
    """
    dims = resolve_dims(cfg.model, vocab_size, cfg.audio.n_mels)
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(MIXED_PRECISION_POLICIES[cfg.training.mixed_precision])
    try:
        model = MODEL_CLASSES[cfg.model.decoder](dims, name=f"{cfg.model.decoder}_tts")
        model.pitch_variation = float(cfg.model.pitch_variation)
        # 16 frames: enough for the aligner to place each of the 5 tokens
        model({k: tf.constant(v) for k, v in dummy_batch(dims, steps=16 // dims.reduction_factor).items()},
              training=False)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    return model


def count_parameters(model: keras.Model) -> int:
    return int(sum(np.prod(v.shape) for v in model.trainable_variables))

"""Build a model and load a checkpoint's weights into it, checking first that the checkpoint holds that model.

The checkpoint holds the model under the key ``model`` (``tf.train.Checkpoint(model=model, ...)``) and, from a run
trained with ``training.ema_decay``, the average of its weights under ``weight_average``, which is what the model is
loaded with (model/weight_average.py); everything else in it (optimizer, step counters, the data iterator) is ignored
here. Which decoder a checkpoint holds is read from its object graph, so a mismatch is a clear error before any
weight is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from myxtts.config import Config
from myxtts.model.build import build_model
from myxtts.model.tts import TTSModel
from myxtts.model.weight_average import load_average_into
from myxtts.run_dir import RunError

# a checkpoint of the first autoregressive design (free cross-attention over the text, a stop token, no aligner)
EARLIER_DESIGN = "earlier-design"


def checkpoint_decoder_type(checkpoint: str | Path) -> str | None:
    """The decoder a checkpoint's model holds: "parallel", "autoregressive" (an aligner, and a decoder with or
    without a prenet) or ``EARLIER_DESIGN`` (a decoder and no aligner); None: unreadable. Read from the
    checkpoint's object graph: the model's variables are saved under the optimizer's names."""
    parts = _model_parts(checkpoint)
    if parts is None:
        return None
    graph, children = parts
    if "decoder" not in children:
        return None
    if "aligner" not in children:
        return EARLIER_DESIGN
    decoder_parts = {child.local_name for child in graph.nodes[children["decoder"]].children}
    return "autoregressive" if "prenet" in decoder_parts else "parallel"


def _model_parts(checkpoint: str | Path) -> tuple[Any, dict[str, int]] | None:
    """(the checkpoint's object graph, the model's top-level modules by name -> node id); None: unreadable."""
    try:
        graph = trackable_object_graph_pb2.TrackableObjectGraph()
        graph.ParseFromString(tf.train.load_checkpoint(str(checkpoint)).get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
        model = next(child.node_id for child in graph.nodes[0].children if child.local_name == "model")
    except (tf.errors.OpError, ValueError, StopIteration):
        return None
    return graph, {child.local_name: child.node_id for child in graph.nodes[model].children}


def checkpoint_has_pitch(checkpoint: str | Path) -> bool | None:
    """Whether a checkpoint's model has the pitch modules (``model.pitch_conditioning``); None: unreadable."""
    parts = _model_parts(checkpoint)
    return None if parts is None else "pitch_predictor" in parts[1]


def checkpoint_has_pitch_level(checkpoint: str | Path) -> bool | None:
    """Whether a checkpoint's model has the pitch level predictor (``model.pitch_level``); None: unreadable."""
    parts = _model_parts(checkpoint)
    return None if parts is None else "pitch_level" in parts[1]


def checkpoint_has_adaptive_norm(checkpoint: str | Path) -> bool | None:
    """Whether a checkpoint's decoder has the speaker-adaptive norms (``model.speaker_adaptive_norm``: a
    ``speaker_film`` in its blocks); None: unreadable or no decoder."""
    parts = _model_parts(checkpoint)
    if parts is None or "decoder" not in parts[1]:
        return None
    graph, children = parts
    frontier, depth = [children["decoder"]], 0
    while frontier and depth < 4:  # decoder -> blocks (a list) -> block -> speaker_film
        nodes = [child for node in frontier for child in graph.nodes[node].children]
        if any(child.local_name == "speaker_film" for child in nodes):
            return True
        frontier, depth = [child.node_id for child in nodes], depth + 1
    return False


def checkpoint_has_reference_attention(checkpoint: str | Path) -> bool | None:
    """Whether a checkpoint's decoder attends over reference tokens (``model.reference_tokens`` > 0); None: unreadable
    or no decoder."""
    parts = _model_parts(checkpoint)
    if parts is None or "decoder" not in parts[1]:
        return None
    graph, children = parts
    return any(child.local_name == "reference_attention" for child in graph.nodes[children["decoder"]].children)


def decoder_mismatch(checkpoint: str, held: str | None, wanted: str) -> str | None:
    """Why a checkpoint of decoder ``held`` cannot serve a config of decoder ``wanted`` (None: it can)."""
    if held == EARLIER_DESIGN:
        return (f"{checkpoint} holds a model of an earlier myxtts design (an autoregressive decoder attending "
                "freely over the text, with a stop token), which this version no longer builds; train a new run "
                "(both decoders now read the text through learned durations).")
    if held is not None and held != wanted:
        return (f"{checkpoint} holds a model of the {held} decoder, but the config says 'model.decoder: {wanted}'; "
                f"use the run's own config.yaml (or set model.decoder: {held}).")
    return None


def restore_model(cfg: Config, vocabulary: Any, checkpoint: str | Path) -> TTSModel:
    """Build the model for ``cfg`` and load the weights of ``checkpoint`` (a prefix or a folder)."""
    checkpoint = str(checkpoint)
    if Path(checkpoint).is_dir():
        prefix = tf.train.latest_checkpoint(checkpoint)
        if not prefix:
            raise RunError(f"No checkpoint in folder {checkpoint}.")
        checkpoint = prefix
    if not Path(checkpoint + ".index").is_file():
        raise RunError(f"Checkpoint not found: {checkpoint} (expected {checkpoint}.index); pass a prefix like "
                       "RUN_DIR/checkpoints/ckpt-3 or the folder holding it.")
    problem = decoder_mismatch(f"Checkpoint {checkpoint}", checkpoint_decoder_type(checkpoint), cfg.model.decoder)
    if problem:
        raise RunError(problem)
    model = build_model(cfg, len(vocabulary))
    status = tf.train.Checkpoint(model=model).restore(checkpoint).expect_partial()
    try:
        status.assert_existing_objects_matched()
    except AssertionError as err:
        raise RunError(f"Checkpoint {checkpoint} does not match the model of this config (model.* keys or "
                       f"vocabulary size differ?): {str(err)[:300]}") from None
    load_average_into(model, checkpoint)  # a run trained with training.ema_decay is used through its average
    return model

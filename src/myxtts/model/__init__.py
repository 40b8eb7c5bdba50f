"""The XTTS-style model (Keras 3 layers, TF backend) and its losses. See docs/architecture.md."""

from myxtts.model.losses import (add_normalizers, compute_losses, decoder_step_lengths, guided_attention_weights,
                                 loss_normalizers)
from myxtts.model.layers import static_or_dynamic_dim
from myxtts.model.presets import PRESETS, ModelDims, resolve_dims
from myxtts.model.xtts import XTTSModel, build_model, count_parameters, dummy_batch

__all__ = ["PRESETS", "ModelDims", "XTTSModel", "add_normalizers", "build_model", "compute_losses",
           "count_parameters", "decoder_step_lengths", "dummy_batch", "guided_attention_weights", "loss_normalizers",
           "resolve_dims", "static_or_dynamic_dim"]

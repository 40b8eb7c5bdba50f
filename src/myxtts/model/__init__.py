"""The text-to-speech model (Keras 3 layers, TF backend) and its losses. See docs/architecture.md."""

from myxtts.model.build import build_model, count_parameters, dummy_batch
from myxtts.model.layers import static_or_dynamic_dim
from myxtts.model.losses import add_normalizers, compute_losses, loss_normalizers
from myxtts.model.presets import PRESETS, ModelDims, resolve_dims
from myxtts.model.tts import TTSModel

__all__ = ["PRESETS", "ModelDims", "TTSModel", "add_normalizers", "build_model", "compute_losses",
           "count_parameters", "dummy_batch", "loss_normalizers", "resolve_dims", "static_or_dynamic_dim"]

"""Model size presets and the resolution of `model.*` config keys against them.

Every `model.*` key that is ``None`` takes the preset's value; any explicit value wins. The resolved
dimensions are a frozen dataclass so the layers never read the raw config twice.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from myxtts.config import ModelConfig
from myxtts.errors import InputError

# Values per preset. `tiny` (< 2M parameters) trains on 2 CPU cores in minutes; `small` and `base`
# are GPU sizes.
PRESETS: dict[str, dict[str, int]] = {
    "tiny": dict(d_model=128, num_heads=2, ff_dim=256, text_layers=2, decoder_layers=2,
                 conditioning_layers=2, num_speaker_latents=4, prenet_dim=128, postnet_channels=128,
                 postnet_layers=3, decoder_conv_blocks=5, text_ff_kernel=3),
    "small": dict(d_model=256, num_heads=4, ff_dim=1024, text_layers=4, decoder_layers=4,
                  conditioning_layers=3, num_speaker_latents=8, prenet_dim=256, postnet_channels=256,
                  postnet_layers=5, decoder_conv_blocks=8, text_ff_kernel=3),
    "base": dict(d_model=512, num_heads=8, ff_dim=2048, text_layers=6, decoder_layers=8,
                 conditioning_layers=4, num_speaker_latents=16, prenet_dim=256, postnet_channels=512,
                 postnet_layers=5, decoder_conv_blocks=12, text_ff_kernel=3),
}

POSTNET_KERNEL = 5  # frames seen by each postnet convolution
CONDITIONING_KERNEL = 3  # frames seen by each conditioning-encoder convolution
PRENET_DROPOUT = 0.5  # Tacotron-style strong prenet dropout, kept at synthesis (seeded)


@dataclass(frozen=True)
class ModelDims:
    """Resolved model hyper-parameters (preset values with config overrides applied)."""

    vocab_size: int
    n_mels: int
    d_model: int
    num_heads: int
    ff_dim: int
    text_layers: int
    decoder_layers: int
    conditioning_layers: int
    num_speaker_latents: int
    prenet_dim: int
    postnet_channels: int
    postnet_layers: int
    decoder_conv_blocks: int  # parallel decoder: residual dilated convolution blocks
    text_ff_kernel: int  # text encoder feed-forward: 1 position-wise, > 1 convolution over that many tokens
    reduction_factor: int
    dropout: float
    max_positions: int
    pitch_conditioning: bool = False  # a pitch predictor and embedding (model/pitch.py)
    speaker_adaptive_norm: bool = False  # parallel decoder: block norms scaled and shifted by the speaker vector
    pitch_level: bool = False  # pitch conditioning: absolute token pitch, its level predicted from the speaker latents
    reference_tokens: int = 0  # parallel decoder: frame-level reference tokens after the K pooled latents (0: none)
    reference_spectrum: float = 0.0  # parallel decoder: the reference's long-term spectrum's share (model/spectrum.py)

    @property
    def conditioning_vectors(self) -> int:
        """Rows of the conditioning encoder's output ``[B, K + reference_tokens + spectrum_rows, d]``: the K pooled
        speaker latents, then the reference tokens, then with ``reference_spectrum`` > 0 the reference's long-term
        spectrum."""
        return self.num_speaker_latents + self.reference_tokens + self.spectrum_rows

    @property
    def spectrum_rows(self) -> int:
        """Rows the reference's long-term spectrum ``[n_mels]`` takes at the conditioning's end, ``d`` values a row
        (model/spectrum.py); 0 without ``reference_spectrum``."""
        return -(-self.n_mels // self.d_model) if self.reference_spectrum > 0 else 0


def resolve_dims(model_cfg: ModelConfig, vocab_size: int, n_mels: int) -> ModelDims:
    """Apply the preset, then every explicit `model.*` key; raise InputError on inconsistent sizes."""
    if model_cfg.preset not in PRESETS:
        raise InputError(f"Config key 'model.preset': unknown preset {model_cfg.preset!r}; "
                         f"choose one of {sorted(PRESETS)}.")
    values = dict(PRESETS[model_cfg.preset])
    for key in values:
        explicit = getattr(model_cfg, key)
        if explicit is not None:
            values[key] = explicit
    if values["d_model"] % values["num_heads"]:
        raise InputError(f"Config keys 'model.d_model' ({values['d_model']}) must be divisible by "
                         f"'model.num_heads' ({values['num_heads']}).")
    if vocab_size < 3:
        raise ValueError(f"vocab_size must be >= 3 (pad, bos, eos), got {vocab_size}.")
    return ModelDims(vocab_size=vocab_size, n_mels=n_mels, reduction_factor=model_cfg.reduction_factor,
                     dropout=model_cfg.dropout, max_positions=model_cfg.max_attention_sequence_length,
                     pitch_conditioning=model_cfg.pitch_conditioning, pitch_level=model_cfg.pitch_level,
                     speaker_adaptive_norm=model_cfg.speaker_adaptive_norm,
                     reference_tokens=model_cfg.reference_tokens,
                     reference_spectrum=model_cfg.reference_spectrum, **values)


def describe(dims: ModelDims) -> dict[str, int | float]:
    return dataclasses.asdict(dims)

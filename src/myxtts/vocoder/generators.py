"""Neural vocoder generators: log mel ``[batch, frames, n_mels]`` -> waveform ``[batch, (frames - 1) * hop]``.

``VocosGenerator`` (Siuzdak 2023, "Vocos"): the whole network runs at frame rate (no upsampling), which is what
makes it cheap on a CPU. An input convolution and ConvNeXt blocks (depthwise convolution over frames, LayerNorm,
a pointwise MLP, a learned per-channel layer scale, residual) produce per-frame features; a linear head predicts
the STFT of the waveform as a log magnitude and a phase angle; an inverse STFT with the front-end's own window and
hop (``InverseStft``) turns it into samples. The output is aligned like Griffin-Lim's: frame ``k`` is centred on
sample ``k * hop``, so ``MelFrontend`` of the output gives back the input's frame count.

With ``vocoder.magnitude_prior`` (FreeV, Lv et al. 2024) the head's log magnitude is a residual over the log of the
mel's pseudo-inverse (``MelFrontend.pseudo_inverse_magnitude``, Griffin-Lim's magnitude): the untrained generator
already has the right spectral envelope, and training spends its steps on phase and fine detail.

The generator normalises its input with per-bin statistics it stores as (non-trainable) weights, so it reads the
plain log mel of ``MelFrontend`` whatever normalisation the acoustic model used.

The other family, ``istftnet`` (``vocoder/istftnet.py``), upsamples to a fraction of the hop before its inverse
STFT; ``build_generator`` builds the one ``vocoder.family`` names.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from myxtts.mel import MelFrontend
from myxtts.model.layers import BuiltByFirstCall, track_listed_layers
from myxtts.vocoder.istft import MAX_LOG_MAGNITUDE, InverseStft
from myxtts.vocoder.istftnet import ISTFTNetGenerator, istftnet_size

PRIOR_FLOOR = 1e-5  # the prior's magnitude is clipped here before its log (bins the pseudo-inverse leaves at 0)


@dataclasses.dataclass(frozen=True)
class VocosSize:
    dim: int
    intermediate_dim: int
    layers: int


# cpu: trains in CPU hours and runs at a few thousandths of real time on 2 cores; gpu: the paper's size
VOCOS_PRESETS = {"cpu": VocosSize(dim=192, intermediate_dim=576, layers=6),
                 "gpu": VocosSize(dim=512, intermediate_dim=1536, layers=8)}


def vocos_size(vocoder_cfg: Any) -> VocosSize:
    """The preset's sizes with any key the config sets instead."""
    preset = VOCOS_PRESETS[vocoder_cfg.preset]
    return VocosSize(dim=vocoder_cfg.dim or preset.dim,
                     intermediate_dim=vocoder_cfg.intermediate_dim or preset.intermediate_dim,
                     layers=vocoder_cfg.layers or preset.layers)


class ConvNeXtBlock(BuiltByFirstCall, keras.layers.Layer):
    """Depthwise convolution over frames, LayerNorm, pointwise MLP (GELU), layer scale, residual."""

    def __init__(self, dim: int, intermediate_dim: int, kernel_size: int, layer_scale: float, **kwargs: Any):
        super().__init__(**kwargs)
        self.depthwise = keras.layers.DepthwiseConv1D(kernel_size, padding="same", name="depthwise")
        self.norm = keras.layers.LayerNormalization(epsilon=1e-6, name="norm")
        self.expand = keras.layers.Dense(intermediate_dim, activation="gelu", name="expand")
        self.project = keras.layers.Dense(dim, name="project")
        self.layer_scale = self.add_weight(shape=(dim,), initializer=keras.initializers.Constant(layer_scale),
                                           name="layer_scale")

    def call(self, x: tf.Tensor) -> tf.Tensor:  # [batch, frames, dim]
        residual = x
        x = self.project(self.expand(self.norm(self.depthwise(x))))
        return residual + self.layer_scale * x


class ZeroFirstColumns(keras.initializers.Initializer):
    """Glorot-uniform, with the first ``count`` output columns zero (a residual head that starts at its prior)."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __call__(self, shape: Any, dtype: Any = None) -> tf.Tensor:
        kernel = keras.initializers.GlorotUniform()(shape, dtype)  # [inputs, outputs]
        return tf.concat([tf.zeros_like(kernel[:, :self.count]), kernel[:, self.count:]], axis=1)

    def get_config(self) -> dict[str, Any]:
        return {"count": self.count}


class VocosGenerator(BuiltByFirstCall, keras.Model):
    """See the module docstring. ``generator(log_mel)``: ``[batch, frames, n_mels]`` -> ``[batch, samples]``."""

    family = "vocos"

    def __init__(self, n_mels: int, n_fft: int, hop_length: int, window: np.ndarray, size: VocosSize,
                 kernel_size: int = 7, prior_frontend: Any = None, **kwargs: Any) -> None:
        """``prior_frontend``: the ``MelFrontend`` whose pseudo-inverse magnitude the head refines
        (``vocoder.magnitude_prior``; None: the head predicts the log magnitude alone)."""
        super().__init__(**kwargs)
        self.n_mels, self.n_fft, self.hop_length, self.size = n_mels, n_fft, hop_length, size
        self.prior_frontend = prior_frontend
        # per-bin statistics of the training corpus' log mels: set once by the trainer, saved with the weights
        self.mel_mean = self.add_weight(shape=(n_mels,), initializer="zeros", trainable=False, name="mel_mean")
        self.mel_std = self.add_weight(shape=(n_mels,), initializer="ones", trainable=False, name="mel_std")
        self.embed = keras.layers.Conv1D(size.dim, 7, padding="same", name="embed")
        self.embed_norm = keras.layers.LayerNormalization(epsilon=1e-6, name="embed_norm")
        self.blocks = [ConvNeXtBlock(size.dim, size.intermediate_dim, kernel_size, 1.0 / size.layers,
                                     name=f"block_{index}") for index in range(size.layers)]
        self.final_norm = keras.layers.LayerNormalization(epsilon=1e-6, name="final_norm")
        # log magnitude and phase of n_fft // 2 + 1 bins; over a prior, the magnitude residual starts at 0
        head_initializer = ZeroFirstColumns(n_fft // 2 + 1) if prior_frontend is not None else "glorot_uniform"
        self.head = keras.layers.Dense(n_fft + 2, kernel_initializer=head_initializer, name="head")
        self.istft = InverseStft(n_fft, hop_length, window, name="istft")

    def set_mel_statistics(self, mean: np.ndarray, std: np.ndarray) -> None:
        self.mel_mean.assign(np.asarray(mean, np.float32))
        self.mel_std.assign(np.asarray(std, np.float32))

    def spectrum(self, log_mel: tf.Tensor, frame_mask: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        """The predicted STFT: linear magnitude and phase angle, each ``[batch, frames, n_fft // 2 + 1]``.
        ``frame_mask`` ``[batch, frames]`` (a padded batch): every convolution's input is zero past each item's
        frames, as past the end of an unpadded mel, so the real frames come out as they would alone; the magnitude
        past them is zero."""
        keep = None if frame_mask is None else tf.cast(frame_mask, log_mel.dtype)[..., None]  # [batch, frames, 1]

        def masked(values: tf.Tensor) -> tf.Tensor:  # no op at all without a mask (training, the engine)
            return values if keep is None else values * keep

        x = masked((log_mel - self.mel_mean) / self.mel_std)  # [batch, frames, n_mels]
        x = self.embed_norm(self.embed(x))  # [batch, frames, dim]
        for block in self.blocks:
            x = block(masked(x))
        x = self.head(self.final_norm(x))  # [batch, frames, n_fft + 2]
        log_magnitude, phase = tf.split(x, 2, axis=-1)  # each [batch, frames, n_fft // 2 + 1]
        if self.prior_frontend is not None:
            prior = self.prior_frontend.pseudo_inverse_magnitude(log_mel)  # [batch, frames, n_fft // 2 + 1]
            log_magnitude = log_magnitude + tf.math.log(tf.maximum(prior, PRIOR_FLOOR))
        return masked(tf.exp(tf.minimum(log_magnitude, MAX_LOG_MAGNITUDE))), phase

    def call(self, log_mel: tf.Tensor, training: bool = False, frame_mask: tf.Tensor | None = None) -> tf.Tensor:
        magnitude, phase = self.spectrum(log_mel, frame_mask)
        # [batch, (frames - 1) * hop]
        return self.istft(magnitude * tf.cos(phase), magnitude * tf.sin(phase), frame_mask=frame_mask)


def generator_sizes(vocoder_cfg: Any) -> dict[str, Any]:
    """The family's resolved sizes as plain values: what ``vocoder.json`` records and a warm start compares."""
    if vocoder_cfg.family == "istftnet":
        return {key: list(value) if isinstance(value, tuple) else value
                for key, value in dataclasses.asdict(istftnet_size(vocoder_cfg)).items()}
    return {**dataclasses.asdict(vocos_size(vocoder_cfg)), "kernel_size": vocoder_cfg.kernel_size,
            "magnitude_prior": vocoder_cfg.magnitude_prior}


# what a vocoder.json written before a size key existed meant by its absence
SIZE_DEFAULTS = {"magnitude_prior": False}


def build_generator(cfg: Any) -> keras.Model:
    """The generator ``cfg.vocoder`` describes, for ``cfg.audio``'s front-end, built (its weights exist)."""
    a, v = cfg.audio, cfg.vocoder
    if v.family == "istftnet":
        generator = ISTFTNetGenerator(a.n_mels, a.hop_length, istftnet_size(v), name="istftnet_generator")
    else:
        frontend = MelFrontend(a)
        window = frontend.window.numpy()  # the analysis window: the inverse uses the same
        generator = VocosGenerator(a.n_mels, a.n_fft, a.hop_length, window, vocos_size(v), v.kernel_size,
                                   prior_frontend=frontend if v.magnitude_prior else None, name="vocos_generator")
    generator(tf.zeros([1, 4, a.n_mels]))  # creates the weights
    track_listed_layers(generator)  # layers held in lists (blocks, stages): checkpoint children too
    return generator

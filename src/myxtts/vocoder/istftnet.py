"""iSTFTNet (Kaneko 2022): HiFi-GAN's upsampling generator ending in a small inverse STFT.

``log mel [batch, frames, n_mels]`` -> ``waveform [batch, (frames - 1) * hop]``, aligned like ``VocosGenerator``'s
and Griffin-Lim's (frame ``k`` centred on sample ``k * hop``)::

    (x - mean) / std -> Conv1D k7 (channels)                                   # [B, F, C]
    -> per stage s: LeakyReLU -> Conv1DTranspose x rate_s (C / 2^(s+1))        # [B, F * rate_1 * ..., C / 2^(s+1)]
                    -> multi-receptive-field fusion: mean of residual blocks, one per kernel size, each a chain of
                       dilated convolutions (HiFi-GAN V3's "ResBlock2")
    -> LeakyReLU -> Conv1D k7 -> log magnitude, phase of an n_fft-point STFT   # [B, F * prod(rates), bins] each
    -> inverse STFT with hop = audio hop / prod(rates)                        # [B, (F - 1) * hop]

HiFi-GAN upsamples by the whole hop with transposed convolutions; iSTFTNet stops a few octaves short (x64 of a
256-sample hop here) and lets a 16-point inverse STFT produce the last samples, which removes the most expensive,
highest-rate layers. Unlike Vocos, most of its work runs above frame rate: it is the family for a GPU, or for a
CPU when quality per training step matters more than speed.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from myxtts.model.layers import BuiltByFirstCall
from myxtts.vocoder.istft import MAX_LOG_MAGNITUDE, InverseStft


@dataclasses.dataclass(frozen=True)
class ISTFTNetSize:
    upsample_rates: tuple[int, ...]
    upsample_channels: int
    resblock_kernels: tuple[int, ...]
    resblock_dilations: tuple[int, ...]


# (upsample_channels, resblock_kernels, resblock_dilations); the rates are vocoder.upsample_rates in both.
# cpu: about twice the Vocos cpu preset's arithmetic per frame; gpu: HiFi-GAN V1's widths with V3's residual blocks
ISTFTNET_PRESETS = {"cpu": (128, (3, 5, 7), (1, 2)), "gpu": (512, (3, 7, 11), (1, 3, 5))}


def istftnet_size(vocoder_cfg: Any) -> ISTFTNetSize:
    """The preset's sizes with any key the config sets instead."""
    channels, kernels, dilations = ISTFTNET_PRESETS[vocoder_cfg.preset]
    return ISTFTNetSize(upsample_rates=tuple(vocoder_cfg.upsample_rates),
                        upsample_channels=vocoder_cfg.upsample_channels or channels,
                        resblock_kernels=tuple(vocoder_cfg.resblock_kernels or kernels),
                        resblock_dilations=tuple(vocoder_cfg.resblock_dilations or dilations))


def _leaky(x: tf.Tensor) -> tf.Tensor:
    return tf.nn.leaky_relu(x, alpha=0.1)


class DilatedResBlock(BuiltByFirstCall, keras.layers.Layer):
    """One kernel size of the fusion: per dilation, LeakyReLU -> dilated Conv1D -> residual."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.convs = [keras.layers.Conv1D(channels, kernel_size, dilation_rate=dilation, padding="same",
                                          name=f"conv_{index}") for index, dilation in enumerate(dilations)]

    def call(self, x: tf.Tensor) -> tf.Tensor:  # [batch, time, channels]
        for conv in self.convs:
            x = x + conv(_leaky(x))
        return x


class UpsampleStage(BuiltByFirstCall, keras.layers.Layer):
    """Transposed convolution by ``rate``, then the mean of one ``DilatedResBlock`` per kernel size."""

    def __init__(self, rate: int, channels: int, kernels: tuple[int, ...], dilations: tuple[int, ...],
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.upsample = keras.layers.Conv1DTranspose(channels, 2 * rate, strides=rate, padding="same",
                                                     name="upsample")
        self.blocks = [DilatedResBlock(channels, kernel, dilations, name=f"resblock_{kernel}") for kernel in kernels]

    def call(self, x: tf.Tensor) -> tf.Tensor:  # [batch, time, in_channels] -> [batch, time * rate, channels]
        x = self.upsample(_leaky(x))
        return tf.add_n([block(x) for block in self.blocks]) / len(self.blocks)


class ISTFTNetGenerator(BuiltByFirstCall, keras.Model):
    """See the module docstring. ``generator(log_mel)``: ``[batch, frames, n_mels]`` -> ``[batch, samples]``."""

    family = "istftnet"

    def __init__(self, n_mels: int, hop_length: int, size: ISTFTNetSize, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        upsampling = math.prod(size.upsample_rates)
        if hop_length % upsampling:
            raise ValueError(f"iSTFTNet's upsample rates {list(size.upsample_rates)} (x{upsampling}) must divide "
                             f"audio.hop_length ({hop_length}).")
        self.n_mels, self.size = n_mels, size
        self.istft_hop = hop_length // upsampling
        self.istft_fft = 4 * self.istft_hop  # 75% overlap, as the paper's 16-point STFT with hop 4
        self.mel_mean = self.add_weight(shape=(n_mels,), initializer="zeros", trainable=False, name="mel_mean")
        self.mel_std = self.add_weight(shape=(n_mels,), initializer="ones", trainable=False, name="mel_std")
        self.embed = keras.layers.Conv1D(size.upsample_channels, 7, padding="same", name="embed")
        self.stages = [UpsampleStage(rate, size.upsample_channels // 2 ** (index + 1), size.resblock_kernels,
                                     size.resblock_dilations, name=f"stage_{index}")
                       for index, rate in enumerate(size.upsample_rates)]
        self.head = keras.layers.Conv1D(self.istft_fft + 2, 7, padding="same", name="head")
        window = np.hanning(self.istft_fft + 1)[:-1]  # periodic Hann
        self.istft = InverseStft(self.istft_fft, self.istft_hop, window, name="istft")

    def set_mel_statistics(self, mean: np.ndarray, std: np.ndarray) -> None:
        self.mel_mean.assign(np.asarray(mean, np.float32))
        self.mel_std.assign(np.asarray(std, np.float32))

    def call(self, log_mel: tf.Tensor, training: bool = False) -> tf.Tensor:
        frames = tf.shape(log_mel)[1]
        x = self.embed((log_mel - self.mel_mean) / self.mel_std)  # [batch, frames, channels]
        for stage in self.stages:
            x = stage(x)  # [batch, frames * rates so far, channels / 2^stages]
        x = self.head(_leaky(x))  # [batch, frames * prod(rates), istft_fft + 2]
        log_magnitude, phase = tf.split(x, 2, axis=-1)  # each [batch, positions, istft_fft // 2 + 1]
        magnitude = tf.exp(tf.minimum(log_magnitude, MAX_LOG_MAGNITUDE))
        wave = self.istft(magnitude * tf.cos(phase), magnitude * tf.sin(phase))  # [batch, frames * hop - istft_hop]
        # position j is centred on sample j * istft_hop: the first (frames - 1) * hop samples match the mel's frames
        return wave[:, :(frames - 1) * self.istft_hop * math.prod(self.size.upsample_rates)]

"""The GAN's discriminators: each maps a waveform batch ``[batch, samples]`` to a list of (score map, feature maps).

- ``PeriodDiscriminator`` (HiFi-GAN's multi-period discriminator, one per period): the waveform folded into
  ``[samples / period, period]`` and read by 2-D convolutions along time only, so each sees every period-th sample:
  periodic structure (pitch, its harmonics) that a plain convolution blurs.
- ``ResolutionDiscriminator`` (UnivNet's multi-resolution discriminator, one per FFT size): 2-D convolutions over the
  linear magnitude spectrogram at one time / frequency resolution: the spectral detail a mel loss averages away.

Widths are configurable (``vocoder.discriminator_channels``, ``vocoder.resolution_channels``): on a CPU the
discriminators are most of an adversarial step's cost, so the CPU recipe keeps them narrow. With
``training.mixed_precision: bfloat16`` their convolutions compute in bfloat16 (weights stay float32; the waveform,
its STFT and every loss stay float32): on CPUs with bfloat16 matrix units (AMX) that is most of the step's saving.
Score and feature maps come out in the convolutions' dtype; the losses cast them.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from myxtts.model.layers import BuiltByFirstCall, track_listed_layers


def _leaky(x: tf.Tensor) -> tf.Tensor:
    return tf.nn.leaky_relu(x, alpha=0.1)


class PeriodDiscriminator(BuiltByFirstCall, keras.layers.Layer):
    def __init__(self, period: int, channels: int, conv_dtype: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.period = int(period)
        widths = (channels, 4 * channels, 8 * channels, 8 * channels)
        self.convs = [keras.layers.Conv2D(width, (5, 1), strides=(3, 1) if index < 3 else (1, 1), padding="same",
                                          dtype=conv_dtype, name=f"conv_{index}") for index, width in enumerate(widths)]
        self.out = keras.layers.Conv2D(1, (3, 1), padding="same", dtype=conv_dtype, name="out")

    def call(self, wave: tf.Tensor) -> tuple[tf.Tensor, list[tf.Tensor]]:
        samples = wave.shape[1]  # static: training segments have one length
        pad = (-samples) % self.period
        if pad:
            wave = tf.pad(wave, [[0, 0], [0, pad]], mode="REFLECT")
        x = tf.reshape(wave, [-1, (samples + pad) // self.period, self.period, 1])  # [batch, time, period, 1]
        features = []
        for conv in self.convs:
            x = _leaky(conv(x))
            features.append(x)
        score = self.out(x)  # [batch, time', period, 1]
        features.append(score)
        return score, features


class ResolutionDiscriminator(BuiltByFirstCall, keras.layers.Layer):
    def __init__(self, n_fft: int, channels: int, conv_dtype: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.n_fft, self.hop_length = int(n_fft), int(n_fft) // 4
        self.convs = [keras.layers.Conv2D(channels, (3, 9), strides=(1, 1) if index == 0 else (1, 2), padding="same",
                                          dtype=conv_dtype, name=f"conv_{index}") for index in range(4)]
        self.convs.append(keras.layers.Conv2D(channels, (3, 3), padding="same", dtype=conv_dtype, name="conv_4"))
        self.out = keras.layers.Conv2D(1, (3, 3), padding="same", dtype=conv_dtype, name="out")

    def call(self, wave: tf.Tensor) -> tuple[tf.Tensor, list[tf.Tensor]]:
        stft = tf.signal.stft(wave, self.n_fft, self.hop_length, pad_end=True)  # [batch, frames, n_fft // 2 + 1]
        magnitude = tf.sqrt(tf.square(tf.math.real(stft)) + tf.square(tf.math.imag(stft)) + 1e-9)
        x = magnitude[..., tf.newaxis]  # [batch, frames, bins, 1]
        features = []
        for conv in self.convs:
            x = _leaky(conv(x))
            features.append(x)
        score = self.out(x)
        features.append(score)
        return score, features


class Discriminators(BuiltByFirstCall, keras.Model):
    """Every period and resolution discriminator; ``call(wave)`` -> list of (score, features), one per member."""

    def __init__(self, periods: tuple[int, ...], period_channels: int, resolution_ffts: tuple[int, ...],
                 resolution_channels: int, conv_dtype: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.members = [PeriodDiscriminator(period, period_channels, conv_dtype, name=f"period_{period}")
                        for period in periods]
        self.members += [ResolutionDiscriminator(n_fft, resolution_channels, conv_dtype, name=f"resolution_{n_fft}")
                         for n_fft in resolution_ffts]

    def call(self, wave: tf.Tensor) -> list[tuple[tf.Tensor, list[tf.Tensor]]]:
        return [member(wave) for member in self.members]


def build_discriminators(cfg: Any) -> Discriminators:
    v = cfg.vocoder
    # the convolutions' Keras dtype policy: bfloat16 compute on float32 weights, or the float32 default
    conv_dtype = "mixed_bfloat16" if cfg.training.mixed_precision == "bfloat16" else None
    discriminators = Discriminators(v.discriminator_periods, v.discriminator_channels, v.resolution_ffts,
                                    v.resolution_channels, conv_dtype, name="discriminators")
    discriminators(tf.zeros([1, v.segment_samples]))  # creates the weights
    track_listed_layers(discriminators)  # the members and their convolution lists: checkpoint children too
    return discriminators

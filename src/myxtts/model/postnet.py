"""The postnet both decoders share: a residual convolution stack that refines the decoder's mel."""

from __future__ import annotations

import keras
import tensorflow as tf

from myxtts.model.layers import BuiltByFirstCall, SiteCounter, stateless_dropout
from myxtts.model.presets import POSTNET_KERNEL, ModelDims


class Postnet(BuiltByFirstCall, keras.layers.Layer):
    """Residual conv stack refining mel_before; padded frames are zeroed after every layer."""

    def __init__(self, dims: ModelDims, sites: SiteCounter, **kwargs):
        # autocast off: the residual adds to the float32 mel_before, which must not be rounded to float16
        super().__init__(autocast=False, **kwargs)
        self.convs = [keras.layers.Conv1D(dims.postnet_channels, POSTNET_KERNEL, padding="same",
                                          activation="tanh", name=f"conv_{i}")
                      for i in range(dims.postnet_layers - 1)]
        self.convs.append(keras.layers.Conv1D(dims.n_mels, POSTNET_KERNEL, padding="same", name="conv_out"))
        self.rate, self.site = dims.dropout, sites()

    def call(self, mel_before, frame_mask, training=False, seed=None):
        """mel_before ``[B, T, n_mels]`` float32; frame_mask ``[B, T]`` bool -> mel_after ``[B, T, n_mels]``."""
        mask = tf.cast(frame_mask[..., None], self.compute_dtype)
        x = tf.cast(mel_before, self.compute_dtype) * mask
        for index, conv in enumerate(self.convs):
            x = conv(x) * mask
            if index < len(self.convs) - 1:
                x = stateless_dropout(x, self.rate, training, seed, self.site * 16 + index)
        return (mel_before + tf.cast(x, tf.float32)) * tf.cast(mask, tf.float32)

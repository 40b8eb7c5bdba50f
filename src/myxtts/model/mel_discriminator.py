"""A discriminator on the mel and the adversarial losses it gives the acoustic model (``model.mel_adversarial_weight``,
``model.mel_feature_matching_weight``).

An L1 loss on the mel's values lets the decoder predict the average of what it cannot know (the pitch behind the
harmonics, the exact onset): the mean of several sharp spectra is a smooth one. A discriminator that tells real
mels from generated ones penalises that smoothness directly (as GAN-TTS models such as Multi-SpectroGAN and
GANSpeech do for FastSpeech-style decoders); its features give a feature-matching loss, a learned distance that
weighs what the discriminator finds telling.

The discriminator is a small stack of 2-D convolutions over (frames, mel bins): translation-invariant along
frequency, as harmonics are, striding along the bins only, so every output keeps its frame and the padding frames
can be masked out exactly. It is trained in the same compiled step as the model (least-squares GAN: real -> 1,
generated -> 0) with its own optimizer and is checkpointed with the run; synthesis never uses it.
"""

from __future__ import annotations

import keras
import tensorflow as tf

ADVERSARIAL_LOSS_KEYS = ("mel_adversarial", "mel_feature_matching", "mel_discriminator")


class MelDiscriminator(keras.layers.Layer):
    """[batch, frames, n_mels] and its real frames [batch, frames] -> per-layer feature maps, the last one the logits
    [batch, frames, bins', 1]. Padding frames are zero in the input and in every feature map, exactly as past the
    tensor's end (the convolutions' own zero padding): a real frame's features do not depend on the padding after
    it, so a clip's losses are the same in any bucket."""

    DEFAULT_CHANNELS = 16  # model.mel_discriminator_channels unset

    def __init__(self, channels: int = DEFAULT_CHANNELS, layers: int = 4, **kwargs):
        # float32 whatever the global precision policy: its losses are small differences of squares
        super().__init__(dtype="float32", **kwargs)
        self.convolutions = [keras.layers.Conv2D(channels, (3, 5), strides=(1, 2), padding="same", name=f"conv_{i}")
                             for i in range(layers)]
        self.logits = keras.layers.Conv2D(1, (3, 3), padding="same", name="logits")

    def build(self, input_shape, mask_shape=None):
        frames_bins = (input_shape[0], input_shape[1], input_shape[2], 1)
        for convolution in self.convolutions:
            convolution.build(frames_bins)
            frames_bins = convolution.compute_output_shape(frames_bins)
        self.logits.build(frames_bins)
        super().build(input_shape)

    def call(self, mel, frame_mask):
        keep = tf.cast(frame_mask, tf.float32)[:, :, None, None]  # [batch, frames, 1, 1]
        hidden = tf.cast(mel, tf.float32)[..., None] * keep  # [batch, frames, n_mels, 1]
        features = []
        for convolution in self.convolutions:
            hidden = convolution(hidden)  # [batch, frames, bins / 2^i, channels]
            # leaky ReLU written out: grappler's fusion of convolution + bias + tf.nn.leaky_relu fails on its
            # gradient here and logs an error on every trace (the fusion is skipped, the result is the same)
            hidden = tf.maximum(hidden, 0.2 * hidden) * keep
            features.append(hidden)
        features.append(self.logits(hidden) * keep)  # [batch, frames, bins', 1]
        return features


def _masked_mean(values: tf.Tensor, frame_mask: tf.Tensor, frames: tf.Tensor) -> tf.Tensor:
    """Sum over real frames of ``values`` [batch, frames, bins, channels], / (``frames`` x bins x channels)."""
    per_frame = tf.reduce_mean(values, axis=[2, 3])  # [batch, frames]
    return tf.reduce_sum(tf.where(frame_mask, per_frame, tf.zeros_like(per_frame))) / frames


def adversarial_losses(discriminator: MelDiscriminator, real_mel: tf.Tensor, generated_mel: tf.Tensor,
                       frame_mask: tf.Tensor, frames: tf.Tensor) -> dict[str, tf.Tensor]:
    """Least-squares GAN losses on the scored frames ``frame_mask`` [batch, frames] (``model.losses.
    scored_frame_mask``: the real frames outside a reference cut from the target itself), each a sum over them
    divided by ``frames`` (the global batch's scored frame count, as the other losses: see ``model.losses``). Both
    mels reach the discriminator with the other frames zeroed, so neither a self-sliced reference's real frames nor
    what the model made there can tell the two apart.

    ``mel_adversarial`` and ``mel_feature_matching`` train the model (the generated mel -> "real"; the L1 distance of
    the discriminator's features of the generated mel to the real mel's); ``mel_discriminator`` trains the
    discriminator (real -> 1, generated -> 0). Differentiate each against its own variables only: the
    discriminator's loss against the model's variables is not a loss of the model.
    """
    real_features = discriminator(real_mel, frame_mask)
    generated_features = discriminator(generated_mel, frame_mask)
    real_logits, generated_logits = real_features[-1], generated_features[-1]  # [batch, frames, bins', 1]
    matching = tf.add_n([_masked_mean(tf.abs(generated - tf.stop_gradient(real)), frame_mask, frames)
                         for real, generated in zip(real_features[:-1], generated_features[:-1])])
    return {"mel_adversarial": _masked_mean(tf.square(generated_logits - 1.0), frame_mask, frames),
            "mel_feature_matching": matching / float(len(real_features) - 1),
            "mel_discriminator": _masked_mean(tf.square(real_logits - 1.0) + tf.square(generated_logits), frame_mask,
                                              frames)}

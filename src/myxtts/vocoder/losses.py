"""The vocoder's losses (TF ops, used inside the compiled GAN step).

Reconstruction: L1 between the log mels of generated and real audio (the project's own front-end, so the loss
measures what the acoustic model produces) and a multi-resolution STFT loss (spectral convergence + L1 of log
magnitudes at several FFT sizes; Yamamoto 2020), which also constrains the phase that a single mel cannot.
Adversarial: hinge losses (Vocos) and feature matching (L1 between the discriminators' feature maps of real and
generated audio, each map's mean; HiFi-GAN), computed in float32 whatever dtype the discriminators compute in.
"""

from __future__ import annotations

import tensorflow as tf

# (n_fft, hop) of the multi-resolution STFT loss
STFT_RESOLUTIONS = ((512, 128), (1024, 256), (2048, 512))


def _float32(tensor: tf.Tensor) -> tf.Tensor:
    return tf.cast(tensor, tf.float32)


def mel_l1(frontend, generated: tf.Tensor, real: tf.Tensor) -> tf.Tensor:
    """Mean |log mel(generated) - log mel(real)| over batch, frames and bins. Waves ``[batch, samples]``."""
    return tf.reduce_mean(tf.abs(frontend.in_graph(generated) - frontend.in_graph(real)))


def _magnitude(wave: tf.Tensor, n_fft: int, hop: int) -> tf.Tensor:
    stft = tf.signal.stft(wave, n_fft, hop, pad_end=True)  # [batch, frames, n_fft // 2 + 1]
    return tf.sqrt(tf.square(tf.math.real(stft)) + tf.square(tf.math.imag(stft)) + 1e-7)


def multi_resolution_stft(generated: tf.Tensor, real: tf.Tensor) -> tf.Tensor:
    """Spectral convergence + log-magnitude L1, averaged over ``STFT_RESOLUTIONS``."""
    total = 0.0
    for n_fft, hop in STFT_RESOLUTIONS:
        fake, true = _magnitude(generated, n_fft, hop), _magnitude(real, n_fft, hop)
        convergence = tf.norm(true - fake) / tf.maximum(tf.norm(true), 1e-7)
        log_l1 = tf.reduce_mean(tf.abs(tf.math.log(true) - tf.math.log(fake)))
        total += convergence + log_l1
    return total / len(STFT_RESOLUTIONS)


def discriminator_hinge(real_outputs: list, fake_outputs: list) -> tf.Tensor:
    """Sum over discriminators of mean(relu(1 - D(real))) + mean(relu(1 + D(fake)))."""
    total = 0.0
    for (real_score, _), (fake_score, _) in zip(real_outputs, fake_outputs):
        total += tf.reduce_mean(tf.nn.relu(1.0 - _float32(real_score))) + \
            tf.reduce_mean(tf.nn.relu(1.0 + _float32(fake_score)))
    return total


def generator_hinge(fake_outputs: list) -> tf.Tensor:
    """Sum over discriminators of mean(relu(1 - D(generated)))."""
    return tf.add_n([tf.reduce_mean(tf.nn.relu(1.0 - _float32(score))) for score, _ in fake_outputs])


def feature_matching(real_outputs: list, fake_outputs: list) -> tf.Tensor:
    """Sum over discriminators of the mean over their layers of mean |features(real) - features(generated)|."""
    total = 0.0
    for (_, real_features), (_, fake_features) in zip(real_outputs, fake_outputs):
        layers = [tf.reduce_mean(tf.abs(tf.stop_gradient(_float32(real)) - _float32(fake)))
                  for real, fake in zip(real_features, fake_features)]
        total += tf.add_n(layers) / len(layers)
    return total

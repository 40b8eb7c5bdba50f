"""The autoregressive model (``model.decoder: autoregressive``): ``TTSModel``'s text encoder, aligner,
duration predictor, conditioning encoder and postnet, with a decoder that produces r frames per step from its
previous ones (``model/decoder.py``). The text still reaches it only through the durations, so alignment,
durations and synthesis lengths work exactly as in the parallel one; only ``run_decoder`` differs:
teacher-forced in training, a compiled ``tf.while_loop`` over the bucket's steps at synthesis.
"""

from __future__ import annotations

import keras

from myxtts.model.decoder import AutoregressiveDecoder
from myxtts.model.layers import SiteCounter
from myxtts.model.tts import TTSModel
from myxtts.model.presets import ModelDims


class AutoregressiveTTSModel(TTSModel):
    decoder_type = "autoregressive"

    def make_decoder(self, dims: ModelDims, sites: SiteCounter) -> keras.layers.Layer:
        return AutoregressiveDecoder(dims, sites, name="decoder")

    def run_decoder(self, frames, frame_mask, latents, target_mel=None, training=False, seed=None):
        """Teacher-forced on ``target_mel`` when given (training, validation), free-running without it."""
        if target_mel is None:
            return self.decoder.generate(frames, frame_mask, latents)
        return self.decoder(frames, frame_mask, latents, target_mel, training=training, seed=seed)

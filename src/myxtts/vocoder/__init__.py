"""Vocoders: log mel -> waveform.

- ``GriffinLim`` (``griffin_lim``): phase reconstruction with TF ops, no training.
- Neural vocoders (``generators``, trained by ``myxtts train-vocoder``; ``discriminators`` and ``losses`` serve their
  GAN training), loaded for synthesis by ``load_vocoder`` (``neural``).
"""

from myxtts.vocoder.base import Vocoder, write_wav
from myxtts.vocoder.griffin_lim import GriffinLim

__all__ = ["GriffinLim", "Vocoder", "write_wav"]

"""Length policy of synthesis: text buckets, and how many tokens a piece of a split text may have.

Texts are padded to a small set of token-length buckets (multiples of ``text_bucket_multiple`` up to
``data.max_text_length``) so the compiled duration function exists once per (batch size, text bucket). The
speech's length comes from the predicted durations; ``piece_token_budget`` keeps a piece's expected speech
within ``data.max_mel_frames`` at the data's typical frames per token (the median ``mel_lengths /
token_lengths`` of the run's prepared cache; without a cache the bundled LJSpeech clips' 5.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from myxtts.errors import InputError
from myxtts.config import Config
from myxtts.data.cache import FeatureCache

DEFAULT_TYPICAL_FRAMES_PER_TOKEN = 5.2  # the median of the bundled clips (characters at hop 256)
PIECE_MARGIN = 1.3  # a split text's piece may take this much more than the typical frames per token
TEXT_BUCKET_MULTIPLE = 32


class TextTooLongError(InputError):
    """A text with more tokens than the largest bucket (data.max_text_length)."""


@dataclass(frozen=True)
class LengthPolicy:
    max_frames: int  # data.max_mel_frames: the largest mel bucket
    max_text_length: int
    text_bucket_multiple: int = TEXT_BUCKET_MULTIPLE
    source: str = "defaults"  # where the typical ratio came from (reported by evaluate / the CLI)
    typical_frames_per_token: float = DEFAULT_TYPICAL_FRAMES_PER_TOKEN  # the data's median ratio

    @classmethod
    def from_config(cls, cfg: Config, text_bucket_multiple: int = TEXT_BUCKET_MULTIPLE) -> "LengthPolicy":
        """The typical ratio from the config's prepared cache when it is usable, else the LJSpeech default."""
        typical, source = DEFAULT_TYPICAL_FRAMES_PER_TOKEN, "defaults (no usable cache)"
        try:
            cache = FeatureCache.load(cfg, lengths_only=True)
            if len(cache):
                typical = float(np.median(cache.mel_lengths / np.maximum(cache.token_lengths, 1)))
                source = f"cache {cfg.cache_dir} ({len(cache)} utterances)"
        except (ValueError, OSError, KeyError):
            pass  # no cache next to this run: defaults, reported in `source`
        return cls(max_frames=cfg.data.max_mel_frames, max_text_length=cfg.data.max_text_length,
                   text_bucket_multiple=text_bucket_multiple, source=source, typical_frames_per_token=typical)

    def text_buckets(self) -> list[int]:
        """Token-length buckets: multiples of ``text_bucket_multiple`` and max_text_length itself."""
        buckets = list(range(self.text_bucket_multiple, self.max_text_length, self.text_bucket_multiple))
        return buckets + [self.max_text_length]

    def text_bucket(self, num_tokens: int) -> int:
        if num_tokens > self.max_text_length:
            raise TextTooLongError(
                f"Text has {num_tokens} tokens (with bos/eos), more than data.max_text_length "
                f"({self.max_text_length}) the model was trained with; split it into sentences "
                "(Synthesizer.synthesize_long and `myxtts synthesize` split long text themselves).")
        return next(bucket for bucket in self.text_buckets() if bucket >= num_tokens)

    def piece_token_budget(self, length_scale: float = 1.0) -> int:
        """The most tokens a piece of a split text may have: it fits the largest text bucket, and at the data's
        typical speaking rate (times ``length_scale`` and a margin) its speech fits the largest mel length."""
        frames_per_token = self.typical_frames_per_token * length_scale * PIECE_MARGIN
        return max(8, min(self.max_text_length, math.floor(self.max_frames / frames_per_token)))

    def to_dict(self) -> dict:
        return {"typical_frames_per_token": round(self.typical_frames_per_token, 3), "max_frames": self.max_frames,
                "text_buckets": self.text_buckets(), "source": self.source}

"""Length policy of free-running decoding: text buckets, and minimum / maximum lengths from the text.

Decoding stops when the stop token fires (sigmoid(stop_logit) > 0.5), but never before a minimum and
always at a maximum, both proportional to the number of tokens:

    min_frames = floor(tokens * min_frames_per_token)
    max_frames = ceil(tokens * max_frames_per_token)  (capped by data.max_mel_frames)

The ratios come from the training data: the frames-per-token ratio of every utterance of the run's
prepared cache (``mel_lengths / token_lengths``); ``min = 0.5 x`` its 1st percentile and ``max = 1.5 x``
its 99th percentile, so a normal utterance is never cut and a model that never fires its stop token
stops at most 50% past the slowest speech it was trained on. Without a cache the LJSpeech values
(measured on the bundled clips: 4.2 - 6.1 frames per character token at hop 256) give 2.0 and 9.5.

Texts are padded to a small set of token-length buckets (multiples of ``text_bucket_multiple`` up to
``data.max_text_length``) so the compiled decoder exists once per (batch size, text bucket); the
key/value cache of a bucket is preallocated for the maximum length of its longest text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from myxtts.config import Config

DEFAULT_MIN_FRAMES_PER_TOKEN = 2.0  # LJSpeech characters at hop 256: 0.5 x the fastest speech (~4.2)
DEFAULT_MAX_FRAMES_PER_TOKEN = 9.5  # 1.5 x the slowest (~6.1)
DEFAULT_TYPICAL_FRAMES_PER_TOKEN = 5.2  # the median of the bundled clips
PIECE_MARGIN = 1.3  # a split text's piece may take this much more than the typical frames per token
MIN_RATIO_SCALE = 0.5  # min_frames_per_token = MIN_RATIO_SCALE * 1st percentile of the data's ratio
MAX_RATIO_SCALE = 1.5  # max_frames_per_token = MAX_RATIO_SCALE * 99th percentile
TEXT_BUCKET_MULTIPLE = 32


class TextTooLongError(ValueError):
    """A text with more tokens than the largest bucket (data.max_text_length)."""


@dataclass(frozen=True)
class LengthPolicy:
    min_frames_per_token: float
    max_frames_per_token: float
    reduction_factor: int
    max_frames: int  # hard cap: data.max_mel_frames, also bounded by the model's position table
    max_text_length: int
    text_bucket_multiple: int = TEXT_BUCKET_MULTIPLE
    source: str = "defaults"  # where the ratios came from (reported by evaluate / the CLI)
    typical_frames_per_token: float = DEFAULT_TYPICAL_FRAMES_PER_TOKEN  # the data's median ratio

    @classmethod
    def from_config(cls, cfg: Config, text_bucket_multiple: int = TEXT_BUCKET_MULTIPLE) -> "LengthPolicy":
        """Ratios from the config's prepared cache when it is usable, else the LJSpeech defaults."""
        low, high, source = DEFAULT_MIN_FRAMES_PER_TOKEN, DEFAULT_MAX_FRAMES_PER_TOKEN, "defaults (no usable cache)"
        typical = DEFAULT_TYPICAL_FRAMES_PER_TOKEN
        try:
            from myxtts.data.cache import FeatureCache

            cache = FeatureCache.load(cfg, lengths_only=True)
            if len(cache):
                ratios = cache.mel_lengths / np.maximum(cache.token_lengths, 1)  # [utterances]
                low = MIN_RATIO_SCALE * float(np.percentile(ratios, 1))
                high = MAX_RATIO_SCALE * float(np.percentile(ratios, 99))
                typical = float(np.median(ratios))
                source = f"cache {cfg.cache_dir} ({len(cache)} utterances)"
        except (ValueError, OSError, KeyError):
            pass  # no cache next to this run: defaults, reported in `source`
        r = cfg.model.reduction_factor
        # the decoder's position table bounds the number of steps, hence the frames
        cap = min(cfg.data.max_mel_frames, cfg.model.max_attention_sequence_length * r)
        return cls(min_frames_per_token=low, max_frames_per_token=max(high, low + 1.0), reduction_factor=r,
                   max_frames=cap, max_text_length=cfg.data.max_text_length,
                   text_bucket_multiple=text_bucket_multiple, source=source, typical_frames_per_token=typical)

    # ---- buckets ------------------------------------------------------------------------------
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

    def bucket_max_steps(self, text_bucket: int) -> int:
        """Decoder steps preallocated for a bucket: the maximum length of its longest text."""
        return self.max_steps(text_bucket)

    def piece_token_budget(self, length_scale: float = 1.0) -> int:
        """The most tokens a piece of a split text may have: it fits the largest text bucket, and at the data's
        typical speaking rate (times ``length_scale`` and a margin) its speech fits the largest mel length."""
        frames_per_token = self.typical_frames_per_token * length_scale * PIECE_MARGIN
        return max(8, min(self.max_text_length, math.floor(self.max_frames / frames_per_token)))

    # ---- per-text limits (decoder steps of r frames) ----------------------------------------------
    def min_steps(self, num_tokens: int) -> int:
        frames = math.floor(num_tokens * self.min_frames_per_token)
        return max(1, min(frames // self.reduction_factor, self.max_frames // self.reduction_factor))

    def max_steps(self, num_tokens: int) -> int:
        frames = min(math.ceil(num_tokens * self.max_frames_per_token), self.max_frames)
        return max(self.min_steps(num_tokens), math.ceil(frames / self.reduction_factor))

    def to_dict(self) -> dict:
        return {"min_frames_per_token": round(self.min_frames_per_token, 3),
                "max_frames_per_token": round(self.max_frames_per_token, 3),
                "max_frames": self.max_frames, "text_buckets": self.text_buckets(), "source": self.source}

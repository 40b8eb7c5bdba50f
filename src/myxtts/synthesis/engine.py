"""The synthesis engine: the steps from text and reference clips to mels and waveforms, each a public method.

``SynthesisEngine`` owns what synthesis runs on (the model, its vocabulary and text front-end, the mel front-end and
statistics, the length policy, the compiled decoder and the vocoder) and offers the steps one at a time, as Vocos
composes a feature extractor, a backbone and a head:

- ``encode(texts)``: texts -> token arrays, each checked against the largest text bucket;
- ``split(text)``: a text of any length -> pieces that each fit one compiled call;
- ``reference_mel(clip)`` / ``reference_windows(clip)``: a reference clip -> the normalised conditioning mel(s);
- ``latents(reference_mels, reference_lengths)``: normalised reference mels -> one voice (latents) each;
- ``decode_tokens(token_lists, voices)``: token arrays, each with its voice -> ``SynthesisResult`` mels (no vocoder);
- ``vocode(result)``: a result's mel -> its waveform.

``Synthesizer`` (``synthesis.synthesizer``) composes them into its entries (``synthesize``, ``synthesize_long``,
``voice``); the server's engine (``synthesis.serving``) splits each request's text with ``text_split.split_speakable``
(bounded and cancellable, as ``split``) and batches the pieces of many requests through ``decode_tokens`` itself; the trainer's listener holds tokens and reference mels from the feature cache and
calls ``latents``, ``decode_tokens`` and ``vocode``; teacher forcing reads ``encode`` and ``reference_mel``.

The model reads and writes normalised log mels (``myxtts.data.mel_stats``: per-bin ``(log_mel - mean) / std`` of the
training data); ``SynthesisResult.mel`` is the denormalised, real log mel (what the vocoder, plots and metrics take).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from myxtts.errors import InputError
from myxtts.audio import load_audio
from myxtts.mel import MelFrontend, sharpen_across_bins
from myxtts.config import Config
from myxtts.data.language import run_text_processor
from myxtts.data.mel_stats import MelStats, reference_crop, reference_windows
from myxtts.model import TTSModel
from myxtts.synthesis.decoding import CompiledDecoder
from myxtts.synthesis.lengths import LengthPolicy
from myxtts.synthesis.text_split import TextPiece, TokenBudget, split_speakable
from myxtts.text import PAD_ID, Vocabulary
from myxtts.vocoder import GriffinLim, Vocoder

Reference = "str | os.PathLike | np.ndarray"  # a clip's path (any audio format) or a waveform at audio.sample_rate
References = "Reference | Sequence[Reference]"  # one clip, or several clips of one voice (their latents averaged)
# The longest reference clip synthesis decodes (the longer of this and data.max_duration, so any clip prepare accepts
# serves): the voice is read from a few seconds of its middle, and a longer file (a whole recording by mistake) would
# cost memory by its length; it is refused from its header, before decoding.
REFERENCE_MAX_SECONDS = 60.0


@dataclass
class SynthesisResult:
    """One synthesized utterance, kept for inspection."""

    text: str
    tokens: np.ndarray  # [tokens] int32 (bos + ids + eos)
    mel: np.ndarray  # [frames, n_mels] log mel after the postnet (true length), denormalised: a real log mel
    alignment: np.ndarray  # [frames, tokens] 0/1: the frames each token got from the predicted durations
    durations: np.ndarray  # [tokens] int32 frames per token (their sum may exceed frames: see ended_by)
    ended_by: str  # "durations" (their sum), or "maximum length" (cut at data.max_mel_frames, truncate_long)
    waveform: np.ndarray | None = None  # [samples] float32
    decode_seconds: float = 0.0  # share of the batch's compiled decoding time
    vocoder_seconds: float = 0.0
    text_bucket: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def frames(self) -> int:
        return int(self.mel.shape[0])


class SynthesisEngine:
    """The steps of synthesis on one model, each public (see the module docstring); ``Synthesizer.engine``."""

    def __init__(self, cfg: Config, model: TTSModel, vocabulary: Vocabulary, vocoder: Vocoder | None = None,
                 length_policy: LengthPolicy | None = None, batch_size: int = 1,
                 mel_stats: MelStats | None = None, length_scale: float = 1.0,
                 truncate_long: bool = False) -> None:
        """The arguments are ``Synthesizer``'s (documented there): it passes its own on."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        self.cfg, self.model, self.vocabulary = cfg, model, vocabulary
        self.mel_stats = mel_stats if mel_stats is not None else MelStats.identity(cfg.audio.n_mels)
        if self.mel_stats.n_mels != cfg.audio.n_mels:
            raise InputError(f"mel_stats has {self.mel_stats.n_mels} bins but audio.n_mels is {cfg.audio.n_mels}: "
                             "the run's mel_stats.json belongs to another audio config.")
        self.text_processor = run_text_processor(cfg, vocabulary)  # data.language's cleaner / voice, as prepare
        self.frontend = MelFrontend(cfg.audio)
        self.vocoder = vocoder if vocoder is not None else GriffinLim(cfg.audio)
        self.lengths = length_policy if length_policy is not None else LengthPolicy.from_config(cfg)
        self.batch_size = batch_size
        self.sample_rate = cfg.audio.sample_rate
        self.length_scale = float(length_scale)
        self.mel_sharpening = float(cfg.model.mel_sharpening)  # applied to every decoded mel (decode_tokens)
        # both decoders take their length from the predicted durations: one duration function per text bucket,
        # one decode function per mel bucket (the autoregressive one runs its steps inside it)
        self.decoder = CompiledDecoder(model, cfg.data.max_text_length, cfg.data.max_mel_frames,
                                       cfg.data.reference_frames, length_scale, truncate=truncate_long)

    @property
    def truncate_long(self) -> bool:
        """True: speech predicted past ``data.max_mel_frames`` is cut there (``ended_by`` "maximum length")."""
        return self.decoder.truncate

    @truncate_long.setter
    def truncate_long(self, value: bool) -> None:
        self.decoder.truncate = bool(value)

    # ---- text ------------------------------------------------------------------------------------
    def encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Texts -> token arrays ``[tokens]`` int32 (bos + ids + eos), one each; raises ``TextError`` (empty text, no
        known character) or ``TextTooLongError`` (more tokens than the largest text bucket) before any decoding."""
        encoded = [np.asarray(ids, np.int32) for ids in self.text_processor.encode_many(list(texts))]
        for ids in encoded:
            self.lengths.text_bucket(len(ids))  # fail before any decoding
        return encoded

    def split(self, text: str, length_scale: float | None = None) -> list[TextPiece]:
        """``text`` (a sentence, a paragraph, a chapter) as pieces that each fit one compiled call
        (``synthesis.text_split``) at ``length_scale`` (default: the engine's). Pieces of punctuation alone (a lone
        "...") are left out; any other piece that cannot be encoded (words in a script the vocabulary does not know)
        is a ``TextError`` naming it, never dropped; a word too long for any piece is an ``UnsplittableTextError``."""
        scale = self.length_scale if length_scale is None else length_scale
        budget = TokenBudget(self.text_processor.encode_many, self.lengths.piece_token_budget(scale))
        return split_speakable(text, budget)[0]

    # ---- voices ----------------------------------------------------------------------------------
    def reference_mel(self, reference: Reference) -> tuple[np.ndarray, int]:
        """A reference clip (a path in any format, or a waveform at the configured rate) -> the normalised
        conditioning mel ``[data.reference_frames, n_mels]`` (centre crop, or zero padding after normalising, as the
        training pipeline) and its true length."""
        waveform = self._reference_waveform(reference)  # [samples]
        return reference_crop(self.frontend(waveform).numpy(), self.cfg.data.reference_frames, self.mel_stats)

    def reference_windows(self, reference: Reference) -> list[tuple[np.ndarray, int]]:
        """A reference clip -> its normalised conditioning windows: up to ``model.reference_windows`` consecutive
        windows from the clip's middle (one, ``reference_mel``'s crop, for a short clip), each
        ``[data.reference_frames, n_mels]`` with its true length."""
        waveform = self._reference_waveform(reference)  # [samples]
        return reference_windows(self.frontend(waveform).numpy(), self.cfg.data.reference_frames, self.mel_stats,
                                 self.cfg.model.reference_windows)

    def _reference_waveform(self, reference: Reference) -> np.ndarray:
        """A clip's path (loaded and resampled) or a waveform (checked) -> ``[samples]`` float32 at the sample rate."""
        if isinstance(reference, (str, os.PathLike)):
            bound = max(REFERENCE_MAX_SECONDS, self.cfg.data.max_duration)
            return load_audio(reference, self.sample_rate, max_seconds=bound,  # raises AudioError naming the file
                              limit_name="the longest reference clip synthesis reads")
        waveform = np.asarray(reference, dtype=np.float32)
        if waveform.ndim != 1 or waveform.size == 0 or not np.all(np.isfinite(waveform)):
            raise InputError("A reference waveform must be a non-empty finite 1-D float array at "
                             f"audio.sample_rate ({self.sample_rate} Hz).")
        return waveform

    def latents(self, reference_mels: Sequence[np.ndarray], reference_lengths: Sequence[int]) -> np.ndarray:
        """Normalised reference mels (each ``[data.reference_frames, n_mels]``, from ``reference_mel`` or the feature
        cache) and their true lengths -> one voice each, the conditioning encoder's latents ``[R, K, d]``, computed in
        batches of the engine's batch size (the compiled shape)."""
        return self.decoder.latents(np.stack(reference_mels), np.asarray(reference_lengths, np.int32),
                                    self.batch_size)

    # ---- decoding and vocoding --------------------------------------------------------------------
    def decode_tokens(self, token_lists: Sequence[np.ndarray], voices: Sequence[np.ndarray],
                      batch_size: int | None = None, texts: Sequence[str] | None = None,
                      length_scales: Sequence[float] | None = None) -> list[SynthesisResult]:
        """Token arrays (``encode``'s), each with its own voice (latents ``[K, d]``: ``latents`` or
        ``Synthesizer.voice``) -> one ``SynthesisResult`` each, in order; no vocoder (``vocode`` adds the waveform).
        The results' ``mel`` is denormalised (a real log mel), then sharpened across bins by
        ``model.mel_sharpening`` when it is > 0.

        Items are sorted by length and grouped into batches of ``batch_size`` (default: the engine's; the last one
        padded by repeating its first item), so each batch uses the smallest text bucket that holds it. ``texts``
        name the items in the results and in a ``SynthesisLengthError``; ``length_scales``: the duration multiplier
        per item (default: the engine's ``length_scale`` for all)."""
        batch_size = batch_size or self.batch_size
        order = sorted(range(len(token_lists)), key=lambda i: len(token_lists[i]))
        results: list[SynthesisResult | None] = [None] * len(token_lists)
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            outputs, seconds = self._decode_batch([token_lists[i] for i in chunk],
                                                  [voices[i] for i in chunk], batch_size,
                                                  [texts[i] for i in chunk] if texts is not None else None,
                                                  [length_scales[i] for i in chunk] if length_scales else None)
            bucket_frames = outputs["mel"].shape[1]
            mels = self.mel_stats.denormalize(outputs["mel"])  # [batch, bucket frames, n_mels]: real log mels
            if self.mel_sharpening > 0:  # across bins only: each frame on its own, the padding frames never read
                mels = sharpen_across_bins(mels, self.mel_sharpening).numpy()
            for slot, index in enumerate(chunk):
                tokens = token_lists[index]
                frames = int(outputs["mel_lengths"][slot])
                durations = outputs["durations"][slot, :len(tokens)]  # [tokens]
                results[index] = SynthesisResult(
                    text=texts[index] if texts is not None else "", tokens=tokens, mel=mels[slot, :frames],
                    alignment=outputs["alignments"][slot, :frames, :len(tokens)], durations=durations,
                    ended_by="maximum length" if durations.sum() > bucket_frames else "durations",
                    decode_seconds=seconds / len(chunk), text_bucket=int(outputs["text_bucket"]))
        return results  # type: ignore[return-value]

    def _decode_batch(self, token_lists: Sequence[np.ndarray], voices: Sequence[np.ndarray], batch_size: int,
                      texts: Sequence[str] | None = None,
                      length_scales: Sequence[float] | None = None) -> tuple[dict[str, np.ndarray], float]:
        """At most ``batch_size`` items padded into one compiled call -> the decoder's outputs (with the text bucket
        used) and the seconds it took; slots past the items repeat the first item."""
        count = len(token_lists)
        bucket = self.lengths.text_bucket(max(len(t) for t in token_lists))
        tokens = np.full([batch_size, bucket], PAD_ID, np.int32)  # [B, text bucket]
        token_lengths = np.zeros([batch_size], np.int32)  # [B]
        latents = np.zeros([batch_size, *np.shape(voices[0])], np.float32)  # [B, K, d]
        for slot in range(batch_size):
            source = slot if slot < count else 0  # padding slots repeat the first item
            ids = token_lists[source]
            tokens[slot, : len(ids)] = ids
            token_lengths[slot] = len(ids)
            latents[slot] = voices[source]
        scales = None
        if length_scales is not None:  # padding slots repeat the first item's, as their tokens do
            scales = np.array([length_scales[slot if slot < count else 0] for slot in range(batch_size)], np.float32)
        started = time.perf_counter()
        outputs = self.decoder(tokens, token_lengths, latents, texts, scales)
        outputs["text_bucket"] = bucket
        return outputs, time.perf_counter() - started

    def vocode(self, result: SynthesisResult) -> np.ndarray:
        """A decoded result's mel -> its waveform ``[samples]`` float32 through the engine's vocoder, stored on the
        result (``waveform``, and ``vocoder_seconds`` the time it took) and returned."""
        started = time.perf_counter()
        waveform = np.asarray(self.vocoder(result.mel), dtype=np.float32)  # [samples]
        result.vocoder_seconds = time.perf_counter() - started
        result.waveform = waveform
        return waveform

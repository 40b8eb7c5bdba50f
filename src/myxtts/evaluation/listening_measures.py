"""Listening measures: does the synthesized audio say the text, and in whose voice? (The pretrained speaker
encoder, the independent judge of the voice, is ``evaluation.speaker_encoder``.)

- ``transcribe``: offline speech recognition with pocketsphinx's bundled en-US model (the ``listen``
  extra), 16 kHz int16 mono input; ``character_error_rate`` / ``corpus_character_error_rate`` compare
  its transcript with the text after ``normalize_for_cer`` (the project's English cleaner, then only
  letters, digits, apostrophes and single spaces). The recognizer's CER on real recordings and on their
  mel + Griffin-Lim resynthesis is the floor to compare a synthesis with: near the resynthesis' figure it
  says the text about as clearly as the vocoder allows (docs/synthesis.md, "Listening measures").
- ``speaker_embedding``: a voice description that needs no downloaded model (mel-cepstrum mean and
  spread over speech frames + F0 statistics); ``speaker_match`` scores whether each output is nearest
  to its own reference voice among all candidate voices (per-voice centroids of a few clips each).
"""

from __future__ import annotations

import functools
import importlib.util
import re
from typing import Mapping, Sequence

import numpy as np
import soxr

from myxtts.errors import SetupError
from myxtts.text import normalize_text

RECOGNIZER_RATE = 16000  # pocketsphinx's en-US acoustic model is trained on 16 kHz audio
_NOT_SPOKEN = re.compile(r"[^a-z0-9' ]+")
_SPACES = re.compile(r" +")


# ---- speech recognition ---------------------------------------------------------------------------
def recognizer_available() -> bool:
    """Whether pocketsphinx (``pip install 'myxtts[listen]'``) can be imported."""
    return importlib.util.find_spec("pocketsphinx") is not None


@functools.lru_cache(maxsize=1)
def _decoder():
    # loading the acoustic model, dictionary and language model is slow: once per process
    try:
        from pocketsphinx import Decoder  # optional: the listen extra
    except ImportError as err:
        raise SetupError("Speech recognition needs pocketsphinx: install the 'listen' extra "
                           "(pip install 'myxtts[listen]', or pip install 'pocketsphinx>=5').") from err
    return Decoder(loglevel="FATAL")


def transcribe(waveform: np.ndarray, sample_rate: int) -> str:
    """The words pocketsphinx hears in a mono float waveform (any rate; resampled to 16 kHz with soxr).

    Returns lowercase words separated by spaces ('' when nothing is recognised).
    """
    samples = np.asarray(waveform, dtype=np.float32)
    if samples.ndim != 1:
        raise ValueError(f"transcribe expects a mono 1-D waveform, got shape {samples.shape}.")
    if not np.all(np.isfinite(samples)):
        raise ValueError("transcribe got a waveform with NaN or Inf samples.")
    decoder = _decoder()
    if samples.size == 0:
        return ""
    if int(sample_rate) != RECOGNIZER_RATE:
        samples = soxr.resample(samples, int(sample_rate), RECOGNIZER_RATE)
    pcm = (np.clip(samples, -1.0, 1.0) * 32767.0).astype(np.int16)
    decoder.start_utt()
    decoder.process_raw(pcm.tobytes(), no_search=False, full_utt=True)
    decoder.end_utt()
    hypothesis = decoder.hyp()
    return hypothesis.hypstr.strip() if hypothesis is not None else ""


# ---- character error rate -------------------------------------------------------------------------
def normalize_for_cer(text: str) -> str:
    """Lowercase words as a listener would write them: numbers and abbreviations spelled out like the
    training text (``myxtts.text.normalize_text``), hyphens as spaces, then only letters, digits,
    apostrophes and single spaces."""
    text = normalize_text(text, "english").replace("-", " ")
    text = _NOT_SPOKEN.sub(" ", text)
    # apostrophes that quote rather than contract ('tis, the boys') carry no sound
    text = " ".join(word.strip("'") for word in text.split(" "))
    return _SPACES.sub(" ", text).strip()


def edit_distance(reference: str, hypothesis: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions of one character each cost 1)."""
    if not reference or not hypothesis:
        return max(len(reference), len(hypothesis))
    target = np.frombuffer(hypothesis.encode("utf-32-le"), dtype=np.uint32)  # [m]
    positions = np.arange(len(target) + 1)
    previous = positions.copy()  # distances from the empty reference prefix
    source = np.frombuffer(reference.encode("utf-32-le"), dtype=np.uint32)  # [n] code points
    for index, char in enumerate(source, start=1):
        current = np.empty_like(previous)
        current[0] = index
        # deletion (from above) and substitution / match (diagonal), vectorised over the row
        current[1:] = np.minimum(previous[1:] + 1, previous[:-1] + (target != char))
        # insertions chain along the row: current[j] = min_k(current[k] + j - k) = j + cummin(current - k)
        current = positions + np.minimum.accumulate(current - positions)
        previous = current
    return int(previous[-1])


def character_error_rate(reference: str, hypothesis: str) -> float:
    """Character edits from the normalised reference to the normalised hypothesis / reference length.

    0 for identical texts, 1 for an empty hypothesis; above 1 when the hypothesis adds a lot.
    """
    reference_chars, hypothesis_chars = normalize_for_cer(reference), normalize_for_cer(hypothesis)
    if not reference_chars:
        raise ValueError(f"The reference text {reference!r} has no letter or digit: its CER is undefined.")
    return edit_distance(reference_chars, hypothesis_chars) / len(reference_chars)


def corpus_character_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Sum of character edits / sum of reference lengths (long sentences weigh more than short ones)."""
    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} references but {len(hypotheses)} hypotheses.")
    if not references:
        raise ValueError("corpus_character_error_rate needs at least one (reference, hypothesis) pair.")
    edits = length = 0
    for reference, hypothesis in zip(references, hypotheses):
        reference_chars = normalize_for_cer(reference)
        edits += edit_distance(reference_chars, normalize_for_cer(hypothesis))
        length += len(reference_chars)
    if length == 0:
        raise ValueError("Every reference text is empty after normalisation: the CER is undefined.")
    return edits / length


def listen(waveforms: Sequence[np.ndarray], texts: Sequence[str], sample_rate: int) -> dict:
    """Transcribe each waveform: ``{"cer": corpus CER, "items": [{"text", "heard", "cer"}, ...]}``."""
    heard = [transcribe(waveform, sample_rate) for waveform in waveforms]
    items = [{"text": text, "heard": words, "cer": character_error_rate(text, words)}
             for text, words in zip(texts, heard)]
    return {"cer": corpus_character_error_rate(list(texts), heard), "items": items}


# ---- speaker embedding and match ------------------------------------------------------------------
CEPSTRAL_COEFFICIENTS = 20
_PITCH_FRAME = 640  # 40 ms at 16 kHz: two periods of a 50 Hz voice
_PITCH_HOP = 160  # 10 ms
_PITCH_RANGE_HZ = (60.0, 400.0)
_VOICED_CORRELATION = 0.5  # normalised autocorrelation peak above which a frame counts as voiced
_SPEECH_RANGE_DB = 35.0  # frames within this of the loudest frame count as speech


def _pitch(samples: np.ndarray) -> tuple[np.ndarray, float]:
    """F0 in Hz of the voiced frames (autocorrelation peak) and the voiced share of loud frames."""
    if samples.size < _PITCH_FRAME:
        return np.zeros([0]), 0.0
    count = 1 + (samples.size - _PITCH_FRAME) // _PITCH_HOP
    index = np.arange(_PITCH_FRAME)[None, :] + _PITCH_HOP * np.arange(count)[:, None]
    frames = samples[index] * np.hanning(_PITCH_FRAME)[None, :]  # [count, frame]
    frames -= frames.mean(axis=1, keepdims=True)
    energy = np.sum(frames ** 2, axis=1)
    loud = energy > energy.max() * 10.0 ** (-_SPEECH_RANGE_DB / 10.0)
    spectrum = np.fft.rfft(frames[loud], n=2 * _PITCH_FRAME)
    correlation = np.fft.irfft(np.abs(spectrum) ** 2)[:, :_PITCH_FRAME]  # [loud, lags]
    correlation /= np.maximum(correlation[:, :1], 1e-12)
    shortest, longest = int(RECOGNIZER_RATE / _PITCH_RANGE_HZ[1]), int(RECOGNIZER_RATE / _PITCH_RANGE_HZ[0])
    lags = np.argmax(correlation[:, shortest:longest], axis=1) + shortest
    peaks = correlation[np.arange(len(lags)), lags]
    voiced = peaks > _VOICED_CORRELATION
    return RECOGNIZER_RATE / lags[voiced], float(voiced.mean()) if voiced.size else 0.0


def speaker_embedding(waveform: np.ndarray, sample_rate: int) -> np.ndarray:
    """A fixed-size voice description ``[2 * CEPSTRAL_COEFFICIENTS + 3]`` (float64) of a waveform.

    Mean and standard deviation of mel cepstra c1..c20 over speech frames (the vocal tract's
    colour, not the words), then median and spread of log F0 and the voiced share (pitch). Compare
    embeddings after standardising each dimension over a set of voices (``speaker_match`` does).
    """
    from myxtts.evaluation.metrics import log_mel, mel_cepstrum  # imports TensorFlow: transcription needs none

    samples = np.asarray(waveform, dtype=np.float32)
    if samples.ndim != 1 or samples.size < _PITCH_FRAME:
        raise ValueError(f"speaker_embedding needs a mono waveform of at least {_PITCH_FRAME} samples at "
                         f"16 kHz, got shape {samples.shape}.")
    if int(sample_rate) != RECOGNIZER_RATE:
        samples = soxr.resample(samples, int(sample_rate), RECOGNIZER_RATE)
    mel = log_mel(samples, RECOGNIZER_RATE)  # [frames, n_mels] natural log
    loudness = mel.max(axis=1)
    speech = loudness > loudness.max() - _SPEECH_RANGE_DB / 20.0 * np.log(10.0)
    cepstra = mel_cepstrum(mel[speech], CEPSTRAL_COEFFICIENTS)  # [speech frames, coefficients]
    f0, voiced_share = _pitch(samples)
    if f0.size >= 2:
        log_f0 = np.log(f0)
        pitch = [float(np.median(log_f0)), float(np.subtract(*np.percentile(log_f0, [75, 25]))), voiced_share]
    else:  # whispered / noise: no pitch to describe
        pitch = [float(np.log(100.0)), 0.0, voiced_share]
    return np.concatenate([cepstra.mean(axis=0), cepstra.std(axis=0), pitch])


def nearest_voices(outputs: Sequence[np.ndarray], references: Mapping[str, Sequence[np.ndarray]],
                   groups: Sequence[object] | None = None) -> list[str]:
    """For each output embedding, the voice whose reference centroid is nearest (cosine similarity
    after standardising every dimension over all reference embeddings, so no feature's scale wins).

    ``groups`` (one key per output, e.g. its text): compare *relatively*. Each output is taken minus the
    mean of its group (the same text in every voice) and each centroid minus the mean centroid, so what is
    matched is how an output differs from the other voices' outputs of the same text against how its voice
    differs from the others; a colouring common to every synthesis (blur, a vocoder's timbre) cancels.
    """
    if len(references) < 2 or any(len(clips) == 0 for clips in references.values()):
        raise ValueError("nearest_voices needs at least two voices, each with at least one reference embedding.")
    names = list(references)
    pooled = np.stack([embedding for name in names for embedding in references[name]])  # [clips, dims]
    mean, scale = pooled.mean(axis=0), pooled.std(axis=0) + 1e-8

    def standard(vectors: np.ndarray) -> np.ndarray:
        return (vectors - mean) / scale

    def unit(vectors: np.ndarray) -> np.ndarray:
        return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)

    centroids = np.stack([np.mean(unit(standard(np.stack(references[name]))), axis=0) for name in names])
    embedded = standard(np.stack(outputs))  # [outputs, dims]
    if groups is not None:
        if len(groups) != len(outputs):
            raise ValueError(f"{len(groups)} groups for {len(outputs)} outputs.")
        keys = list(groups)
        for key in set(keys):
            rows = [index for index, other in enumerate(keys) if other == key]
            if len(rows) < 2:  # minus its own mean an output is zero: nothing left to match
                raise ValueError(f"Group {key!r} has one output; a relative match needs each group's text spoken "
                                 "in at least two voices.")
            embedded[rows] -= embedded[rows].mean(axis=0)
        centroids = centroids - centroids.mean(axis=0)
    similarity = unit(embedded) @ unit(centroids).T  # [outputs, voices]
    return [names[index] for index in np.argmax(similarity, axis=1)]


def speaker_match(outputs: Sequence[tuple[str, np.ndarray]], references: Mapping[str, Sequence[np.ndarray]],
                  sample_rate: int, groups: Sequence[object] | None = None) -> float:
    """Share of outputs nearest to their own reference voice among all voices (chance: 1 / voices).

    ``outputs``: ``(voice, waveform)`` pairs, the voice each output was asked to speak in;
    ``references``: ``voice -> waveforms`` of that voice (a few clips each make its centroid);
    ``groups``: optional key per output (its text) for the relative match of ``nearest_voices``.
    """
    if not outputs:
        raise ValueError("speaker_match needs at least one (voice, waveform) output.")
    unknown = sorted({voice for voice, _ in outputs} - set(references))
    if unknown:
        raise ValueError(f"Outputs name voices without reference clips: {unknown}.")
    reference_embeddings = {voice: [speaker_embedding(clip, sample_rate) for clip in clips]
                            for voice, clips in references.items()}
    chosen = nearest_voices([speaker_embedding(wave, sample_rate) for _, wave in outputs], reference_embeddings,
                            groups)
    return float(np.mean([voice == nearest for (voice, _), nearest in zip(outputs, chosen)]))

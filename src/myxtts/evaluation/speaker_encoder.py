"""Speaker similarity from a pretrained speaker encoder, the independent judge of the voice.

``speaker_similarity``: Resemblyzer's pretrained GE2E speaker
  encoder (the ``judge`` extra; weights in its wheel, offline, CPU): the cosine of each output's
  embedding with the mean embedding of real clips of the speaker. ``reference_similarity`` gives the
  same cosine for real clips (leave-one-out) and their mel + Griffin-Lim resynthesis, so an output is
  read as "output X / real Y / Griffin-Lim Z" (what those read as: docs/synthesis.md, "Speaker similarity").
"""

from __future__ import annotations

import functools
import importlib.util
import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import soxr

from myxtts.config import AudioConfig
from myxtts.errors import SetupError

SPEAKER_ENCODER_RATE = 16000  # Resemblyzer's GE2E encoder: 40-band mels of 16 kHz audio
_MIN_VOICE_SAMPLES = SPEAKER_ENCODER_RATE // 10  # 0.1 s
_JUDGE_INSTALL = ("Speaker similarity needs Resemblyzer (a pretrained GE2E speaker encoder whose weights ship in "
                  "its wheel; runs offline on the CPU; pulls torch): install the 'judge' extra "
                  "(pip install -e '.[judge]', or pip install 'Resemblyzer>=0.1.4' 'setuptools<81').")


def speaker_encoder_available() -> bool:
    """Whether Resemblyzer (``pip install -e '.[judge]'``) can be imported."""
    return importlib.util.find_spec("resemblyzer") is not None


@functools.lru_cache(maxsize=1)
def _speaker_encoder():
    """Resemblyzer's ``(VoiceEncoder on the CPU, preprocess_wav, normalize_volume)``, loaded once per process."""
    try:
        with warnings.catch_warnings():
            # import-time noise we do not control: webrtcvad imports pkg_resources, resemblyzer a
            # deprecated scipy.ndimage namespace
            warnings.simplefilter("ignore")
            from resemblyzer import VoiceEncoder, normalize_volume, preprocess_wav  # optional: the judge extra
    except ImportError as err:
        raise SetupError(f"{_JUDGE_INSTALL} (import failed: {err})") from err
    return VoiceEncoder(device="cpu", verbose=False), preprocess_wav, normalize_volume


def voice_embedding(waveform: np.ndarray, sample_rate: int) -> np.ndarray:
    """Resemblyzer's unit-length speaker embedding ``[256]`` (float32, every entry >= 0) of a mono waveform.

    Resampled to 16 kHz with soxr, then Resemblyzer's ``preprocess_wav``: quiet audio raised to -30 dBFS,
    pauses longer than ~0.2 s cut (webrtcvad); when the VAD hears no voice at all the untrimmed audio is
    embedded. The embeddings of 1.6 s windows are averaged and normalised. An all-zero vector when the
    encoder finds nothing (its ReLU output silent): its cosine with any voice is 0.
    """
    samples = np.asarray(waveform, dtype=np.float32)
    if samples.ndim != 1:
        raise ValueError(f"voice_embedding expects a mono 1-D waveform, got shape {samples.shape}.")
    if not np.all(np.isfinite(samples)):
        raise ValueError("voice_embedding got a waveform with NaN or Inf samples.")
    encoder, preprocess, normalize_volume = _speaker_encoder()
    if int(sample_rate) != SPEAKER_ENCODER_RATE and samples.size:
        samples = soxr.resample(samples, int(sample_rate), SPEAKER_ENCODER_RATE).astype(np.float32)
    if samples.size < _MIN_VOICE_SAMPLES or not np.any(samples):
        raise ValueError(f"voice_embedding needs at least 0.1 s of audio that is not all zero, got "
                         f"{samples.size} samples at {SPEAKER_ENCODER_RATE} Hz.")
    trimmed = preprocess(samples)
    if trimmed.size < _MIN_VOICE_SAMPLES:  # no voice detected: judge the sound as it is
        trimmed = normalize_volume(samples, -30, increase_only=True)
    embedding = encoder.embed_utterance(np.asarray(trimmed, dtype=np.float32))
    if not np.all(np.isfinite(embedding)):
        return np.zeros(embedding.shape, np.float32)
    return embedding.astype(np.float32)


def _unit_mean(embeddings: Sequence[np.ndarray]) -> np.ndarray:
    """The speaker's centroid: mean of utterance embeddings, normalised (Resemblyzer's ``embed_speaker``)."""
    mean = np.mean(np.stack(embeddings), axis=0)
    return mean / max(float(np.linalg.norm(mean)), 1e-12)


def _cosine(embedding: np.ndarray, centroid: np.ndarray) -> float:
    norm = float(np.linalg.norm(embedding)) * float(np.linalg.norm(centroid))
    return float(np.dot(embedding, centroid) / norm) if norm > 0 else 0.0


@dataclass(frozen=True)
class SpeakerSimilarity:
    """Cosines (one per judged clip) between Resemblyzer embeddings and a speaker's mean embedding.

    Resemblyzer embeddings are non-negative, so unrelated voices still score ~0.5-0.75; clips of one
    speaker score ~0.85-0.95. Read a score against the real / Griffin-Lim figures of ``reference_similarity``.
    """

    scores: tuple[float, ...]

    @property
    def mean(self) -> float:
        return float(np.mean(self.scores))

    @property
    def minimum(self) -> float:
        return float(np.min(self.scores))

    def __str__(self) -> str:
        return f"{self.mean:.3f}"


@dataclass(frozen=True)
class ReferenceSimilarity:
    """What a synthesis's speaker similarity can be compared with.

    ``real``: each real clip against the mean of the *other* real clips (leave-one-out), the score of a
    perfect synthesis; ``griffin_lim``: each clip's raw log mel (``MelFrontend``) inverted by ``GriffinLim``
    against the mean of the other real clips, the ceiling of a Griffin-Lim synthesis (None when skipped).
    """

    real: SpeakerSimilarity
    griffin_lim: SpeakerSimilarity | None

    def summary(self, output: SpeakerSimilarity | None = None) -> str:
        """``"output 0.712 / real 0.903 / Griffin-Lim 0.871"`` (parts that are present)."""
        parts = [] if output is None else [f"output {output}"]
        parts.append(f"real {self.real}")
        if self.griffin_lim is not None:
            parts.append(f"Griffin-Lim {self.griffin_lim}")
        return " / ".join(parts)


def speaker_similarity(outputs: Sequence[np.ndarray], references: Sequence[np.ndarray], sample_rate: int,
                       reference_rate: int | None = None) -> SpeakerSimilarity:
    """For each output waveform, the cosine between its Resemblyzer embedding (``voice_embedding``) and the
    mean embedding of ``references``, real clips of the voice it should speak in.

    ``sample_rate``: the outputs' rate; ``reference_rate``: the references' (default: the same). Needs the
    ``judge`` extra (``RuntimeError`` naming it otherwise).
    """
    if not outputs:
        raise ValueError("speaker_similarity needs at least one output waveform.")
    if not references:
        raise ValueError("speaker_similarity needs at least one reference clip of the speaker.")
    rate = int(sample_rate if reference_rate is None else reference_rate)
    centroid = _unit_mean([voice_embedding(clip, rate) for clip in references])
    return SpeakerSimilarity(tuple(_cosine(voice_embedding(wave, sample_rate), centroid) for wave in outputs))


def reference_similarity(references: Sequence[np.ndarray], sample_rate: int, audio_cfg=None,
                         griffin_lim: bool = True) -> ReferenceSimilarity:
    """Speaker similarity of real clips (each against the mean of the others) and, with ``griffin_lim``,
    of their mel + Griffin-Lim resynthesis (each against the mean of the *other* real clips), so a
    synthesis can be printed as "output X / real Y / Griffin-Lim Z".

    ``audio_cfg``: the ``AudioConfig`` of the mel and the vocoder (default ``AudioConfig()``); references at
    another rate are resampled to its rate (soxr) before the mel. Needs two or more reference clips.
    """
    if len(references) < 2:
        raise ValueError(f"reference_similarity needs at least two real clips (leave-one-out), got {len(references)}.")
    real = [voice_embedding(clip, sample_rate) for clip in references]

    def held_out(index: int) -> np.ndarray:
        return _unit_mean([embedding for other, embedding in enumerate(real) if other != index])

    real_scores = SpeakerSimilarity(tuple(_cosine(real[index], held_out(index)) for index in range(len(real))))
    if not griffin_lim:
        return ReferenceSimilarity(real_scores, None)

    # both import TensorFlow: only the Griffin-Lim resynthesis needs it, the similarity of clips alone does not
    from myxtts.mel import MelFrontend
    from myxtts.vocoder import GriffinLim  # TensorFlow too, as the comment above says

    audio = AudioConfig() if audio_cfg is None else audio_cfg
    frontend, vocoder = MelFrontend(audio), GriffinLim(audio)
    resynthesised = []
    for index, clip in enumerate(references):
        samples = np.asarray(clip, dtype=np.float32)
        if int(sample_rate) != audio.sample_rate:
            samples = soxr.resample(samples, int(sample_rate), audio.sample_rate).astype(np.float32)
        wave = np.asarray(vocoder(frontend(samples)))  # raw log mel -> audio at audio.sample_rate
        resynthesised.append(_cosine(voice_embedding(wave, audio.sample_rate), held_out(index)))
    return ReferenceSimilarity(real_scores, SpeakerSimilarity(tuple(resynthesised)))

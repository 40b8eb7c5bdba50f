"""Speech from a LiteRT export (``myxtts export --format litert``) without TensorFlow: ``ai-edge-litert``'s
interpreter, numpy and the project's text front-end.

    voice = LiteRtVoice("exports/voice-litert")
    embedding = voice.speaker_embedding(reference_waveform)   # [1, K, d]: the voice, from one clip
    waveform = voice.say("Hello there.", embedding)            # [samples] float32 at voice.sample_rate

``say`` encodes the text as training did (``vocab.json``, ``config.yaml``), runs ``durations_T`` of the smallest text
bucket that holds it, then ``decode_F`` of the smallest mel bucket that holds its durations; a text longer than the
largest bucket is refused with a ``LiteRtLengthError`` that says to split it (``say_long`` splits at sentences).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import soundfile  # the project's audio readers, here without myxtts.audio (which imports TensorFlow)
import soxr

from myxtts.config import load_config
from myxtts.data.language import run_text_processor
from myxtts.errors import InputError
from myxtts.run_dir import RunDir
from myxtts.text import Vocabulary

MODEL_FILE = "model.tflite"  # the names export_litert writes (myxtts.synthesis.litert, which imports TensorFlow)
RECORD_FILE = "litert.json"
SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")


class LiteRtLengthError(InputError):
    """A text or its speech longer than the largest bucket of the export."""


def read_clip(path: str | Path, sample_rate: int) -> np.ndarray:
    """An audio file (any format soundfile reads) -> mono float32 ``[samples]`` at ``sample_rate`` (soxr)."""
    try:
        waveform, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except (OSError, RuntimeError) as error:
        raise InputError(f"Cannot read the reference {path}: {error}. Give a WAV, FLAC or OGG file.") from error
    mono = waveform.mean(axis=1)
    return mono if rate == sample_rate else soxr.resample(mono, rate, sample_rate).astype(np.float32)


def reference_window(waveform: np.ndarray, reference_frames: int, n_fft: int, hop_length: int) -> tuple[np.ndarray,
                                                                                                         int]:
    """A clip ``[samples]`` -> (the samples its middle ``reference_frames`` mel frames read ``[(reference_frames - 1)
    * hop + n_fft]`` float32, how many of those frames are real): the clip reflect-padded by ``n_fft // 2`` as the
    front-end pads it, the engine's centre crop of its frames, zeros after a clip shorter than the window."""
    waveform = np.asarray(waveform, np.float32)
    if waveform.ndim != 1 or waveform.size <= n_fft // 2 or not np.all(np.isfinite(waveform)):
        raise InputError(f"A reference must be a finite 1-D waveform longer than {n_fft // 2} samples.")
    padded = np.pad(waveform, n_fft // 2, mode="reflect")
    frames = 1 + waveform.size // hop_length
    start = max((frames - reference_frames) // 2, 0)
    count = min(reference_frames, frames)
    window = np.zeros((reference_frames - 1) * hop_length + n_fft, np.float32)
    piece = padded[start * hop_length:start * hop_length + (count - 1) * hop_length + n_fft]
    window[:piece.size] = piece
    return window, count


class LiteRtVoice:
    """One LiteRT export folder: its interpreter and signatures, its text front-end and its shapes."""

    def __init__(self, folder: str | Path, threads: int | None = None) -> None:
        from ai_edge_litert.interpreter import Interpreter  # optional: the litert extra

        folder = Path(folder)
        if not (folder / MODEL_FILE).is_file() or not (folder / RECORD_FILE).is_file():
            raise InputError(f"{folder} holds no LiteRT export ({MODEL_FILE} and {RECORD_FILE}): write one with "
                             "`myxtts export --format litert`.")
        self.record = json.loads((folder / RECORD_FILE).read_text(encoding="utf-8"))
        cfg = load_config(folder / RunDir.CONFIG)
        self.text_processor = run_text_processor(cfg, Vocabulary.load(folder / RunDir.VOCAB, cfg.text))
        self.sample_rate = int(self.record["sample_rate"])
        self.text_buckets, self.mel_buckets = list(self.record["text_buckets"]), list(self.record["mel_buckets"])
        self.interpreter = Interpreter(model_path=str(folder / MODEL_FILE), num_threads=threads)
        self._runners: dict[str, object] = {}

    def runner(self, name: str):
        """The signature runner of ``name`` (``speaker_embedding``, ``durations_T``, ``decode_F``), made once."""
        if name not in self._runners:
            self._runners[name] = self.interpreter.get_signature_runner(name)
        return self._runners[name]

    def speaker_embedding(self, waveform: np.ndarray) -> np.ndarray:
        """A reference clip ``[samples]`` at ``sample_rate`` -> the voice's embedding ``[1, K, d]``."""
        record = self.record
        window, frames = reference_window(waveform, record["reference_frames"], record["n_fft"],
                                          record["hop_length"])
        return self.runner("speaker_embedding")(window=window[None], frames=np.array([frames], np.int32))["embedding"]

    def tokens(self, text: str) -> np.ndarray:
        """``text`` -> its token ids ``[tokens]`` int32 (``<bos>`` + symbols + ``<eos>``), as training encoded."""
        return np.asarray(self.text_processor.encode(text), np.int32)

    def say(self, text: str, embedding: np.ndarray, speed: float = 1.0) -> np.ndarray:
        """One sentence in the voice of ``embedding`` -> its waveform ``[samples]`` float32; ``speed`` in [0.25, 4]."""
        if not 0.25 <= speed <= 4.0:  # NaN fails too; the graph's own bound (synthesis.export.SPEED_RANGE)
            raise InputError(f"speed must be in [0.25, 4] (1: the trained rate), got {speed}.")
        ids = self.tokens(text)
        bucket = next((size for size in self.text_buckets if size >= ids.size), None)
        if bucket is None:
            raise LiteRtLengthError(f"The text has {ids.size} tokens, more than the largest bucket "
                                    f"({self.text_buckets[-1]}): split it into sentences (say_long does).")
        token_ids = np.zeros([1, bucket], np.int32)
        token_ids[0, :ids.size] = ids
        timing = self.runner(f"durations_{bucket}")(token_ids=token_ids, token_count=np.array([ids.size], np.int32),
                                                    speed=np.array([speed], np.float32))
        frames = int(timing["durations"].sum())
        mel_bucket = next((size for size in self.mel_buckets if size >= frames), None)
        if mel_bucket is None:
            raise LiteRtLengthError(f"The speech of {text[:60]!r} is {frames} frames long, more than the largest "
                                    f"bucket ({self.mel_buckets[-1]}): split it into shorter sentences, or speak "
                                    "faster.")
        out = self.runner(f"decode_{mel_bucket}")(text=timing["text"], durations=timing["durations"],
                                                  embedding=np.asarray(embedding, np.float32))
        return out["waveform"][0, :int(out["samples"][0])]

    def say_long(self, text: str, embedding: np.ndarray, speed: float = 1.0, pause_seconds: float = 0.25) -> np.ndarray:
        """A text of any number of sentences (split after . ! ? ; :) -> one waveform, a short pause between them."""
        pause = np.zeros(int(pause_seconds * self.sample_rate), np.float32)
        pieces = [piece for piece in SENTENCE_END.split(text.strip()) if piece.strip()]
        if not pieces:
            raise InputError("The text is empty.")
        waves = []
        for piece in pieces:
            waves += [self.say(piece, embedding, speed), pause]
        return np.concatenate(waves[:-1])

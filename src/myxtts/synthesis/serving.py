"""The serving engine: many requests' sentences batched into the synthesizer's compiled calls, streamed in order.

A request's text is split into pieces (``Synthesizer.split``) and its pieces join one queue shared by all requests.
One engine thread owns the decoder: it takes up to ``batch_size`` queued pieces (whoever they belong to, each with
its own voice and speed), earliest piece index first (a new request's first sentence goes ahead of the others'
later ones: time to first audio stays short under load), decodes them in one compiled call per bucket
(``decode_tokens``: every function was traced at start-up by ``warm_up_all``) and hands each piece's mel to a pool
of ``vocoder_threads`` threads (TF ops release the GIL: the next batch decodes while the last is vocoded, on the
other core), which delivers its audio to its request's stream. The stream yields pieces in order, each followed by
its pause, as 16-bit PCM. A cancelled stream (the
client went away) has its remaining pieces dropped from the queue. Nothing here knows about HTTP
(``synthesis/http.py``).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from myxtts.synthesis.synthesizer import Synthesizer
from myxtts.synthesis.text_split import TextPiece

DEFAULT_MAX_CHARACTERS = 4096


class SpeechRequestError(ValueError):
    """A request that cannot be served as asked (empty or oversized text, unknown voice, bad speed); ``param`` names
    the field, ``status`` the HTTP status it maps to (413 for a text over the limit, else 400)."""

    def __init__(self, message: str, param: str, status: int = 400):
        super().__init__(message)
        self.param, self.status = param, status


@dataclass
class Voice:
    name: str
    latents: np.ndarray  # [K, d] the conditioning encoder's latents of the voice's clip (Synthesizer.voice)


@dataclass
class SpeechStream:
    """One request's audio, piece by piece: iterate ``pcm16()`` (blocking) or poll ``next_chunk()``."""

    pieces: list[TextPiece]
    sample_rate: int
    _ready: "queue.Queue[tuple[int, np.ndarray | BaseException]]" = field(default_factory=queue.Queue)
    cancelled: bool = False
    submitted: float = field(default_factory=time.perf_counter)
    first_audio: float | None = None  # perf_counter when the first piece was ready

    def deliver(self, index: int, audio: "np.ndarray | BaseException") -> None:
        if self.first_audio is None and index == 0:
            self.first_audio = time.perf_counter()
        self._ready.put((index, audio))

    def cancel(self) -> None:
        self.cancelled = True

    def pcm16(self, timeout: float | None = None) -> Iterator[bytes]:
        """Each piece's audio then its pause, as little-endian 16-bit PCM, in order; raises what the engine raised."""
        waiting: dict[int, np.ndarray] = {}
        for index, piece in enumerate(self.pieces):
            while index not in waiting:
                got, audio = self._ready.get(timeout=timeout)
                if isinstance(audio, BaseException):
                    raise audio
                waiting[got] = audio
            audio = waiting.pop(index)
            pause = np.zeros([int(round(piece.pause_after * self.sample_rate))], np.float32)
            yield to_pcm16(np.concatenate([audio, pause]))


def to_pcm16(waveform: np.ndarray) -> bytes:
    return (np.clip(waveform, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def wav_header(sample_rate: int, data_bytes: int = 0xFFFFFFFF - 36) -> bytes:
    """A 44-byte mono 16-bit PCM WAV header; the default sizes say "until the stream ends" (streaming players and
    soundfile read it)."""
    import struct

    return (b"RIFF" + struct.pack("<I", min(data_bytes + 36, 0xFFFFFFFF)) + b"WAVEfmt "
            + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
            + b"data" + struct.pack("<I", min(data_bytes, 0xFFFFFFFF)))


class SpeechEngine:
    """Owns a ``Synthesizer``; ``submit`` from any thread, audio comes back on the stream."""

    def __init__(self, synthesizer: Synthesizer, voices: dict[str, "str | os.PathLike | list"], batch_size: int = 4,
                 max_characters: int = DEFAULT_MAX_CHARACTERS, vocoder_threads: int = 2):
        if not voices:
            raise ValueError("Give at least one voice (--voice NAME=CLIP.wav): requests choose one by name.")
        self.synthesizer, self.batch_size, self.max_characters = synthesizer, batch_size, max_characters
        # a piece predicted past data.max_mel_frames is cut there: one such piece must not fail the other
        # requests that share its batch (pieces are sized to fit, so this is rare)
        synthesizer.decoder.truncate = True
        self.voices = {}
        for name, clip in voices.items():
            self.voices[name] = Voice(name, synthesizer.voice(clip))  # AudioError naming the clip
        self._text_lock = threading.Lock()  # the text front-end (espeak) is used by one thread at a time
        self._pending: list[tuple] = []  # (piece index, arrival, stream, tokens, voice, scale)
        self._arrivals = 0
        self._wake = threading.Condition()
        self._closed = False
        started = time.perf_counter()
        synthesizer.warm_up_all(batch_size)
        self.vocode(np.zeros([2, synthesizer.cfg.audio.n_mels], np.float32))  # the vocoder's one graph too
        self.warmup_seconds = time.perf_counter() - started
        self.compiles_at_warmup = self.compiles()
        self.served = 0
        self._vocoders = ThreadPoolExecutor(max_workers=vocoder_threads, thread_name_prefix="myxtts-vocoder")
        self._thread = threading.Thread(target=self._run, name="myxtts-speech-engine", daemon=True)
        self._thread.start()

    def compiles(self) -> int:
        return self.synthesizer.tracing_count() + self.synthesizer.vocoder.tracing_count()

    def compiles_after_warmup(self) -> int:
        return self.compiles() - self.compiles_at_warmup

    def vocode(self, log_mel: np.ndarray) -> np.ndarray:
        return np.asarray(self.synthesizer.vocoder(log_mel), np.float32)

    # ---- requests -------------------------------------------------------------------------------------
    def submit(self, text: str, voice: str, speed: float = 1.0) -> SpeechStream:
        """Split and encode ``text`` (raises ``SpeechRequestError`` / ``TextError`` before anything is queued)."""
        if voice not in self.voices:
            raise SpeechRequestError(f"Unknown voice {voice!r}; this server has {sorted(self.voices)}.", "voice")
        if not text or not text.strip():
            raise SpeechRequestError("The input text is empty.", "input")
        if len(text) > self.max_characters:
            raise SpeechRequestError(f"The input has {len(text)} characters, more than this server's limit of "
                                     f"{self.max_characters}; send it in parts.", "input", status=413)
        if not 0.25 <= speed <= 4.0:
            raise SpeechRequestError(f"speed must be in [0.25, 4.0], got {speed}.", "speed")
        scale = 1.0 / speed
        with self._text_lock:
            pieces = self.synthesizer.split(text, length_scale=scale)
            tokens = [np.asarray(t, np.int32) for t in self.synthesizer.encode([p.text for p in pieces])]
        stream = SpeechStream(pieces, self.synthesizer.sample_rate)
        with self._wake:
            if self._closed:
                raise RuntimeError("the speech engine is shut down")
            for index, ids in enumerate(tokens):
                self._pending.append((index, self._arrivals, stream, ids, self.voices[voice], scale))
                self._arrivals += 1
            self._wake.notify()
        return stream

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout=60)
        self._vocoders.shutdown(wait=True)

    def queued(self) -> int:
        with self._wake:
            return len(self._pending)

    # ---- the engine thread and the vocoder pool --------------------------------------------------------
    def _vocode_into(self, stream: SpeechStream, index: int, log_mel: np.ndarray) -> None:
        try:
            stream.deliver(index, self.vocode(log_mel))
        except Exception as err:  # noqa: BLE001  the request fails, the pool goes on
            stream.deliver(index, err)

    def _take(self) -> list[tuple]:
        with self._wake:
            while not self._closed and not self._pending:
                self._wake.wait()
            self._pending = [item for item in self._pending if not item[2].cancelled]
            self._pending.sort(key=lambda item: item[:2])  # earliest piece index, then arrival
            batch, self._pending = self._pending[:self.batch_size], self._pending[self.batch_size:]
            return [(stream, index, ids, voice, scale) for index, _, stream, ids, voice, scale in batch]

    def _run(self) -> None:
        while not self._closed:
            batch = self._take()
            if not batch:
                continue
            try:
                results = self.synthesizer.decode_tokens(
                    [item[2] for item in batch], [item[3].latents for item in batch], batch_size=self.batch_size,
                    length_scales=[item[4] for item in batch])
                for (stream, index, *_), result in zip(batch, results):
                    if not stream.cancelled:
                        self._vocoders.submit(self._vocode_into, stream, index, result.mel)
                self.served += len(batch)
            except Exception as err:  # noqa: BLE001  one bad batch fails its requests, never the engine
                for stream, index, *_ in batch:
                    stream.deliver(index, err)

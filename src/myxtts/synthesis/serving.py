"""The serving engine: many requests' sentences batched into the synthesizer's compiled calls, streamed in order.

A request's text is split into pieces (``Synthesizer.split``) and its pieces join one queue shared by all requests.
One engine thread owns the decoder: it takes up to ``batch_size`` queued pieces (whoever they belong to, each with
its own voice and speed), earliest piece index first (a new request's first sentence goes ahead of the others'
later ones: time to first audio stays short under load), decodes them in one compiled call per bucket
(``decode_tokens``: every function was traced at start-up by ``warm_up_all``) and hands each piece's mel to a pool
of ``vocoder_threads`` threads (TF ops release the GIL: the next batch decodes while the last is vocoded, on the
other core), which delivers its audio to its request's stream (``speech_stream.py``: the stream yields pieces in
order, each followed by its pause, as 16-bit PCM).

The engine is bounded by ``ServerLimits`` (``server_limits.py``): a request over ``max_characters`` or
``max_pieces`` is refused before anything is queued, and one that would pass ``max_requests_in_flight`` or
``max_queued_pieces`` gets ``EngineBusyError`` with a Retry-After estimated from the backlog and the measured
seconds per piece. The backlog is counted where it really sits: pending (not yet decoded), decoding, vocoding.
A cancelled stream (the client went away or stopped reading) has its pending pieces dropped at once and its
decoded ones skipped before vocoding. Nothing here knows about HTTP (``synthesis/http.py``).
"""

from __future__ import annotations

import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from myxtts.synthesis.lengths import TextTooLongError
from myxtts.synthesis.server_limits import ServerLimits
from myxtts.synthesis.speech_stream import SpeechStream, to_pcm16
from myxtts.synthesis.synthesizer import Synthesizer
from myxtts.synthesis.text_split import UnsplittableTextError
from myxtts.text import TextError

__all__ = ["EngineBusyError", "SpeechEngine", "SpeechRequestError", "SpeechStream", "to_pcm16", "wav_header"]

# the longest wait for one piece's audio before its request fails (the engine is stuck or far behind)
PIECE_READY_TIMEOUT = 300.0
# Retry-After bounds, in seconds
RETRY_AFTER_MIN, RETRY_AFTER_MAX = 1, 60


class SpeechRequestError(ValueError):
    """A request that cannot be served as asked (empty or oversized text, too many pieces, unknown voice, bad
    speed, a word too long to split, text the language cannot pronounce); ``param`` names the field, ``status``
    the HTTP status it maps to."""

    def __init__(self, message: str, param: str | None, status: int = 400):
        super().__init__(message)
        self.param, self.status = param, status


class EngineBusyError(SpeechRequestError):
    """Too many requests in flight or pieces queued: 429, try again after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message, None, status=429)
        self.retry_after = retry_after


@dataclass
class Voice:
    name: str
    latents: np.ndarray  # [K, d] the conditioning encoder's latents of the voice's clip (Synthesizer.voice)


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
                 limits: ServerLimits | None = None, vocoder_threads: int = 2):
        if not voices:
            raise ValueError("Give at least one voice (--voice NAME=CLIP.wav): requests choose one by name.")
        self.synthesizer, self.batch_size, self.limits = synthesizer, batch_size, limits or ServerLimits()
        # a piece predicted past data.max_mel_frames is cut there: one such piece must not fail the other
        # requests that share its batch (pieces are sized to fit, so this is rare)
        synthesizer.decoder.truncate = True
        self.voices = {}
        for name, clip in voices.items():
            self.voices[name] = Voice(name, synthesizer.voice(clip))  # AudioError naming the clip
        self._text_lock = threading.Lock()  # the text front-end (espeak) is used by one thread at a time
        self._pending: list[tuple] = []  # (piece index, arrival, stream, tokens, voice, scale)
        self._arrivals = 0
        self._decoding = 0  # pieces in the batch being decoded
        self._vocoding = 0  # pieces handed to the vocoder pool and not yet delivered
        self._in_flight: set[SpeechStream] = set()
        # running averages of seconds per piece in each stage, for Retry-After (the slower stage sets the pace)
        self._decode_seconds, self._vocode_seconds = 0.1, 1.0
        self._wake = threading.Condition()
        self._closed = False
        started = time.perf_counter()
        synthesizer.warm_up_all(batch_size)
        self.vocode(np.zeros([2, synthesizer.cfg.audio.n_mels], np.float32))  # the vocoder's one graph too
        self.warmup_seconds = time.perf_counter() - started
        self.compiles_at_warmup = self.compiles()
        self.served = 0
        self.vocoder_threads = vocoder_threads
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
        """Split and encode ``text``; raises ``SpeechRequestError`` (``EngineBusyError`` when over a backlog
        limit) before anything is queued."""
        if voice not in self.voices:
            raise SpeechRequestError(f"Unknown voice {voice!r}; this server has {sorted(self.voices)}.", "voice")
        if not text or not text.strip():
            raise SpeechRequestError("The input text is empty.", "input")
        if len(text) > self.limits.max_characters:
            raise SpeechRequestError(f"The input has {len(text)} characters, more than this server's limit of "
                                     f"{self.limits.max_characters}; send it in parts.", "input")
        if not 0.25 <= speed <= 4.0:
            raise SpeechRequestError(f"speed must be in [0.25, 4.0], got {speed}.", "speed")
        with self._wake:
            self._refuse_if_busy(0)  # before spending the text front-end on a request that would be refused
        scale = 1.0 / speed
        with self._text_lock:
            try:
                pieces = self.synthesizer.split(text, length_scale=scale)
                tokens = [np.asarray(t, np.int32) for t in self.synthesizer.encode([p.text for p in pieces])]
            except (TextError, UnsplittableTextError, TextTooLongError) as err:
                raise SpeechRequestError(f"The input cannot be spoken: {err}", "input") from None
        if len(pieces) > self.limits.max_pieces:
            raise SpeechRequestError(f"The input splits into {len(pieces)} pieces, more than this server's limit "
                                     f"of {self.limits.max_pieces} per request; send it in parts.", "input")
        stream = SpeechStream(pieces, self.synthesizer.sample_rate, on_finish=self._finished)
        with self._wake:
            if self._closed:
                raise RuntimeError("the speech engine is shut down")
            self._refuse_if_busy(len(pieces))
            self._in_flight.add(stream)
            for index, ids in enumerate(tokens):
                self._pending.append((index, self._arrivals, stream, ids, self.voices[voice], scale))
                self._arrivals += 1
            self._wake.notify()
        return stream

    def _refuse_if_busy(self, new_pieces: int) -> None:
        """429 when one more request or ``new_pieces`` more pieces would pass a limit (the caller holds _wake)."""
        backlog = self._backlog_locked()
        per_piece = max(self._decode_seconds, self._vocode_seconds / self.vocoder_threads)
        retry_after = min(RETRY_AFTER_MAX, max(RETRY_AFTER_MIN, math.ceil(backlog * per_piece)))
        if len(self._in_flight) >= self.limits.max_requests_in_flight:
            raise EngineBusyError(f"This server already has {len(self._in_flight)} requests in flight (its limit); "
                                  f"retry after {retry_after} s.", retry_after)
        if backlog + new_pieces > self.limits.max_queued_pieces:
            raise EngineBusyError(f"This server has {backlog} pieces queued; {new_pieces or 'more'} more would pass "
                                  f"its limit of {self.limits.max_queued_pieces}; retry after {retry_after} s.",
                                  retry_after)

    def _finished(self, stream: SpeechStream) -> None:
        with self._wake:
            self._in_flight.discard(stream)
            if stream.cancelled:  # its pieces not yet decoded are freed now, not when the engine reaches them
                self._pending = [item for item in self._pending if item[2] is not stream]

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout=60)
        self._vocoders.shutdown(wait=True)

    def _backlog_locked(self) -> int:
        return len(self._pending) + self._decoding + self._vocoding

    def queued(self) -> int:
        """Pieces accepted and not yet delivered: pending, decoding and vocoding."""
        with self._wake:
            return self._backlog_locked()

    def backlog(self) -> dict:
        with self._wake:
            return {"pending": len(self._pending), "decoding": self._decoding, "vocoding": self._vocoding,
                    "requests_in_flight": len(self._in_flight),
                    "ready_unsent": sum(stream.ready() for stream in self._in_flight)}

    # ---- the engine thread and the vocoder pool --------------------------------------------------------
    def _vocode_into(self, stream: SpeechStream, index: int, log_mel: np.ndarray) -> None:
        started = time.perf_counter()
        try:
            if not stream.cancelled:  # a departed client's piece is not vocoded
                stream.deliver(index, self.vocode(log_mel))
        except Exception as err:  # noqa: BLE001  the request fails, the pool goes on
            stream.deliver(index, err)
        finally:
            with self._wake:
                self._vocoding -= 1
                self._vocode_seconds = 0.9 * self._vocode_seconds + 0.1 * (time.perf_counter() - started)

    def _take(self) -> list[tuple]:
        with self._wake:
            while not self._closed and not self._pending:
                self._wake.wait()
            self._pending = [item for item in self._pending if not item[2].cancelled]
            self._pending.sort(key=lambda item: item[:2])  # earliest piece index, then arrival
            batch, self._pending = self._pending[:self.batch_size], self._pending[self.batch_size:]
            self._decoding = len(batch)
            return [(stream, index, ids, voice, scale) for index, _, stream, ids, voice, scale in batch]

    def _run(self) -> None:
        while not self._closed:
            batch = self._take()
            if not batch:
                continue
            started = time.perf_counter()
            try:
                results = self.synthesizer.decode_tokens(
                    [item[2] for item in batch], [item[3].latents for item in batch], batch_size=self.batch_size,
                    length_scales=[item[4] for item in batch])
                for (stream, index, *_), result in zip(batch, results):
                    if not stream.cancelled:
                        with self._wake:
                            self._vocoding += 1
                        self._vocoders.submit(self._vocode_into, stream, index, result.mel)
                self.served += len(batch)
            except Exception as err:  # noqa: BLE001  one bad batch fails its requests, never the engine
                for stream, index, *_ in batch:
                    stream.deliver(index, err)
            finally:
                with self._wake:
                    self._decoding = 0
                    seconds = (time.perf_counter() - started) / len(batch)
                    self._decode_seconds = 0.9 * self._decode_seconds + 0.1 * seconds

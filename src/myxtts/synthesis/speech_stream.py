"""One request's audio, piece by piece, handed from the engine's threads to whoever sends it.

The engine's threads ``deliver`` each piece's waveform (or the error that failed it) in any order; the stream keeps it
as 16-bit PCM followed by its pause, and the consumer takes the pieces in order: ``pcm16()`` blocks a thread,
``next_chunk()`` awaits on an event loop without holding any thread (the HTTP server's streams). A stream is finished
when its last piece is taken or when it is cancelled; either way ``on_finish`` runs once, which is how the engine
counts requests in flight. A cancelled stream drops what it holds and refuses later deliveries, so a departed client's
audio does not pile up, and runs the callbacks registered with ``when_cancelled``.

Each stream accounts for its audio in the engine's ``UnsentAudio`` ledger (``admission.py``): it starts with the
worst case of every piece reserved (``reserved``), a delivered piece's reservation becomes its real size, and its
bytes are given back (``release``) when the consumer says they were sent (``sent``; ``pcm16()`` says so itself when
asked for the next piece) or when the stream is cancelled. ``deadline`` (``time.monotonic()``) is when the request's
``request_timeout`` runs out: the HTTP response ends the stream there (``expire``).
"""

from __future__ import annotations

import asyncio
import math
import struct
import threading
import time
from typing import Callable, Iterator, Sequence

import numpy as np

from myxtts.synthesis.text_split import TextPiece


def to_pcm16(waveform: np.ndarray) -> bytes:
    return (np.clip(waveform, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def wav_header(sample_rate: int, data_bytes: int = 0xFFFFFFFF - 36) -> bytes:
    """A 44-byte mono 16-bit PCM WAV header; the default sizes say "until the stream ends" (streaming players and
    soundfile read it)."""
    return (b"RIFF" + struct.pack("<I", min(data_bytes + 36, 0xFFFFFFFF)) + b"WAVEfmt "
            + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
            + b"data" + struct.pack("<I", min(data_bytes, 0xFFFFFFFF)))


def _set_from_thread(loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
    try:
        loop.call_soon_threadsafe(event.set)
    except RuntimeError:  # the loop is closed: its waiter is gone with it
        pass


class SpeechStream:
    def __init__(self, pieces: list[TextPiece], sample_rate: int, on_finish: Callable[["SpeechStream"], None]
                 | None = None, reserved: Sequence[int] | None = None, release: Callable[[int], None] | None = None,
                 deadline: float = math.inf, on_taken: Callable[[], None] | None = None):
        """``reserved``: the bytes already reserved for each piece in the ledger that ``release`` gives back to
        (none by default: a stream of its own); ``deadline``: the request's end (module docstring); ``on_taken``:
        called (outside the stream's lock) each time the consumer takes a piece: the engine decodes a stream's pieces
        only a few ahead of what its consumer has taken."""
        self.pieces, self.sample_rate, self.deadline = pieces, sample_rate, deadline
        self.cancelled = False
        self.expired = False  # ended at its deadline (``expire``)
        self.submitted = time.perf_counter()
        self.first_audio: float | None = None  # perf_counter when the first piece was ready
        # pieces the engine decoded and vocoded for this request (its threads count them under the engine's lock):
        # once cancelled, a request stops gaining either
        self.decoded = self.vocoded = 0
        # pieces whose predicted length passed data.max_mel_frames: decoded in the largest bucket and cut at its end
        # (the engine records them; the HTTP layer logs them with the request's id)
        self.cut: list[int] = []
        self._delivered: dict[int, "bytes | BaseException"] = {}  # 16-bit PCM of the piece and its pause
        self._reserved = list(reserved) if reserved is not None else [0] * len(pieces)  # bytes, until delivered
        self._release = release if release is not None else (lambda count: None)
        self._unsent = sum(self._reserved)  # bytes this stream holds in the ledger: reserved, delivered, taken unsent
        self._next = 0  # the index of the next piece to hand out
        self._changed = threading.Condition()
        self._wakers: list[Callable[[], None]] = []  # async consumers waiting for a delivery or a cancel
        self._on_cancel: list[Callable[[], None]] = []  # see when_cancelled
        self._on_finish = on_finish
        self._on_taken = on_taken
        self._finished = False

    # ---- the engine's side --------------------------------------------------------------------------
    def deliver(self, index: int, audio: "np.ndarray | BaseException") -> None:
        """Piece ``index``'s waveform ``[samples]`` float32 (kept as 16-bit PCM with its pause: the conversion runs
        on the engine's thread, not on the event loop) or the error that failed it."""
        if not isinstance(audio, BaseException):
            pause = np.zeros([int(round(self.pieces[index].pause_after * self.sample_rate))], np.float32)
            audio = to_pcm16(np.concatenate([audio, pause]))
        with self._changed:
            if self.cancelled:
                return  # nobody will take it: do not keep it (cancel gave its reservation back)
            if self.first_audio is None and index == 0:
                self.first_audio = time.perf_counter()
            replaced = self._delivered.get(index)  # an engine failure delivers errors over every piece
            freed = self._reserved[index] + (len(replaced) if isinstance(replaced, bytes) else 0)
            freed -= len(audio) if isinstance(audio, bytes) else 0
            self._reserved[index] = 0
            self._unsent -= freed
            self._delivered[index] = audio
            self._changed.notify_all()
            wakers, self._wakers = self._wakers, []
        self._release(freed)
        for wake in wakers:
            wake()

    def cancel(self) -> None:
        """The client went away (or will not be served): drop what is held, give its bytes back; the engine skips
        the rest."""
        with self._changed:
            first = not self.cancelled
            self.cancelled = True
            self._delivered.clear()
            freed, self._unsent = self._unsent, 0
            self._reserved = [0] * len(self.pieces)
            self._changed.notify_all()
            wakers, self._wakers = self._wakers, []
            callbacks, self._on_cancel = (self._on_cancel, []) if first else ([], [])
        self._release(freed)
        for wake in wakers + callbacks:
            wake()
        self._finish()

    def expire(self) -> None:
        """Cancel the stream because its request ran past ``deadline``."""
        self.expired = True
        self.cancel()

    def sent(self, count: int) -> None:
        """``count`` bytes of the pieces taken have left the process: give them back to the ledger."""
        with self._changed:
            count = min(count, self._unsent)  # nothing once cancelled: cancel gave everything back
            self._unsent -= count
        self._release(count)

    def unsent_bytes(self) -> int:
        """Bytes this stream holds in the ledger: reserved for pieces to come, delivered, taken and not yet sent."""
        with self._changed:
            return self._unsent

    def when_cancelled(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once when the stream is cancelled (now if it already is), from the cancelling thread:
        the HTTP response uses it to abandon a send blocked on a client that does not read."""
        with self._changed:
            if not self.cancelled:
                self._on_cancel.append(callback)
                return
        callback()

    def taken(self) -> int:
        """Pieces handed to the consumer so far."""
        return self._next

    def ready(self) -> int:
        """Pieces delivered and not yet taken."""
        with self._changed:
            return len(self._delivered)

    # ---- the consumer's side ------------------------------------------------------------------------
    def _take_locked(self) -> "bytes | None | BaseException | bool":
        """The next chunk if ready, None at the end, False if not ready yet (the caller holds the lock)."""
        if self.cancelled or self._next >= len(self.pieces):
            return None
        if self._next not in self._delivered:
            return False
        audio = self._delivered.pop(self._next)
        if not isinstance(audio, BaseException):
            self._next += 1
        return audio

    def _result(self, taken: "bytes | None | BaseException") -> "bytes | None":
        if isinstance(taken, BaseException):
            self.cancel()
            raise taken
        if isinstance(taken, bytes) and self._on_taken is not None:
            self._on_taken()
        if taken is None or self._next >= len(self.pieces):
            self._finish()
        return taken

    def pcm16(self, timeout: float | None = None) -> Iterator[bytes]:
        """Each piece's audio then its pause, in order (blocking); raises what the engine raised, ``TimeoutError``
        when a piece takes longer than ``timeout`` seconds. A chunk counts as sent once the next is asked for."""
        while True:
            with self._changed:
                if not self._changed.wait_for(self._take_locked_peek, timeout=timeout):
                    raise TimeoutError(f"no audio for piece {self._next} within {timeout} s")
                taken = self._take_locked()
            chunk = self._result(taken)
            if chunk is None:
                return
            try:
                yield chunk
            finally:
                self.sent(len(chunk))

    def _take_locked_peek(self) -> bool:
        return self.cancelled or self._next >= len(self.pieces) or self._next in self._delivered

    async def next_chunk(self, timeout: float) -> "bytes | None":
        """The next piece's audio and pause, None at the end or once cancelled; awaits on the running loop
        (no thread held); ``TimeoutError`` when the piece takes longer than ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            event = asyncio.Event()
            with self._changed:
                taken = self._take_locked()
                if taken is False:
                    self._wakers.append(lambda: _set_from_thread(loop, event))
            if taken is not False:
                return self._result(taken)
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"no audio for piece {self._next} within {timeout} s")
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except asyncio.TimeoutError:
                raise TimeoutError(f"no audio for piece {self._next} within {timeout} s") from None

    def _finish(self) -> None:
        with self._changed:
            if self._finished:
                return
            self._finished = True
        if self._on_finish is not None:
            self._on_finish(self)

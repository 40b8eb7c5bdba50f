"""The serving engine: many requests' sentences batched into the synthesizer's compiled calls, streamed in order.

A request's text is split into pieces (``SynthesisEngine.split``: ``synthesizer.engine``) and its pieces join one
queue shared by all requests. One engine thread owns the decoder: it takes up to ``batch_size`` queued pieces (whoever
they belong to, each with its own voice and speed) in priority order (``piece_queue.priority``) and decodes them in
one compiled call per bucket (``SynthesisEngine.decode_tokens``: every function was traced at start-up by
``warm_up``) at the smallest compiled batch size that holds them (``batch_sizes``: ``batch_size`` and the smaller sizes given, so that
under light load a lone piece is not decoded as a full batch of padding) and puts each piece's mel on the vocoder
queue, which ``vocoder_threads`` threads take in the same priority order (TF ops release the GIL: the next batch
decodes while the last is vocoded, on the other core); each delivers its audio to its request's stream
(``speech_stream.py``: the stream yields pieces in order, each followed by its pause, as 16-bit PCM).

The vocoder queue is bounded: a batch is decoded only while fewer than ``batch_size`` decoded pieces wait there,
so the backlog sits undecoded in the priority queue, where a new request's first piece can still go ahead of it
and a cancel drops it for nothing (Griffin-Lim is most of the time of a piece). And a stream's pieces are decoded
at most ``piece_queue.PIECES_AHEAD`` ahead of what its consumer has taken: a client that reads slowly gets its
audio made at its own pace, so it costs the others no more than its reading allows.

The engine is bounded by ``ServerLimits`` (``server_limits.py``) through its ``Admission`` (``admission.py``): a
request over ``max_characters`` is refused before any text work; one that would pass ``max_requests_in_flight``
(counting the requests being split), ``max_requests_per_client`` from its client's address or ``max_queued_pieces`` gets ``EngineBusyError`` with a Retry-After estimated
from the backlog and the measured seconds per piece, before its text work and again once its pieces are known, with
the worst case of its audio against ``max_unsent_bytes``. The text work (``admission.split_request``)
is linear in the text, stops as soon as ``max_pieces`` is passed, holds no lock of its own (the espeak-ng library
is locked for each front-end pass only) and checks before every pass whether its client has left or its
``request_timeout`` has run out. The backlog is counted where it really sits: pending (not yet decoded), decoding,
vocoding (queued for the vocoder or being vocoded). A cancelled stream (the client went away, stopped reading or ran
past its time) has its pieces dropped at every stage: pending and vocoder-queue pieces at once, a piece in the batch
being decoded when the batch ends, and every piece is checked again just before it is vocoded; each stream counts
the pieces decoded and vocoded for it (``SpeechStream.decoded`` / ``vocoded``). Nothing here knows about HTTP
(``synthesis/http.py``).
"""

from __future__ import annotations

import heapq
import logging
import os
import threading
import time
import traceback
from typing import Callable, Sequence

import numpy as np

from myxtts.synthesis.admission import (Admission, AudioBound, EngineBusyError, EngineFailedError,
                                        SpeechRequestError, split_request)
from myxtts.synthesis.piece_queue import QueuedPiece, Voice, priority, take_batch
from myxtts.synthesis.server_limits import ServerLimits
from myxtts.synthesis.speech_stream import SpeechStream, to_pcm16, wav_header
from myxtts.synthesis.synthesizer import Synthesizer
from myxtts.synthesis.text_split import TextPiece

LOG = logging.getLogger("myxtts.serve")

__all__ = ["EngineBusyError", "EngineFailedError", "SpeechEngine", "SpeechRequestError", "SpeechStream",
           "small_batch_sizes", "to_pcm16", "wav_header"]


def small_batch_sizes(batch_size: int) -> list[int]:
    """The powers of two below ``batch_size``: what ``serve`` compiles besides it (1 -> [], 4 -> [1, 2], 6 ->
    [1, 2, 4])."""
    return [2 ** exponent for exponent in range(batch_size.bit_length()) if 2 ** exponent < batch_size]


# the longest wait for one piece's audio before its request fails (the engine is stuck or far behind)
PIECE_READY_TIMEOUT = 300.0


class SpeechEngine:
    """Owns a ``Synthesizer``; ``submit`` from any thread, audio comes back on the stream."""

    def __init__(self, synthesizer: Synthesizer, voices: dict[str, "str | os.PathLike | list"], batch_size: int = 4,
                 limits: ServerLimits | None = None, vocoder_threads: int = 2,
                 smaller_batch_sizes: Sequence[int] = ()):
        """``batch_size``: the most pieces decoded in one call; ``smaller_batch_sizes``: sizes below it also compiled
        at warm-up, a batch of fewer pieces being decoded at the smallest compiled size that holds it."""
        if not voices:
            raise ValueError("Give at least one voice (--voice NAME=CLIP.wav): requests choose one by name.")
        if batch_size < 1 or vocoder_threads < 1:
            raise ValueError(f"batch_size and vocoder_threads must be at least 1, got {batch_size} and "
                             f"{vocoder_threads}.")
        if any(not 1 <= size < batch_size for size in smaller_batch_sizes):
            raise ValueError(f"smaller_batch_sizes must be between 1 and batch_size - 1 ({batch_size - 1}), got "
                             f"{list(smaller_batch_sizes)}.")
        self.synthesizer, self.batch_size, self.limits = synthesizer, batch_size, limits or ServerLimits()
        self.batch_sizes = sorted({*smaller_batch_sizes, batch_size})  # every size compiled at warm-up
        self._batches_by_size = {size: 0 for size in self.batch_sizes}  # batches decoded at each size
        # a piece predicted past data.max_mel_frames is cut there: one such piece must not fail the other
        # requests that share its batch (pieces are sized to fit, so this is rare)
        synthesizer.truncate_long = True
        self.voices = {}
        for name, clip in voices.items():
            self.voices[name] = Voice(name, synthesizer.voice(clip))  # AudioError naming the clip
        self.admission = Admission(self.limits)
        self._pending: list[QueuedPiece] = []  # heap: pieces not yet decoded
        self._to_vocode: list[QueuedPiece] = []  # heap: decoded pieces waiting for a vocoder thread (bounded, see _take)
        self._requests = 0  # requests accepted so far: the arrival number in each piece's priority
        self._decoding = 0  # pieces in the batch being decoded
        self._vocoding_now = 0  # pieces a vocoder thread is working on
        self._in_flight: set[SpeechStream] = set()
        self._client_of: dict[SpeechStream, str | None] = {}  # each stream in flight: its client's address
        # running averages of seconds per piece in each stage, for Retry-After (the slower stage sets the pace)
        self._decode_seconds, self._vocode_seconds = 0.1, 1.0
        self._wake = threading.Condition()  # guards all of the above; notified on every change a thread waits for
        self._closed = False
        self.failure: str | None = None  # a thread that died: its name, error and traceback (``/health``: 503)
        started = time.perf_counter()
        for size in self.batch_sizes:
            synthesizer.warm_up(batch_size=size)
        # the vocoder's one graph too; its samples for 2 and 3 frames give its samples per frame, hence the most
        # audio a piece can become (data.max_mel_frames: a longer one is cut there)
        two, three = (len(self.vocode(np.zeros([frames, synthesizer.cfg.audio.n_mels], np.float32)))
                      for frames in (2, 3))
        self.audio_bound = AudioBound(max(0, two + (three - two) * (synthesizer.cfg.data.max_mel_frames - 2)),
                                      synthesizer.sample_rate)
        self.warmup_seconds = time.perf_counter() - started
        self.compiles_at_warmup = self.compiles()
        self.served = 0  # pieces decoded
        self.dropped = 0  # pieces of cancelled requests dropped before being vocoded (at any stage)
        # pieces whose vocoding was under way when their request was cancelled: the work a departure still costs
        # (at most one per vocoder thread per departure)
        self.vocoded_after_cancel = 0
        self.cut = 0  # pieces predicted longer than data.max_mel_frames, served cut at it
        self.timed_out = 0  # requests ended at their request_timeout (``SpeechStream.expire``)
        self.vocoder_threads = vocoder_threads
        self._threads = [threading.Thread(target=self._guarded, args=(self._run,), name="myxtts-speech-engine",
                                          daemon=True)]
        self._threads += [threading.Thread(target=self._guarded, args=(self._vocoder_loop,),
                                           name=f"myxtts-vocoder-{i}", daemon=True) for i in range(vocoder_threads)]
        for thread in self._threads:
            thread.start()

    def batches_by_size(self) -> dict[int, int]:
        """Batches decoded so far at each compiled batch size."""
        with self._wake:
            return dict(self._batches_by_size)

    def compiles(self) -> int:
        return self.synthesizer.tracing_count() + self.synthesizer.vocoder.tracing_count()

    def compiles_after_warmup(self) -> int:
        return self.compiles() - self.compiles_at_warmup

    def vocode(self, log_mel: np.ndarray) -> np.ndarray:
        return np.asarray(self.synthesizer.vocoder(log_mel), np.float32)

    # ---- requests -------------------------------------------------------------------------------------
    def submit(self, text: str, voice: str, speed: float = 1.0, cancelled: Callable[[], bool] | None = None,
               client: str | None = None) -> SpeechStream:
        """Split and encode ``text``; raises ``SpeechRequestError`` (``EngineBusyError`` when over a limit, status
        503 once the engine is closing) before anything is queued. ``cancelled``: asked before every front-end pass
        of the text work, True once the client has left (the work stops there). ``client``: the requester's address,
        held to ``max_requests_per_client`` (None: not counted per client)."""
        if voice not in self.voices:
            raise SpeechRequestError(f"Unknown voice {voice!r}; this server has {sorted(self.voices)}.", "voice")
        if not text or not text.strip():
            raise SpeechRequestError("The input text is empty.", "input")
        if len(text) > self.limits.max_characters:
            raise SpeechRequestError(f"The input has {len(text)} characters, more than this server's limit of "
                                     f"{self.limits.max_characters}; send it in parts.", "input")
        if not 0.25 <= speed <= 4.0:
            raise SpeechRequestError(f"speed must be in [0.25, 4.0], got {speed}.", "speed")
        deadline = time.monotonic() + self.limits.request_timeout
        with self._wake:  # a place in flight before spending the text front-end on the request
            self._refuse_if_failed()
            self.admission.admit_request(len(self._in_flight), self._backlog_locked(), self._seconds_per_piece(),
                                         client)
        queued = accepted = False
        try:
            scale = 1.0 / speed
            pieces, tokens = self._split(text, scale, cancelled, deadline)
            stream = SpeechStream(pieces, self.synthesizer.sample_rate, on_finish=self._finished,
                                  on_taken=self._piece_taken, reserved=[self.audio_bound.piece_bytes(piece.pause_after) for piece in pieces],
                                  release=self.admission.unsent.release, deadline=deadline)
            with self._wake:
                queued = True  # admitted or refused below: no longer preparing either way
                self.admission.admit_pieces(self._backlog_locked(), len(pieces), stream.unsent_bytes(),
                                            self._seconds_per_piece())
                self._in_flight.add(stream)
                self._client_of[stream], accepted = client, True
                number, self._requests = self._requests, self._requests + 1
                # the client's other requests in flight or being split (this one is counted already)
                others = self.admission.by_client.get(client, 1) - 1 if client is not None else 0
                for index, ids in enumerate(tokens):
                    heapq.heappush(self._pending, QueuedPiece(priority(number, index, self.batch_size, others),
                                                              stream, index, ids, self.voices[voice], scale))
                self._wake.notify_all()
            return stream
        finally:
            if not accepted:
                with self._wake:
                    if not queued:
                        self.admission.withdraw()
                    self.admission.leave(client)

    def _split(self, text: str, scale: float, cancelled: Callable[[], bool] | None,
               deadline: float) -> tuple[list[TextPiece], list[np.ndarray]]:
        """The request's pieces and their tokens (``admission.split_request``), stopped at the first front-end pass
        after its client left or its ``request_timeout`` ran out."""

        def checkpoint() -> None:  # before each front-end pass
            if cancelled is not None and cancelled():
                raise SpeechRequestError("The client left while its text was being split.", None)
            if time.monotonic() > deadline:
                raise SpeechRequestError(f"The request's text work ran past its request_timeout "
                                         f"({self.limits.request_timeout} s): the server is overloaded.", None, 503)
            self._refuse_if_failed()

        return split_request(self.synthesizer.engine, text, scale, self.limits.max_pieces, checkpoint)

    def _refuse_if_failed(self) -> None:
        """503 once the engine is closing or failed."""
        if self.failure is not None:
            raise EngineFailedError(f"This server's engine failed ({self.failure.splitlines()[0]}); it answers no "
                                    "request until it is restarted.")
        if self._closed:
            raise SpeechRequestError("This server is shutting down; retry on another.", None, status=503)

    def _seconds_per_piece(self) -> float:
        """The pace of the slower stage (running averages; the vocoder's spread over its threads)."""
        return max(self._decode_seconds, self._vocode_seconds / self.vocoder_threads)

    def _finished(self, stream: SpeechStream) -> None:
        with self._wake:
            self._in_flight.discard(stream)
            self.admission.leave(self._client_of.pop(stream, None))
            self.timed_out += stream.expired
            if stream.cancelled:  # its queued pieces are freed now, not when a thread reaches them
                for name in ("_pending", "_to_vocode"):
                    queue = getattr(self, name)
                    kept = [piece for piece in queue if piece.stream is not stream]
                    if len(kept) < len(queue):
                        self.dropped += len(queue) - len(kept)
                        heapq.heapify(kept)
                        setattr(self, name, kept)
                self._wake.notify_all()  # room on the vocoder queue for the engine thread

    def cancel_all(self) -> int:
        """Cancel every stream in flight (a shutdown's grace period is over); returns how many there were."""
        with self._wake:
            streams = list(self._in_flight)
        for stream in streams:  # outside the lock: a cancel calls back into _finished
            stream.cancel()
        return len(streams)

    def close(self) -> None:
        """Cancel what is in flight and stop the threads (a piece being decoded or vocoded is finished first)."""
        with self._wake:
            self._closed = True
        self.cancel_all()
        with self._wake:
            self._wake.notify_all()
        for thread in self._threads:
            thread.join(timeout=60)

    def _backlog_locked(self) -> int:
        return len(self._pending) + self._decoding + len(self._to_vocode) + self._vocoding_now

    def queued(self) -> int:
        """Pieces accepted and not yet delivered: pending, decoding and vocoding."""
        with self._wake:
            return self._backlog_locked()

    def backlog(self) -> dict:
        with self._wake:
            return {"pending": len(self._pending), "decoding": self._decoding,
                    "vocoding": len(self._to_vocode) + self._vocoding_now,
                    "requests_in_flight": len(self._in_flight) + self.admission.preparing,
                    "ready_unsent": sum(stream.ready() for stream in self._in_flight),
                    "unsent_bytes": self.admission.unsent.bytes}

    # ---- the engine thread and the vocoder threads -----------------------------------------------------
    def _guarded(self, loop) -> None:
        """Run a thread's loop; if anything escapes it (outside the per-batch guards: a bug, a broken runtime), the
        engine is failed: the traceback logged and kept for ``/health``, every request in flight failed at once
        (its stream cut), every later one refused with 503 (``EngineFailedError``)."""
        try:
            loop()
        except BaseException as err:  # noqa: BLE001  a dead thread must be visible, never silent
            where = threading.current_thread().name
            LOG.error("engine thread %s died: the server answers 503 until it is restarted\n%s", where,
                      traceback.format_exc())
            with self._wake:
                self.failure = f"{where}: {type(err).__name__}: {err}\n{traceback.format_exc()}"
                self._closed = True
                streams = list(self._in_flight)
                self._wake.notify_all()
            failed = EngineFailedError(f"the engine thread {where} died: {type(err).__name__}: {err}")
            for stream in streams:  # each response is cut at its next piece (synthesis/http.py), its error logged
                for index in range(len(stream.pieces)):
                    stream.deliver(index, failed)

    def health(self) -> tuple[bool, str | None]:
        """(healthy, the failure's first line or None)."""
        failure = self.failure
        return failure is None, None if failure is None else failure.splitlines()[0]

    def _take(self) -> list[QueuedPiece] | None:
        """The next batch (``take_batch``: highest priority first, of pieces fewer than ``PIECES_AHEAD`` ahead of
        what their stream's consumer has taken); None once closed. A batch is taken only while fewer than
        ``batch_size`` decoded pieces wait for the vocoder (so at most ``2 * batch_size - 1`` ever wait there)."""
        with self._wake:
            while True:
                if self._closed:
                    return None
                if self._pending and len(self._to_vocode) < self.batch_size:
                    batch, dropped = take_batch(self._pending, self.batch_size)
                    self.dropped += dropped
                    if batch:
                        self._decoding = len(batch)
                        return batch
                self._wake.wait()  # a new request, a piece taken by a consumer, a vocoder slot, or the close

    def _piece_taken(self) -> None:
        """A consumer took a piece: the next of its stream's pieces may be decoded now."""
        with self._wake:
            self._wake.notify_all()

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            if not batch:  # every piece taken belonged to cancelled streams
                continue
            started = time.perf_counter()
            rows = min(size for size in self.batch_sizes if size >= len(batch))  # the smallest compiled that holds it
            try:
                results = self.synthesizer.engine.decode_tokens(
                    [piece.tokens for piece in batch], [piece.voice.latents for piece in batch],
                    batch_size=rows, length_scales=[piece.scale for piece in batch])
            except Exception as err:  # noqa: BLE001  one bad batch fails its requests, never the engine
                LOG.exception("a batch of %d piece(s) failed to decode; its requests fail", len(batch))
                results = None
                for piece in batch:
                    piece.stream.deliver(piece.index, err)
            with self._wake:
                self._decoding = 0
                self._decode_seconds = 0.9 * self._decode_seconds + 0.1 * (time.perf_counter() - started) / len(batch)
                self.served += len(batch) if results is not None else 0
                self._batches_by_size[rows] += results is not None
                for piece, result in zip(batch, results or ()):
                    piece.stream.decoded += 1
                    if piece.stream.cancelled:  # cancelled while its batch was decoding
                        self.dropped += 1
                    else:
                        piece.mel = result.mel
                        if result.ended_by == "maximum length":
                            piece.stream.cut.append(piece.index)
                            self.cut += 1
                        heapq.heappush(self._to_vocode, piece)
                self._wake.notify_all()

    def _vocoder_loop(self) -> None:
        while True:
            with self._wake:
                while not self._closed and not self._to_vocode:
                    self._wake.wait()
                if self._closed:
                    return
                piece = heapq.heappop(self._to_vocode)
                self._wake.notify_all()  # room on the vocoder queue: the engine thread may decode the next batch
                if piece.stream.cancelled:  # checked again just before vocoding: a departed client's piece is
                    self.dropped += 1        # dropped, not vocoded
                    continue
                self._vocoding_now += 1
            started, vocoded = time.perf_counter(), False
            try:
                audio = self.vocode(piece.mel)
                vocoded = True
                piece.stream.deliver(piece.index, audio)
            except Exception as err:  # noqa: BLE001  the request fails, the vocoder threads go on
                LOG.exception("a piece failed to vocode; its request fails")
                piece.stream.deliver(piece.index, err)
            finally:
                with self._wake:
                    self._vocoding_now -= 1
                    piece.stream.vocoded += vocoded
                    self.vocoded_after_cancel += vocoded and piece.stream.cancelled
                    self._vocode_seconds = 0.9 * self._vocode_seconds + 0.1 * (time.perf_counter() - started)
                    self._wake.notify_all()

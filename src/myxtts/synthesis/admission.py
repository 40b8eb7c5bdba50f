"""Which requests the speech engine takes (``SpeechEngine.submit``), and the audio they may hold unsent.

A request is admitted in two steps, each refused with 429 and a Retry-After (``EngineBusyError``):

- before its text work (``Admission.admit_request``): fewer than ``max_requests_in_flight`` requests in flight,
  counting those being split (``preparing``: a request holds its place from here, so at most that many requests
  split text at once), fewer than ``max_requests_per_client`` of them from its client's address (``by_client``,
  counted the same way until ``leave``), and room left under ``max_queued_pieces``;
- the text work between the two (``split_request``): ``text_split.split_speakable``, linear in the text, stopped as
  soon as ``max_pieces`` is passed and at the first front-end pass after ``checkpoint`` raises;
- after the split, before anything is queued (``Admission.admit_pieces``): its pieces fit under
  ``max_queued_pieces`` and the worst case of its audio under ``max_unsent_bytes`` (``UnsentAudio``). A request
  whose worst case alone passes ``max_unsent_bytes`` could never be served: 400, send it in parts.

``UnsentAudio`` counts the bytes of 16-bit audio reserved for or held by the streams and not yet sent, all requests
together. At admission a request reserves the worst case of each piece (``AudioBound``: ``data.max_mel_frames``
frames, since a longer piece is cut there, through the vocoder, plus the piece's pause); when a piece is vocoded its
reservation becomes its real size, and its bytes are released once they are sent, or when its stream ends
(``speech_stream.py``). So clients that read slowly, however many, hold at most ``max_unsent_bytes`` of audio, and a
request is never cut mid-stream for it: it is refused before it starts.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from myxtts.synthesis.lengths import TextTooLongError
from myxtts.synthesis.server_limits import ServerLimits
from myxtts.synthesis.text_split import (TextPiece, TokenBudget, TooManyPiecesError, UnsplittableTextError,
                                         split_speakable)
from myxtts.text import TextError

# Retry-After bounds, in seconds
RETRY_AFTER_MIN, RETRY_AFTER_MAX = 1, 60
BYTES_PER_SAMPLE = 2  # the streams hold 16-bit PCM


class SpeechRequestError(ValueError):
    """A request that cannot be served as asked (empty or oversized text, too many pieces, unknown voice, bad
    speed, a word too long to split, text the language cannot pronounce); ``param`` names the field, ``status``
    the HTTP status it maps to."""

    def __init__(self, message: str, param: str | None, status: int = 400):
        super().__init__(message)
        self.param, self.status = param, status


class EngineBusyError(SpeechRequestError):
    """Too many requests in flight, pieces queued or audio unsent: 429, try again after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message, None, status=429)
        self.retry_after = retry_after


class EngineFailedError(SpeechRequestError):
    """The engine's decoder or vocoder thread died (a bug or a broken runtime, not a request's fault): every request
    fails with 503 until the server is restarted; ``/health`` says why."""

    def __init__(self, message: str):
        super().__init__(message, None, status=503)


@dataclass(frozen=True)
class AudioBound:
    """The most audio a piece can become: ``max_samples`` (the vocoder's output for ``data.max_mel_frames``
    frames, measured at the engine's warm-up) plus its pause, at ``sample_rate``."""
    max_samples: int
    sample_rate: int

    def piece_bytes(self, pause_after: float) -> int:
        """The worst case of one piece's 16-bit audio and pause, in bytes."""
        return BYTES_PER_SAMPLE * (self.max_samples + int(round(pause_after * self.sample_rate)))


class UnsentAudio:
    """Bytes of audio reserved for or held by streams and not yet sent, all requests together, at most ``limit``.
    Its lock is a leaf (it calls nothing while holding it): any thread may reserve or release."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._bytes = 0
        self._lock = threading.Lock()

    def reserve(self, count: int) -> bool:
        """Take ``count`` bytes if they fit under the limit; False (nothing taken) if not."""
        with self._lock:
            if self._bytes + count > self.limit:
                return False
            self._bytes += count
            return True

    def release(self, count: int) -> None:
        """Give back ``count`` bytes (negative: a piece longer than its reservation, taken beyond it)."""
        with self._lock:
            self._bytes -= count

    @property
    def bytes(self) -> int:
        with self._lock:
            return self._bytes


def retry_after(backlog: int, seconds_per_piece: float) -> int:
    """Seconds until the backlog is likely worked off, within [RETRY_AFTER_MIN, RETRY_AFTER_MAX]."""
    return min(RETRY_AFTER_MAX, max(RETRY_AFTER_MIN, math.ceil(backlog * seconds_per_piece)))


class Admission:
    """The engine's admission state (module docstring): ``preparing`` requests and the ``unsent`` ledger. The
    checks and ``preparing`` run under the engine's lock; the ledger has its own."""

    def __init__(self, limits: ServerLimits) -> None:
        self.limits = limits
        self.unsent = UnsentAudio(limits.max_unsent_bytes)
        self.preparing = 0  # requests admitted to their text work and not yet queued or refused
        # requests in flight or being split per client address, each until ``leave``
        self.by_client: dict[str, int] = {}

    def admit_request(self, in_flight: int, backlog: int, seconds_per_piece: float, client: str | None = None) -> None:
        """Before the text work: a place in flight (``preparing`` counts it until ``admit_pieces`` or a refusal)
        and, for a request with a ``client`` address, one of that client's places (until ``leave``)."""
        wait = retry_after(backlog, seconds_per_piece)
        held = self.by_client.get(client, 0) if client is not None else 0
        if held >= self.limits.max_requests_per_client:
            raise EngineBusyError(f"This client ({client}) already has {held} requests in flight, this server's limit "
                                  f"per client (max_requests_per_client); retry after {wait} s.", wait)
        if in_flight + self.preparing >= self.limits.max_requests_in_flight:
            raise EngineBusyError(f"This server already has {in_flight + self.preparing} requests in flight (its "
                                  f"limit); retry after {wait} s.", wait)
        if backlog >= self.limits.max_queued_pieces:
            raise EngineBusyError(f"This server has {backlog} pieces queued (its limit of "
                                  f"{self.limits.max_queued_pieces}); retry after {wait} s.", wait)
        self.preparing += 1
        if client is not None:
            self.by_client[client] = held + 1

    def admit_pieces(self, backlog: int, new_pieces: int, new_bytes: int, seconds_per_piece: float) -> None:
        """After the text work: the request's pieces and the worst case of its audio (reserved here), or a
        refusal; either way it is no longer ``preparing``."""
        self.preparing -= 1
        wait = retry_after(backlog, seconds_per_piece)
        if backlog + new_pieces > self.limits.max_queued_pieces:
            raise EngineBusyError(f"This server has {backlog} pieces queued; {new_pieces} more would pass its limit "
                                  f"of {self.limits.max_queued_pieces}; retry after {wait} s.", wait)
        if new_bytes > self.unsent.limit:
            raise SpeechRequestError(f"The input's audio may take up to {new_bytes} bytes, more than this server "
                                     f"holds unsent for all requests together ({self.unsent.limit}, "
                                     "max_unsent_bytes); send it in parts.", "input")
        if not self.unsent.reserve(new_bytes):
            raise EngineBusyError(f"This server holds {self.unsent.bytes} bytes of audio not yet sent; the "
                                  f"{new_bytes} this request may take would pass its limit of {self.unsent.limit} "
                                  f"(max_unsent_bytes); retry after {wait} s.", wait)

    def withdraw(self) -> None:
        """A request refused or failed during its text work gives its place back."""
        self.preparing -= 1

    def leave(self, client: str | None) -> None:
        """A request of ``client`` (admitted by ``admit_request``) has ended: finished, cancelled or refused."""
        if client is None:
            return
        held = self.by_client[client] - 1
        if held:
            self.by_client[client] = held
        else:
            del self.by_client[client]


def split_request(synthesis_engine: Any, text: str, scale: float, max_pieces: int,
                  checkpoint: Callable[[], None]) -> tuple[list[TextPiece], list[np.ndarray]]:
    """A request's pieces at length scale ``scale`` and their tokens (``[tokens]`` int32 each), as the
    ``SynthesisEngine``'s ``split`` and ``encode`` give them, or the ``SpeechRequestError`` that refuses the text
    (400, ``param`` "input": more than ``max_pieces`` pieces, a piece that cannot be said, named)."""
    lengths = synthesis_engine.lengths
    budget = TokenBudget(synthesis_engine.text_processor.encode_many, lengths.piece_token_budget(scale), checkpoint)
    try:
        pieces, tokens = split_speakable(text, budget, max_pieces)
        for ids in tokens:
            lengths.text_bucket(len(ids))  # a piece within the budget has a bucket: checked all the same
    except TooManyPiecesError:
        raise SpeechRequestError(f"The input splits into more than {max_pieces} pieces, this server's limit per "
                                 "request; send it in parts.", "input") from None
    except (TextError, UnsplittableTextError, TextTooLongError) as err:
        raise SpeechRequestError(f"The input cannot be spoken: {err}", "input") from None
    if not pieces:
        raise SpeechRequestError("The input has nothing to say.", "input")
    return pieces, [np.asarray(ids, np.int32) for ids in tokens]

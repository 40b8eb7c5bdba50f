"""The engine's queue of pieces (``synthesis/serving.py``): what a queued piece carries, the order pieces are decoded in
(``priority``) and which of them a batch may take (``take_batch``: not those of cancelled streams, nor those too far
ahead of what their stream's consumer has taken)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from myxtts.synthesis.speech_stream import SpeechStream

# a stream's piece is decoded only while its index is below what its consumer has taken + PIECES_AHEAD: a client that
# reads slowly gets its audio made at its pace, not all at once ahead of it, and a well-behaved one still has its next
# piece ready while it takes the last
PIECES_AHEAD = 2


@dataclass
class Voice:
    name: str
    latents: np.ndarray  # [K, d] the conditioning encoder's latents of the voice's clip (Synthesizer.voice)


@dataclass(order=True)
class QueuedPiece:
    """One piece on its way through the engine; pieces compare by ``priority`` alone (the queues are heaps)."""
    priority: tuple[int, int, int]
    stream: SpeechStream = field(compare=False)
    index: int = field(compare=False)
    tokens: np.ndarray = field(compare=False)
    voice: Voice = field(compare=False)
    scale: float = field(compare=False)
    mel: np.ndarray | None = field(default=None, compare=False)  # once decoded


def priority(request_number: int, index: int, ageing_step: int, client_requests: int = 0) -> tuple[int, int, int]:
    """Piece ``index`` of the ``request_number``-th request counts as if its request had arrived ``ageing_step *
    (index + client_requests)`` requests later, ``client_requests`` being the requests its client already had in
    flight when it arrived: a client's second request at once waits as its first one's second piece would, so a
    host that sends many at once shares the engine with the others instead of taking it (a client with one request
    at a time is ordered as before). A new request's first piece therefore goes ahead of older requests' later pieces (time to
    first audio stays short under load), but only of those at least ``ageing_step`` requests per piece index ahead:
    an older request's piece ``i`` lets at most ``ageing_step * i`` newer requests' pieces pass it, so under any
    steady flow of new requests it is reached within about ``i`` batches (with ``ageing_step = batch_size``) and no
    request starves. Counted in requests, not seconds: new arrivals are the only competition, and the order does
    not depend on how fast the machine is. Ties go to the older request, then to the earlier piece."""
    return request_number + ageing_step * (index + client_requests), request_number, index


def take_batch(pending: list[QueuedPiece], batch_size: int) -> tuple[list[QueuedPiece], int]:
    """Up to ``batch_size`` pieces off the heap ``pending``, highest priority first, each fewer than ``PIECES_AHEAD``
    ahead of what its stream's consumer has taken; the pieces of cancelled streams are dropped (their count
    returned), those too far ahead stay on the heap. Returns (the batch, the pieces dropped)."""
    batch, ahead, dropped = [], [], 0
    while pending and len(batch) < batch_size:
        piece = heapq.heappop(pending)
        if piece.stream.cancelled:  # cancelled, its pieces not yet swept by the engine: never decoded
            dropped += 1
        elif piece.index < piece.stream.taken() + PIECES_AHEAD:
            batch.append(piece)
        else:
            ahead.append(piece)
    for piece in ahead:
        heapq.heappush(pending, piece)
    return batch, dropped

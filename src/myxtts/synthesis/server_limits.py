"""The limits that keep ``myxtts serve`` bounded under abuse, each answered in OpenAI's error shape.

    header_timeout          seconds a connection may take to send a request's line and headers (from its opening,
                            or from the end of its previous response): the connection is closed after that
                            (uvicorn's own keep-alive timer restarts at every byte, so headers sent one byte a second
                            would hold a connection for ever)
    max_body_bytes          a request body larger than this: 413, decided from Content-Length or while reading,
                            before anything is parsed
    body_timeout            seconds a client may take to send its whole body: 408 after that
    max_characters          input characters per request: 400
    max_pieces              pieces (``SynthesisEngine.split``) per request: 400 (one short sentence per piece would
                            otherwise let a 4 KB request queue a thousand decodes)
    max_requests_in_flight  requests accepted and not yet finished: 429 with Retry-After beyond it
    max_requests_per_client requests in flight from one client address (the connection's peer), counted as
                            max_requests_in_flight is: 429 with Retry-After beyond it, so one client's burst takes
                            neither every place nor the text work and the engine from the others (behind a reverse
                            proxy every client has the proxy's address: raise it to max_requests_in_flight)
    max_queued_pieces       pieces accepted and not yet delivered (pending, decoding, vocoding): 429 with
                            Retry-After when a request would take the backlog beyond it
    send_timeout            seconds one piece's audio may take to reach a client: a client that stops reading is
                            dropped and its remaining pieces freed
    request_timeout         seconds a request may take in all, from its body's arrival to its last byte (text work,
                            queueing and streaming): a stream past it is ended, its queued pieces dropped (a client
                            that reads a little at a time, each piece within send_timeout, holds a stream no longer)
    max_unsent_bytes        bytes of audio the streams may hold not yet sent, all requests together: a request whose
                            worst case would pass it gets 429 with Retry-After before it starts (``admission.py``)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from myxtts.errors import InputError


@dataclass(frozen=True)
class ServerLimits:
    # 4096 characters, each at most 12 bytes of JSON escapes (a surrogate pair), fit in 48 KB; 64 KB leaves room
    # for the other fields
    max_body_bytes: int = 65536
    header_timeout: float = 10.0
    body_timeout: float = 10.0
    max_characters: int = 4096
    max_pieces: int = 128
    max_requests_in_flight: int = 64
    # an eighth of max_requests_in_flight: a burst from one address admits this many, the rest get 429
    max_requests_per_client: int = 8
    max_queued_pieces: int = 512
    send_timeout: float = 30.0
    # open connections at once (uvicorn's limit_concurrency, answered 503 above it): each idle one holds a file
    # descriptor for header_timeout, so a flood cannot exhaust the process' descriptors (1,024 by default)
    max_connections: int = 512
    # five minutes: about the audio of max_characters at speed 1, for a client that reads at the pace it plays (a
    # longer or slower request read so needs more)
    request_timeout: float = 300.0
    # 256 MiB: max_queued_pieces pieces of the shipped model's longest (data.max_mel_frames) fit in it
    max_unsent_bytes: int = 268435456

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_characters", "max_pieces", "max_requests_in_flight",
                     "max_requests_per_client", "max_queued_pieces", "max_connections", "max_unsent_bytes"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise InputError(f"Server limit {name} must be a positive whole number, got {getattr(self, name)!r}.")
        for name in ("header_timeout", "body_timeout", "send_timeout", "request_timeout"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise InputError(f"Server limit {name} must be a positive number of seconds, got {value!r}.")
        if self.max_pieces > self.max_queued_pieces:
            # a request the size of max_pieces would be refused with 429 forever, even on an idle server
            raise InputError(f"max_pieces ({self.max_pieces}) must not exceed max_queued_pieces "
                             f"({self.max_queued_pieces}).")

    def as_dict(self) -> dict:
        return asdict(self)

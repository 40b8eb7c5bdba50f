"""What the `myxtts serve` limit tests share (test_serve_request_limits.py, test_serve_backlog.py,
test_serve_slow_readers.py): a real server with tight limits (``bounded_server``: each test module holds it in a
module-scoped fixture, ``bounded``, so starts it once), the engine thread held inside its next decode (``engine_held``)
so a backlog stays queued while a test looks at it, and a raw HTTP exchange over a socket (``raw_exchange``) with the
OpenAI error shape the server answers in (``error_of``).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from typing import Any, Iterator

from conftest import bundled_wavs
from test_serve import running_server


def tight_limits():
    """The limits of the ``bounded`` server: small enough that a test reaches each one with a few requests."""
    from myxtts.synthesis.server_limits import ServerLimits

    return ServerLimits(max_body_bytes=4096, header_timeout=1.0, body_timeout=2.0, max_characters=600, max_pieces=8,
                        max_requests_in_flight=2, max_queued_pieces=10, send_timeout=2.0)


@contextlib.contextmanager
def bounded_server(synthesizer) -> Iterator[tuple[str, Any]]:
    """``synthesizer`` behind a real server with ``tight_limits``; yields (its URL, its SpeechEngine). Each test
    module holds it in a module-scoped ``bounded`` fixture, so the server starts once per module."""
    from myxtts.synthesis.serving import SpeechEngine

    engine = SpeechEngine(synthesizer, {"linda": bundled_wavs(1)[0]}, batch_size=4, limits=tight_limits())
    with running_server(engine) as url:
        yield url, engine


@contextlib.contextmanager
def engine_held(engine) -> Iterator[threading.Event]:
    """The engine thread stops inside its next decode until the block ends; yields an event set once it is there."""
    inside, release = threading.Event(), threading.Event()
    real = engine.synthesizer.engine.decode_tokens

    def held(*args, **kwargs):
        inside.set()
        release.wait(60)
        return real(*args, **kwargs)

    engine.synthesizer.engine.decode_tokens = held
    try:
        yield inside
    finally:
        release.set()
        del engine.synthesizer.engine.decode_tokens  # the class's method again


def idle(engine) -> bool:
    """Nothing in flight, queued or unsent: the engine is back where a test found it."""
    backlog = engine.backlog()
    return backlog["requests_in_flight"] == 0 and engine.queued() == 0 and backlog["unsent_bytes"] == 0


def raw_exchange(url: str, request: bytes, timeout: float = 20) -> tuple[int, dict, bytes]:
    """Send ``request`` as is and read the answer until the server closes the connection."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as connection:
        connection.sendall(request)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {key.lower(): value for key, value in headers.items()}, body


def error_of(payload: bytes) -> dict:
    """The error of an answer in OpenAI's shape (message, type, param, code; a message always said)."""
    error = json.loads(payload)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error

"""``myxtts serve``: an HTTP server with an OpenAI-compatible speech endpoint (FastAPI + uvicorn, the ``serve`` extra).

    POST /v1/audio/speech  {"input": "...", "voice": NAME, "response_format": "wav" | "pcm", "speed": 1.0}
        -> audio streamed sentence by sentence (wav: a 44-byte header then 16-bit mono PCM; pcm: the raw samples,
           little-endian, at the model's sample rate, also in the X-Sample-Rate header)
    GET /health -> {"status": "ok", "voices": [...], "compiles_after_warmup": 0, "backlog": {...}, "limits": {...}}

A connection whose request line and headers do not all arrive within ``header_timeout`` is closed
(``http_connections.head_deadline_protocol``); above ``max_connections`` open connections a new one is answered 503 (uvicorn's
``limit_concurrency``). Cross-site requests are refused before any route (``SameOriginGuard``): a Host header that
is not the server's own (its bind address and port, or ``allowed_hosts``; DNS rebinding) and an Origin header of
another site get 403, and the speech endpoint takes ``Content-Type: application/json`` only (415), so a web page the
user visits cannot POST to it as a "simple" form or text request. Every refusal is a JSON error in OpenAI's shape (``{"error": {"message", "type",
"param", "code"}}``) and never reaches the engine: a body over ``max_body_bytes`` (413, from Content-Length or
while reading, before parsing), a body not received within ``body_timeout`` (408), malformed JSON, missing or
mistyped fields, empty input, input over ``max_characters`` or ``max_pieces`` (400), an unknown voice or format, a
speed out of range, text the model cannot say (400), too many requests in flight or pieces queued (429 with
Retry-After; ``server_limits.py``).

The text work runs in a worker thread while the route watches for the client leaving (``engine.submit``'s
``cancelled``: the work stops at its next front-end pass). The audio is sent by ``AudioResponse``: it awaits each
piece on the event loop (no worker thread is held while a stream waits), gives each send ``send_timeout`` seconds
and the whole request ``request_timeout`` (a client that stops reading, or reads a little at a time, is dropped) and
watches for the client leaving; either way the stream is cancelled and its remaining pieces freed, and a client too
slow to read has its connection aborted (``head_deadline_protocol`` puts the hook in the scope's extensions), which
frees what uvicorn's buffer still holds for it. A piece's bytes count as unsent (``max_unsent_bytes``) until the
send after it returns: uvicorn waits before each send until the connection's buffer is below its high-water mark,
so by then the piece has left the process but for at most that mark, into a kernel send buffer of a fixed
``CONNECTION_SEND_BUFFER_BYTES`` (a client that reads slowly makes the sends wait, and the timeouts see it). Each
accepted request gets an id (``X-Request-Id``) that every log line about it names. A failure after the headers (an engine error, a piece
that never comes, a cancel) ends the response without its final chunk and closes the connection: the client sees
the chunked transfer cut, never a clean end of a truncated WAV.

Shutdown (``serve``): SIGTERM or Ctrl-C stops accepting connections at once, lets the streams in flight finish for
``shutdown_grace`` seconds, then cuts those still open (as above), closes the engine and returns, so
``myxtts serve`` exits 0; a second signal cuts them at once. The synthesis itself is ``synthesis/serving.py``'s
engine.
(No ``from __future__ import annotations`` here: FastAPI reads the request model from the live annotation.)
"""


import asyncio
import logging
import math
import threading
import time
import uuid
from typing import Any

from myxtts.synthesis.admission import EngineBusyError, SpeechRequestError
from myxtts.synthesis.http_connections import ABORT_EXTENSION, head_deadline_protocol
from myxtts.synthesis.http_guard import SameOriginGuard, allowed_hosts_for
from myxtts.synthesis.serving import PIECE_READY_TIMEOUT, SpeechEngine
from myxtts.synthesis.speech_stream import SpeechStream, wav_header

FORMATS = {"wav": "audio/wav", "pcm": "audio/pcm"}
LOG = logging.getLogger("myxtts.serve")
# seconds the streams in flight may take to finish after SIGTERM (under the 30 s a container orchestrator such as
# Kubernetes waits by default before it kills)
DEFAULT_SHUTDOWN_GRACE = 20.0


def _error(status: int, message: str, param: str | None = None, kind: str = "invalid_request_error",
           code: str | None = None, headers: dict | None = None):
    from fastapi.responses import JSONResponse  # fastapi is the serve extra

    return JSONResponse(status_code=status, headers=headers,
                        content={"error": {"message": message, "type": kind, "param": param, "code": code}})


class BodyTooLarge(ValueError):
    pass


class SlowClientError(TimeoutError):
    """A client that did not take a piece within ``send_timeout``."""


async def _read_body(request: Any, max_bytes: int) -> bytes:
    """The request body, refused as soon as it passes ``max_bytes`` (a chunked body has no Content-Length)."""
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > max_bytes:
            raise BodyTooLarge(size)
        parts.append(part)
    return b"".join(parts)


async def _wait_for_disconnect(receive: Any) -> None:
    """Returns once the client has gone (uvicorn answers every receive after the body with ``http.disconnect``
    when it has; a cancelled wait consumes nothing)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _call_from_thread(loop: asyncio.AbstractEventLoop, callback) -> None:
    try:
        loop.call_soon_threadsafe(callback)
    except RuntimeError:  # the loop is closed: nothing of it is left to stop
        pass


def _response_class():
    from starlette.responses import Response  # starlette comes with fastapi, the serve extra

    class AudioResponse(Response):
        """Streams a ``SpeechStream`` as one chunked response (see the module docstring). Only a stream taken to
        its end gets the final chunk; anything else closes the connection without it."""

        def __init__(self, stream: SpeechStream, media_type: str, headers: dict, prefix: bytes, send_timeout: float,
                     request_id: str = "-"):
            self.stream, self.prefix, self.send_timeout, self.request_id = stream, prefix, send_timeout, request_id
            self.status_code, self.media_type, self.background = 200, media_type, None
            self.init_headers({**headers, "content-type": media_type})

        async def _send_chunk(self, send: Any, chunk: bytes, more: bool = True) -> None:
            message = {"type": "http.response.body", "body": chunk, "more_body": more}
            try:
                await asyncio.wait_for(send(message), self.send_timeout)
            except asyncio.TimeoutError:
                raise SlowClientError(f"the client took more than {self.send_timeout} s to take a piece") from None

        async def _watch_disconnect(self, receive: Any) -> None:
            await _wait_for_disconnect(receive)
            self.stream.cancel()  # wakes the sender, frees the pieces

        async def _pump(self, send: Any) -> None:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            if self.prefix:
                await self._send_chunk(send, self.prefix)
            previous = 0  # bytes of the audio chunk handed to uvicorn last
            while (chunk := await self.stream.next_chunk(PIECE_READY_TIMEOUT)) is not None:
                await self._send_chunk(send, chunk)
                self.stream.sent(previous)  # this send first waited for the chunk before to leave (module docstring)
                previous = len(chunk)
            if not self.stream.cancelled:
                await self._send_chunk(send, b"")  # sends nothing once the last chunk has left
                self.stream.sent(previous)
                await self._send_chunk(send, b"", more=False)

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            loop = asyncio.get_running_loop()
            pump = asyncio.ensure_future(self._pump(send))
            watcher = asyncio.ensure_future(self._watch_disconnect(receive))
            # a cancel from anywhere (the client left, the shutdown's grace ran out) also ends a send that is
            # blocked on a client that does not read
            self.stream.when_cancelled(lambda: _call_from_thread(loop, pump.cancel))
            remaining = self.stream.deadline - time.monotonic()  # inf for a stream without a deadline
            try:
                finished, _ = await asyncio.wait({pump}, timeout=max(0.0, remaining) if remaining < math.inf else None)
                if not finished:  # past request_timeout: ended, its queued pieces dropped
                    self.stream.expire()
                    pump.cancel()
                    await asyncio.wait({pump})
            finally:
                watcher.cancel()
                pump.cancel()
                self.stream.cancel()
            done = f"after {self.stream.taken()} of {len(self.stream.pieces)} pieces"
            for index in self.stream.cut:  # served, but not all of it: say which text was cut
                LOG.warning("request %s: piece %d (%r) was predicted longer than data.max_mel_frames and is cut "
                            "there", self.request_id, index, self.stream.pieces[index].text[:60])
            slow = self.stream.expired or (not pump.cancelled() and isinstance(pump.exception(), SlowClientError))
            if slow and (abort := scope.get("extensions", {}).get(ABORT_EXTENSION)) is not None:
                abort()  # what uvicorn still buffers for this client goes too
            if self.stream.expired:
                LOG.warning("request %s: stream ended %s at its request_timeout, its queued pieces dropped",
                            self.request_id, done)
            elif not pump.cancelled() and pump.exception() is not None:  # a slow client, a stuck or failed engine
                LOG.warning("request %s: stream cut %s: %s", self.request_id, done, pump.exception())
            elif pump.cancelled() or self.stream.taken() < len(self.stream.pieces):
                LOG.info("request %s: stream cancelled %s (the client left or the server is shutting down)",
                         self.request_id, done)

    return AudioResponse


def _speech_body_class() -> type:
    """The speech endpoint's request body (a pydantic model: the ``serve`` extra's, imported on first use)."""
    from pydantic import BaseModel, ConfigDict  # pydantic comes with fastapi, the serve extra

    class SpeechBody(BaseModel):
        model_config = ConfigDict(extra="ignore")  # OpenAI clients also send e.g. "model"
        input: str
        voice: str
        response_format: str = "wav"
        speed: float = 1.0

    return SpeechBody


def _health(engine: SpeechEngine) -> Any:
    """``GET /health``: the engine's figures and limits; 503 once its thread has died."""
    healthy, failure = engine.health()
    limits = engine.limits
    if not healthy:  # a dead engine thread: a load balancer must stop sending requests here
        from fastapi.responses import JSONResponse  # fastapi is the serve extra

        return JSONResponse(status_code=503, content={"status": "failed", "error": failure,
                                                      "voices": sorted(engine.voices)})
    return {"status": "ok", "voices": sorted(engine.voices), "sample_rate": engine.synthesizer.sample_rate,
            "batch_size": engine.batch_size, "batches_by_size": engine.batches_by_size(),
            "compiles_after_warmup": engine.compiles_after_warmup(),
            "queued_pieces": engine.queued(), "backlog": engine.backlog(), "pieces_served": engine.served,
            "pieces_dropped": engine.dropped, "pieces_vocoded_after_cancel": engine.vocoded_after_cancel,
            "pieces_cut": engine.cut, "requests_timed_out": engine.timed_out,
            "max_characters": limits.max_characters, "limits": limits.as_dict()}


def _too_large(limits: Any, size: str) -> Any:
    """413 for a body of ``size`` bytes (a number, or "over N" when it was cut off while reading)."""
    # the unread rest of the body makes the connection unusable: close it after the answer
    return _error(413, f"The request body is {size} bytes, more than this server's limit of "
                       f"{limits.max_body_bytes}.", code="request_too_large", headers={"Connection": "close"})


async def _parse(request: Any, limits: Any, speech_body: type) -> Any:
    """The body as a ``speech_body`` (``_speech_body_class``), or the error response that refuses it."""
    from pydantic import ValidationError  # pydantic and starlette come with fastapi, the serve extra
    from starlette.requests import ClientDisconnect  # the serve extra, as above

    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limits.max_body_bytes:
        return _too_large(limits, declared)
    try:
        raw = await asyncio.wait_for(_read_body(request, limits.max_body_bytes), limits.body_timeout)
    except BodyTooLarge as err:
        return _too_large(limits, f"over {err.args[0]}")
    except ClientDisconnect:  # gone before its body arrived: the answer is for the log only
        return _error(400, "The client left before its request body arrived.")
    except asyncio.TimeoutError:
        return _error(408, f"The request body did not arrive within {limits.body_timeout} s.", code="timeout",
                      headers={"Connection": "close"})
    try:
        return speech_body.model_validate_json(raw)
    except ValidationError as err:
        first = err.errors()[0] if err.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ())) or None
        return _error(400, f"Invalid request body: {first.get('msg', 'malformed JSON')}"
                           + (f" (field {where!r})" if where else ""), where)


async def _speech(engine: SpeechEngine, request: Any, speech_body: type, audio_response: type) -> Any:
    """``POST /v1/audio/speech``: the body checked, the text work in a worker thread while the client is watched,
    then the audio streamed (``audio_response``: ``_response_class``), or the error response that refuses it."""
    from starlette.concurrency import run_in_threadpool  # starlette comes with fastapi, the serve extra

    limits = engine.limits
    body = await _parse(request, limits, speech_body)
    if not isinstance(body, speech_body):
        return body
    if body.response_format not in FORMATS:
        return _error(400, f"response_format {body.response_format!r} is not supported; use one of "
                           f"{sorted(FORMATS)}.", "response_format")
    left = threading.Event()  # set once the client has gone: the text work stops at its next front-end pass
    client = request.client.host if request.client is not None else None  # the peer's address
    work = asyncio.ensure_future(run_in_threadpool(engine.submit, body.input, body.voice, body.speed, left.is_set,
                                                   client))
    watcher = asyncio.ensure_future(_wait_for_disconnect(request.receive))
    await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
    watcher.cancel()
    if watcher.done() and not watcher.cancelled():
        left.set()
    try:
        stream = await work
    except EngineBusyError as err:
        return _error(429, str(err), kind="requests", code="rate_limit_exceeded",
                      headers={"Retry-After": str(err.retry_after)})
    except SpeechRequestError as err:
        return _error(err.status, str(err), err.param)
    if left.is_set():  # the work ended just as the client went: nobody takes the audio
        stream.cancel()
        return _error(400, "The client left before its audio started.")
    rate, request_id = engine.synthesizer.sample_rate, f"req_{uuid.uuid4().hex[:24]}"
    headers = {"X-Sample-Rate": str(rate), "X-Pieces": str(len(stream.pieces)), "X-Request-Id": request_id}
    prefix = wav_header(rate) if body.response_format == "wav" else b""
    return audio_response(stream, FORMATS[body.response_format], headers, prefix, limits.send_timeout, request_id)


def create_app(engine: SpeechEngine, allowed_hosts: tuple[str, ...] | None = None) -> Any:
    """The FastAPI application: ``POST /v1/audio/speech`` and ``GET /health`` over ``engine``, behind
    ``SameOriginGuard`` with ``allowed_hosts`` (None: any Host, cross-site Origins still refused).

    The routes are closures over the engine that hand the request to the module's ``_speech`` / ``_health``; the
    streaming is ``speech_stream``'s."""
    from fastapi import FastAPI, Request  # fastapi is the serve extra

    speech_body, audio_response = _speech_body_class(), _response_class()
    app = FastAPI(title="myxtts", docs_url=None, redoc_url=None)

    @app.get("/health")
    async def health():
        return _health(engine)

    @app.post("/v1/audio/speech")
    async def speech(request: Request):  # a live annotation: FastAPI passes the request by it
        return await _speech(engine, request, speech_body, audio_response)

    return SameOriginGuard(app, allowed_hosts)


def uvicorn_config(engine: SpeechEngine, host: str, port: int, log_level: str = "info",
                   allowed_hosts: tuple[str, ...] = (), **options: Any):
    """The uvicorn configuration ``serve`` runs ``create_app(engine)`` with (the tests run the same): the host
    names of the bind (``allowed_hosts_for``, plus ``allowed_hosts``) and ``max_connections``."""
    import uvicorn  # uvicorn is the serve extra

    app = create_app(engine, allowed_hosts_for(host, tuple(allowed_hosts)))
    return uvicorn.Config(app, host=host, port=port, log_level=log_level,
                          http=head_deadline_protocol(engine.limits.header_timeout),
                          limit_concurrency=engine.limits.max_connections, **options)


def serve(engine: SpeechEngine, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info",
          shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE, allowed_hosts: tuple[str, ...] = ()) -> None:
    """Serve until SIGTERM or Ctrl-C, then shut down within ``shutdown_grace`` seconds (module docstring) and
    return; the caller closes the engine."""
    import uvicorn  # uvicorn is the serve extra

    if not isinstance(shutdown_grace, (int, float)) or not math.isfinite(shutdown_grace) or shutdown_grace < 0:
        raise ValueError(f"shutdown_grace must be a number of seconds >= 0, got {shutdown_grace!r}.")

    def cut_open_streams(why: str) -> None:
        if cut := engine.cancel_all():
            LOG.warning("shutdown: %s, %d stream(s) still open cut", why, cut)

    class GracefulServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # uvicorn's own handler notes the signal to raise it again once shut down, which would end the process
            # by the signal (status 143: a crash to a supervisor); a shutdown that completed here is an exit 0.
            # A second signal stops the waiting (uvicorn's force_exit; shutdown then cuts what is left).
            if self.should_exit:
                self.force_exit = True
            self.should_exit = True

        def abort_connections(self) -> None:
            """Close what is still open a second after the streams were cut: a cut response closes its connection
            only once the client has taken what was sent, which a client that stopped reading never does."""
            for connection in list(self.server_state.connections):
                if (transport := getattr(connection, "transport", None)) is not None:
                    transport.abort()

        def grace_over(self) -> None:
            cut_open_streams(f"the {shutdown_grace} s grace period is over")
            asyncio.get_running_loop().call_later(1.0, self.abort_connections)

        async def shutdown(self, sockets: Any = None) -> None:
            backlog = engine.backlog()
            LOG.info("shutdown: no new connections; %d request(s) in flight get %s s to finish",
                     backlog["requests_in_flight"], shutdown_grace)
            timer = asyncio.get_running_loop().call_later(shutdown_grace, self.grace_over)
            try:
                await super().shutdown(sockets)
            finally:
                timer.cancel()
                cut_open_streams("a second signal")  # only a forced exit leaves any

    # uvicorn's own timeout cancels the response tasks a little after the grace period, should one not have ended
    config = uvicorn_config(engine, host, port, log_level, allowed_hosts=allowed_hosts,
                            timeout_graceful_shutdown=math.ceil(shutdown_grace) + 5)
    if not LOG.handlers:  # the request-id lines go where uvicorn's own go, at its level (Config set them up)
        LOG.handlers, LOG.propagate = list(logging.getLogger("uvicorn").handlers), False
        LOG.setLevel(log_level.upper())
    asyncio.run(GracefulServer(config).serve())

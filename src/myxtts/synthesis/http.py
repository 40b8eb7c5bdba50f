"""``myxtts serve``: an HTTP server with an OpenAI-compatible speech endpoint (FastAPI + uvicorn, the ``serve`` extra).

    POST /v1/audio/speech  {"input": "...", "voice": NAME, "response_format": "wav" | "pcm", "speed": 1.0}
        -> audio streamed sentence by sentence (wav: a 44-byte header then 16-bit mono PCM; pcm: the raw samples,
           little-endian, at the model's sample rate, also in the X-Sample-Rate header)
    GET /health -> {"status": "ok", "voices": [...], "compiles_after_warmup": 0, "backlog": {...}, "limits": {...}}

Every refusal is a JSON error in OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``) and never
reaches the engine: a body over ``max_body_bytes`` (413, from Content-Length or while reading, before parsing), a
body not received within ``body_timeout`` (408), malformed JSON, missing or mistyped fields, empty input, input over
``max_characters`` or ``max_pieces`` (400), an unknown voice or format, a speed out of range, text the model cannot
say (400), too many requests in flight or pieces queued (429 with Retry-After; ``server_limits.py``).

The audio is sent by ``AudioResponse``: it awaits each piece on the event loop (no worker thread is held while a
stream waits), gives each send ``send_timeout`` seconds (a client that stops reading is dropped) and watches for
the client leaving; either way the stream is cancelled and its remaining pieces freed. The synthesis itself is
``synthesis/serving.py``'s engine.
(No ``from __future__ import annotations`` here: FastAPI reads the request model from the live annotation.)
"""


import asyncio
import logging
from typing import Any

from myxtts.synthesis.serving import (PIECE_READY_TIMEOUT, EngineBusyError, SpeechEngine, SpeechRequestError,
                                      SpeechStream, wav_header)

FORMATS = {"wav": "audio/wav", "pcm": "audio/pcm"}
LOG = logging.getLogger("myxtts.serve")


def _error(status: int, message: str, param: str | None = None, kind: str = "invalid_request_error",
           code: str | None = None, headers: dict | None = None):
    from fastapi.responses import JSONResponse

    return JSONResponse(status_code=status, headers=headers,
                        content={"error": {"message": message, "type": kind, "param": param, "code": code}})


class BodyTooLarge(ValueError):
    pass


async def _read_body(request: Any, max_bytes: int) -> bytes:
    """The request body, refused as soon as it passes ``max_bytes`` (a chunked body has no Content-Length)."""
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > max_bytes:
            raise BodyTooLarge(size)
        parts.append(part)
    return b"".join(parts)


def _response_class():
    from starlette.responses import Response

    class AudioResponse(Response):
        """Streams a ``SpeechStream`` as one chunked response (see the module docstring). A failure after the
        headers ends the response without its final chunk, so the client sees the transfer cut, not a clean end."""

        def __init__(self, stream: SpeechStream, media_type: str, headers: dict, prefix: bytes, send_timeout: float):
            self.stream, self.prefix, self.send_timeout = stream, prefix, send_timeout
            self.status_code, self.media_type, self.background = 200, media_type, None
            self.init_headers({**headers, "content-type": media_type})

        async def _send_chunk(self, send: Any, chunk: bytes, more: bool = True) -> None:
            message = {"type": "http.response.body", "body": chunk, "more_body": more}
            try:
                await asyncio.wait_for(send(message), self.send_timeout)
            except asyncio.TimeoutError:
                raise TimeoutError(f"the client took more than {self.send_timeout} s to take a piece") from None

        async def _watch_disconnect(self, receive: Any) -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            self.stream.cancel()  # wakes the sender, frees the pieces

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            watcher = asyncio.ensure_future(self._watch_disconnect(receive))
            try:
                await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
                if self.prefix:
                    await self._send_chunk(send, self.prefix)
                while (chunk := await self.stream.next_chunk(PIECE_READY_TIMEOUT)) is not None:
                    await self._send_chunk(send, chunk)
                if not self.stream.cancelled:
                    await self._send_chunk(send, b"", more=False)
            except Exception as err:  # noqa: BLE001  a slow client, a stuck or failed engine: end this stream only
                LOG.warning("speech stream dropped after %d of %d pieces: %s", self.stream.taken(),
                            len(self.stream.pieces), err)
            finally:
                watcher.cancel()
                self.stream.cancel()

    return AudioResponse


def create_app(engine: SpeechEngine) -> Any:
    from fastapi import FastAPI, Request
    from pydantic import BaseModel, ConfigDict, ValidationError
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import ClientDisconnect

    limits = engine.limits
    audio_response = _response_class()

    class SpeechBody(BaseModel):
        model_config = ConfigDict(extra="ignore")  # OpenAI clients also send e.g. "model"
        input: str
        voice: str
        response_format: str = "wav"
        speed: float = 1.0

    app = FastAPI(title="myxtts", docs_url=None, redoc_url=None)

    @app.get("/health")
    async def health():
        return {"status": "ok", "voices": sorted(engine.voices), "sample_rate": engine.synthesizer.sample_rate,
                "batch_size": engine.batch_size, "compiles_after_warmup": engine.compiles_after_warmup(),
                "queued_pieces": engine.queued(), "backlog": engine.backlog(), "pieces_served": engine.served,
                "max_characters": limits.max_characters, "limits": limits.as_dict()}

    def too_large(size: str) -> Any:
        # the unread rest of the body makes the connection unusable: close it after the answer
        return _error(413, f"The request body is {size} bytes, more than this server's limit of "
                           f"{limits.max_body_bytes}.", code="request_too_large", headers={"Connection": "close"})

    async def parse(request: Request) -> Any:
        """The body as a ``SpeechBody``, or the error response that refuses it."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limits.max_body_bytes:
            return too_large(declared)
        try:
            raw = await asyncio.wait_for(_read_body(request, limits.max_body_bytes), limits.body_timeout)
        except BodyTooLarge as err:
            return too_large(f"over {err.args[0]}")
        except ClientDisconnect:  # gone before its body arrived: the answer is for the log only
            return _error(400, "The client left before its request body arrived.")
        except asyncio.TimeoutError:
            return _error(408, f"The request body did not arrive within {limits.body_timeout} s.", code="timeout",
                          headers={"Connection": "close"})
        try:
            return SpeechBody.model_validate_json(raw)
        except ValidationError as err:
            first = err.errors()[0] if err.errors() else {}
            where = ".".join(str(part) for part in first.get("loc", ())) or None
            return _error(400, f"Invalid request body: {first.get('msg', 'malformed JSON')}"
                               + (f" (field {where!r})" if where else ""), where)

    @app.post("/v1/audio/speech")
    async def speech(request: Request):
        body = await parse(request)
        if not isinstance(body, SpeechBody):
            return body
        if body.response_format not in FORMATS:
            return _error(400, f"response_format {body.response_format!r} is not supported; use one of "
                               f"{sorted(FORMATS)}.", "response_format")
        try:
            stream = await run_in_threadpool(engine.submit, body.input, body.voice, body.speed)
        except EngineBusyError as err:
            return _error(429, str(err), kind="requests", code="rate_limit_exceeded",
                          headers={"Retry-After": str(err.retry_after)})
        except SpeechRequestError as err:
            return _error(err.status, str(err), err.param)
        rate = engine.synthesizer.sample_rate
        headers = {"X-Sample-Rate": str(rate), "X-Pieces": str(len(stream.pieces))}
        prefix = wav_header(rate) if body.response_format == "wav" else b""
        return audio_response(stream, FORMATS[body.response_format], headers, prefix, limits.send_timeout)

    return app


def serve(engine: SpeechEngine, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info") -> None:
    import uvicorn

    asyncio.run(uvicorn.Server(uvicorn.Config(create_app(engine), host=host, port=port, log_level=log_level)).serve())

"""``myxtts serve``: an HTTP server with an OpenAI-compatible speech endpoint (FastAPI + uvicorn, the ``serve`` extra).

    POST /v1/audio/speech  {"input": "...", "voice": NAME, "response_format": "wav" | "pcm", "speed": 1.0}
        -> audio streamed sentence by sentence (wav: a 44-byte header then 16-bit mono PCM; pcm: the raw samples,
           little-endian, at the model's sample rate, also in the X-Sample-Rate header)
    GET /health -> {"status": "ok", "voices": [...], "compiles_after_warmup": 0, "queued_pieces": n, ...}

Bad requests (malformed JSON, missing or mistyped fields, empty or oversized input, an unknown voice or format, a
speed out of range, text with nothing to pronounce) get a 4xx JSON error in OpenAI's shape
(``{"error": {"message", "type", "param"}}``) and never reach the engine; a client that disconnects mid-stream
has its remaining sentences dropped. The synthesis itself is ``synthesis/serving.py``'s engine.
(No ``from __future__ import annotations`` here: FastAPI reads the request model from the live annotation.)
"""


import asyncio
from typing import Any

from myxtts.synthesis.serving import SpeechEngine, SpeechRequestError, wav_header

FORMATS = {"wav": "audio/wav", "pcm": "audio/pcm"}


def _error(status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
    from fastapi.responses import JSONResponse

    return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind, "param": param}})


def create_app(engine: SpeechEngine) -> Any:
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import StreamingResponse
    from pydantic import BaseModel, ConfigDict
    from starlette.concurrency import run_in_threadpool

    from myxtts.text import TextError

    class SpeechBody(BaseModel):
        model_config = ConfigDict(extra="ignore")  # OpenAI clients also send e.g. "model"
        input: str
        voice: str
        response_format: str = "wav"
        speed: float = 1.0

    app = FastAPI(title="myxtts", docs_url=None, redoc_url=None)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(_request: Request, err: RequestValidationError):
        first = err.errors()[0] if err.errors() else {}
        # loc is ("body", field, ...) for a field; a JSON syntax error gives ("body", character offset)
        where = ".".join(part for part in first.get("loc", ()) if isinstance(part, str) and part != "body") or None
        return _error(400, f"Invalid request body: {first.get('msg', 'malformed JSON')}"
                           + (f" (field {where!r})" if where else ""), where)

    @app.get("/health")
    async def health():
        return {"status": "ok", "voices": sorted(engine.voices), "sample_rate": engine.synthesizer.sample_rate,
                "batch_size": engine.batch_size, "compiles_after_warmup": engine.compiles_after_warmup(),
                "queued_pieces": engine.queued(), "pieces_served": engine.served,
                "max_characters": engine.max_characters}

    @app.post("/v1/audio/speech")
    async def speech(body: SpeechBody, request: Request):
        if body.response_format not in FORMATS:
            return _error(400, f"response_format {body.response_format!r} is not supported; use one of "
                               f"{sorted(FORMATS)}.", "response_format")
        try:
            stream = await run_in_threadpool(engine.submit, body.input, body.voice, body.speed)
        except SpeechRequestError as err:
            return _error(err.status, str(err), err.param)
        except TextError as err:
            return _error(400, f"The input cannot be spoken: {err}", "input")
        rate = engine.synthesizer.sample_rate

        async def audio():
            chunks = stream.pcm16(timeout=300)
            try:
                if body.response_format == "wav":
                    yield wav_header(rate)
                while True:
                    chunk = await run_in_threadpool(next, chunks, None)  # waits off the event loop
                    if chunk is None:
                        return
                    if await request.is_disconnected():
                        return
                    yield chunk
            finally:
                stream.cancel()  # a client gone mid-stream: its remaining sentences are dropped

        headers = {"X-Sample-Rate": str(rate), "X-Pieces": str(len(stream.pieces))}
        return StreamingResponse(audio(), media_type=FORMATS[body.response_format], headers=headers)

    return app


def serve(engine: SpeechEngine, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info") -> None:
    import uvicorn

    asyncio.run(uvicorn.Server(uvicorn.Config(create_app(engine), host=host, port=port, log_level=log_level)).serve())

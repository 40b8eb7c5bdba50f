"""`myxtts serve` under load, over real HTTP on localhost: the in-flight and queue limits answer 429 while the engine
is held mid-decode, open streams hold no thread, a client that stops reading is dropped, a connection flood is 503,
a dead engine thread turns the server 503; and a real `myxtts serve` process shut down by SIGTERM with streams in
flight.

One server with tight limits (``bounded``, ``serve_limits_helpers``); where a test needs a backlog, the real engine
thread is held inside its next decode (``engine_held``) so the pieces stay queued for as long as the test looks at
them. What a request may be (body, head, text, origin): test_serve_request_limits.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import threading

import pytest

from conftest import bundled_wavs
from serve_limits_helpers import bounded_server, engine_held, error_of, idle, raw_exchange, tight_limits
from test_serve import TRANSCRIPTS, TWO_SENTENCES, _free_port, _health, _post, _wait_until, running_server

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


@pytest.fixture(scope="module")
def bounded(serving_synthesizer):
    with bounded_server(serving_synthesizer) as served:
        yield served


def _busy_answer(url: str, text: str = TRANSCRIPTS[1]) -> dict:
    status, headers, payload = _post(url, {"input": text, "voice": "linda", "response_format": "pcm"})
    assert status == 429, payload
    assert int(headers["retry-after"]) >= 1
    error = error_of(payload)
    assert error["type"] == "requests" and error["code"] == "rate_limit_exceeded"
    return error


def test_requests_past_the_in_flight_limit_get_429_with_retry_after(bounded):
    url, engine = bounded
    with engine_held(engine) as inside:
        held = [engine.submit(TRANSCRIPTS[i], "linda") for i in (0, 3)]  # the limit: 2
        inside.wait(60)
        assert "2 requests in flight" in _busy_answer(url)["message"]
        for stream in held:
            stream.cancel()
    _wait_until(lambda: idle(engine))
    status, _, pcm = _post(url, {"input": TRANSCRIPTS[1], "voice": "linda", "response_format": "pcm"})
    assert status == 200
    _wait_until(lambda: idle(engine))  # the server finishes a request's bookkeeping after its last byte went out
    stream = engine.submit(TRANSCRIPTS[1], "linda")  # the blocking side of a stream, as a Python caller reads it
    assert len(b"".join(stream.pcm16(timeout=60))) == len(pcm)
    _wait_until(lambda: idle(engine))


def test_pieces_past_the_queue_limit_get_429_and_health_shows_the_backlog(bounded):
    from myxtts.synthesis.piece_queue import PIECES_AHEAD

    url, engine = bounded
    text = " ".join(f"Sentence number {word}." for word in "one two three four five six seven eight".split())
    with engine_held(engine) as inside:
        stream = engine.submit(text, "linda")
        assert len(stream.pieces) == 8
        inside.wait(60)
        health = _health(url)
        # nothing taken yet: its first PIECES_AHEAD pieces are decoded, the rest wait; the audio bytes of its eight
        # pieces' worst case stay reserved until they are sent
        assert health["backlog"] == {"pending": 8 - PIECES_AHEAD, "decoding": PIECES_AHEAD, "vocoding": 0,
                                     "requests_in_flight": 1,
                                     "ready_unsent": 0, "unsent_bytes": stream.unsent_bytes()}
        assert stream.unsent_bytes() == sum(engine.audio_bound.piece_bytes(piece.pause_after)
                                            for piece in stream.pieces)
        assert health["queued_pieces"] == 8 and health["limits"] == tight_limits().as_dict()
        assert "8 pieces queued" in _busy_answer(url, "Come here. Sit down. Wait.")["message"]  # 8 + 3 > 10
        stream.cancel()  # its pending pieces are freed at once
        assert engine.backlog()["pending"] == 0
    _wait_until(lambda: idle(engine))


def _threads_waiting_on_streams() -> list[str]:
    waiting = []
    for thread_id, frame in sys._current_frames().items():
        while frame is not None:
            if frame.f_code.co_name in ("pcm16", "next_chunk"):
                waiting.append(str(thread_id))
                break
            frame = frame.f_back
    return waiting


def test_open_streams_wait_without_holding_a_thread(bounded):
    url, engine = bounded
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"input": TRANSCRIPTS[0], "voice": "linda"}).encode()
    with engine_held(engine) as inside, contextlib.ExitStack() as clients:
        for _ in range(2):
            connection = clients.enter_context(socket.create_connection((host, int(port)), timeout=20))
            connection.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                               + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            assert connection.recv(64).startswith(b"HTTP/1.1 200")
        inside.wait(60)
        assert engine.backlog()["requests_in_flight"] == 2 and _threads_waiting_on_streams() == []
    _wait_until(lambda: idle(engine))  # both clients left: their streams are cancelled


def test_a_client_that_stops_reading_is_dropped_and_its_pieces_freed(bounded):
    """The response's own ASGI calls, with a client whose buffers are full after the first piece (over a real
    socket the kernel's buffers would first take megabytes of audio)."""
    from myxtts.synthesis.http import _response_class

    _, engine = bounded
    long_text = ""
    for text in TRANSCRIPTS:  # as many pieces as the limits allow
        candidate = f"{long_text} {text}".strip()
        if len(candidate) > 600 or len(engine.synthesizer.engine.split(candidate)) > 8:
            break
        long_text = candidate
    stream = engine.submit(long_text, "linda")
    assert len(stream.pieces) > 3
    sent = []

    async def send(message: dict) -> None:
        sent.append(message)
        if len(sent) > 2:  # the headers and the first piece went out; then nothing is read any more
            await asyncio.Event().wait()

    async def receive() -> dict:
        await asyncio.Event().wait()  # the client neither sends nor leaves

    response = _response_class()(stream, "audio/pcm", {}, b"", engine.limits.send_timeout)
    asyncio.run(asyncio.wait_for(response({"type": "http"}, receive, send), 60))
    assert stream.cancelled and stream.taken() < len(stream.pieces)
    assert [message.get("more_body") for message in sent[1:]] == [True, True]  # never a clean end
    _wait_until(lambda: idle(engine) and engine.backlog()["ready_unsent"] == 0
                and engine.backlog()["unsent_bytes"] == 0)


def test_a_connection_flood_is_answered_503_and_the_server_recovers(bounded):
    """Past max_connections open connections a new one gets 503 at once (uvicorn's limit_concurrency) instead of
    the process running out of file descriptors; once they close, /health answers again."""
    from myxtts.synthesis.server_limits import ServerLimits
    from myxtts.synthesis.serving import SpeechEngine

    _, shared = bounded
    engine = SpeechEngine(shared.synthesizer, {"linda": bundled_wavs(1)[0]}, batch_size=4,
                          limits=ServerLimits(max_connections=3, header_timeout=30.0, max_characters=600))
    with running_server(engine) as url:
        host, port = url.removeprefix("http://").split(":")
        idle = [socket.create_connection((host, int(port)), timeout=30) for _ in range(3)]
        try:
            for connection in idle:  # a request head that never ends: each holds its connection
                connection.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            _wait_until(lambda: raw_exchange(url, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                                   b"Connection: close\r\n\r\n")[0] == 503, seconds=30)
        finally:
            for connection in idle:
                connection.close()
        _wait_until(lambda: raw_exchange(url, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                               b"Connection: close\r\n\r\n")[0] == 200, seconds=30)
        assert _health(url)["limits"]["max_connections"] == 3



def test_a_dead_engine_thread_turns_health_503_and_refuses_requests_with_its_traceback_logged(bounded, caplog):
    """An error outside the per-batch guards kills the engine thread: /health turns 503 naming it, a request in
    flight is cut, new requests get 503 at once (not a 200 and a 300 s wait), and the traceback is in the log."""
    import logging

    from myxtts.synthesis.server_limits import ServerLimits
    from myxtts.synthesis.serving import SpeechEngine

    _, shared = bounded
    engine = SpeechEngine(shared.synthesizer, {"linda": bundled_wavs(1)[0]}, batch_size=4,
                          limits=ServerLimits(max_characters=600))
    class Broken(dict):
        def __getitem__(self, key):
            raise RuntimeError("injected engine failure")

    # the engine thread's bookkeeping after its next batch raises: outside the guard around the decode itself
    engine._batches_by_size = Broken(engine._batches_by_size)
    with running_server(engine) as url, caplog.at_level(logging.ERROR, logger="myxtts.serve"):
        assert _health(url)["status"] == "ok"
        outcome = []

        def in_flight():
            try:
                outcome.append(_post(url, {"input": TRANSCRIPTS[1], "voice": "linda"}))
            except http.client.IncompleteRead as cut:  # the stream cut: the chunked body ends without its last chunk
                outcome.append(cut)

        first = threading.Thread(target=in_flight)
        first.start()
        _wait_until(lambda: raw_exchange(url, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                               b"Connection: close\r\n\r\n")[0] == 503, seconds=30)
        first.join(60)
        assert not first.is_alive() and isinstance(outcome[0], http.client.IncompleteRead)  # cut, not kept waiting
        status, _, payload = raw_exchange(url, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert json.loads(payload)["status"] == "failed" and "injected engine failure" in json.loads(payload)["error"]
        status, _, payload = _post(url, {"input": TRANSCRIPTS[1], "voice": "linda"})
        assert status == 503 and "engine failed" in error_of(payload)["message"]
    assert any("injected engine failure" in record.getMessage() and "Traceback" in record.getMessage()
               for record in caplog.records)


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


@pytest.mark.slow
def test_sigterm_lets_a_short_stream_finish_cuts_a_stalled_one_and_exits_0(serving_run, tmp_path):
    """A real `myxtts serve` process, signalled with two streams in flight: a short one read to its end, and a long
    one whose client takes the headers and then reads nothing (with a small receive window), so it cannot end."""
    grace, port = 3.0, _free_port()
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "myxtts", "serve", "--run", str(serving_run), "--voice",
                                    f"linda={bundled_wavs(1)[0]}", "--port", str(port), "--max-characters", "8000",
                                    "--shutdown-grace", str(grace), "--no-small-batches"],
                                   stdout=log, stderr=subprocess.STDOUT)
    cleanup = contextlib.ExitStack()
    try:
        _wait_until(lambda: process.poll() is not None or _accepts(port), 300)
        assert process.poll() is None, log_path.read_text()
        long_text = " ".join(TRANSCRIPTS * 2)  # megabytes of audio: more than the socket buffers take
        body = json.dumps({"input": long_text, "voice": "linda", "response_format": "pcm"}).encode()
        stalled = cleanup.enter_context(socket.socket())
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.settimeout(60)
        stalled.connect(("127.0.0.1", port))
        stalled.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        received = stalled.recv(4096)
        assert received.startswith(b"HTTP/1.1 200"), received
        short = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        cleanup.callback(short.close)
        short.request("POST", "/v1/audio/speech", json.dumps({"input": TWO_SENTENCES, "voice": "linda"}),
                      {"Content-Type": "application/json"})
        response = short.getresponse()
        assert response.status == 200
        process.send_signal(signal.SIGTERM)
        wav = response.read()  # read to its clean end within the grace (a cut would raise IncompleteRead)
        assert len(wav) > 44 and wav[:4] == b"RIFF"
        _wait_until(lambda: not _accepts(port), grace)  # no new connections
        assert process.wait(timeout=grace + 60) == 0, log_path.read_text()
        with contextlib.suppress(ConnectionResetError):
            while chunk := stalled.recv(1 << 20):
                received += chunk
        assert not received.endswith(b"\r\n0\r\n\r\n")  # the stalled stream was cut, not ended
    finally:
        cleanup.close()
        if process.poll() is None:
            process.kill()
    output = log_path.read_text()
    assert f"the {grace} s grace period is over, 1 stream(s) still open cut" in output, output
    assert re.search(r"request req_\w+: stream cancelled after \d+ of \d+ pieces", output), output

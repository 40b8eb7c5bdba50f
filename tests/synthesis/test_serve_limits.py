"""`myxtts serve` under abuse: every limit answered in OpenAI's error shape, over real HTTP on localhost; a real
`myxtts serve` process shut down by SIGTERM with streams in flight.

One server with tight limits; where a test needs a backlog, the real engine thread is held inside its next decode
(``engine_held``) so the pieces stay queued for as long as the test looks at them.
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
from typing import Iterator

import pytest

from conftest import bundled_wavs
from test_export import parallel_run  # noqa: F401  (the fixture: a pitch-conditioned parallel run, plausible durations)
from test_serve import TRANSCRIPTS, TWO_SENTENCES, _free_port, _health, _post, _wait_until, running_server

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


def _limits():
    from myxtts.synthesis.server_limits import ServerLimits

    return ServerLimits(max_body_bytes=4096, header_timeout=1.0, body_timeout=2.0, max_characters=600, max_pieces=8,
                        max_requests_in_flight=2, max_queued_pieces=10, send_timeout=2.0)


@pytest.fixture(scope="module")
def bounded(parallel_run):  # noqa: F811
    from myxtts.synthesis import Synthesizer
    from myxtts.synthesis.serving import SpeechEngine

    synthesizer = Synthesizer.from_run(parallel_run, batch_size=4)
    engine = SpeechEngine(synthesizer, {"linda": bundled_wavs(1)[0]}, batch_size=4, limits=_limits())
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


def _idle(engine) -> bool:
    backlog = engine.backlog()
    return backlog["requests_in_flight"] == 0 and engine.queued() == 0 and backlog["unsent_bytes"] == 0


def _raw_exchange(url: str, request: bytes, timeout: float = 20) -> tuple[int, dict, bytes]:
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


def _error_of(payload: bytes) -> dict:
    error = json.loads(payload)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


def test_a_huge_content_length_is_refused_before_the_body_is_read(bounded):
    url, engine = bounded
    status, headers, payload = _raw_exchange(url, b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                                  b"Content-Type: application/json\r\nContent-Length: 1000000000\r\n"
                                                  b"\r\n{\"input\":")
    assert status == 413 and headers["content-type"] == "application/json"
    assert _error_of(payload)["code"] == "request_too_large"
    assert _health(url)["status"] == "ok"


def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit(bounded):
    url, _ = bounded
    body = json.dumps({"input": "Hello there. " * 400, "voice": "linda"}).encode()  # no Content-Length
    chunks = b"".join(f"{len(body[i:i + 1000]):x}\r\n".encode() + body[i:i + 1000] + b"\r\n"
                      for i in range(0, len(body), 1000))
    status, _, payload = _raw_exchange(url, b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                                            + chunks + b"0\r\n\r\n")
    assert status == 413 and _error_of(payload)["code"] == "request_too_large"


def test_a_body_that_stops_arriving_is_answered_408(bounded):
    url, _ = bounded
    status, _, payload = _raw_exchange(url, b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"input\":")
    assert status == 408 and _error_of(payload)["code"] == "timeout"


def test_headers_that_arrive_too_slowly_close_the_connection(bounded):
    """Slowloris: a request head sent a byte at a time is cut header_timeout after the connection opened (uvicorn's
    keep-alive timer alone restarts at every byte received); the server goes on answering."""
    url, engine = bounded
    host, port = url.removeprefix("http://").split(":")
    # a byte per 0.2 s: the head is not complete after 6 s (the deadline is 1 s), nor would it be for ever
    head = b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 200
    closed_after = None
    with socket.create_connection((host, int(port)), timeout=0.2) as connection:
        for sent, byte in enumerate(head[:30]):
            try:
                connection.sendall(bytes([byte]))
                if connection.recv(1024) == b"":
                    closed_after = sent
                    break
            except socket.timeout:
                continue
            except OSError:  # reset by the server
                closed_after = sent
                break
    assert engine.limits.header_timeout == 1.0 and closed_after is not None, "the slow head kept its connection"
    assert _health(url)["status"] == "ok"


@pytest.mark.parametrize("text, says", [
    ("Go. " * 20, "splits into more than 8 pieces"),  # 80 characters, 20 decodes: refused at the ninth piece
    ("It said " + "abracadabra" * 30 + " twice.", "alone is longer"),
    ("Hello. Привет, как дела? Goodbye.", "'Привет, как дела?' cannot be spoken"),
])
def test_input_the_server_will_not_say_is_400_naming_why(bounded, text, says):
    url, engine = bounded
    status, headers, payload = _post(url, {"input": text, "voice": "linda"})
    assert status == 400 and headers["content-type"] == "application/json", payload
    error = _error_of(payload)
    assert error["param"] == "input" and error["type"] == "invalid_request_error" and says in error["message"]
    assert engine.queued() == 0


def test_punctuation_alone_is_the_only_text_left_out(bounded):
    _, engine = bounded
    pieces = engine.synthesizer.engine.split(f"{TRANSCRIPTS[0]} ... {TRANSCRIPTS[3]}")
    assert [piece.text for piece in pieces] == [TRANSCRIPTS[0], TRANSCRIPTS[3]]


def _busy_answer(url: str, text: str = TRANSCRIPTS[1]) -> dict:
    status, headers, payload = _post(url, {"input": text, "voice": "linda", "response_format": "pcm"})
    assert status == 429, payload
    assert int(headers["retry-after"]) >= 1
    error = _error_of(payload)
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
    _wait_until(lambda: _idle(engine))
    status, _, pcm = _post(url, {"input": TRANSCRIPTS[1], "voice": "linda", "response_format": "pcm"})
    assert status == 200
    _wait_until(lambda: _idle(engine))  # the server finishes a request's bookkeeping after its last byte went out
    stream = engine.submit(TRANSCRIPTS[1], "linda")  # the blocking side of a stream, as a Python caller reads it
    assert len(b"".join(stream.pcm16(timeout=60))) == len(pcm)
    _wait_until(lambda: _idle(engine))


def test_pieces_past_the_queue_limit_get_429_and_health_shows_the_backlog(bounded):
    url, engine = bounded
    text = " ".join(f"Sentence number {word}." for word in "one two three four five six seven eight".split())
    with engine_held(engine) as inside:
        stream = engine.submit(text, "linda")
        assert len(stream.pieces) == 8
        inside.wait(60)
        health = _health(url)
        # the audio bytes of its eight pieces' worst case stay reserved until they are sent
        assert health["backlog"] == {"pending": 4, "decoding": 4, "vocoding": 0, "requests_in_flight": 1,
                                     "ready_unsent": 0, "unsent_bytes": stream.unsent_bytes()}
        assert stream.unsent_bytes() == sum(engine.audio_bound.piece_bytes(piece.pause_after)
                                            for piece in stream.pieces)
        assert health["queued_pieces"] == 8 and health["limits"] == _limits().as_dict()
        assert "8 pieces queued" in _busy_answer(url, "Come here. Sit down. Wait.")["message"]  # 8 + 3 > 10
        stream.cancel()  # its pending pieces are freed at once
        assert engine.backlog()["pending"] == 0
    _wait_until(lambda: _idle(engine))


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
    _wait_until(lambda: _idle(engine))  # both clients left: their streams are cancelled


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
    _wait_until(lambda: _idle(engine) and engine.backlog()["ready_unsent"] == 0
                and engine.backlog()["unsent_bytes"] == 0)


def test_serve_takes_every_limit_as_an_option_with_the_engine_defaults(tmp_path):
    from click.testing import CliRunner

    from myxtts.cli import main
    from myxtts.cli.synth_commands import serve_command
    from myxtts.synthesis.server_limits import ServerLimits

    from myxtts.synthesis.http import DEFAULT_SHUTDOWN_GRACE

    options = {param.name: param.default for param in serve_command.params}
    assert {name: options[name] for name in ServerLimits().as_dict()} == ServerLimits().as_dict()
    assert options["shutdown_grace"] == DEFAULT_SHUTDOWN_GRACE
    clip = str(bundled_wavs(1)[0])
    result = CliRunner().invoke(main, ["serve", "--run", str(tmp_path), "--voice", f"linda={clip}",
                                       "--max-pieces", "600", "--max-queued-pieces", "500"])
    assert result.exit_code == 2 and "max_pieces (600) must not exceed max_queued_pieces (500)" in result.output


def test_serve_compiles_the_powers_of_two_below_its_batch_size_and_refuses_other_sizes():
    from myxtts.synthesis.serving import SpeechEngine, small_batch_sizes

    assert [small_batch_sizes(size) for size in (1, 2, 4, 6, 8)] == [[], [1], [1, 2], [1, 2, 4], [1, 2, 4]]
    for sizes in ((4,), (0, 2), (5,)):  # refused before any model is touched
        with pytest.raises(ValueError, match="smaller_batch_sizes must be between 1 and batch_size - 1"):
            SpeechEngine(None, {"linda": "unused.wav"}, batch_size=4, smaller_batch_sizes=sizes)


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


@pytest.mark.slow
def test_sigterm_lets_a_short_stream_finish_cuts_a_stalled_one_and_exits_0(parallel_run, tmp_path):  # noqa: F811
    """A real `myxtts serve` process, signalled with two streams in flight: a short one read to its end, and a long
    one whose client takes the headers and then reads nothing (with a small receive window), so it cannot end."""
    grace, port = 3.0, _free_port()
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "myxtts", "serve", "--run", str(parallel_run), "--voice",
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


def test_cross_site_requests_are_refused_before_the_engine(bounded):
    """A web page the user visits cannot drive the server: a text/plain POST (a "simple" cross-site request) is 415,
    a foreign Host (DNS rebinding) or Origin is 403, all in OpenAI's error shape; the server's own origin passes."""
    url, engine = bounded
    port = url.rsplit(":", 1)[1]
    body = json.dumps({"input": TRANSCRIPTS[1], "voice": "linda"}).encode()
    head = f"POST /v1/audio/speech HTTP/1.1\r\nContent-Length: {len(body)}\r\n".encode()
    cases = [(b"Host: 127.0.0.1:" + port.encode() + b"\r\nContent-Type: text/plain\r\n", 415,
              "unsupported_media_type"),
             (b"Host: evil.example:" + port.encode() + b"\r\nContent-Type: application/json\r\n", 403,
              "host_not_allowed"),
             (b"Host: 127.0.0.1:" + port.encode() + b"\r\nOrigin: http://evil.example\r\nContent-Type: "
              b"application/json\r\n", 403, "origin_not_allowed"),
             (b"Host: localhost:" + port.encode() + b"\r\nOrigin: null\r\nContent-Type: application/json\r\n", 403,
              "origin_not_allowed")]
    served = engine.served
    for headers, expected, code in cases:
        status, _, payload = _raw_exchange(url, head + headers + b"Connection: close\r\n\r\n" + body)
        assert status == expected and _error_of(payload)["code"] == code, payload
    assert engine.served == served  # none reached the engine
    same_site = (b"Host: localhost:" + port.encode() + b"\r\nOrigin: http://localhost:" + port.encode()
                 + b"\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n\r\n")
    status, _, _ = _raw_exchange(url, head + same_site + body, timeout=120)
    assert status == 200


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
            _wait_until(lambda: _raw_exchange(url, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                                   b"Connection: close\r\n\r\n")[0] == 503, seconds=30)
        finally:
            for connection in idle:
                connection.close()
        _wait_until(lambda: _raw_exchange(url, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                               b"Connection: close\r\n\r\n")[0] == 200, seconds=30)
        assert _health(url)["limits"]["max_connections"] == 3


def test_text_in_another_script_is_a_400_naming_its_characters(bounded):
    url, engine = bounded
    status, _, payload = _post(url, {"input": "We landed in 北京 on Monday.", "voice": "linda"})
    error = _error_of(payload)
    assert status == 400 and "'北'" in error["message"] and "'京'" in error["message"], error


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
        _wait_until(lambda: _raw_exchange(url, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                               b"Connection: close\r\n\r\n")[0] == 503, seconds=30)
        first.join(60)
        assert not first.is_alive() and isinstance(outcome[0], http.client.IncompleteRead)  # cut, not kept waiting
        status, _, payload = _raw_exchange(url, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert json.loads(payload)["status"] == "failed" and "injected engine failure" in json.loads(payload)["error"]
        status, _, payload = _post(url, {"input": TRANSCRIPTS[1], "voice": "linda"})
        assert status == 503 and "engine failed" in _error_of(payload)["message"]
    assert any("injected engine failure" in record.getMessage() and "Traceback" in record.getMessage()
               for record in caplog.records)

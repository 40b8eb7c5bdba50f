"""`myxtts serve` refusing what it will not take, each in OpenAI's error shape, over real HTTP on localhost: a body
too large or too slow, a request head too slow, text it will not say, a cross-site request; and the limits as serve's
options.

One server with tight limits (``bounded``, ``serve_limits_helpers``); the backlog, connection, shutdown and engine
failure limits: test_serve_backlog.py.
"""

from __future__ import annotations

import json
import socket

import pytest

from conftest import bundled_wavs
from serve_limits_helpers import bounded_server, error_of, raw_exchange
from test_serve import TRANSCRIPTS, _health, _post

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


@pytest.fixture(scope="module")
def bounded(serving_synthesizer):
    with bounded_server(serving_synthesizer) as served:
        yield served


def test_a_huge_content_length_is_refused_before_the_body_is_read(bounded):
    url, engine = bounded
    status, headers, payload = raw_exchange(url, b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                                  b"Content-Type: application/json\r\nContent-Length: 1000000000\r\n"
                                                  b"\r\n{\"input\":")
    assert status == 413 and headers["content-type"] == "application/json"
    assert error_of(payload)["code"] == "request_too_large"
    assert _health(url)["status"] == "ok"


def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit(bounded):
    url, _ = bounded
    body = json.dumps({"input": "Hello there. " * 400, "voice": "linda"}).encode()  # no Content-Length
    chunks = b"".join(f"{len(body[i:i + 1000]):x}\r\n".encode() + body[i:i + 1000] + b"\r\n"
                      for i in range(0, len(body), 1000))
    status, _, payload = raw_exchange(url, b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                                            + chunks + b"0\r\n\r\n")
    assert status == 413 and error_of(payload)["code"] == "request_too_large"


def test_a_body_that_stops_arriving_is_answered_408(bounded):
    url, _ = bounded
    status, _, payload = raw_exchange(url, b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"input\":")
    assert status == 408 and error_of(payload)["code"] == "timeout"


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
    error = error_of(payload)
    assert error["param"] == "input" and error["type"] == "invalid_request_error" and says in error["message"]
    assert engine.queued() == 0


def test_punctuation_alone_is_the_only_text_left_out(bounded):
    _, engine = bounded
    pieces = engine.synthesizer.engine.split(f"{TRANSCRIPTS[0]} ... {TRANSCRIPTS[3]}")
    assert [piece.text for piece in pieces] == [TRANSCRIPTS[0], TRANSCRIPTS[3]]


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
        status, _, payload = raw_exchange(url, head + headers + b"Connection: close\r\n\r\n" + body)
        assert status == expected and error_of(payload)["code"] == code, payload
    assert engine.served == served  # none reached the engine
    same_site = (b"Host: localhost:" + port.encode() + b"\r\nOrigin: http://localhost:" + port.encode()
                 + b"\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n\r\n")
    status, _, _ = raw_exchange(url, head + same_site + body, timeout=120)
    assert status == 200


def test_text_in_another_script_is_a_400_naming_its_characters(bounded):
    url, engine = bounded
    status, _, payload = _post(url, {"input": "We landed in 北京 on Monday.", "voice": "linda"})
    error = error_of(payload)
    assert status == 400 and "'北'" in error["message"] and "'京'" in error["message"], error



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

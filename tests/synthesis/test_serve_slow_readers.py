"""`myxtts serve` against clients that read slowly and requests whose text is costly, over real HTTP on localhost:
the audio held unsent is bounded for all requests together (``max_unsent_bytes``), one client address holds at most
``max_requests_per_client`` places, a request has a total time (``request_timeout``), and a request's text work is bounded by ``max_pieces`` while splitting, stops when its client
leaves and is linear in the text.

The server gives every connection a small kernel send buffer of its own (``http_connections.py``), so the audio a
client does not read stays in the server's process, where it is counted and timed, instead of filling megabytes of
the kernel's buffers.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import socket
import threading
from typing import Iterator

import pytest

from conftest import bundled_wavs
from test_serve import TRANSCRIPTS, TWO_SENTENCES, _health, _post, _wait_until, running_server
from serve_limits_helpers import engine_held, error_of, idle

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

SLOW_TEXT = " ".join(TRANSCRIPTS[i] for i in (0, 3, 1, 4, 5, 9))  # six pieces: two batches, ~1 MB of audio


@pytest.fixture(scope="module")
def synthesizer(serving_synthesizer):
    return serving_synthesizer


def _engine(synthesizer, **limits):
    from myxtts.synthesis.server_limits import ServerLimits
    from myxtts.synthesis.serving import SpeechEngine

    return SpeechEngine(synthesizer, {"linda": bundled_wavs(1)[0]}, batch_size=4,
                        limits=ServerLimits(max_characters=600, **limits))


@pytest.fixture(scope="module")
def timed(synthesizer):
    """A server whose requests have 1.5 s in all (max_pieces 8)."""
    engine = _engine(synthesizer, request_timeout=1.5, max_pieces=8)
    with running_server(engine) as url:
        yield url, engine


@contextlib.contextmanager
def slow_reader(url: str, text: str) -> Iterator[socket.socket]:
    """A client that sends a request, takes the response's head and a few bytes, then reads nothing more (a small
    receive buffer: the kernel takes little for it); closed when the block ends."""
    host, port = url.removeprefix("http://").split(":")
    connection = socket.socket()
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    connection.settimeout(60)
    connection.connect((host, int(port)))
    body = json.dumps({"input": text, "voice": "linda", "response_format": "pcm"}).encode()
    connection.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    head = connection.recv(64)
    assert head.startswith(b"HTTP/1.1 200"), head
    try:
        yield connection
    finally:
        connection.close()


def _read_to_the_end(connection: socket.socket) -> bytes:
    """What the server still sends until it closes or resets the connection."""
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := connection.recv(1 << 16):
            received += chunk
    return received


def test_slow_readers_hold_at_most_max_unsent_bytes_and_a_further_request_gets_429(synthesizer, timed):
    """Eight clients that stop reading hold their audio, counted up to the limit (each request reserves the worst
    case of its pieces when it is admitted): a ninth is refused at admission with Retry-After, never cut mid-stream;
    once they leave the count is 0 again and a well-behaved request is served."""
    from myxtts.synthesis.server_limits import ServerLimits

    _, other = timed  # the same synthesizer: the same bound on a piece's audio
    worst = sum(other.audio_bound.piece_bytes(piece.pause_after) for piece in synthesizer.engine.split(TWO_SENTENCES))
    limit = 8 * worst + worst // 2  # eight such requests fit, a ninth does not
    engine = _engine(synthesizer, max_pieces=8, max_requests_in_flight=16, max_requests_per_client=16,
                     max_queued_pieces=64, max_unsent_bytes=limit)
    with running_server(engine) as url, contextlib.ExitStack() as clients:
        with engine_held(engine) as inside:  # nothing is delivered yet: each holds its whole reservation
            readers = [clients.enter_context(slow_reader(url, TWO_SENTENCES)) for _ in range(8)]
            inside.wait(60)
            assert engine.backlog()["unsent_bytes"] == 8 * worst
            status, headers, payload = _post(url, {"input": TWO_SENTENCES, "voice": "linda"})
            assert status == 429 and int(headers["retry-after"]) >= 1, payload
            error = error_of(payload)
            assert error["code"] == "rate_limit_exceeded" and "max_unsent_bytes" in error["message"]
        # the readers stalled: every piece vocoded and delivered, the audio held unsent in the ledger
        _wait_until(lambda: engine.queued() == 0)
        for reader in readers:
            reader.recv(16)  # a few bytes, then nothing more
        health = _health(url)
        assert health["limits"]["max_unsent_bytes"] == limit == ServerLimits(**health["limits"]).max_unsent_bytes
        assert 0 < health["backlog"]["unsent_bytes"] <= limit
        clients.close()  # the slow readers leave
        _wait_until(lambda: idle(engine))  # idle: nothing in flight or queued, no byte unsent
        status, _, pcm = _post(url, {"input": TWO_SENTENCES, "voice": "linda", "response_format": "pcm"})
        assert status == 200 and len(pcm) > 0
        _wait_until(lambda: idle(engine))


def _post_from(address: str, url: str, body: dict) -> tuple[int, bytes]:
    """POST ``body`` from the loopback ``address`` (another client, as the server tells clients apart)."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60, source_address=(address, 0))
    try:
        connection.request("POST", "/v1/audio/speech", json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_one_client_past_its_limit_gets_429_while_another_address_is_served(synthesizer):
    """Two streams held by 127.0.0.1 fill its places (max_requests_per_client 2, 64 in all): its third request is
    refused before any text work, naming the limit, while 127.0.0.2 is served; once the two leave, 127.0.0.1 is
    served again and no place is left counted."""
    engine = _engine(synthesizer, max_requests_per_client=2)
    request = {"input": TWO_SENTENCES, "voice": "linda", "response_format": "pcm"}
    with running_server(engine) as url, contextlib.ExitStack() as clients:
        for _ in range(2):
            clients.enter_context(slow_reader(url, TWO_SENTENCES))
        assert engine.admission.by_client == {"127.0.0.1": 2}
        status, headers, payload = _post(url, request)
        assert status == 429 and int(headers["retry-after"]) >= 1, payload
        message = error_of(payload)["message"]
        assert "max_requests_per_client" in message and "127.0.0.1" in message
        assert engine.admission.preparing == 0 and engine.admission.by_client == {"127.0.0.1": 2}
        status, pcm = _post_from("127.0.0.2", url, request)
        assert status == 200 and len(pcm) > 0
        clients.close()  # the two streams end: their places are given back
        _wait_until(lambda: idle(engine) and not engine.admission.by_client)
        status, _, pcm_again = _post(url, request)
        assert status == 200 and len(pcm_again) == len(pcm)
        _wait_until(lambda: not engine.admission.by_client)


def test_a_client_with_requests_in_flight_waits_behind_a_newcomer(synthesizer):
    """Three requests from one client at once and then one from another, queued while the engine is held: the
    newcomer's first piece is decoded before the first client's second and third requests' first pieces (each of a
    client's requests counts as if it were its previous one's next piece), and the first client's first request
    keeps its place."""
    from myxtts.synthesis.piece_queue import take_batch

    engine = _engine(synthesizer)
    try:
        with engine_held(engine) as inside:
            held = engine.submit(TRANSCRIPTS[9], "linda", client="10.0.0.1")  # the batch the engine is held in
            inside.wait(60)
            many = [engine.submit(TRANSCRIPTS[i], "linda", client="10.0.0.2") for i in (0, 3, 4)]
            newcomer = engine.submit(TRANSCRIPTS[5], "linda", client="10.0.0.3")
            with engine._wake:  # the queue as the engine thread would take it next
                order = [(piece.stream, piece.index) for piece in take_batch(list(engine._pending), 16)[0]]
            firsts = [order.index((stream, 0)) for stream in (*many, newcomer)]
            assert firsts[0] < firsts[3] < firsts[1] < firsts[2], order
            assert engine.admission.by_client == {"10.0.0.1": 1, "10.0.0.2": 3, "10.0.0.3": 1}
            for stream in (*many, newcomer):
                stream.cancel()
        assert len(b"".join(held.pcm16(timeout=60))) > 0  # taken to its end
        _wait_until(lambda: idle(engine))
        assert engine.admission.by_client == {}  # no place left counted
    finally:
        engine.close()


def test_a_request_longer_than_the_whole_unsent_budget_is_400(synthesizer):
    engine = _engine(synthesizer, max_unsent_bytes=1000)
    try:
        from myxtts.synthesis.serving import SpeechRequestError

        with pytest.raises(SpeechRequestError, match="send it in parts") as refused:
            engine.submit(TWO_SENTENCES, "linda")
        assert refused.value.status == 400 and refused.value.param == "input"
        assert idle(engine)
    finally:
        engine.close()


def test_a_stream_past_its_request_timeout_is_ended_and_its_resources_released(timed, caplog):
    """A client that takes the head and then nothing, its request's second batch still decoding at 1.5 s: the
    stream is ended there (the connection aborted without the final chunk), its queued pieces dropped, its bytes
    released; /health counts it."""
    url, engine = timed
    decode, batches, release = engine.synthesizer.engine.decode_tokens, [], threading.Event()

    def second_batch_held(*args, **kwargs):  # the first batch decodes, the second waits until the test ends
        batches.append(len(args[0]))
        if len(batches) == 2:
            release.wait(60)
        return decode(*args, **kwargs)

    engine.synthesizer.engine.decode_tokens = second_batch_held
    dropped_before, timed_out_before = engine.dropped, engine.timed_out
    try:
        with caplog.at_level(logging.WARNING, logger="myxtts.serve"), slow_reader(url, SLOW_TEXT) as reader:
            _wait_until(lambda: engine.timed_out == timed_out_before + 1, seconds=30)
            assert not _read_to_the_end(reader).endswith(b"\r\n0\r\n\r\n")  # cut, never a clean end
    finally:
        release.set()
        del engine.synthesizer.engine.decode_tokens  # the class's method again
    _wait_until(lambda: idle(engine))  # the queue empty, the byte count back to 0
    assert len(batches) == 2 and engine.dropped - dropped_before >= batches[1]  # the held batch was never vocoded
    assert _health(url)["requests_timed_out"] == timed_out_before + 1
    assert any("at its request_timeout" in record.getMessage() for record in caplog.records)


def test_max_pieces_is_refused_after_a_few_front_end_passes(timed):
    """100 sentences against max_pieces 8: the split stops at the ninth piece, the other sentences never read."""
    url, engine = timed
    processor = engine.synthesizer.engine.text_processor
    passes = []
    encode_many = processor.encode_many

    def counted(texts):
        passes.append(len(texts))
        return encode_many(texts)

    processor.encode_many = counted
    try:
        status, _, payload = _post(url, {"input": "Go. " * 100, "voice": "linda"})
    finally:
        del processor.encode_many  # the class's method again
    error = error_of(payload)
    assert status == 400 and error["param"] == "input" and "more than 8 pieces" in error["message"], payload
    assert len(passes) <= 8 + 2  # one per piece found, the ninth and the one after it
    assert idle(engine)


def test_the_text_work_of_a_client_that_left_stops_at_its_next_front_end_pass(timed):
    """The first front-end pass of a request waits until the server has seen its client leave: the pass after it
    never runs, nothing is queued and the request's place in flight is given back."""
    url, engine = timed
    processor = engine.synthesizer.engine.text_processor
    encode_many, submit = processor.encode_many, engine.submit
    passes, left = [], []

    def watched_submit(text, voice, speed=1.0, cancelled=None, client=None):
        left.append(cancelled)  # the route's "has the client gone" (asked before every pass)
        return submit(text, voice, speed, cancelled, client)

    def first_pass_waits(texts):
        passes.append(len(texts))
        if len(passes) == 1:
            _wait_until(lambda: left and left[0](), seconds=30)
        return encode_many(texts)

    engine.submit, processor.encode_many = watched_submit, first_pass_waits
    host, port = url.removeprefix("http://").split(":")
    served = engine.served
    try:
        body = json.dumps({"input": " ".join(f"Sentence {n}." for n in range(8)), "voice": "linda"}).encode()
        with socket.create_connection((host, int(port)), timeout=60) as connection:
            connection.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                               b"application/json\r\n" + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            _wait_until(lambda: len(passes) == 1)  # its text work has begun: the client leaves
        _wait_until(lambda: idle(engine))
    finally:
        del engine.submit, processor.encode_many  # the class's methods again
    assert len(passes) == 1 and engine.served == served


def test_the_servers_split_is_synthesize_longs(synthesizer):
    """The pieces a request is split into are exactly SynthesisEngine.split's at the request's speed (so a request's
    audio equals synthesize_long's), with its encode's tokens."""
    import numpy as np

    from myxtts.synthesis.admission import split_request

    engine = synthesizer.engine
    document = " ".join(TRANSCRIPTS[:8]) + "\n\n" + " ".join(TRANSCRIPTS[8:14]) + " ... Done."
    for speed in (0.25, 1.0, 4.0):
        pieces, tokens = split_request(engine, document, 1.0 / speed, 10 ** 6, lambda: None)
        assert pieces == engine.split(document, length_scale=1.0 / speed), speed
        expected = engine.encode([piece.text for piece in pieces])
        assert all(np.array_equal(got, want) and got.dtype == np.int32 for got, want in zip(tokens, expected))

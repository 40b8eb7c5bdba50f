"""`myxtts serve`: real HTTP on localhost, several clients at once, bad requests, a client that leaves mid-stream,
cancellation through every stage, fairness between old and new requests, a failure after the headers."""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Iterator

import numpy as np
import pytest

from conftest import BUNDLED_CORPUS, bundled_wavs

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

TRANSCRIPTS = [line.split("|")[2]
               for line in (BUNDLED_CORPUS / "metadata.csv").read_text(encoding="utf-8").splitlines()]
TWO_SENTENCES = f"{TRANSCRIPTS[0]} {TRANSCRIPTS[3]}"
CLIENT_TEXTS = [TRANSCRIPTS[i] for i in (1, 4, 6, 9)]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def running_server(engine) -> Iterator[str]:
    """``engine`` behind the real app and uvicorn on a free localhost port, in a thread; yields its URL."""
    import uvicorn

    from myxtts.synthesis.http import uvicorn_config

    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    http = uvicorn.Server(uvicorn_config(engine, "127.0.0.1", port, log_level="warning"))
    thread = threading.Thread(target=http.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not http.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        http.should_exit = True
        thread.join(30)
        engine.close()
        listening.close()


@pytest.fixture(scope="module")
def server(serving_synthesizer):
    from myxtts.synthesis.server_limits import ServerLimits
    from myxtts.synthesis.serving import SpeechEngine, to_pcm16

    synthesizer = serving_synthesizer
    engine = SpeechEngine(synthesizer, {"linda": bundled_wavs(1)[0]}, batch_size=4,
                          limits=ServerLimits(max_characters=600), smaller_batch_sizes=(1,))
    # what each text sounds like alone (before the engine thread shares the synthesizer)
    expected = {text: to_pcm16(synthesizer.synthesize_long(text, bundled_wavs(1)[0])[0].waveform)
                for text in [TWO_SENTENCES, *CLIENT_TEXTS]}
    with running_server(engine) as url:
        yield url, engine, expected


def _post(url: str, body, raw: bytes | None = None) -> tuple[int, dict, bytes]:
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(url + "/v1/audio/speech", data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def _health(url: str) -> dict:
    with urllib.request.urlopen(url + "/health", timeout=60) as response:
        return json.loads(response.read())


def _wait_until(condition, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true"
        time.sleep(0.05)


def _snr(expected: bytes, got: bytes) -> float:
    a, b = (np.frombuffer(x, "<i2").astype(np.float64) for x in (expected, got))
    return float(10 * np.log10(np.sum(a ** 2) / max(np.sum((a - b) ** 2), 1e-9)))


@pytest.mark.slow
def test_speech_streams_wav_and_pcm_equal_to_synthesize_long(server):
    url, engine, expected = server
    health = _health(url)
    assert health["status"] == "ok" and health["voices"] == ["linda"] and health["compiles_after_warmup"] == 0
    status, headers, wav = _post(url, {"model": "tts-1", "input": TWO_SENTENCES, "voice": "linda"})
    assert status == 200, wav
    assert headers["content-type"] == "audio/wav" and int(headers["x-pieces"]) == 2
    assert wav[:4] == b"RIFF" and wav[8:16] == b"WAVEfmt " and wav[36:40] == b"data"
    assert len(wav) - 44 == len(expected[TWO_SENTENCES]) and _snr(expected[TWO_SENTENCES], wav[44:]) >= 30
    status, headers, pcm = _post(url, {"input": TWO_SENTENCES, "voice": "linda", "response_format": "pcm"})
    assert status == 200 and headers["x-sample-rate"] == "22050" and pcm == wav[44:]
    status, _, fast = _post(url, {"input": TWO_SENTENCES, "voice": "linda", "response_format": "pcm", "speed": 2.0})
    assert status == 200 and 0.35 * len(pcm) < len(fast) < 0.7 * len(pcm)  # durations halved, pauses kept
    # a lone one-sentence request on an idle engine is decoded at the compiled batch size 1, not padded to 4
    before = _health(url)["batches_by_size"]
    status, _, alone = _post(url, {"input": CLIENT_TEXTS[0], "voice": "linda", "response_format": "pcm"})
    after = _health(url)["batches_by_size"]
    assert status == 200 and _snr(expected[CLIENT_TEXTS[0]], alone) >= 30
    assert after == {**before, "1": before["1"] + 1}
    assert _health(url)["compiles_after_warmup"] == 0


@pytest.mark.slow
def test_concurrent_clients_share_batches_and_each_gets_its_own_speech(server):
    url, engine, expected = server
    served_before = engine.served
    answers: dict[str, tuple] = {}

    def client(text: str) -> None:
        answers[text] = _post(url, {"input": text, "voice": "linda", "response_format": "pcm"})

    threads = [threading.Thread(target=client, args=(text,)) for text in CLIENT_TEXTS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    for text in CLIENT_TEXTS:
        status, _, pcm = answers[text]
        assert status == 200 and len(pcm) == len(expected[text]) and _snr(expected[text], pcm) >= 30
    assert engine.served - served_before == len(CLIENT_TEXTS)
    assert _health(url)["compiles_after_warmup"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("body, status, param", [
    (b"{not json", 400, None),
    ({"voice": "linda"}, 400, "input"),
    ({"input": "   ", "voice": "linda"}, 400, "input"),
    ({"input": "word " * 200, "voice": "linda"}, 400, "input"),
    ({"input": "Hello.", "voice": "nobody"}, 400, "voice"),
    ({"input": "Hello.", "voice": "linda", "response_format": "mp3"}, 400, "response_format"),
    ({"input": "Hello.", "voice": "linda", "speed": 10}, 400, "speed"),
    ({"input": "Hello.", "voice": "linda", "speed": "fast"}, 400, "speed"),
    ({"input": "... --- ...", "voice": "linda"}, 400, "input"),
])
def test_bad_requests_get_a_json_error_and_the_server_keeps_serving(server, body, status, param):
    url, _, _ = server
    got, headers, payload = _post(url, None, raw=body) if isinstance(body, bytes) else _post(url, body)
    assert got == status and headers["content-type"] == "application/json", payload
    error = json.loads(payload)["error"]
    assert error["message"] and error["type"] == "invalid_request_error" and error["param"] == param
    assert _health(url)["status"] == "ok"


@pytest.mark.slow
def test_a_client_leaving_mid_stream_does_not_disturb_the_server(server):
    url, engine, expected = server
    host, port = url.removeprefix("http://").split(":")
    long_text = ""
    for text in TRANSCRIPTS:  # as many sentences as the 600-character limit allows: several batches
        if len(long_text) + len(text) + 1 > 600:
            break
        long_text = f"{long_text} {text}".strip()
    body = json.dumps({"input": long_text, "voice": "linda"}).encode()
    with socket.create_connection((host, int(port)), timeout=60) as connection:
        connection.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        assert connection.recv(64).startswith(b"HTTP/1.1 200")  # headers, then it leaves
    status, _, pcm = _post(url, {"input": CLIENT_TEXTS[0], "voice": "linda", "response_format": "pcm"})
    assert status == 200 and len(pcm) == len(expected[CLIENT_TEXTS[0]])
    deadline = time.monotonic() + 60
    while engine.queued() and time.monotonic() < deadline:  # the departed client's sentences are dropped
        time.sleep(0.1)
    assert engine.queued() == 0 and _health(url)["compiles_after_warmup"] == 0


@pytest.mark.slow
def test_a_client_that_leaves_after_its_first_chunk_has_at_most_a_few_of_its_40_pieces_vocoded(server, monkeypatch):
    """The tiny test model vocodes a piece in milliseconds, far faster than a socket's close reaches the server; so
    that the vocoder is as slow against the client as Griffin-Lim is on a real model, a vocoder thread that made a
    later piece of this request waits, before handing it over, until the request is cancelled."""
    from myxtts.synthesis.piece_queue import PIECES_AHEAD
    from myxtts.synthesis.speech_stream import SpeechStream

    url, engine, _ = server
    text = " ".join(["Go."] * 40)
    deliver = SpeechStream.deliver
    streams: list[SpeechStream] = []

    def slow_vocoder(stream: SpeechStream, index: int, audio) -> None:
        if len(stream.pieces) == 40:
            if stream not in streams:
                streams.append(stream)
            deadline = time.monotonic() + 30
            while index > 0 and not stream.cancelled and time.monotonic() < deadline:
                time.sleep(0.01)
        deliver(stream, index, audio)

    monkeypatch.setattr(SpeechStream, "deliver", slow_vocoder)
    dropped_before, after_cancel_before = engine.dropped, engine.vocoded_after_cancel
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"input": text, "voice": "linda", "response_format": "pcm"}).encode()
    with socket.create_connection((host, int(port)), timeout=60) as connection:
        connection.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        answer = b""
        while not answer.partition(b"\r\n\r\n")[2]:  # the headers, then the first piece's audio begins
            answer += connection.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200") and b"x-pieces: 40" in answer.lower()
        # the engine decodes a stream's pieces only PIECES_AHEAD ahead of what its consumer took (piece 0 here: the
        # later ones wait in the stalled vocoder threads): wait for that steady state rather than for a time
        _wait_until(lambda: streams and streams[0].decoded >= 1 + PIECES_AHEAD and engine.backlog()["decoding"] == 0)
        stream = streams[0]
        decoded_before_leaving = stream.decoded
    _wait_until(lambda: stream.cancelled and engine.queued() == 0)
    # piece 0, and at most one more per vocoder thread (those in progress when the client left)
    assert 1 <= stream.vocoded <= 1 + engine.vocoder_threads
    # the engine decodes a stream's pieces a few ahead of its consumer, not all 40
    assert decoded_before_leaving == 1 + PIECES_AHEAD and stream.decoded == decoded_before_leaving
    assert engine.dropped - dropped_before == 40 - stream.vocoded  # every other piece dropped, at some stage
    # those in progress when it left are counted (/health: pieces_vocoded_after_cancel), piece 0 is not
    assert engine.vocoded_after_cancel - after_cancel_before == stream.vocoded - 1
    assert engine.backlog()["requests_in_flight"] == 0


@pytest.mark.slow
def test_an_older_request_finishes_within_a_few_batches_under_a_steady_stream_of_new_ones(server):
    """Every batch the engine decodes brings four new one-piece requests (as many as a batch takes): earliest piece
    index first alone would serve them forever ahead of the older request's second and third pieces."""
    _, engine, _ = server
    decode, inside, go = engine.synthesizer.engine.decode_tokens, threading.Event(), threading.Event()
    newcomers, batches_seen = [], []  # batches_seen: the older request's pieces decoded when each batch began
    older = None

    def steady(*args, **kwargs):
        batches_seen.append(older.decoded if older else None)
        if len(batches_seen) == 1:  # the first batch is held until the older request and four newcomers wait
            inside.set()
            go.wait(60)
        elif older.decoded < 3 and len(batches_seen) <= 12:
            newcomers.extend(engine.submit("Come here.", "linda") for _ in range(engine.batch_size))
        return decode(*args, **kwargs)

    engine.synthesizer.engine.decode_tokens = steady
    try:
        newcomers.append(engine.submit("Wait.", "linda"))
        inside.wait(60)
        older = engine.submit(f"{TRANSCRIPTS[0]} {TRANSCRIPTS[3]} {TRANSCRIPTS[1]}", "linda")
        newcomers.extend(engine.submit("Come here.", "linda") for _ in range(engine.batch_size))
        go.set()
        audio = b"".join(older.pcm16(timeout=60))
    finally:
        del engine.synthesizer.engine.decode_tokens  # the class's method again
        go.set()
        for stream in newcomers:
            stream.cancel()
    assert len(older.pieces) == 3 and len(audio) > 0
    # it waited behind the held batch, then its three pieces went within four batches shared with the newcomers
    finished_after = batches_seen.index(3) if 3 in batches_seen else len(batches_seen)
    assert finished_after <= 5, batches_seen
    _wait_until(lambda: engine.queued() == 0 and engine.backlog()["requests_in_flight"] == 0)


@pytest.mark.slow
def test_a_failure_after_the_headers_cuts_the_transfer_and_logs_the_request_id(server, caplog):
    url, engine, _ = server

    def broken(log_mel):
        raise RuntimeError("the vocoder broke")

    engine.vocode = broken
    host, port = url.removeprefix("http://").split(":")
    try:
        with caplog.at_level(logging.WARNING, logger="myxtts.serve"), \
                contextlib.closing(http.client.HTTPConnection(host, int(port), timeout=60)) as connection:
            connection.request("POST", "/v1/audio/speech", json.dumps({"input": TWO_SENTENCES, "voice": "linda"}),
                               {"Content-Type": "application/json"})
            response = connection.getresponse()
            assert response.status == 200 and response.getheader("transfer-encoding") == "chunked"
            request_id = response.getheader("x-request-id")
            with pytest.raises(http.client.IncompleteRead):  # no final chunk: not a clean end
                response.read()
    finally:
        del engine.vocode  # the class's method again
    assert request_id.startswith("req_")
    assert any(request_id in record.getMessage() and "the vocoder broke" in record.getMessage()
               for record in caplog.records)
    _wait_until(lambda: engine.queued() == 0 and engine.backlog()["requests_in_flight"] == 0)
    status, _, wav = _post(url, {"input": TWO_SENTENCES, "voice": "linda"})
    assert status == 200 and len(wav) > 44


def test_a_piece_cut_at_the_largest_bucket_is_counted_and_logged_with_the_request_id(server, caplog):
    """A piece whose predicted length passes data.max_mel_frames is decoded in the largest bucket and cut there (so
    the other pieces of its batch are served): /health counts it and a warning names the request and the piece."""
    url, engine, _ = server
    projection = engine.synthesizer.model.duration_predictor.output_proj
    kept = [np.array(projection.kernel.numpy()), np.array(projection.bias.numpy())]
    # 30 frames per token: the short first piece fits the largest bucket, the long second one does not
    short, long = "Hi there.", TRANSCRIPTS[3]
    limit = engine.synthesizer.cfg.data.max_mel_frames
    tokens = [len(engine.synthesizer.engine.encode([text])[0]) for text in (short, long)]
    assert 30 * tokens[0] < limit < 30 * tokens[1]
    projection.kernel.assign(np.zeros_like(kept[0]))
    projection.bias.assign(np.full_like(kept[1], np.log(1.0 + 30.0)))  # compiled functions read the variables
    cut_before = _health(url)["pieces_cut"]
    try:
        with caplog.at_level(logging.WARNING, logger="myxtts.serve"):
            status, raw_headers, wav = _post(url, {"input": f"{short} {long}", "voice": "linda"})
            _wait_until(lambda: any("cut there" in record.getMessage() for record in caplog.records))
    finally:
        projection.kernel.assign(kept[0])
        projection.bias.assign(kept[1])
    headers = {key.lower(): value for key, value in raw_headers.items()}
    assert status == 200 and headers["x-pieces"] == "2"
    assert _health(url)["pieces_cut"] == cut_before + 1
    (message,) = [record.getMessage() for record in caplog.records if "cut there" in record.getMessage()]
    assert headers["x-request-id"] in message and "piece 1" in message and long[:20] in message
    hop = engine.synthesizer.cfg.audio.hop_length
    assert (len(wav) - 44) // 2 >= limit * hop  # the cut piece is served to the bucket's end, not dropped


def test_a_voice_named_twice_takes_both_clips(tmp_path):
    from myxtts.cli.synth_commands import _voices

    first, second, third = (str(path) for path in bundled_wavs(3))
    assert _voices((f"linda={first}", f"pair={second}", f"pair={third}")) == {"linda": [first], "pair": [second, third]}
    with pytest.raises(ValueError, match="reference clip not found"):
        _voices((f"pair={first}", f"pair={tmp_path / 'gone.wav'}"))

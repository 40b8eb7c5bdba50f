"""`myxtts serve`: real HTTP on localhost, several clients at once, bad requests, a client that leaves mid-stream."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Iterator

import numpy as np
import pytest

from conftest import BUNDLED_CORPUS, bundled_wavs
from test_export import parallel_run  # noqa: F401  (the fixture: a parallel run with plausible durations)

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

    from myxtts.synthesis.http import create_app

    port = _free_port()
    http = uvicorn.Server(uvicorn.Config(create_app(engine), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=http.run, daemon=True)
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


@pytest.fixture(scope="module")
def server(parallel_run):  # noqa: F811
    from myxtts.synthesis import Synthesizer
    from myxtts.synthesis.server_limits import ServerLimits
    from myxtts.synthesis.serving import SpeechEngine, to_pcm16

    synthesizer = Synthesizer.from_run(parallel_run, batch_size=4)
    engine = SpeechEngine(synthesizer, {"linda": bundled_wavs(1)[0]}, batch_size=4,
                          limits=ServerLimits(max_characters=600))
    # what each text sounds like alone (before the engine thread shares the synthesizer)
    expected = {text: to_pcm16(synthesizer.synthesize_long(text, bundled_wavs(1)[0]).waveform)
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
        connection.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        assert connection.recv(64).startswith(b"HTTP/1.1 200")  # headers, then it leaves
    status, _, pcm = _post(url, {"input": CLIENT_TEXTS[0], "voice": "linda", "response_format": "pcm"})
    assert status == 200 and len(pcm) == len(expected[CLIENT_TEXTS[0]])
    deadline = time.monotonic() + 60
    while engine.queued() and time.monotonic() < deadline:  # the departed client's sentences are dropped
        time.sleep(0.1)
    assert engine.queued() == 0 and _health(url)["compiles_after_warmup"] == 0


def test_a_voice_named_twice_takes_both_clips(tmp_path):
    from myxtts.cli.synth_commands import _voices

    first, second, third = (str(path) for path in bundled_wavs(3))
    assert _voices((f"linda={first}", f"pair={second}", f"pair={third}")) == {"linda": [first], "pair": [second, third]}
    with pytest.raises(ValueError, match="reference clip not found"):
        _voices((f"pair={first}", f"pair={tmp_path / 'gone.wav'}"))

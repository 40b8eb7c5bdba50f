"""`myxtts serve` under abuse: well-behaved clients' latency with and without abusers, in one run.

A real server process (``python -m myxtts serve``, default limits) on 127.0.0.1. Phases of ``--seconds`` alternate
``--rounds`` times: **quiet** (``--clients`` well-behaved clients, each a closed loop streaming a two-sentence
paragraph, as ``benchmarks/serve.py``) and **abused** (the same clients while abusers run beside them). The abusers,
one thread per kind, each bounded in count:

- ``huge_content_length``: ``Content-Length: 1000000000`` and 10 bytes sent (413, or a close, within 2 s);
- ``input_100kb``: a 100 KB input (413: over the body limit);
- ``malformed_json``, ``unknown_voice``, ``nan_speed``: 400;
- ``burst``: 80 requests at once (past the requests-in-flight limit: 429 with Retry-After for the excess), each
  closed as soon as its status line arrives;
- ``disconnect``: a many-piece request closed after its first audio bytes;
- ``stop_reading``: a many-piece request whose client reads the first audio bytes and then nothing (the server
  drops it after its send timeout);
- ``slowloris``: request headers sent one byte a second (how long the server keeps such a connection is reported).

Reported: the well-behaved clients' time to first audio (p50 / p95) and failures per phase kind, the p95 ratio
abused / quiet paired by round, each abuser kind's status codes and slowest answer, ``/health`` polled every second
throughout (failures, slowest answer), the server's resident memory sampled every 5 s (first minute against last
minute) and its peak, and ``/health``'s count of pieces vocoded for clients that had already left.

    python benchmarks/serve_faults.py --run pretrained/base-espeak-tiny --rounds 2 --seconds 75 \\
        --json docs/benchmarks/serve-faults.json --plot docs/benchmarks/serve-faults.png
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import REPO, child_environment, paired_ratios, spread, write_report  # noqa: E402
from serve import free_port, paragraphs, peak_memory_gb, request, wait_for  # noqa: E402
from myxtts.machine import machine  # noqa: E402

LONG_TEXT = " ".join(["The committee met again in the morning, and the report was read aloud."] * 12)


def percentile(values: list[float], fraction: float) -> float | None:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else None


def raw_request(port: int, body: bytes, declared: int | None = None, timeout: float = 30.0) -> socket.socket:
    """A POST to /v1/audio/speech on a raw socket (``declared``: the Content-Length to claim)."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    connection.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       + f"Content-Length: {len(body) if declared is None else declared}\r\n\r\n".encode() + body)
    return connection


def status_of(connection: socket.socket) -> tuple[int | None, bytes]:
    """(status code or None when the server closed without one, what was read up to the end of the headers)."""
    answer = b""
    try:
        while b"\r\n\r\n" not in answer:
            chunk = connection.recv(65536)
            if not chunk:
                break
            answer += chunk
    except OSError:
        pass
    line = answer.split(b"\r\n", 1)[0].split()
    return (int(line[1]) if len(line) > 1 and line[1].isdigit() else None), answer


def speech_body(text: str, **extra) -> bytes:
    return json.dumps({"input": text, "voice": "voice", "response_format": "pcm", **extra}).encode()


class Abusers:
    """One thread per abuse kind, looping until ``stop``; every attempt recorded as (kind, status, seconds)."""

    def __init__(self, port: int):
        self.port, self.records, self.lock, self.stop = port, [], threading.Lock(), threading.Event()

    def record(self, kind: str, status: int | None, seconds: float, **extra) -> None:
        with self.lock:
            self.records.append({"kind": kind, "status": status, "seconds": round(seconds, 3), **extra})

    def simple(self, kind: str, body: bytes, declared: int | None = None) -> None:
        started = time.perf_counter()
        with raw_request(self.port, body, declared, timeout=10) as connection:
            status, _ = status_of(connection)
        self.record(kind, status, time.perf_counter() - started)

    def burst(self) -> None:
        started, connections = time.perf_counter(), []
        for _ in range(80):
            connections.append(raw_request(self.port, speech_body(LONG_TEXT)))
        for connection in connections:
            status, answer = status_of(connection)
            retry_after = b"retry-after" in answer.lower()
            connection.close()
            self.record("burst", status, time.perf_counter() - started, retry_after=retry_after)

    def leave_early(self, kind: str, stall: float) -> None:
        """Read the headers and the first audio bytes; then close (``stall`` 0) or stop reading for ``stall`` s."""
        started = time.perf_counter()
        connection = raw_request(self.port, speech_body(LONG_TEXT))
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a full window comes soon
        status, answer = status_of(connection)
        if status == 200 and not answer.partition(b"\r\n\r\n")[2]:
            connection.recv(4096)
        self.record(kind, status, time.perf_counter() - started)
        if stall:
            self.stop.wait(stall)
        connection.close()

    def slowloris(self) -> None:
        """Headers one byte a second; returns when the server closes the connection or the phase ends."""
        started = time.perf_counter()
        head = b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 10_000
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as connection:
            closed = False
            for byte in head:
                if self.stop.is_set():
                    break
                try:
                    connection.sendall(bytes([byte]))
                    connection.settimeout(1.0)
                    if connection.recv(1024) == b"":
                        closed = True
                        break
                except socket.timeout:
                    continue
                except OSError:
                    closed = True
                    break
        self.record("slowloris", None, time.perf_counter() - started, closed_by_server=closed)

    def loop(self, kind: str, attempt, pause: float, limit: int) -> None:
        for _ in range(limit):
            if self.stop.is_set():
                return
            try:
                attempt()
            except OSError as err:
                self.record(kind, None, 0.0, error=str(err)[:120])
            self.stop.wait(pause)

    def start(self) -> list[threading.Thread]:
        self.stop.clear()
        kinds = {
            "huge_content_length": (lambda: self.simple("huge_content_length", b'{"input": "', 1_000_000_000), 2),
            "input_100kb": (lambda: self.simple("input_100kb", speech_body("a" * 100_000)), 2),
            "malformed_json": (lambda: self.simple("malformed_json", b'{"input": "Hello.", "voice": '), 2),
            "unknown_voice": (lambda: self.simple("unknown_voice", speech_body("Hello.").replace(
                b'"voice": "voice"', b'"voice": "nobody"')), 2),
            "nan_speed": (lambda: self.simple("nan_speed", speech_body("Hello.")[:-1] + b', "speed": NaN}'), 2),
            "burst": (self.burst, 20),
            "disconnect": (lambda: self.leave_early("disconnect", 0.0), 3),
            "stop_reading": (lambda: self.leave_early("stop_reading", 40.0), 1),
            "slowloris": (self.slowloris, 1),
        }
        threads = [threading.Thread(target=self.loop, args=(kind, attempt, pause, 200), daemon=True)
                   for kind, (attempt, pause) in kinds.items()]
        for thread in threads:
            thread.start()
        return threads

    def summary(self) -> dict:
        kinds: dict[str, dict] = {}
        for record in self.records:
            entry = kinds.setdefault(record["kind"], {"attempts": 0, "statuses": {}, "slowest_seconds": 0.0})
            entry["attempts"] += 1
            key = str(record["status"])
            entry["statuses"][key] = entry["statuses"].get(key, 0) + 1
            entry["slowest_seconds"] = max(entry["slowest_seconds"], record["seconds"])
            if "closed_by_server" in record:
                entry["closed_by_server"] = entry.get("closed_by_server", 0) + int(record["closed_by_server"])
            if record.get("retry_after"):
                entry["with_retry_after"] = entry.get("with_retry_after", 0) + 1
        return kinds


def clients_phase(url: str, clients: int, seconds: float, texts: list[str]) -> dict:
    """``clients`` closed-loop clients for ``seconds``: time to first audio of every request, failures."""
    results, lock, stop_at = [], threading.Lock(), time.perf_counter() + seconds

    def client(index: int) -> None:
        position = index
        while time.perf_counter() < stop_at:
            result = request(url, texts[position % len(texts)], "voice")
            position += clients
            with lock:
                results.append(result)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ttfa = [r["ttfa"] for r in results if r["ok"]]
    return {"requests": len(results), "failed": len(results) - len(ttfa), "ttfa_p50": percentile(ttfa, 0.5),
            "ttfa_p95": percentile(ttfa, 0.95), "errors": sorted({r["error"] for r in results if not r["ok"]})[:5]}


class Watch(threading.Thread):
    """/health every second (answer time, failures) and the server's resident memory every 5 s."""

    def __init__(self, url: str, pid: int):
        super().__init__(daemon=True)
        self.url, self.pid, self.stop = url, pid, threading.Event()
        self.health_seconds, self.health_failures, self.memory = [], 0, []
        self.started = time.perf_counter()

    def run(self) -> None:
        import urllib.request

        tick = 0
        while not self.stop.wait(1.0):
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as response:
                    response.read()
                self.health_seconds.append(time.perf_counter() - started)
            except OSError:
                self.health_failures += 1
            tick += 1
            if tick % 5 == 0:
                for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.memory.append((round(time.perf_counter() - self.started, 1),
                                            int(line.split()[1]) / 1024))  # MiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a trained run (or packed model) of the parallel decoder")
    parser.add_argument("--reference", default=str(REPO / "data" / "ljspeech-bundled" / "wavs" / "LJ001-0008.wav"))
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=75.0, help="per phase")
    parser.add_argument("--vocoder", default="griffin-lim")
    parser.add_argument("--no-small-batches", action="store_true",
                        help="the server compiles its batch size alone (every batch padded to it), not also the "
                             "smaller powers of two")
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None)
    args = parser.parse_args()
    port, url = free_port()
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"myxtts-serve-faults-{port}.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "myxtts", "serve", "--run", args.run, "--voice",
                                   f"voice={args.reference}", "--port", str(port), "--vocoder", args.vocoder,
                                   *(["--no-small-batches"] if args.no_small_batches else [])],
                                  stdout=log, stderr=subprocess.STDOUT, env=child_environment(), cwd=REPO)
        try:
            health_at_start = wait_for(url, server)
            texts = paragraphs(200)
            request(url, texts[0], "voice")  # connections and allocator before timing
            watch, abusers = Watch(url, server.pid), Abusers(port)
            watch.start()
            phases = []
            for index in range(args.rounds):
                for kind in ("quiet", "abused"):
                    threads = abusers.start() if kind == "abused" else []
                    result = clients_phase(url, args.clients, args.seconds, texts)
                    abusers.stop.set()
                    for thread in threads:
                        thread.join(60)
                    phases.append({"round": index + 1, "kind": kind, **result})
                    print(f"round {index + 1} {kind}: {json.dumps(result)}", flush=True)
            watch.stop.set()
            watch.join(10)
            health_at_end = wait_for(url, server)
            peak = peak_memory_gb(server.pid)
        finally:
            server.terminate()
            server.wait(60)
    quiet = [p for p in phases if p["kind"] == "quiet"]
    abused = [p for p in phases if p["kind"] == "abused"]
    memory = [mib for _, mib in watch.memory]
    first, last = memory[: 12] or [0.0], memory[-12:] or [0.0]  # the first and the last minute
    abuse = abusers.summary()
    report = {
        "benchmark": "serve_faults", "run": args.run, "vocoder": args.vocoder, "clients": args.clients,
        "seconds_per_phase": args.seconds, "small_batches": not args.no_small_batches, "machine": machine(),
        "phases": phases,
        "quiet": {"ttfa_p50": spread(p["ttfa_p50"] for p in quiet), "ttfa_p95": spread(p["ttfa_p95"] for p in quiet),
                  "failed": sum(p["failed"] for p in quiet), "requests": sum(p["requests"] for p in quiet)},
        "abused": {"ttfa_p50": spread(p["ttfa_p50"] for p in abused),
                   "ttfa_p95": spread(p["ttfa_p95"] for p in abused),
                   "failed": sum(p["failed"] for p in abused), "requests": sum(p["requests"] for p in abused)},
        "ttfa_p95_abused_over_quiet": paired_ratios([p["ttfa_p95"] for p in abused], [p["ttfa_p95"] for p in quiet]),
        "abusers": abuse,
        "health": {"polls": len(watch.health_seconds), "failures": watch.health_failures,
                   "slowest_seconds": max(watch.health_seconds, default=None),
                   "median_seconds": statistics.median(watch.health_seconds) if watch.health_seconds else None},
        "memory_mib": {"samples": watch.memory, "first_minute_mean": statistics.mean(first),
                       "last_minute_mean": statistics.mean(last), "peak_gib": peak},
        "health_at_start": health_at_start, "health_at_end": health_at_end,
    }
    growth = report["memory_mib"]["last_minute_mean"] / max(report["memory_mib"]["first_minute_mean"], 1e-9) - 1
    answered = {kind: entry["slowest_seconds"] for kind, entry in abuse.items()
                if kind not in ("slowloris", "stop_reading", "disconnect")}
    report["targets"] = {
        "well_behaved_failed": {"target": 0, "value": report["quiet"]["failed"] + report["abused"]["failed"]},
        "ttfa_p95_ratio": {"target": "<= 1.5", "median": report["ttfa_p95_abused_over_quiet"]["median"]},
        "memory_growth": {"target": "<= 0.10", "value": round(growth, 3)},
        "abuse_answered_within_2s": {"target": "<= 2.0", "slowest": answered},
        "health_failures": {"target": 0, "value": watch.health_failures},
        "vocoded_after_cancel": {"target": "<= vocoder threads per departure",
                                 "value": health_at_end.get("pieces_vocoded_after_cancel"),
                                 "departures": sum(abuse.get(k, {}).get("attempts", 0)
                                                   for k in ("disconnect", "stop_reading", "burst"))},
    }
    write_report(report, args.json)
    print(f"server log: {log_path}", file=sys.stderr)
    if args.plot:
        plot(report, args.plot)


def plot(report: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for kind, marker in (("quiet", "o"), ("abused", "s")):
        phases = [p for p in report["phases"] if p["kind"] == kind]
        left.plot([p["round"] for p in phases], [p["ttfa_p95"] for p in phases], marker=marker, label=f"{kind} p95")
        left.plot([p["round"] for p in phases], [p["ttfa_p50"] for p in phases], marker=marker, linestyle=":",
                  label=f"{kind} p50")
    left.set(xlabel="round", ylabel="time to first audio (s)",
             title=f"{report['clients']} well-behaved clients")
    left.legend(fontsize=8)
    samples = report["memory_mib"]["samples"]
    right.plot([t for t, _ in samples], [m for _, m in samples])
    right.set(xlabel="seconds since warm-up", ylabel="server resident memory (MiB)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


if __name__ == "__main__":
    main()

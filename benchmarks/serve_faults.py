"""`myxtts serve` under abuse: well-behaved clients' latency with and without abusers, then a connection flood past
the limit and an injected engine failure, in one run.

A real server process on 127.0.0.1 (``myxtts serve``, default limits), started through
``benchmarks/serve_failing_engine.py``: the CLI as deployed, but with the engine's decoding set to fail once this
benchmark creates a trigger file (the last phase). Phases of ``--seconds`` alternate ``--rounds`` times: **quiet**
(``--clients`` well-behaved clients, each a closed loop streaming a two-sentence paragraph, as
``benchmarks/serve.py``) and **abused** (the same clients while abusers run beside them: ``benchmarks/serve_abusers.py``).
Each well-behaved client connects from a loopback address of its own (``client_address``: 127.0.1.N), the abusers
all from one (``serve_abusers.ABUSER_ADDRESS``), as distinct hosts would: the server holds each address to
``--max-requests-per-client``. The abusers, one thread per kind (eight for the slow readers), each bounded in count:

- ``huge_content_length``: ``Content-Length: 1000000000`` and 10 bytes sent (413, or a close, within 2 s);
- ``input_100kb``: a 100 KB input (413: over the body limit);
- ``malformed_json``, ``unknown_voice``, ``nan_speed``: 400;
- ``cross_site_origin``: a POST with ``Origin: http://evil.example`` (403: another site's page);
- ``foreign_host``: a POST with ``Host: evil.example`` (403: DNS rebinding);
- ``text_plain``: a POST with ``Content-Type: text/plain`` (415: a "simple" cross-site form or text request);
- ``burst``: 80 requests at once (past the per-client and in-flight limits: 429 with Retry-After for the excess), each
  closed as soon as its status line arrives;
- ``disconnect``: a many-piece request closed after its first audio bytes;
- ``stop_reading``: a many-piece request whose client reads the first audio bytes and then nothing (the server
  drops it after its send timeout);
- ``slowloris``: request headers sent one byte a second (how long the server keeps such a connection is reported);
- ``slow_readers``: eight streams at once of a twelve-sentence text, each client reading 2 KB every 0.5 s through a
  small receive buffer (the server should end each at its send_timeout or request_timeout, cutting or resetting the
  connection, while its unsent audio stays under ``max_unsent_bytes``); per stream its status, bytes read, seconds
  until the client saw the end and how it ended (clean end, cut, reset, or given up by the client 30 s past the
  server's request_timeout). A client this slow still takes each piece within send_timeout, so request_timeout is
  what should end it. The phase's end waits for the streams open then, so the next quiet phase does not share the
  server with them;
- ``idle_connections``: a flood below the connection limit (``max_connections`` less the clients, a margin of 50 and
  the connections the other kinds hold at once, the burst's above all): idle sockets that send nothing, held until
  the server closes them (its header_timeout), then opened again; per wave how many the server closed and after how
  long. The well-behaved clients must not notice it.

After the rounds, on the same server: **flood_past_limit**, ``max_connections + 100`` idle sockets (the limit read from
``/health``), then ``GET /health`` on 20 more connections (each expected 503 from uvicorn's limit_concurrency, at once),
the flood closed, and the seconds until a well-behaved request succeeds again; then **engine_failure**, last since it
kills the engine: the trigger file created, a long request sent (expected: its stream cut or failed), ``/health``
polled every 0.1 s until it is not 200, a new request after that (expected 503 at once), and whether the server's
log holds the traceback of ``InjectedEngineFailure``.

Reported: the well-behaved clients' time to first audio (p50 / p95) and failures per phase kind, the p95 ratio
abused / quiet paired by round, each abuser kind's status codes and slowest answer, ``/health`` polled every second
throughout the rounds (failures, slowest answer, the peak of ``backlog.unsent_bytes``, ``requests_timed_out``), the
server's resident memory sampled every 5 s (first minute against last minute) and its peak, ``/health``'s count of
pieces vocoded for clients that had already left, the two final phases, and every target against its figure.

    python benchmarks/serve_faults.py --run pretrained/base-espeak-tiny --rounds 2 --seconds 75 \\
        --json docs/benchmarks/serve-faults.json --plot docs/benchmarks/serve-faults.png
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import REPO, child_environment, paired_ratios, spread, write_report  # noqa: E402
from serve import client_address, free_port, paragraphs, peak_memory_gb, request, wait_for  # noqa: E402
from serve_abusers import (KINDS, LONG_TEXT, OTHER_ABUSER_CONNECTIONS, Abusers, connect, open_idle,  # noqa: E402
                           raw_request, read_until_end, speech_body, status_of)
from myxtts.machine import machine  # noqa: E402

FAILING_ENGINE = Path(__file__).resolve().parent / "serve_failing_engine.py"
# kinds that are not a request answered at once: their seconds are how long the server kept them, not an answer time
HELD_KINDS = ("slowloris", "stop_reading", "disconnect", "slow_readers", "idle_connections")
# the refusals and the status each expects
EXPECTED_STATUS = {"huge_content_length": 413, "input_100kb": 413, "malformed_json": 400, "unknown_voice": 400,
                   "nan_speed": 400, "cross_site_origin": 403, "foreign_host": 403, "text_plain": 415}
FLOOD_PROBES = 20  # GET /health on further connections while the flood is past the limit


def percentile(values: list[float], fraction: float) -> float | None:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else None


def health_status(url: str, timeout: float = 5.0) -> tuple[int | None, dict]:
    """/health's status code (None: no answer) and its JSON ({} when it is not JSON)."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, {}
    except (OSError, ValueError):
        return None, {}


def clients_phase(url: str, clients: int, seconds: float, texts: list[str]) -> dict:
    """``clients`` closed-loop clients for ``seconds``: time to first audio of every request, failures."""
    results, lock, stop_at = [], threading.Lock(), time.perf_counter() + seconds

    def client(index: int) -> None:
        position = index
        while time.perf_counter() < stop_at:
            result = request(url, texts[position % len(texts)], "voice", client_address(index))
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
    """/health every second (answer time, failures, the peak of its unsent audio bytes, its requests timed out) and
    the server's resident memory every 5 s."""

    def __init__(self, url: str, pid: int):
        super().__init__(daemon=True)
        self.url, self.pid, self.stop = url, pid, threading.Event()
        self.health_seconds, self.health_failures, self.memory = [], 0, []
        self.unsent_bytes_peak, self.requests_timed_out = 0, None
        self.started = time.perf_counter()

    def run(self) -> None:
        tick = 0
        while not self.stop.wait(1.0):
            started = time.perf_counter()
            status, health = health_status(self.url)
            if status == 200:
                self.health_seconds.append(time.perf_counter() - started)
                self.unsent_bytes_peak = max(self.unsent_bytes_peak, health.get("backlog", {}).get("unsent_bytes", 0))
                self.requests_timed_out = health.get("requests_timed_out")
            else:
                self.health_failures += 1
            tick += 1
            if tick % 5 == 0:
                for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.memory.append((round(time.perf_counter() - self.started, 1),
                                            int(line.split()[1]) / 1024))  # MiB


def flood_past_limit(port: int, url: str, max_connections: int, texts: list[str]) -> dict:
    """``max_connections + 100`` idle sockets, ``GET /health`` on FLOOD_PROBES more (status and answer time each),
    the flood closed, then the seconds until a well-behaved request succeeds again."""
    flood = open_idle(port, max_connections + 100)
    time.sleep(1.0)  # the server accepts them all (well within its header_timeout, after which it closes them)
    probes = []
    for _ in range(FLOOD_PROBES):
        started, status = time.perf_counter(), None
        try:
            with connect(port, timeout=10) as connection:
                connection.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                status, _ = status_of(connection)
        except OSError:
            pass
        probes.append({"status": status, "seconds": round(time.perf_counter() - started, 3)})
    for connection in flood:
        connection.close()
    closed, recovered, attempts = time.perf_counter(), None, 0
    while recovered is None and time.perf_counter() - closed < 60:
        result = request(url, texts[attempts % len(texts)], "voice")
        attempts += 1
        if result["ok"]:
            recovered = round(time.perf_counter() - closed, 3)
        else:
            time.sleep(0.2)
    statuses: dict[str, int] = {}
    for probe in probes:
        statuses[str(probe["status"])] = statuses.get(str(probe["status"]), 0) + 1
    return {"flood_opened": len(flood), "probes": probes, "statuses": statuses,
            "slowest_seconds": max(probe["seconds"] for probe in probes),
            "recovered_seconds": recovered, "requests_until_recovered": attempts}


def engine_failure(port: int, url: str, trigger: Path, log_path: Path) -> dict:
    """The trigger file created, then a long request (its outcome), /health every 0.1 s until it is not 200, a new
    request after that (its status and answer time), and whether the log holds the injected failure's traceback."""
    in_flight: dict = {}

    def stream() -> None:  # the request in flight when the engine dies: read to its end, as fast as it comes
        begun = time.perf_counter()
        try:
            with raw_request(port, speech_body(LONG_TEXT), timeout=10, headers={"Connection": "close"}) as connection:
                status, answer = status_of(connection)
                body = answer.partition(b"\r\n\r\n")[2]
                count, ended = (read_until_end(connection, body, 65536, 0.0, begun + 60) if status == 200
                                else (len(body), "refused"))
            in_flight.update(status=status, bytes_read=count, ended=ended)
        except OSError as err:
            in_flight.update(status=None, ended="error", error=str(err)[:120])
        in_flight["seconds"] = round(time.perf_counter() - begun, 3)

    trigger.touch()
    started = time.perf_counter()
    reader = threading.Thread(target=stream, daemon=True)
    reader.start()
    status, unhealthy_after = 200, None
    while time.perf_counter() - started < 30:
        status, _ = health_status(url, timeout=2)
        if status != 200:
            unhealthy_after = round(time.perf_counter() - started, 3)
            break
        time.sleep(0.1)
    after_started, after_status = time.perf_counter(), None
    try:
        with raw_request(port, speech_body("Hello."), timeout=10) as connection:
            after_status, _ = status_of(connection)
    except OSError:
        pass
    after_seconds = round(time.perf_counter() - after_started, 3)
    reader.join(70)
    time.sleep(0.5)  # the engine's log line is written by then
    log = log_path.read_text(errors="replace")
    return {"health_non_200_after_seconds": unhealthy_after, "health_status": status, "in_flight": in_flight,
            "after_failure": {"status": after_status, "seconds": after_seconds},
            "traceback_in_log": "Traceback" in log and "InjectedEngineFailure" in log}


def abusers_engine_share(phases: list[dict]) -> dict:
    """Per round, the share of the abused phase's decoded pieces the abusers took: its pieces less what its
    well-behaved requests would take at the quiet phase's pieces per request (the clients' texts are the same)."""
    shares = []
    for quiet, abused in zip(phases[0::2], phases[1::2]):
        per_request = quiet["pieces_decoded"] / max(1, quiet["requests"])
        theirs = abused["pieces_decoded"] - per_request * abused["requests"]
        shares.append({"round": abused["round"], "pieces_decoded": abused["pieces_decoded"],
                       "clients_pieces_estimated": round(per_request * abused["requests"], 1),
                       "abusers_share": round(theirs / max(1, abused["pieces_decoded"]), 3)})
    return {"rounds": shares}


def stop_server(server: subprocess.Popen) -> None:
    """SIGTERM, and SIGKILL if it has not exited within a minute: no server outlives the benchmark."""
    server.terminate()
    try:
        server.wait(60)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(10)


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
    parser.add_argument("--skip-abuse", action="append", default=[], choices=KINDS, metavar="KIND",
                        help="leave this abuse kind out of the abused phases (repeatable): which abuse costs what")
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None)
    args = parser.parse_args()
    port, url = free_port()
    temporary = Path(os.environ.get("TMPDIR", "/tmp"))
    log_path = temporary / f"myxtts-serve-faults-{port}.log"
    trigger = temporary / f"myxtts-serve-faults-{port}.fail"  # its existence fails the engine's next decode
    trigger.unlink(missing_ok=True)
    with open(log_path, "w") as log:
        server = subprocess.Popen([sys.executable, str(FAILING_ENGINE), "--trigger-file", str(trigger), "serve",
                                   "--run", args.run, "--voice", f"voice={args.reference}", "--port", str(port),
                                   "--vocoder", args.vocoder, *(["--no-small-batches"] if args.no_small_batches else [])],
                                  stdout=log, stderr=subprocess.STDOUT, env=child_environment(), cwd=REPO)
        try:
            health_at_start = wait_for(url, server)
            limits = health_at_start["limits"]
            # below the connection limit by the clients, a margin of 50 and what the other abusers hold at once
            idle_count = max(0, limits["max_connections"] - args.clients - 50 - OTHER_ABUSER_CONNECTIONS)
            texts = paragraphs(200)
            request(url, texts[0], "voice")  # connections and allocator before timing
            watch, abusers = Watch(url, server.pid), Abusers(port, idle_count, limits["request_timeout"])
            watch.start()
            phases = []
            for index in range(args.rounds):
                for kind in ("quiet", "abused"):
                    decoded_before = health_status(url)[1].get("pieces_served", 0)
                    threads = abusers.start(tuple(args.skip_abuse)) if kind == "abused" else []
                    result = clients_phase(url, args.clients, args.seconds, texts)
                    # the engine's work in the phase (pieces decoded, every one also vocoded unless cancelled
                    # between): against the quiet phase's pieces per request, what the abusers cost
                    result["pieces_decoded"] = health_status(url)[1].get("pieces_served", 0) - decoded_before
                    abusers.stop.set()
                    waited = time.perf_counter()
                    deadline = waited + abusers.slow_reader_cap + 30  # a slow reader still open ends by then
                    for thread in threads:
                        thread.join(max(0.0, deadline - time.perf_counter()))
                    result["abusers_wait_seconds"] = round(time.perf_counter() - waited, 1) if threads else 0.0
                    phases.append({"round": index + 1, "kind": kind, **result})
                    print(f"round {index + 1} {kind}: {json.dumps(result)}", flush=True)
            watch.stop.set()
            watch.join(10)
            health_at_end = wait_for(url, server)
            flood = flood_past_limit(port, url, limits["max_connections"], texts)
            print(f"flood_past_limit: {json.dumps({k: v for k, v in flood.items() if k != 'probes'})}", flush=True)
            peak = peak_memory_gb(server.pid)  # before the engine dies
            failure = engine_failure(port, url, trigger, log_path)
            print(f"engine_failure: {json.dumps(failure)}", flush=True)
        finally:
            trigger.unlink(missing_ok=True)
            stop_server(server)
    quiet = [p for p in phases if p["kind"] == "quiet"]
    abused = [p for p in phases if p["kind"] == "abused"]
    memory = [mib for _, mib in watch.memory]
    first, last = memory[: 12] or [0.0], memory[-12:] or [0.0]  # the first and the last minute
    abuse = abusers.summary()
    report = {
        "benchmark": "serve_faults", "run": args.run, "skipped_abuses": args.skip_abuse, "vocoder": args.vocoder, "clients": args.clients,
        "seconds_per_phase": args.seconds, "small_batches": not args.no_small_batches, "machine": machine(),
        "idle_connections_per_wave": idle_count, "phases": phases,
        "quiet": {"ttfa_p50": spread(p["ttfa_p50"] for p in quiet), "ttfa_p95": spread(p["ttfa_p95"] for p in quiet),
                  "failed": sum(p["failed"] for p in quiet), "requests": sum(p["requests"] for p in quiet)},
        "abused": {"ttfa_p50": spread(p["ttfa_p50"] for p in abused),
                   "ttfa_p95": spread(p["ttfa_p95"] for p in abused),
                   "failed": sum(p["failed"] for p in abused), "requests": sum(p["requests"] for p in abused)},
        "ttfa_p95_abused_over_quiet": paired_ratios([p["ttfa_p95"] for p in abused], [p["ttfa_p95"] for p in quiet]),
        "abusers_engine_share": abusers_engine_share(phases),
        "abusers": abuse,
        "health": {"polls": len(watch.health_seconds), "failures": watch.health_failures,
                   "slowest_seconds": max(watch.health_seconds, default=None),
                   "median_seconds": statistics.median(watch.health_seconds) if watch.health_seconds else None,
                   "unsent_bytes_peak": watch.unsent_bytes_peak, "requests_timed_out": watch.requests_timed_out},
        "memory_mib": {"samples": watch.memory, "first_minute_mean": statistics.mean(first),
                       "last_minute_mean": statistics.mean(last), "peak_gib": peak},
        "flood_past_limit": flood, "engine_failure": failure,
        "health_at_start": health_at_start, "health_at_end": health_at_end,
    }
    growth = report["memory_mib"]["last_minute_mean"] / max(report["memory_mib"]["first_minute_mean"], 1e-9) - 1
    answered = {kind: entry["slowest_seconds"] for kind, entry in abuse.items() if kind not in HELD_KINDS}
    slow_ended = abuse.get("slow_readers", {}).get("ended", {})
    report["targets"] = {
        "well_behaved_failed": {"target": 0, "value": report["quiet"]["failed"] + report["abused"]["failed"]},
        "ttfa_p95_ratio": {"target": "<= 1.5", "median": report["ttfa_p95_abused_over_quiet"]["median"]},
        "memory_growth": {"target": "<= 0.10", "value": round(growth, 3)},
        "abuse_answered_within_2s": {"target": "<= 2.0", "slowest": answered},
        "abuse_statuses": {"target": EXPECTED_STATUS,
                           "statuses": {kind: abuse.get(kind, {}).get("statuses") for kind in EXPECTED_STATUS}},
        "unsent_bytes_peak": {"target": f"<= max_unsent_bytes ({limits['max_unsent_bytes']})",
                              "value": watch.unsent_bytes_peak},
        "slow_readers_ended_by_server": {"target": "cut or reset, none given up by the client",
                                         "ended": slow_ended},
        "idle_connections_closed_by_server": {  # a wave still open when its phase ended is left out
            "target": f"every socket, after about header_timeout ({limits['header_timeout']} s)",
            "waves": [wave for wave in abuse.get("idle_connections", {}).get("waves", [])
                      if not wave.get("ended_by_phase")]},
        "health_failures": {"target": 0, "value": watch.health_failures},
        "vocoded_after_cancel": {"target": "<= vocoder threads per departure",
                                 "value": health_at_end.get("pieces_vocoded_after_cancel"),
                                 "departures": sum(abuse.get(k, {}).get("attempts", 0)
                                                   for k in ("disconnect", "stop_reading", "burst", "slow_readers"))},
        "flood_excess_503_within_2s": {"target": "every probe 503, <= 2.0", "statuses": flood["statuses"],
                                       "slowest": flood["slowest_seconds"]},
        "health_non_200_within_1s_of_failure": {"target": "<= 1.0",
                                                "value": failure["health_non_200_after_seconds"]},
        "after_failure_503_within_2s": {"target": "503, <= 2.0", **failure["after_failure"]},
        "failure_traceback_in_log": {"target": True, "value": failure["traceback_in_log"]},
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

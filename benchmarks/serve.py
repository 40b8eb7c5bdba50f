"""`myxtts serve` under load: time to first audio, real-time factor and throughput at 1, 4 and 16 clients.

The server runs as its own process (``python -m myxtts serve``, as deployed) on localhost; the clients are threads
of this process, each a closed loop: send a two-sentence paragraph (LJSpeech transcripts, chosen at random,
``response_format: pcm``), read the stream, send the next. Per request: time to the first audio byte (TTFA),
the wall time, the audio seconds received (RTF = wall / audio). Per level: requests, failures, throughput (audio
seconds delivered per wall second, all clients together). Levels alternate in rounds (1, 4, 16, 1, 4, 16, ...),
``--seconds`` each, so every level sees about the same load on the shared cores; figures are medians with min-max
over rounds. At the end: the server's peak resident memory (VmHWM) and /health's compiles after warm-up. Several
``--vocoder``: one server each (started in turn, then idle while another is measured), taking turns within every
level of every round, the first rotating; each one's throughput and TTFA over the first's, round by round.

    python benchmarks/serve.py --run runs/demo --reference data/ljspeech-bundled/wavs/LJ001-0008.wav \\
        --rounds 2 --seconds 30 --json docs/benchmarks/serve.json --plot docs/benchmarks/serve.png
    python benchmarks/serve.py --run RUN --vocoder griffin-lim --vocoder pretrained/vocoder-vocos-ljspeech ...
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
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
from myxtts.machine import machine  # noqa: E402

TRANSCRIPTS = REPO.parent / "shared" / "data" / "ljspeech-mini" / "transcripts_all.csv"
BUNDLED = REPO / "data" / "ljspeech-bundled" / "metadata.csv"


def paragraphs(count: int, seed: int = 0) -> list[str]:
    """Two-sentence paragraphs of LJSpeech transcripts (20-120 characters each)."""
    source = TRANSCRIPTS if TRANSCRIPTS.is_file() else BUNDLED
    lines = [line.split("|")[-1].strip() for line in source.read_text(encoding="utf-8").splitlines()]
    lines = [line for line in lines if 20 <= len(line) <= 120 and line.endswith(".")]
    rng = random.Random(seed)
    return [f"{rng.choice(lines)} {rng.choice(lines)}" for _ in range(count)]


def client_address(index: int) -> str:
    """The loopback address well-behaved client ``index`` connects from (one host each)."""
    return f"127.0.1.{index + 1}"


def request(url: str, text: str, voice: str, source: str | None = None) -> dict:
    """One streamed request: time to its first audio bytes, its wall time and its audio's length. ``source``: the
    loopback address to connect from (the server tells clients apart by address)."""
    body = json.dumps({"input": text, "voice": voice, "response_format": "pcm"}).encode()
    host, port = url.removeprefix("http://").split(":")
    started = time.perf_counter()
    connection = http.client.HTTPConnection(host, int(port), timeout=300,
                                            source_address=(source, 0) if source else None)
    try:
        connection.request("POST", "/v1/audio/speech", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            return {"ok": False, "error": f"HTTP {response.status}: {response.read()[:160]!r}",
                    "wall": time.perf_counter() - started}
        rate = int(response.headers["X-Sample-Rate"])
        first = response.read(2)
        ttfa = time.perf_counter() - started
        total = len(first) + len(response.read())
        wall = time.perf_counter() - started
        audio = total / 2 / rate
        return {"ok": True, "ttfa": ttfa, "wall": wall, "audio": audio, "rtf": wall / max(audio, 1e-9)}
    except (http.client.HTTPException, OSError, ValueError) as err:
        return {"ok": False, "error": str(err)[:200], "wall": time.perf_counter() - started}
    finally:
        connection.close()


def level_round(url: str, voice: str, clients: int, seconds: float, texts: list[str]) -> dict:
    results: list[dict] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def client(index: int) -> None:
        rng = random.Random(index)
        while time.perf_counter() < stop_at:
            result = request(url, rng.choice(texts), voice)
            with lock:
                results.append(result)

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    good = [r for r in results if r["ok"]]
    return {"clients": clients, "requests": len(results), "failed": len(results) - len(good), "seconds": elapsed,
            "ttfa_median": statistics.median(r["ttfa"] for r in good) if good else None,
            "ttfa_max": max((r["ttfa"] for r in good), default=None),
            "rtf_median": statistics.median(r["rtf"] for r in good) if good else None,
            "throughput_audio_seconds_per_second": sum(r["audio"] for r in good) / elapsed,
            "errors": sorted({r["error"] for r in results if not r["ok"]})[:5]}


def free_port() -> tuple[int, str]:
    """A free port on 127.0.0.1 and the server's URL there."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return port, f"http://127.0.0.1:{port}"


def wait_for(url: str, process: subprocess.Popen, seconds: float = 600) -> dict:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited ({process.returncode})")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as response:
                return json.loads(response.read())
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    raise RuntimeError("the server did not answer /health")


def peak_memory_gb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024 ** 2
    except OSError:
        return None
    return None


def start_server(args, vocoder: str) -> dict:
    """One ``myxtts serve`` process with ``vocoder``, answering /health: its process, URL, log and start-up time."""
    port, url = free_port()
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"myxtts-serve-{port}.log", "w")
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "myxtts", "serve", "--run", args.run, "--voice",
                                f"voice={args.reference}", "--port", str(port), "--batch-size", str(args.batch_size),
                                "--vocoder", vocoder, *(["--no-small-batches"] if args.no_small_batches else [])],
                               stdout=log, stderr=subprocess.STDOUT, env=child_environment(), cwd=REPO)
    server = {"process": process, "url": url, "log": log}
    try:
        server["health"] = wait_for(url, process)
    except RuntimeError:
        stop_server(server)
        raise
    server["startup"] = time.perf_counter() - started
    return server


def stop_server(server: dict) -> None:
    server["process"].terminate()
    server["process"].wait(60)
    server["log"].close()


def level_figures(runs: list[dict]) -> dict:
    return {"ttfa_median_seconds": spread(r["ttfa_median"] for r in runs),
            "rtf_median": spread(r["rtf_median"] for r in runs),
            "throughput_audio_seconds_per_second": spread(r["throughput_audio_seconds_per_second"] for r in runs),
            "requests": sum(r["requests"] for r in runs), "failed": sum(r["failed"] for r in runs), "rounds": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a trained run of the parallel decoder")
    parser.add_argument("--reference", default=str(REPO / "data" / "ljspeech-bundled" / "wavs" / "LJ001-0008.wav"))
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=30.0, help="per level per round")
    parser.add_argument("--soak-seconds", type=float, default=120.0, help="a last run at the highest level (0: none)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--no-small-batches", action="store_true",
                        help="the servers compile --batch-size alone (every batch padded to it), not also the smaller "
                             "powers of two")
    parser.add_argument("--vocoder", action="append", default=None,
                        help="the server's --vocoder: a vocoder directory or griffin-lim (the default); repeat it to "
                        "compare: one server each, alternated within every round, ratios to the first")
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None)
    args = parser.parse_args()
    vocoders = args.vocoder or ["griffin-lim"]
    if len(set(vocoders)) != len(vocoders):
        parser.error(f"--vocoder given twice: {vocoders}")
    servers: dict[str, dict] = {}
    try:
        for vocoder in vocoders:  # started one after another: each warm-up has the cores to itself
            servers[vocoder] = start_server(args, vocoder)
        texts = paragraphs(200)
        for server in servers.values():
            request(server["url"], texts[0], "voice")  # one request before timing: connections, allocator
        rounds = {vocoder: {level: [] for level in args.levels} for vocoder in vocoders}
        for index in range(args.rounds):
            for level in args.levels:
                # the servers take turns, the first one rotating each round; an idle server only holds memory
                for vocoder in vocoders[index % len(vocoders):] + vocoders[:index % len(vocoders)]:
                    figures = level_round(servers[vocoder]["url"], "voice", level, args.seconds, texts)
                    rounds[vocoder][level].append(figures)
                    print(f"round {index + 1} clients {level} {vocoder}: {json.dumps(figures)}", flush=True)
        for vocoder, server in servers.items():
            server["soak"] = (level_round(server["url"], "voice", max(args.levels), args.soak_seconds, texts)
                              if args.soak_seconds else None)
            server["final"] = wait_for(server["url"], server["process"])
            server["memory"] = peak_memory_gb(server["process"].pid)
    finally:
        for server in servers.values():
            stop_server(server)
    lowest, highest = min(args.levels), max(args.levels)
    report = {"benchmark": "serve", "run": args.run, "vocoders": vocoders, "batch_size": args.batch_size,
              "small_batches": not args.no_small_batches, "machine": machine(), "seconds_per_level": args.seconds,
              "results": {}}
    for vocoder, server in servers.items():
        runs = rounds[vocoder]
        gain = [h["throughput_audio_seconds_per_second"] / max(l["throughput_audio_seconds_per_second"], 1e-9)
                for h, l in zip(runs[highest], runs[lowest])]
        soak = server["soak"]
        report["results"][vocoder] = {
            "startup_seconds": round(server["startup"], 1), "health_at_start": server["health"],
            "health_at_end": server["final"], "compiles_after_warmup": server["final"]["compiles_after_warmup"],
            "server_peak_memory_gb": server["memory"],
            "levels": {str(level): level_figures(level_runs) for level, level_runs in runs.items()},
            "throughput_gain_highest_over_lowest": spread(gain), "soak": soak,
            # time to first audio: the serving issue's 0.3 s with Griffin-Lim, the vocoder issue's 0.25 s with one
            "targets": {"ttfa_1_client_seconds": {"target": "<= 0.3" if vocoder == "griffin-lim" else "<= 0.25",
                                                  "median": spread(
                            r["ttfa_median"] for r in runs[lowest])["median"]},
                        "throughput_gain": {"target": ">= 2x", "median": spread(gain)["median"]},
                        "soak_failed_requests": {"target": 0, "value": soak["failed"] if soak else None},
                        "compiles_after_warmup": {"target": 0, "value": server["final"]["compiles_after_warmup"]}}}
        if vocoder != vocoders[0]:  # pair by pair: round i of this server against round i of the first
            report["results"][vocoder]["over_first"] = {str(level): {
                key: paired_ratios([r[key] for r in runs[level]], [r[key] for r in rounds[vocoders[0]][level]])
                for key in ("throughput_audio_seconds_per_second", "ttfa_median")} for level in args.levels}
    write_report(report, args.json)
    if args.plot:
        plot({vocoder: result["levels"] for vocoder, result in report["results"].items()}, args.plot)


def plot(levels_by_vocoder: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    for vocoder, levels in levels_by_vocoder.items():
        clients = [int(level) for level in levels]
        ttfa = [levels[str(c)]["ttfa_median_seconds"] for c in clients]
        left.errorbar(clients, [t["median"] for t in ttfa], yerr=[[t["median"] - t["min"] for t in ttfa],
                                                                 [t["max"] - t["median"] for t in ttfa]],
                      marker="o", label=Path(vocoder).name)
        rate = [levels[str(c)]["throughput_audio_seconds_per_second"]["median"] for c in clients]
        right.plot(clients, rate, marker="o", label=Path(vocoder).name)
    left.axhline(0.3, linestyle="--", color="grey", label="target 0.3 s (1 client)")
    left.set(xscale="log", xlabel="concurrent clients", ylabel="time to first audio (s, median)")
    left.legend(fontsize=7)
    right.set(xscale="log", xlabel="concurrent clients", ylabel="audio seconds per second (all clients)")
    right.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


if __name__ == "__main__":
    main()

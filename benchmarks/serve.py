"""`myxtts serve` under load: time to first audio, real-time factor and throughput at 1, 4 and 16 clients.

The server runs as its own process (``python -m myxtts serve``, as deployed) on localhost; the clients are threads
of this process, each a closed loop: send a two-sentence paragraph (LJSpeech transcripts, chosen at random,
``response_format: pcm``), read the stream, send the next. Per request: time to the first audio byte (TTFA),
the wall time, the audio seconds received (RTF = wall / audio). Per level: requests, failures, throughput (audio
seconds delivered per wall second, all clients together). Levels alternate in rounds (1, 4, 16, 1, 4, 16, ...),
``--seconds`` each, so every level sees about the same load on the shared cores; figures are medians with min-max
over rounds. At the end: the server's peak resident memory (VmHWM) and /health's compiles after warm-up.

    python benchmarks/serve.py --run runs/demo --reference data/ljspeech-bundled/wavs/LJ001-0008.wav \\
        --rounds 2 --seconds 30 --json docs/benchmarks/serve.json --plot docs/benchmarks/serve.png
"""

from __future__ import annotations

import argparse
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
from common import REPO, child_environment, spread, write_report  # noqa: E402
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


def request(url: str, text: str, voice: str) -> dict:
    body = json.dumps({"input": text, "voice": voice, "response_format": "pcm"}).encode()
    started = time.perf_counter()
    try:
        req = urllib.request.Request(url + "/v1/audio/speech", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as response:
            rate = int(response.headers["X-Sample-Rate"])
            first = response.read(2)
            ttfa = time.perf_counter() - started
            total = len(first) + len(response.read())
        wall = time.perf_counter() - started
        audio = total / 2 / rate
        return {"ok": True, "ttfa": ttfa, "wall": wall, "audio": audio, "rtf": wall / max(audio, 1e-9)}
    except (urllib.error.URLError, OSError, ValueError) as err:
        return {"ok": False, "error": str(err)[:200], "wall": time.perf_counter() - started}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a trained run of the parallel decoder")
    parser.add_argument("--reference", default=str(REPO / "data" / "ljspeech-bundled" / "wavs" / "LJ001-0008.wav"))
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=30.0, help="per level per round")
    parser.add_argument("--soak-seconds", type=float, default=120.0, help="a last run at the highest level (0: none)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--vocoder", default="griffin-lim", help="the server's --vocoder: a vocoder directory or "
                        "griffin-lim")
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None)
    args = parser.parse_args()
    port, url = free_port()
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"myxtts-serve-{port}.log", "w")
    started = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "myxtts", "serve", "--run", args.run, "--voice",
                               f"voice={args.reference}", "--port", str(port), "--batch-size", str(args.batch_size),
                               "--vocoder", args.vocoder],
                              stdout=log, stderr=subprocess.STDOUT, env=child_environment(), cwd=REPO)
    try:
        health = wait_for(url, server)
        startup = time.perf_counter() - started
        texts = paragraphs(200)
        request(url, texts[0], "voice")  # one request before timing: connections, allocator
        rounds: dict[int, list[dict]] = {level: [] for level in args.levels}
        for index in range(args.rounds):
            for level in args.levels:
                rounds[level].append(level_round(url, "voice", level, args.seconds, texts))
                print(f"round {index + 1} clients {level}: {json.dumps(rounds[level][-1])}", flush=True)
        soak = level_round(url, "voice", max(args.levels), args.soak_seconds, texts) if args.soak_seconds else None
        final = wait_for(url, server)
        memory = peak_memory_gb(server.pid)
    finally:
        server.terminate()
        server.wait(60)
        log.close()
    levels = {}
    for level, runs in rounds.items():
        levels[str(level)] = {"ttfa_median_seconds": spread(r["ttfa_median"] for r in runs),
                              "rtf_median": spread(r["rtf_median"] for r in runs),
                              "throughput_audio_seconds_per_second": spread(
                                  r["throughput_audio_seconds_per_second"] for r in runs),
                              "requests": sum(r["requests"] for r in runs), "failed": sum(r["failed"] for r in runs),
                              "rounds": runs}
    lowest, highest = str(min(args.levels)), str(max(args.levels))
    gain = [h["throughput_audio_seconds_per_second"] / max(l["throughput_audio_seconds_per_second"], 1e-9)
            for h, l in zip(rounds[int(highest)], rounds[int(lowest)])]
    report = {"benchmark": "serve", "run": args.run, "vocoder": args.vocoder, "batch_size": args.batch_size, "machine": machine(),
              "startup_seconds": round(startup, 1), "health_at_start": health, "health_at_end": final,
              "compiles_after_warmup": final["compiles_after_warmup"], "server_peak_memory_gb": memory,
              "levels": levels, "throughput_gain_highest_over_lowest": spread(gain), "soak": soak,
              "targets": {"ttfa_1_client_seconds": {"target": "<= 0.3",
                                                    "median": levels[lowest]["ttfa_median_seconds"]["median"]},
                          "throughput_gain": {"target": ">= 2x", "median": spread(gain)["median"]},
                          "soak_failed_requests": {"target": 0, "value": soak["failed"] if soak else None},
                          "compiles_after_warmup": {"target": 0, "value": final["compiles_after_warmup"]}}}
    write_report(report, args.json)
    if args.plot:
        plot(levels, args.plot)


def plot(levels: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clients = [int(level) for level in levels]
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    ttfa = [levels[str(c)]["ttfa_median_seconds"] for c in clients]
    left.errorbar(clients, [t["median"] for t in ttfa], yerr=[[t["median"] - t["min"] for t in ttfa],
                                                             [t["max"] - t["median"] for t in ttfa]], marker="o")
    left.axhline(0.3, linestyle="--", color="grey", label="target 0.3 s (1 client)")
    left.set(xscale="log", xlabel="concurrent clients", ylabel="time to first audio (s, median)")
    left.legend()
    rate = [levels[str(c)]["throughput_audio_seconds_per_second"]["median"] for c in clients]
    right.plot(clients, rate, marker="o")
    right.set(xscale="log", xlabel="concurrent clients", ylabel="audio seconds per second (all clients)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


if __name__ == "__main__":
    main()

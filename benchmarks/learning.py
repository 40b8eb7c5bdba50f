"""Learning benchmark: does the model learn to speak? Curves of listening measures against training minutes.

For one corpus (``--corpus bundled | ljspeech-mini | espeak``) it prepares the data, then trains in chunks
(``myxtts.training.run`` with ``resume``) until ``--minutes`` of training-loop time are spent, and after each
chunk evaluates the latest checkpoint on training-set and held-out sentences (free-running synthesis,
Griffin-Lim vocoder, the reference voice another clip of the same speaker):

- ``focus_rate`` / ``attention_diagonality`` of the aligning layer's free-running alignment (``myxtts.metrics``);
- ``mcd_dtw_db`` against the recording and ``length_error`` = |synthesized - real frames| / real frames;
- ``cer``: pocketsphinx's character error rate on the synthesized audio (``myxtts.listening``), next to the
  CER of the recordings and of their Griffin-Lim resynthesis (the ceiling a Griffin-Lim synthesis can reach);
- multi-speaker corpora: ``speaker_match``, the share of (held-out text, reference voice) syntheses whose
  voice embedding is nearest to the reference voice's centroid (Griffin-Lim resynthesised training clips), and
  its relative form (each output against the other voices' outputs of the same text, so a colouring common to
  every synthesis cancels; ``myxtts.listening.nearest_voices``).

Writes ``OUT/<corpus>.json`` (machine, TensorFlow version, environment, config, points) and
``OUT/<corpus>.png`` (CER, focus rate, MCD and speaker match against training minutes).
The learning-rate schedule must not depend on ``training.max_steps`` (each chunk raises it), so a cosine
decay is replaced by a constant rate; the JSON records it.

Run: ``.venv/bin/python benchmarks/learning.py --corpus bundled --minutes 2 --evaluations 2``
(needs the ``bench`` extra: pocketsphinx, matplotlib; espeak-ng for ``--corpus espeak``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import myxtts  # noqa: E402,F401  (first: the process settings TensorFlow reads at import)

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED_MINI = REPO.parent / "shared" / "data" / "ljspeech-mini"
CORPORA = ("bundled", "ljspeech-mini", "espeak")
ENV_KEYS = ("TF_ENABLE_ONEDNN_OPTS", "TF_CPP_MIN_LOG_LEVEL", "OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
            "TF_NUM_INTEROP_THREADS", "CUDA_VISIBLE_DEVICES")


def corpus_source(args) -> tuple[Path, str]:
    """(corpus path, data.corpus_format) for the chosen corpus; renders the espeak corpus when needed."""
    if args.corpus == "bundled":
        return (Path(args.data) if args.data else REPO / "data" / "ljspeech-bundled"), "ljspeech"
    if args.corpus == "ljspeech-mini":
        path = Path(args.data) if args.data else SHARED_MINI
        if not (path / "metadata.csv").is_file():
            sys.exit(f"Error: no LJSpeech corpus at {path} (metadata.csv); pass --data FOLDER.")
        return path, "ljspeech"
    from myxtts.data.espeak_corpus import (EspeakMissingError, bundled_sentences, read_transcripts, render_corpus,
                                           select_sentences)

    transcripts = SHARED_MINI / "transcripts_all.csv"
    sentences = read_transcripts(transcripts) if transcripts.is_file() else bundled_sentences()
    out = Path(args.data) if args.data else REPO / "cache" / "espeak-corpus"
    chosen = select_sentences(sentences, min(args.espeak_sentences, len(sentences)), seed=0)
    try:
        print(render_corpus(chosen, args.voices, out, jobs=2).summary(), flush=True)
    except EspeakMissingError as err:
        sys.exit(f"Error: {err}")
    return out / "list.txt", "list"


def make_config(args, corpus: Path, corpus_format: str, run_dir: Path):
    from myxtts.config import load_config

    overrides = [f"data.corpus_path={corpus.resolve()}", f"data.corpus_format={corpus_format}",
                 f"data.cache_dir={(run_dir.parent / (run_dir.name + '-cache')).resolve()}",
                 f"data.validation_size={args.held_out}", *args.set]
    cfg = load_config(args.config, overrides)
    note = None
    if cfg.training.decay == "cosine":  # cosine decays to its floor at max_steps: every chunk would end there
        cfg = load_config(args.config, overrides + ["training.decay=constant"])
        note = "training.decay cosine -> constant (each chunk raises training.max_steps)"
    return cfg, note


def evaluation_sets(cfg, limit: int):
    """(training-set entries, held-out entries, every entry) - the cache manifest's split."""
    from myxtts.evaluate import corpus_entries

    held_out, pool, _ = corpus_entries(cfg, None)
    held_ids = {entry.id for entry in held_out}
    speakers = sorted({entry.speaker for entry in pool})
    training = [e for e in pool if e.id not in held_ids]
    # spread over speakers: round-robin through each speaker's training clips
    by_speaker = [[e for e in training if e.speaker == s] for s in speakers]
    interleaved = [clips[i] for i in range(max(map(len, by_speaker))) for clips in by_speaker if i < len(clips)]
    return interleaved[:limit], held_out[:limit], pool


def recordings_ceiling(cfg, entries) -> dict:
    """CER of the recordings and of their mel + Griffin-Lim resynthesis (what a perfect mel would give)."""
    from myxtts.audio import MelFrontend, load_audio
    from myxtts.listening import listen
    from myxtts.vocoder import GriffinLim

    rate, frontend, vocoder = cfg.audio.sample_rate, MelFrontend(cfg.audio), GriffinLim(cfg.audio)
    waves = [load_audio(e.audio_path, rate) for e in entries]
    texts = [e.text for e in entries]
    return {"recordings_cer": listen(waves, texts, rate)["cer"],
            "griffin_lim_cer": listen([np.asarray(vocoder(frontend(w))) for w in waves], texts, rate)["cer"]}


def synthesize(synthesizer, entries, references, batch_size: int):
    """Free-running synthesis of each entry's text with the matching reference clip; results with waveforms."""
    mels = [synthesizer.reference_mel(reference.audio_path) for reference in references]
    results = synthesizer.decode_tokens(synthesizer.encode([e.text for e in entries]), [m for m, _ in mels],
                                        [n for _, n in mels], batch_size=batch_size, texts=[e.text for e in entries])
    for result in results:
        synthesizer.vocode(result)
    return results


def measure(synthesizer, entries, pool, batch_size: int) -> dict:
    from myxtts.audio import load_audio
    from myxtts.evaluate import pick_reference
    from myxtts.listening import listen
    from myxtts.metrics import attention_diagonality, focus_rate, mel_cepstral_distortion

    rate = synthesizer.sample_rate
    results = synthesize(synthesizer, entries, [pick_reference(e, pool) for e in entries], batch_size)
    heard = listen([r.waveform for r in results], [e.text for e in entries], rate)
    items = []
    for entry, result, listened in zip(entries, results, heard["items"]):
        real = load_audio(entry.audio_path, rate)
        real_frames = int(synthesizer.frontend(real).shape[0])
        items.append({"id": entry.id, "cer": listened["cer"], "heard": listened["heard"],
                      "focus_rate": focus_rate(result.alignment),
                      "attention_diagonality": attention_diagonality(result.alignment),
                      "mcd_dtw_db": mel_cepstral_distortion(real, result.waveform, rate),
                      "length_error": abs(result.frames - real_frames) / real_frames,
                      "stopped_by_token": result.stopped_by_token,
                      "stopped_by_alignment": result.ended_by == "alignment"})
    means = {key: float(np.mean([item[key] for item in items]))
             for key in ("focus_rate", "attention_diagonality", "mcd_dtw_db", "length_error", "stopped_by_token",
                         "stopped_by_alignment")}
    return {"cer": heard["cer"], **means, "items": items}


def voice_match(synthesizer, held_out, pool, texts: int, batch_size: int) -> dict | None:
    """Held-out texts spoken with a reference clip of every voice; is each output nearest its voice?"""
    from myxtts.listening import speaker_match

    speakers = sorted({e.speaker for e in pool})
    if len(speakers) < 2:
        return None
    held_ids = {e.id for e in held_out}
    clips = {s: [e for e in pool if e.speaker == s and e.id not in held_ids] for s in speakers}
    usable = [s for s in speakers if len(clips[s]) >= 4]  # 3 for the centroid, 1 as the reference
    if len(usable) < 2:
        return None
    chosen = held_out[:texts]
    pairs = [(entry, speaker) for speaker in usable for entry in chosen]
    results = synthesize(synthesizer, [entry for entry, _ in pairs], [clips[s][3] for _, s in pairs], batch_size)
    outputs = [(speaker, result.waveform) for (_, speaker), result in zip(pairs, results)]
    # centroids from Griffin-Lim resynthesis of real clips, so the vocoder's colouring is common to both sides
    from myxtts.audio import load_audio

    rate = synthesizer.sample_rate
    references = {s: [np.asarray(synthesizer.vocoder(synthesizer.frontend(load_audio(e.audio_path, rate))))
                      for e in clips[s][:3]] for s in usable}
    # relative: each output against the other voices' outputs of its text (a colouring common to every
    # synthesis cancels; listening.nearest_voices); the absolute share is the measure
    texts_of = [entry.id for entry, _ in pairs]
    return {"share": speaker_match(outputs, references, rate),
            "relative_share": speaker_match(outputs, references, rate, groups=texts_of),
            "chance": 1.0 / len(usable), "voices": usable, "texts": len(chosen)}


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = report["points"]
    minutes = [p["training_minutes"] for p in points]
    panels = [("cer", "character error rate (pocketsphinx)"), ("focus_rate", "alignment focus rate"),
              ("mcd_dtw_db", "MCD-DTW (dB)")]
    multi = any(p.get("speaker_match") for p in points)
    figure, axes = plt.subplots(1, len(panels) + multi, figsize=(4.5 * (len(panels) + multi), 3.8))
    for axis, (key, label) in zip(axes, panels):
        for split, style in (("train", "o-"), ("held_out", "s--")):
            axis.plot(minutes, [p[split][key] for p in points], style, label=split.replace("_", "-"))
        if key == "cer":
            for split, color in (("train", "tab:green"), ("held_out", "tab:red")):
                ceiling = report["ceiling"][split]
                axis.axhline(ceiling["recordings_cer"], color=color, linestyle=":", label=f"recordings ({split})")
                axis.axhline(ceiling["griffin_lim_cer"], color=color, linestyle="-.", label=f"Griffin-Lim ({split})")
        axis.set_xlabel("training minutes")
        axis.set_ylabel(label)
        if key != "mcd_dtw_db":  # rates: keep 0 (and 1) in view so a flat curve looks flat
            axis.set_ylim(0, max(1.05, axis.get_ylim()[1]))
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    if multi:
        axis = axes[-1]
        for key, label in (("share", "absolute"), ("relative_share", "relative (per text)")):
            axis.plot(minutes, [p["speaker_match"].get(key, np.nan) if p.get("speaker_match") else np.nan
                                for p in points], "o-", label=label)
        axis.axhline(points[-1]["speaker_match"]["chance"], linestyle=":", color="gray", label="chance")
        axis.set_xlabel("training minutes")
        axis.set_ylabel("speaker match (share nearest own voice)")
        axis.set_ylim(0, 1.05)
        axis.legend(fontsize=7)
    figure.suptitle(f"learning on {report['corpus']} ({report['config']['model']['preset']} preset)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=CORPORA, default="bundled")
    parser.add_argument("--data", default=None, help="corpus folder (ljspeech) or espeak output folder")
    parser.add_argument("--minutes", type=float, default=30.0, help="training-loop minutes (warm-up excluded)")
    parser.add_argument("--evaluations", type=int, default=6, help="evaluation points over the budget")
    parser.add_argument("--config", default=str(REPO / "configs" / "mini.yaml"))
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="config override")
    parser.add_argument("--out", default=str(REPO / "docs" / "benchmarks" / "learning"))
    parser.add_argument("--workdir", default=None, help="run directory (default runs/learning-<corpus>; must be new)")
    parser.add_argument("--sentences", type=int, default=8, help="training-set and held-out sentences evaluated")
    parser.add_argument("--held-out", type=int, default=8, help="data.validation_size")
    parser.add_argument("--voice-texts", type=int, default=3, help="held-out texts per voice for speaker match")
    parser.add_argument("--espeak-sentences", type=int, default=1000, help="the issue asks >= 1,000")
    parser.add_argument("--voices", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=4, help="synthesis batch size")
    args = parser.parse_args()

    from myxtts.data.prepare import prepare
    from myxtts.evaluate import machine_description
    from myxtts.listening import recognizer_available
    from myxtts.synthesis import Synthesizer
    from myxtts.training import run

    if not recognizer_available():
        sys.exit("Error: the benchmark needs pocketsphinx: pip install -e '.[bench]'.")
    run_dir = Path(args.workdir or REPO / "runs" / f"learning-{args.corpus}")
    if (run_dir / "checkpoints").exists():
        sys.exit(f"Error: {run_dir} already holds a run; remove it or pass another --workdir.")
    corpus, corpus_format = corpus_source(args)
    cfg, schedule_note = make_config(args, corpus, corpus_format, run_dir)
    print(prepare(cfg, progress=False).summary(), flush=True)
    training, held_out, pool = evaluation_sets(cfg, args.sentences)
    import tensorflow as tf

    report = {"corpus": args.corpus, "data": str(corpus), "budget_minutes": args.minutes,
              "machine": machine_description(), "tensorflow": tf.__version__,
              "env": {key: os.environ.get(key) for key in ENV_KEYS}, "config": cfg.to_dict(),
              "schedule_note": schedule_note, "run_dir": str(run_dir),
              "sentences": {"train": [e.id for e in training], "held_out": [e.id for e in held_out]},
              "ceiling": {"train": recordings_ceiling(cfg, training), "held_out": recordings_ceiling(cfg, held_out)},
              "points": []}
    print(f"ceiling (CER of recordings / Griffin-Lim resynthesis): {report['ceiling']}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    budget, chunk = args.minutes * 60.0, args.minutes * 60.0 / max(args.evaluations, 1)
    trained, wall_started, step, rate = 0.0, time.perf_counter(), 0, None
    while budget - trained > 0.25 * chunk:  # a sliver of budget is not worth a warm-up and an evaluation
        # the first chunk is a short probe that measures the step rate; later chunks fill the budget, the
        # last one taking what is left when less than half a chunk would remain after it
        remaining = budget - trained
        seconds = remaining if remaining < 1.5 * chunk else chunk
        steps = 20 if rate is None else max(1, round(rate * seconds))
        chunk_cfg = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, max_steps=step + steps))
        summary = run(chunk_cfg, run_dir, resume=step > 0, progress=False)
        trained += summary["seconds"]
        rate, step = summary["steps_per_second"], summary["steps"]
        synthesizer = Synthesizer.from_run(run_dir)
        point = {"step": step, "training_minutes": trained / 60.0,
                 "wall_minutes": (time.perf_counter() - wall_started) / 60.0, "loss": summary["loss_last"],
                 "validation_loss": summary["validation_loss"],
                 "train": measure(synthesizer, training, pool, args.batch_size),
                 "held_out": measure(synthesizer, held_out, pool, args.batch_size),
                 "speaker_match": voice_match(synthesizer, held_out, pool, args.voice_texts, args.batch_size)}
        report["points"].append(point)
        print(f"step {step} ({point['training_minutes']:.1f} training min): " + ", ".join(
            f"{split} CER {point[split]['cer']:.2f} focus {point[split]['focus_rate']:.2f} "
            f"MCD {point[split]['mcd_dtw_db']:.1f}" for split in ("train", "held_out"))
            + (f", speaker match {point['speaker_match']['share']:.2f} (relative "
               f"{point['speaker_match']['relative_share']:.2f})" if point["speaker_match"] else ""), flush=True)
        (out / f"{args.corpus}.json").write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
        plot(report, out / f"{args.corpus}.png")
    print(f"wrote {out / (args.corpus + '.json')} and {out / (args.corpus + '.png')}")


if __name__ == "__main__":
    main()

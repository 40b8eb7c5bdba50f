"""Vocoder benchmark: resynthesis of held-out recordings by Griffin-Lim and by neural vocoders, in the same run.

For the last ``--held-out`` clips of an LJSpeech-layout corpus (never trained on: the shipped vocoder trains on the
clips before them), each recording's log mel (the project's front-end) is turned back into audio by every system and
judged against the recording (``vocoder_metrics``: PESQ-wb, STOI, MCD, F0 RMSE, V/UV F1, periodicity error,
naturalness with ``--nisqa`` at the recordings' level, pocketsphinx CER, Whisper WER, Resemblyzer similarity). The recordings are
judged too, so every figure has its ceiling beside it. ``--curve RUN`` adds one system per checkpoint of a vocoder
run (and of ``--snapshots DIR``, copies of older ones), with its training minutes: quality against training time. The
real-time factor (vocoding seconds / audio seconds, 2 cores) is measured in ``--rounds`` alternated rounds, paired per
round with Griffin-Lim's (32 iterations). ``--acoustic-run RUN``: the held-out sentences said by RUN through every
system, free-running and teacher-forced on the recordings (the model's spectrum with the speaker's timing), and how
much of the recordings' mel detail the teacher-forced mels keep.

Run: ``.venv/bin/python benchmarks/vocoder.py --corpus ../shared/data/ljspeech-mini --nisqa ../shared/judges/nisqa
--vocoder vocos=pretrained/vocoder-vocos-ljspeech --json docs/benchmarks/vocoder.json``. The recipe's training data
(every clip but the held-out ones): ``--make-train-corpus cache/vocoder-ljspeech-mini/corpus``
(``configs/vocoder-ljspeech-mini.yaml`` reads it).
(needs the ``bench`` and ``judge`` extras; NISQA needs torch, librosa and pandas in this Python).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import myxtts  # noqa: E402,F401  (first: the process settings TensorFlow reads at import)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from common import paired_ratios, spread, tensorflow_environment  # noqa: E402
from myxtts.machine import machine  # noqa: E402

QUALITY_KEYS = ("naturalness", "wer", "cer", "similarity", "pesq_wb", "stoi", "mcd", "f0_rmse", "vuv_f1", "periodicity_rmse",
                "naturalness_own_level", "level_db")


def held_out_clips(corpus: Path, count: int) -> list[tuple[str, str]]:
    """(id, normalised text) of the last ``count`` lines of ``corpus/metadata.csv``."""
    lines = [line.split("|") for line in (corpus / "metadata.csv").read_text(encoding="utf-8").splitlines() if line]
    if len(lines) <= count:
        sys.exit(f"Error: {corpus / 'metadata.csv'} has {len(lines)} clips; --held-out {count} leaves none trained on.")
    return [(fields[0], fields[-1]) for fields in lines[-count:]]


def make_train_corpus(corpus: Path, held_out: int, out: Path) -> None:
    """``out``: an LJSpeech-layout corpus of every clip of ``corpus`` but the last ``held_out`` (wavs linked, not
    copied): what the shipped vocoder trains on, so the benchmark's clips stay unheard."""
    lines = [line for line in (corpus / "metadata.csv").read_text(encoding="utf-8").splitlines() if line]
    kept = lines[:-held_out]
    (out / "wavs").mkdir(parents=True, exist_ok=True)
    (out / "metadata.csv").write_text("\n".join(kept) + "\n", encoding="utf-8")
    for line in kept:
        link = out / "wavs" / f"{line.split('|')[0]}.wav"
        if not link.exists():
            link.symlink_to((corpus / "wavs" / link.name).resolve())
    print(f"wrote {out}: {len(kept)} clips of {corpus} (the last {held_out} held out)")


def curve_systems(run: Path, snapshots: Path | None) -> list[tuple[str, str, float]]:
    """(name, checkpoint prefix, training minutes) of every checkpoint of a vocoder run and its snapshot folder."""
    import tensorflow as tf

    prefixes = {}
    for folder in [run / "checkpoints", *([snapshots] if snapshots else [])]:
        for index in sorted(Path(folder).glob("ckpt-*.index")):
            prefixes[int(index.stem.split("-")[1])] = str(index.with_suffix(""))
    systems = []
    for step, prefix in sorted(prefixes.items()):
        seconds = float(tf.train.load_variable(prefix, "trained_seconds/.ATTRIBUTES/VARIABLE_VALUE"))
        systems.append((f"{run.name}@{step}", prefix, seconds / 60.0))
    return systems


def judge(waves: list[np.ndarray], recordings: list[np.ndarray], texts: list[str], rate: int, args,
          reference_free: bool = False) -> dict:
    """Every metric of ``vocoder_metrics`` per clip (waves and recordings sample-aligned), and their means;
    ``reference_free``: waves that are not resyntheses of the recordings (only CER, similarity, naturalness)."""
    import vocoder_metrics as metrics
    from myxtts.evaluation.listening_measures import listen
    from myxtts.evaluation.metrics import mel_cepstral_distortion
    from myxtts.evaluation.whisper_listener import listen_whisper, shared_listener, whisper_available

    per_clip: dict[str, list[float]] = {key: [] for key in QUALITY_KEYS}
    aligned = not reference_free and not all(wave is recording for wave, recording in zip(waves, recordings))
    for wave, recording in zip(waves, recordings):
        if aligned:
            per_clip["pesq_wb"].append(metrics.pesq_wb(recording, wave, rate))
            per_clip["stoi"].append(metrics.stoi(recording, wave, rate))
            per_clip["mcd"].append(mel_cepstral_distortion(recording, wave, rate))
            if not args.no_pitch:
                errors = metrics.pitch_errors(metrics.pitch_track(recording, rate), metrics.pitch_track(wave, rate))
                for key, value in errors.items():
                    per_clip[key].append(value)
    heard = listen(waves, texts, rate)
    per_clip["cer"] = [item["cer"] for item in heard["items"]]
    whisper = None
    if not args.no_whisper and whisper_available():  # the field's listener, beside pocketsphinx
        whisper = listen_whisper(shared_listener(), waves, texts, rate)
        per_clip["wer"] = [item["wer"] for item in whisper["items"]]
    if not args.no_similarity:
        per_clip["similarity"] = metrics.leave_one_out_similarity(waves, recordings, rate)
    per_clip["level_db"] = [20 * np.log10(max(metrics.active_level(wave, rate), 1e-9)
                                           / max(metrics.active_level(recording, rate), 1e-9))
                            for wave, recording in zip(waves, recordings)]
    if args.nisqa:  # at the recordings' level (the judge's figure), and as made
        per_clip["naturalness"] = metrics.naturalness(metrics.level_matched(waves, recordings, rate), rate,
                                                      Path(args.nisqa))
        per_clip["naturalness_own_level"] = metrics.naturalness(waves, rate, Path(args.nisqa))
    means = {key: float(np.nanmean(values)) for key, values in per_clip.items() if values}
    means["cer"] = heard["cer"]  # the corpus CER (characters pooled), as the other benchmarks report it
    if whisper is not None:
        means["wer"] = whisper["wer"]  # the corpus WER (words pooled)
    return {**means, "per_clip": per_clip}


def fine_structure(model_mels: list[np.ndarray], real_mels: list[np.ndarray]) -> dict:
    """How much of the recordings' mel detail the model's teacher-forced mels keep (1 = all), clip means: variance per
    bin over time, mean absolute change frame to frame and bin to bin (what an L1-trained decoder smooths away)."""
    ratios: dict[str, list[float]] = {"variance": [], "frame_to_frame": [], "bin_to_bin": []}
    for model_mel, real_mel in zip(model_mels, real_mels):
        frames = min(len(model_mel), len(real_mel))
        model_mel, real_mel = model_mel[:frames], real_mel[:frames]  # [frames, n_mels] each, the same frames
        ratios["variance"].append(float(model_mel.var(0).mean() / real_mel.var(0).mean()))
        for key, axis in (("frame_to_frame", 0), ("bin_to_bin", 1)):
            ratios[key].append(float(np.abs(np.diff(model_mel, axis=axis)).mean()
                                     / np.abs(np.diff(real_mel, axis=axis)).mean()))
    return {key: float(np.mean(values)) for key, values in ratios.items()}


def end_to_end(args, systems: dict, clips: list[tuple[str, str]], mels: list[np.ndarray],
               recordings: list[np.ndarray], rate: int, report: dict, save) -> None:
    """The held-out sentences said by ``--acoustic-run`` (the voice: the corpus' first ``--references`` clips,
    training clips of the same voice, their latents averaged), each mel through every system: what a listener of
    ``synthesize --vocoder`` hears. And the same model teacher-forced on each recording's mel (its aligner's
    durations, the recording's frames): the model's spectrum with the speaker's own timing, so the gap to the
    recordings splits into the vocoder's part (resynthesis), the acoustic model's spectrum (teacher-forced) and its
    timing and prosody (free-running). Fills ``report``, calling ``save`` after each system."""
    from myxtts.synthesis import Synthesizer
    from myxtts.synthesis.teacher_forcing import TeacherForcing
    from myxtts.vocoder.neural import check_audio_match

    synthesizer = Synthesizer.from_run(args.acoustic_run, truncate_long=True, vocoder="griffin-lim")  # mels only
    lines = [line for line in (args.corpus / "metadata.csv").read_text(encoding="utf-8").splitlines() if line]
    voice_clips = [str(args.corpus / "wavs" / f"{line.split('|', 1)[0]}.wav") for line in lines[:args.references]]
    reference = voice_clips[0]  # teacher forcing reads one clip
    voice = synthesizer.voice(voice_clips)
    texts = [text for _, text in clips]
    free_running = [result.mel for result in synthesizer.synthesize(texts, voices=[voice] * len(texts), vocode=False)]
    teacher = TeacherForcing(synthesizer)
    # a pitch-conditioned model reads each recording's own pitch, as in training
    teacher_forced = [teacher(text, mel, reference, recording).mel
                      for text, mel, recording in zip(texts, mels, recordings)]
    report.update({"acoustic_run": str(args.acoustic_run), "checkpoint": synthesizer.checkpoint,
                   "references": [Path(clip).stem for clip in voice_clips], "systems": {},
                   "teacher_forced": {}, "teacher_forced_fine_structure": fine_structure(teacher_forced, mels)})
    print(f"teacher-forced mels against the recordings': {report['teacher_forced_fine_structure']}", flush=True)
    light = argparse.Namespace(**{**vars(args), "no_pitch": True})
    for name, system in systems.items():
        if hasattr(system, "audio"):
            check_audio_match(name, system.audio, args.acoustic_run, synthesizer.cfg.audio)
        for kind, outputs in (("systems", free_running), ("teacher_forced", teacher_forced)):
            waves = [np.asarray(system(mel), np.float32) for mel in outputs]
            judged = judge(waves, recordings, texts, rate, light, reference_free=True)
            report[kind][name] = judged
            save()
            label = "end to end" if kind == "systems" else "teacher-forced"
            print(f"{label}, {name}: {summary_line(judged)}", flush=True)


def real_time_factors(systems: dict, mels: list[np.ndarray], seconds: float, rounds: int) -> dict:
    """Vocoding seconds / audio seconds per system and round; the order rotates each round (no system always first)."""
    names = list(systems)
    for name in names:  # warm-up: every graph traced and run before timing
        np.asarray(systems[name](mels[0]))
    per_round: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        for name in names[index % len(names):] + names[:index % len(names)]:
            started = time.perf_counter()
            for mel in mels:
                np.asarray(systems[name](mel))
            per_round[name].append((time.perf_counter() - started) / seconds)
    return {name: {**spread(values), "per_round": values,
                   "ratio_to_griffin_lim": paired_ratios(values, per_round["griffin_lim"])}
            for name, values in per_round.items()}


def plot(report: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = [s for s in report["systems"].values() if s.get("trained_minutes") is not None]
    keys = [k for k in ("naturalness", "cer", "similarity", "pesq_wb")
            if any(k in s for s in report["systems"].values())]
    figure, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.4))
    for axis, key in zip(np.atleast_1d(axes), keys):
        if curve:
            points = sorted((s["trained_minutes"], s[key]) for s in curve if key in s)
            axis.plot(*zip(*points), "o-", label="vocoder (checkpoints)")
        for name, style in (("recordings", "g--"), ("griffin_lim", "r--")):
            if key in report["systems"].get(name, {}):
                axis.axhline(report["systems"][name][key], color=style[0], linestyle="--", label=name)
        for name, system in report["systems"].items():
            if name not in ("recordings", "griffin_lim") and system.get("trained_minutes") is None and key in system:
                axis.axhline(system[key], linestyle=":", label=name)
        axis.set_title(key)
        axis.set_xlabel("training minutes")
    np.atleast_1d(axes)[0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="LJSpeech-layout corpus (metadata.csv, wavs/).")
    parser.add_argument("--held-out", type=int, default=30, help="The last N clips: judged, never trained on.")
    parser.add_argument("--vocoder", action="append", default=[], metavar="NAME=DIR[@CHECKPOINT]",
                        help="A vocoder to judge (its newest checkpoint, or the checkpoint prefix given).")
    parser.add_argument("--curve", type=Path, help="A vocoder run: judge each of its checkpoints.")
    parser.add_argument("--snapshots", type=Path, help="A folder of older checkpoints of --curve's run.")
    parser.add_argument("--nisqa", help="The NISQA-TTS folder (nisqa_mos.py): naturalness.")
    parser.add_argument("--rounds", type=int, default=3, help="Alternated rounds of the real-time factor.")
    parser.add_argument("--acoustic-run", type=Path,
                        help="Also say the held-out sentences with this acoustic model through every system (its "
                             "own vocoder, RUN/vocoder, among them as 'own').")
    parser.add_argument("--references", type=int, default=1,
                        help="End to end, the voice: the corpus' first N clips (training clips; latents averaged).")
    parser.add_argument("--no-pitch", action="store_true", help="Skip pYIN (F0, V/UV, periodicity): faster.")
    parser.add_argument("--no-similarity", action="store_true", help="Skip Resemblyzer.")
    parser.add_argument("--no-whisper", action="store_true",
                        help="Skip Whisper's WER (measured when faster-whisper, the judge extra, is installed).")
    parser.add_argument("--json", type=Path, help="Write the report here (and the plot beside it).")
    parser.add_argument("--make-train-corpus", type=Path, metavar="DIR",
                        help="Only write DIR: the corpus without its held-out clips (the vocoder recipe's data).")
    args = parser.parse_args()
    if args.make_train_corpus:
        make_train_corpus(args.corpus, args.held_out, args.make_train_corpus)
        return
    if args.json is None:
        parser.error("--json is required (or --make-train-corpus)")
    if args.references < 1:
        parser.error("--references must be at least 1")
    if args.references != 1 and args.acoustic_run is None:
        parser.error("--references chooses the end-to-end voice: it needs --acoustic-run")
    if args.acoustic_run is not None:  # before any judging: a refused voice loses no work
        metadata = (args.corpus / "metadata.csv").read_text(encoding="utf-8").splitlines()
        trained = sum(1 for line in metadata if line) - args.held_out  # the clips before the held-out ones
        if args.references > trained:
            parser.error(f"--references {args.references} would take held-out clips: {args.corpus / 'metadata.csv'} "
                         f"has {trained} clips before its last {args.held_out}.")

    from myxtts.audio import load_audio
    from myxtts.mel import MelFrontend
    from myxtts.config import AudioConfig
    from myxtts.vocoder import GriffinLim
    from myxtts.vocoder.neural import load_vocoder, own_vocoder

    audio_cfg = AudioConfig()
    rate = audio_cfg.sample_rate
    clips = held_out_clips(args.corpus, args.held_out)
    frontend = MelFrontend(audio_cfg)
    mels = [frontend(load_audio(args.corpus / "wavs" / f"{clip_id}.wav", rate)).numpy() for clip_id, _ in clips]
    recordings = [load_audio(args.corpus / "wavs" / f"{clip_id}.wav", rate)[:(len(mel) - 1) * audio_cfg.hop_length]
                  for (clip_id, _), mel in zip(clips, mels)]
    texts = [text for _, text in clips]
    seconds = sum(len(wave) for wave in recordings) / rate
    systems = {"griffin_lim": GriffinLim(audio_cfg)}
    minutes = {}
    for item in args.vocoder:
        name, _, path = item.partition("=")
        path, _, checkpoint = path.partition("@")  # DIR@CHECKPOINT_PREFIX: one checkpoint of a run
        systems[name] = load_vocoder(path, audio_cfg, "the benchmark's front-end", checkpoint=checkpoint or None)
    own = own_vocoder(args.acoustic_run) if args.acoustic_run is not None else None
    if own is not None and "own" not in systems:  # what `synthesize --run` of that model speaks through
        systems["own"] = load_vocoder(own, audio_cfg, "the benchmark's front-end")
    if args.curve:
        for name, prefix, trained in curve_systems(args.curve, args.snapshots):
            systems[name] = load_vocoder(args.curve, audio_cfg, "the benchmark's front-end", checkpoint=prefix)
            minutes[name] = trained
    report = {"benchmark": "vocoder", "corpus": str(args.corpus), "held_out": [clip_id for clip_id, _ in clips],
              "audio_seconds": seconds, "machine": machine(), "tensorflow": tensorflow_environment(),
              "arguments": {key: str(value) for key, value in vars(args).items()}, "systems": {}}

    def save() -> None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1), encoding="utf-8")

    report["systems"]["recordings"] = judge(recordings, recordings, texts, rate, args)
    save()
    print(f"recordings: {summary_line(report['systems']['recordings'])}", flush=True)
    for name, system in systems.items():
        waves = [np.asarray(system(mel), np.float32) for mel in mels]
        report["systems"][name] = {**judge(waves, recordings, texts, rate, args), "trained_minutes": minutes.get(name)}
        save()
        print(f"{name}: {summary_line(report['systems'][name])}", flush=True)
    if args.acoustic_run:
        latest = {name: system for name, system in systems.items()
                  if name not in minutes or name == max(minutes, key=minutes.get)}
        report["end_to_end"] = {}
        end_to_end(args, latest, clips, mels, recordings, rate, report["end_to_end"], save)
    rtf_systems = {name: system for name, system in systems.items()
                   if name not in minutes or name == max(minutes, key=minutes.get)}
    report["real_time_factor"] = real_time_factors(rtf_systems, mels, seconds, args.rounds)
    save()
    for name, figures in report["real_time_factor"].items():
        print(f"RTF {name}: {figures['median']:.4f} ({figures['min']:.4f}-{figures['max']:.4f}); "
              f"x{figures['ratio_to_griffin_lim']['median']:.3f} of Griffin-Lim's", flush=True)
    plot(report, args.json.with_suffix(".png"))


def summary_line(system: dict) -> str:
    return ", ".join(f"{key} {system[key]:.3f}" for key in QUALITY_KEYS if key in system)


if __name__ == "__main__":
    main()

"""Zero-shot voice cloning: does a base model speak in the voices of real speakers it never trained on?

The default mode reads a prepared cache's development speakers (``--cache``: its manifest's ``splits.held_out``, the
clips of ``held_out_speakers``, never trained on), set by set (the corpus before the ":" of a speaker's name, e.g.
``librispeech-251``, ``commonvoice-en``; ``benchmarks/zero_shot_sets.py``). Each speaker's first clip (by id) is the
reference and its other clips give its Resemblyzer centroid; a speaker with one clip gives the first half as the
reference and the second half as the centroid. Each speaker says ``--texts`` sentences the base never heard (the last
rows of the bundled LJSpeech metadata) under each reference condition: ``full`` (the whole reference), ``3s`` /
``6s`` / ``10s`` (its first seconds; a crop longer than the reference is skipped) and ``3clips`` (three clips'
latents averaged; speakers with four clips or more, the centroid from the rest). Measured per set and condition:
``identified`` (the output's embedding is nearest its own centroid among the set's), ``margin`` (its cosine to the own
centroid minus the mean cosine to the others), ``own_cosine``, Whisper's WER, pocketsphinx's CER and, with
``--nisqa``, NISQA-TTS naturalness (each output at its reference's level). In the same run, the baselines: the
reference clips themselves (the judge's ceiling), their mel + Griffin-Lim resynthesis and their resynthesis through
the neural vocoder the outputs are heard through. Resemblyzer only judges; the model hears the references alone.

``--espeak`` runs the earlier benchmark instead: the 4 espeak-ng voices kept out of the base corpus
(``myxtts.data.espeak_corpus.HELD_OUT_VOICES``; with ``--seen`` also 4 of its training voices) read ljspeech-mini's
transcripts; ``--references`` clips condition the model, ``--centroid-clips`` others give the centroid.

Run: ``.venv/bin/python benchmarks/zero_shot.py --run RUN --cache CACHE --nisqa ../shared/judges/nisqa``
``--json docs/benchmarks/zero_shot_real.json`` (needs the ``judge`` extra: Resemblyzer, faster-whisper); the espeak
benchmark: ``.venv/bin/python benchmarks/zero_shot.py --espeak --run pretrained/base-espeak-tiny --seen``
``--json docs/benchmarks/zero_shot.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections import Counter
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import myxtts  # noqa: E402,F401  (first: the process settings TensorFlow reads at import)

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED_MINI = REPO.parent / "shared" / "data" / "ljspeech-mini" / "metadata.csv"
BUNDLED_METADATA = REPO / "data" / "ljspeech-bundled" / "metadata.csv"  # its last rows: never in the base corpus


def nearest_share(embeddings: dict[str, list[np.ndarray]], centroids: dict[str, np.ndarray]) -> dict:
    """Share of embeddings nearer their own voice's centroid than any other's, and their mean own-cosine."""
    names = sorted(centroids)
    table = np.stack([centroids[name] for name in names])  # [voices, 256] unit rows
    hits, cosines = [], []
    for voice, items in embeddings.items():
        for embedding in items:
            scores = table @ (embedding / max(float(np.linalg.norm(embedding)), 1e-12))
            hits.append(names[int(np.argmax(scores))] == voice)
            cosines.append(float(scores[names.index(voice)]))
    return {"share": float(np.mean(hits)), "own_cosine": float(np.mean(cosines)), "items": len(hits)}


def espeak_main(args: argparse.Namespace) -> None:
    """The espeak-ng voices benchmark, as it was before the real speakers."""
    from myxtts.audio import load_audio
    from myxtts.data.corpus import read_corpus
    from myxtts.data.espeak_corpus import (HELD_OUT_VOICES, VOICES, bundled_sentences, read_transcripts,
                                           render_corpus, select_sentences)
    from myxtts.evaluation.listening_measures import listen, recognizer_available
    from myxtts.evaluation.speaker_encoder import speaker_encoder_available, voice_embedding
    from myxtts.machine import machine
    from myxtts.synthesis import Synthesizer

    if not speaker_encoder_available():
        sys.exit("Error: the zero-shot benchmark needs Resemblyzer: pip install -e '.[judge]'.")
    groups = {"held_out": list(HELD_OUT_VOICES)}
    if args.seen:
        groups["seen"] = list(VOICES[:4])
    per_voice = args.references + args.centroid_clips
    source = read_transcripts(SHARED_MINI) if SHARED_MINI.is_file() else bundled_sentences()
    sentences = select_sentences(source, None)
    texts = [s.text for s in sentences[-args.texts:]]  # said through the model; never a clip's own text
    clips_needed = per_voice * max(len(v) for v in groups.values())
    if len(sentences) - args.texts < clips_needed:
        sys.exit(f"Error: {len(sentences)} sentences cannot give {clips_needed} clips and {args.texts} texts.")
    synthesizer = Synthesizer.from_run(args.run, batch_size=args.batch_size, truncate_long=True,
                                       vocoder=None if args.vocoder == "own" else args.vocoder)
    rate = synthesizer.sample_rate
    report = {"run": args.run, "machine": machine(), "texts": texts, "references": args.references,
              "centroid_clips": args.centroid_clips, "groups": {}}
    for group, voices in groups.items():
        rendered = render_corpus(sentences[:clips_needed], voices, Path(args.workdir) / group, jobs=2,
                                 progress=False)
        entries = read_corpus(rendered.list_file, "list").entries
        by_voice = {v.name: [e for e in entries if e.speaker == v.name][:per_voice] for v in voices}
        real, resynthesized, outputs, heard, ended_by = {}, {}, {}, [], Counter()
        centroids = {}
        for voice, clips in by_voice.items():
            references, others = clips[:args.references], clips[args.references:]
            waves = [load_audio(e.audio_path, rate) for e in others]
            real[voice] = [voice_embedding(w, rate) for w in waves]
            resynthesized[voice] = [voice_embedding(np.asarray(synthesizer.vocoder(synthesizer.frontend(w))), rate)
                                    for w in waves]
            centroid = np.mean(np.stack(real[voice]), axis=0)
            centroids[voice] = centroid / max(float(np.linalg.norm(centroid)), 1e-12)
            results = synthesizer.synthesize(texts, [str(e.audio_path) for e in references])
            outputs[voice] = [voice_embedding(result.waveform, rate) for result in results]
            heard.append([result.waveform for result in results])
            ended_by.update(result.ended_by for result in results)  # "maximum length": cut at the largest bucket
        point = {"voices": [v.name for v in voices],
                 "model": nearest_share(outputs, centroids),
                 # each real clip against centroids that include it: an upper bound of what the judge can tell
                 "recordings": nearest_share(real, centroids),
                 "griffin_lim": nearest_share(resynthesized, centroids),
                 "chance": 1.0 / len(voices), "ended_by": dict(ended_by)}
        if recognizer_available():
            waves = [w for per in heard for w in per]
            point["model_cer"] = listen(waves, texts * len(voices), rate)["cer"]
        report["groups"][group] = point
        print(f"{group}: model {point['model']['share']:.2f} nearest own voice (cosine "
              f"{point['model']['own_cosine']:.3f}), recordings {point['recordings']['share']:.2f}, Griffin-Lim "
              f"{point['griffin_lim']['share']:.2f}, chance {point['chance']:.2f}"
              + (f", CER {point['model_cer']:.3f}" if "model_cer" in point else ""), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
        print(f"wrote {args.json}")


class Judges:
    """The judges of a run: Resemblyzer (a centroid clip embedded once), Whisper, pocketsphinx, NISQA-TTS."""

    def __init__(self, sample_rate: int, hop_length: int, nisqa: Path | None) -> None:
        from myxtts.evaluation.listening_measures import recognizer_available
        from myxtts.evaluation.whisper_listener import shared_listener, whisper_available

        self.sample_rate, self.hop_length, self.nisqa = sample_rate, hop_length, nisqa
        self.whisper = shared_listener() if whisper_available() else None
        self.pocketsphinx = recognizer_available()
        self._clips: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def embed(self, wave: np.ndarray) -> np.ndarray:
        from myxtts.evaluation.speaker_encoder import voice_embedding

        return voice_embedding(wave, self.sample_rate)

    def embed_clip(self, wave: np.ndarray) -> np.ndarray:
        """A real clip's embedding, computed once however many centroids it serves (keyed by the array, kept)."""
        if id(wave) not in self._clips:
            self._clips[id(wave)] = (wave, self.embed(wave))
        return self._clips[id(wave)][1]

    def pitch(self, wave: np.ndarray) -> tuple[float | None, float]:
        """(median F0 in Hz, voiced share) of one waveform (zero_shot_sets.voiced_pitch)."""
        import zero_shot_sets as sets

        return sets.voiced_pitch(wave, self.sample_rate, self.hop_length)

    def heard(self, waves: list[np.ndarray], texts: list[str]) -> dict:
        """Whisper's WER and pocketsphinx's CER of ``waves`` against ``texts`` (None for a judge not installed)."""
        from myxtts.evaluation.listening_measures import listen
        from myxtts.evaluation.whisper_listener import listen_whisper

        heard: dict = {"wer": None, "cer": None, "whisper": [None] * len(waves), "pocketsphinx": [None] * len(waves)}
        if self.whisper is not None:
            whisper = listen_whisper(self.whisper, waves, texts, self.sample_rate)
            heard.update(wer=whisper["wer"], whisper=[item["heard"] for item in whisper["items"]])
        if self.pocketsphinx:
            sphinx = listen(waves, texts, self.sample_rate)
            heard.update(cer=sphinx["cer"], pocketsphinx=[item["heard"] for item in sphinx["items"]])
        return heard

    def naturalness(self, waves: list[np.ndarray], levels: list[np.ndarray]) -> list[float] | None:
        """NISQA-TTS MOS of each wave scaled to its level clip's active level (the judge prefers quieter audio);
        None without ``--nisqa``."""
        import vocoder_metrics

        if self.nisqa is None or not waves:
            return None
        matched = vocoder_metrics.level_matched(waves, levels, self.sample_rate)
        return vocoder_metrics.naturalness(matched, self.sample_rate, self.nisqa)


def line(label: str, point: dict) -> str:
    """One printed line: a condition's outputs or a baseline."""
    def figure(key: str, digits: int) -> str:
        return "n/a" if point.get(key) is None else f"{point[key]:.{digits}f}"

    parts = [f"identified {figure('identified', 2)} (chance {point['chance']:.2f})", f"margin {figure('margin', 3)}",
             f"own cosine {figure('own_cosine', 3)}"]
    parts += [f"{name} {figure(key, 3)}" for key, name in (("wer", "WER"), ("cer", "CER"),
                                                           ("naturalness", "naturalness"), ("voiced_share", "voiced"),
                                                           ("pitch_error_semitones", "pitch error (semitones)"))
              if key in point]
    return f"{label}: " + ", ".join(parts)


def baselines(voices: list, centroids: dict[str, np.ndarray], resynthesizers: dict, synthesizer,
              judges: Judges) -> dict:
    """The reference clips themselves and their resyntheses, judged against the set's centroids."""
    import zero_shot_sets as sets

    references = [voice.reference for voice in voices]
    groups = {"recordings": references}
    for name, vocoder in resynthesizers.items():
        groups[name] = [np.asarray(vocoder(synthesizer.frontend(wave).numpy()), np.float32) for wave in references]
    points = {}
    for name, waves in groups.items():
        point, rows = sets.judge([(voice.name, judges.embed(wave)) for voice, wave in zip(voices, waves)], centroids)
        pitch, pitch_rows = sets.pitch_point([judges.pitch(wave) for wave in waves],
                                             [judges.pitch(wave) for wave in references])
        point.update(pitch)
        for row, pitch_row in zip(rows, pitch_rows):
            row.update(pitch_row)
        scores = judges.naturalness(waves, references)  # a recording against itself keeps its own level
        if scores is not None:
            point["naturalness"] = float(np.mean(scores))
            for row, score in zip(rows, scores):
                row["naturalness"] = score
        points[name] = {**point, "rows": rows}
    return points


def condition_point(condition: str, voices: list, standard: dict[str, np.ndarray], texts: list[str], synthesizer,
                    judges: Judges) -> tuple[dict, list[dict]]:
    """(summary, one row per output) of the set's speakers saying ``texts`` under one reference condition."""
    import zero_shot_sets as sets

    rate = judges.sample_rate
    covered = [(voice, audio) for voice in voices
               if (audio := sets.condition_audio(voice, condition, rate)) is not None]
    if not covered:
        return {"measurable": False, "speakers": 0, "of": len(voices)}, []
    # every speaker of the set stays a candidate; a covered speaker's centroid leaves out what the model heard
    centroids = dict(standard)
    for voice, (_, clips) in covered:
        centroids[voice.name] = sets.unit_mean([judges.embed_clip(clip) for clip in clips])
    waves, levels, rows, ended_by = [], [], [], Counter()
    for voice, (references, _) in covered:
        for result in synthesizer.synthesize(texts, list(references)):  # several references: latents averaged
            waves.append(result.waveform)
            levels.append(references[0])
            ended_by[result.ended_by] += 1  # "maximum length": cut at the largest bucket
            rows.append({"speaker": voice.name, "condition": condition, "text": result.text,
                         "seconds": len(result.waveform) / rate, "ended_by": result.ended_by})
    summary, judged = sets.judge([(row["speaker"], judges.embed(wave)) for row, wave in zip(rows, waves)],
                                 centroids)
    heard = judges.heard(waves, [row["text"] for row in rows])
    pitch, pitch_rows = sets.pitch_point([judges.pitch(wave) for wave in waves],
                                         [judges.pitch(wave) for wave in levels])
    summary.update(pitch)
    summary.update(measurable=True, of=len(voices), wer=heard["wer"], cer=heard["cer"], ended_by=dict(ended_by),
                   reference_seconds=float(np.mean([sum(len(r) for r in refs) / rate for _, (refs, _) in covered])))
    for index, (row, verdict) in enumerate(zip(rows, judged)):
        row.update(own_cosine=verdict["own_cosine"], nearest=verdict["nearest"], margin=verdict["margin"],
                   whisper=heard["whisper"][index], pocketsphinx=heard["pocketsphinx"][index], **pitch_rows[index])
    scores = judges.naturalness(waves, levels)
    if scores is not None:
        summary["naturalness"] = float(np.mean(scores))
        for row, score in zip(rows, scores):
            row["naturalness"] = score
    return summary, rows


def overridden_config(run: str, overrides: list[str]) -> str | None:
    """The run's config with ``--set section.key=value`` overrides (synthesis keys such as
    model.reference_windows), written to a temporary file (never into the run); None without overrides."""
    if not overrides:
        return None
    import tempfile

    from myxtts.config import load_config, save_config

    cfg = load_config(Path(run) / "config.yaml", list(overrides))  # relative paths still resolve against the run
    path = Path(tempfile.mkdtemp(prefix="zero-shot-config-")) / "config.yaml"
    save_config(cfg, path)
    return str(path)


def real_main(args: argparse.Namespace) -> None:
    """The development speakers of ``--cache``, set by set."""
    from myxtts.audio import load_audio
    from myxtts.evaluation.speaker_encoder import speaker_encoder_available
    from myxtts.machine import machine
    from myxtts.synthesis import Synthesizer
    from myxtts.vocoder import GriffinLim
    from myxtts.vocoder.neural import vocoder_name

    import zero_shot_sets as sets

    if args.cache is None:
        sys.exit("Error: --cache CACHE is required (a prepared cache with held-out speakers), or --espeak.")
    conditions = [name.strip() for name in args.conditions.split(",") if name.strip()]
    unknown = [name for name in conditions if name not in sets.CONDITIONS]
    if unknown or not conditions:
        sys.exit(f"Error: unknown condition(s) {unknown}: use some of {','.join(sets.CONDITIONS)}.")
    if not speaker_encoder_available():
        sys.exit("Error: the zero-shot benchmark needs Resemblyzer: pip install -e '.[judge]'.")
    nisqa = Path(args.nisqa) if args.nisqa else None
    if nisqa is not None and not (nisqa / "nisqa_mos.py").is_file():
        sys.exit(f"Error: {nisqa} holds no nisqa_mos.py (the NISQA-TTS folder).")
    if nisqa is not None and importlib.util.find_spec("pandas") is None:  # before minutes of synthesis, not after
        sys.exit("Error: NISQA's script runs in this Python and needs pandas: .venv/bin/pip install pandas.")
    texts = sets.held_out_texts(BUNDLED_METADATA, args.texts)
    speaker_sets, manifest = sets.held_out_sets(Path(args.cache))
    if args.seen_speakers:
        speaker_sets.update(sets.seen_sets(Path(args.cache), args.seen_speakers))
    choice = None if args.vocoder == "own" else args.vocoder
    synthesizer = Synthesizer.from_run(args.run, config=overridden_config(args.run, args.set), batch_size=args.batch_size,
                                       truncate_long=True, vocoder=choice)
    rate = synthesizer.sample_rate
    heard_through_griffin_lim = isinstance(synthesizer.vocoder, GriffinLim)
    resynthesizers = {"griffin_lim": synthesizer.vocoder if heard_through_griffin_lim
                      else GriffinLim(synthesizer.cfg.audio)}
    if not heard_through_griffin_lim:
        resynthesizers["vocoder"] = synthesizer.vocoder
    judges = Judges(rate, synthesizer.cfg.audio.hop_length, nisqa)
    cfg = synthesizer.cfg
    report = {"mode": "real speakers", "command": [sys.executable, *sys.argv], "machine": machine(),
              "run": args.run, "checkpoint": synthesizer.checkpoint, "overrides": list(args.set),
              "vocoder": vocoder_name(synthesizer.vocoder, choice), "cache": args.cache,
              "cache_feature_hash": manifest.get("feature_hash"), "texts": texts, "conditions": conditions,
              # what the conditioning encoder takes of each reference: its middle frames (reference_crop)
              "conditioning_seconds": cfg.data.reference_frames * cfg.audio.hop_length / rate,
              "whisper": judges.whisper.model_name if judges.whisper is not None else None,
              "pocketsphinx": judges.pocketsphinx, "nisqa": args.nisqa, "sets": {}}
    for set_name, speakers in speaker_sets.items():
        speakers = speakers[:args.limit_speakers] if args.limit_speakers else speakers
        voices = [sets.split_voice(speaker, lambda path: load_audio(path, rate)) for speaker in speakers]
        standard = {voice.name: sets.unit_mean([judges.embed_clip(clip) for clip in voice.centroid_clips])
                    for voice in voices}
        point: dict = {"speakers": [{"name": speaker.name, "clips": speaker.ids, "halved": voice.halved,
                                     "reference_seconds": len(voice.reference) / rate,
                                     "centroid_seconds": sum(len(clip) for clip in voice.centroid_clips) / rate}
                                    for speaker, voice in zip(speakers, voices)],
                       "baselines": baselines(voices, standard, resynthesizers, synthesizer, judges),
                       "conditions": {}, "outputs": []}
        for name, baseline in point["baselines"].items():
            print(line(f"{set_name} {name} ({baseline['speakers']} speakers)", baseline), flush=True)
        for condition in conditions:
            summary, rows = condition_point(condition, voices, standard, texts, synthesizer, judges)
            point["conditions"][condition] = summary
            point["outputs"] += rows
            label = f"{set_name} {condition} ({summary['speakers']}/{len(voices)} speakers"
            if summary["measurable"]:
                print(line(f"{label}, {summary['items']} outputs)", summary), flush=True)
            else:
                print(f"{label}): not measurable", flush=True)
        report["sets"][set_name] = point
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
        print(f"wrote {args.json}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="base run directory or packed model")
    parser.add_argument("--cache", default=None,
                        help="prepared cache with held-out speakers (required unless --espeak)")
    parser.add_argument("--texts", type=int, default=None,
                        help="sentences each voice says through the model (default 3; --espeak: 6)")
    parser.add_argument("--conditions", default=",".join(("full", "3s", "6s", "10s", "3clips")),
                        help="reference conditions, comma-separated: full, 3s, 6s, 10s, 3clips")
    parser.add_argument("--limit-speakers", type=int, default=None, help="the first K speakers of each set")
    parser.add_argument("--seen-speakers", type=int, default=0, metavar="K",
                        help="also K speakers of each set the base trained on (sets 'SET seen'): memorised voices "
                             "beside the held-out ones")
    parser.add_argument("--nisqa", default=None, help="the NISQA-TTS folder (nisqa_mos.py): naturalness")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--vocoder", default=None,
                        help="'own' (the run's own; the default), griffin-lim or a vocoder directory "
                             "(--espeak: griffin-lim by default, as every figure before)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a key of the run's config for synthesis (e.g. model.reference_windows=3)")
    parser.add_argument("--json", default=None)
    espeak = parser.add_argument_group("the espeak-ng voices benchmark (--espeak)")
    espeak.add_argument("--espeak", action="store_true", help="the espeak-ng held-out voices instead of real speakers")
    espeak.add_argument("--references", type=int, default=2, help="reference clips per voice (latents averaged)")
    espeak.add_argument("--centroid-clips", type=int, default=4, help="real clips per voice for its centroid")
    espeak.add_argument("--seen", action="store_true", help="also 4 of the base's training voices, for comparison")
    espeak.add_argument("--workdir", default=str(REPO / "cache" / "zero-shot"), help="rendered clips (reused)")
    args = parser.parse_args()
    if args.espeak:
        args.texts = 6 if args.texts is None else args.texts
        args.vocoder = args.vocoder or "griffin-lim"
        espeak_main(args)
    else:
        args.texts = 3 if args.texts is None else args.texts
        args.vocoder = args.vocoder or "own"
        real_main(args)


if __name__ == "__main__":
    main()

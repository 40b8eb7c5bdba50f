"""Zero-shot voice cloning: does a base model speak in voices it never trained on?

The 4 espeak-ng voices kept out of the base corpus (``myxtts.data.espeak_corpus.HELD_OUT_VOICES``; with
``--seen`` also 4 of its training voices, for comparison) read sentences the base never heard (ljspeech-mini's
transcripts, excluded from ``configs/base-espeak.yaml``'s corpus; the bundled ones without ``../shared``). Each
voice's clips are split: ``--references`` clips condition the model, ``--centroid-clips`` others give the voice's
Resemblyzer centroid. Each voice then says ``--texts`` sentences (not among its clips) with its references; an output
is matched when its embedding is nearer its own voice's centroid than any other voice's. Reported beside it, in the
same run: the share for the real clips themselves and for their mel + Griffin-Lim resynthesis (what the vocoder
allows), the cosine to the own centroid, and pocketsphinx's CER of the outputs (when installed).

Run: ``.venv/bin/python benchmarks/zero_shot.py --run pretrained/base-espeak-tiny --seen``
``--json docs/benchmarks/zero_shot.json`` (needs the ``judge`` extra: Resemblyzer).
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="base run directory or packed model")
    parser.add_argument("--texts", type=int, default=6, help="sentences each voice says through the model")
    parser.add_argument("--references", type=int, default=2, help="reference clips per voice (latents averaged)")
    parser.add_argument("--centroid-clips", type=int, default=4, help="real clips per voice for its centroid")
    parser.add_argument("--seen", action="store_true", help="also 4 of the base's training voices, for comparison")
    parser.add_argument("--workdir", default=str(REPO / "cache" / "zero-shot"), help="rendered clips (reused)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--vocoder", default="griffin-lim",
                        help="griffin-lim (as every figure before), a vocoder directory, or 'own' (the run's own)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

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


if __name__ == "__main__":
    main()

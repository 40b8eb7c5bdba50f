"""Learning benchmark: does the model learn to speak? Listening measures on held-out sentences against
training minutes, for either decoder (``--decoder parallel | autoregressive``) and one or more seeds.

For one corpus (``--corpus bundled | ljspeech-mini | espeak``) it prepares the data (``--held-out`` clips go to the
validation split and are never trained on), then for each ``--seeds`` value trains in chunks: chunk i is
``myxtts.training.run`` with ``training.max_minutes`` = the i-th ``--evaluate-at`` value, resuming the same run
(the checkpoint's ``trained_seconds`` carries the budget; warm-up excluded). After each chunk the latest checkpoint
synthesizes every held-out sentence (and ``--train-sentences`` training ones) free-running, the reference voice
another clip of the same speaker, Griffin-Lim vocoder, and ``learning_eval.measure`` scores it: pocketsphinx CER,
Resemblyzer speaker similarity, duration error, focus rate, MCD-DTW (definitions in ``benchmarks/learning_eval.py``).
The recordings' and their Griffin-Lim resynthesis' CER and speaker similarity are measured once, in the same run.

Fine-tuning (``--init-from BASE``): every seed trains two runs chunk by chunk, alternating, so both meet the same
machine load: ``scratch`` (random weights) and ``finetune`` (``training.init_from`` = BASE, with the
``--finetune-set`` overrides, e.g. configs/finetune.yaml's learning rate). ``--train-clips N`` trains on the first N
clips of an LJSpeech corpus only (the issue's "five minutes of a new voice": 48 clips); the held-out sentences are
then chosen from the other clips (never trained on by either run, nor by the base: ``myxtts corpus espeak --exclude``).

Writes ``OUT/<corpus>-<decoder>.json`` after every evaluation (machine, TensorFlow, environment, config, ceilings,
one entry per seed with its points) and ``OUT/<corpus>-<decoder>.png`` (CER, speaker similarity, duration error and
focus against training minutes). ``training.max_steps`` is set out of reach (the time budget ends each chunk), so
a cosine decay, which would depend on it, is replaced by a constant rate; the JSON records it.

Run: ``.venv/bin/python benchmarks/learning.py --corpus bundled --evaluate-at 0.5 1 --held-out 4``
(needs the ``bench`` extra: pocketsphinx, matplotlib; the ``judge`` extra for speaker similarity; espeak corpus:
the espeakng-loader wheel).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import myxtts  # noqa: E402,F401  (first: the process settings TensorFlow reads at import)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # learning_eval, next to this file

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


HELD_OUT_DEFAULT = {"bundled": 4, "ljspeech-mini": 30, "espeak": 30}  # bundled: 32 clips, 28 left to train on
OUT_OF_REACH_STEPS = 100_000_000  # training.max_steps: the time budget (training.max_minutes) ends every chunk


def first_clips_corpus(source: Path, first: int, held_out: int, out: Path) -> tuple[Path, list[str]]:
    """An LJSpeech folder of the first ``first`` clips of ``source`` (metadata order; wavs linked) and the ids held
    out from the other clips (prepare's deterministic choice, ``validation_ids``)."""
    from myxtts.data.splits import validation_ids

    lines = [line for line in (source / "metadata.csv").read_text(encoding="utf-8").splitlines() if line.strip()]
    if first >= len(lines):
        sys.exit(f"Error: --train-clips {first} leaves no held-out clip of {len(lines)} in {source}.")
    ids = [line.split("|")[0] for line in lines]
    out.mkdir(parents=True, exist_ok=True)
    (out / "metadata.csv").write_text("\n".join(lines[:first]) + "\n", encoding="utf-8")
    if not (out / "wavs").exists():
        (out / "wavs").symlink_to((source / "wavs").resolve(), target_is_directory=True)
    return out, validation_ids(ids[first:], held_out)


def make_config(args, corpus: Path, corpus_format: str, cache_dir: Path):
    """The run config (decoder, held-out count, the corpus) and a note when the schedule had to change."""
    from myxtts.config import load_config

    decoder = [f"model.decoder={args.decoder}"]
    overrides = [f"data.corpus_path={corpus.resolve()}", f"data.corpus_format={corpus_format}",
                 f"data.cache_dir={cache_dir.resolve()}", f"data.validation_size={args.held_out}", *decoder,
                 f"training.max_steps={OUT_OF_REACH_STEPS}", *args.set]
    cfg = load_config(args.config, overrides)
    note = None
    if cfg.training.decay == "cosine":  # cosine decays to its floor at max_steps, which no chunk reaches
        cfg = load_config(args.config, overrides + ["training.decay=constant"])
        note = "training.decay cosine -> constant (training.max_steps is out of reach; max_minutes ends each chunk)"
    if getattr(cfg.training, "listen_sentences", 0) and not any("listen_sentences" in s for s in args.set):
        # the trainer's own listening (free-running synthesis at each validation) would count as training minutes
        cfg = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, listen_sentences=0))
    return cfg, note


def with_seed(cfg, seed: int, max_minutes: float):
    """The config of one seed (model initialisation and data order) and chunk (its training.max_minutes)."""
    training = dataclasses.replace(cfg.training, seed=seed, max_minutes=max_minutes)
    return dataclasses.replace(cfg, training=training, data=dataclasses.replace(cfg.data, seed=seed))


def evaluation_minutes(args) -> list[float]:
    if args.evaluate_at:
        minutes = sorted(set(args.evaluate_at))
    else:  # evenly spaced over --minutes
        minutes = [args.minutes * (i + 1) / args.evaluations for i in range(args.evaluations)]
    if minutes[0] <= 0:
        sys.exit("Error: --evaluate-at needs training minutes > 0.")
    return minutes


def evaluate_point(args, synthesizer, sets, judge) -> dict:
    from learning_eval import measure, voice_match

    training, held_out, pool = sets
    return {"held_out": measure(synthesizer, held_out, pool, judge, args.batch_size),
            "train": measure(synthesizer, training, pool, judge, args.batch_size) if training else None,
            "speaker_match": voice_match(synthesizer, held_out, pool, args.voice_texts, args.batch_size)}


def measure_point(args, summary: dict, run_dir: Path, budget: float, wall_started: float, sets, judge) -> dict:
    """One evaluation of a run's latest checkpoint, after a chunk of training."""
    import tensorflow as tf

    from myxtts.synthesis import Synthesizer

    # what training.max_minutes counts: loop time of every chunk, without warm-up, validation or saving
    trained = float(tf.train.load_variable(summary["checkpoint"], "trained_seconds/.ATTRIBUTES/VARIABLE_VALUE"))
    # a briefly trained duration predictor may overrun the largest bucket: cut there and counted in ended_by
    synthesizer = Synthesizer.from_run(run_dir, length_scale=args.length_scale, truncate_long=True,
                                       vocoder=None if args.vocoder == "own" else args.vocoder)
    return {"step": summary["steps"], "training_minutes": trained / 60.0, "budget_minutes": budget,
            "stopped": summary["stopped"], "warmup_seconds": summary["warmup_seconds"],
            "wall_minutes": (time.perf_counter() - wall_started) / 60.0, "loss": summary["loss_last"],
            "validation_loss": summary["validation_loss"], "load_average": list(os.getloadavg()),
            **evaluate_point(args, synthesizer, sets, judge)}


def describe(point: dict) -> str:
    def figure(split: str, key: str, spec: str) -> str:
        value = point[split][key] if point.get(split) else None
        return "-" if value is None else format(value, spec)

    text = (f"step {point['step']} ({point['training_minutes']:.2f} training min): held-out CER "
            f"{figure('held_out', 'cer', '.3f')} (train {figure('train', 'cer', '.3f')}), speaker similarity "
            f"{figure('held_out', 'speaker_similarity', '.3f')}, duration error "
            f"{figure('held_out', 'duration_error', '.3f')}, focus {figure('held_out', 'focus_rate', '.3f')}, "
            f"ended by {point['held_out']['ended_by']}")
    match = point.get("speaker_match")
    return text + (f", speaker match {match['share']:.2f} (relative {match['relative_share']:.2f})" if match else "")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=CORPORA, default="bundled")
    parser.add_argument("--data", default=None, help="corpus folder (ljspeech) or espeak output folder")
    parser.add_argument("--decoder", choices=("parallel", "autoregressive"), default="parallel",
                        help="model.decoder")
    parser.add_argument("--seeds", "--seed", nargs="+", type=int, default=[1], metavar="SEED",
                        help="training.seed and data.seed; one run per seed, one after the other")
    parser.add_argument("--evaluate-at", nargs="+", type=float, default=None, metavar="MINUTES",
                        help="training minutes (warm-up excluded) after which to evaluate, e.g. 10 20 30; "
                             "each is a chunk's training.max_minutes")
    parser.add_argument("--minutes", type=float, default=30.0, help="without --evaluate-at: the budget ...")
    parser.add_argument("--evaluations", type=int, default=3, help="... split into this many evenly spaced points")
    parser.add_argument("--config", default=str(REPO / "configs" / "mini.yaml"))
    parser.add_argument("--set", "--config-set", dest="set", action="append", default=[],
                        metavar="SECTION.KEY=VALUE", help="config override (after the benchmark's own)")
    parser.add_argument("--out", default=str(REPO / "docs" / "benchmarks" / "learning"))
    parser.add_argument("--workdir", default=str(REPO / "runs"),
                        help="folder of the run directories (learning-<corpus>-<decoder>-seed<N>; must be new)")
    parser.add_argument("--held-out", type=int, default=None,
                        help="data.validation_size: sentences never trained on, all evaluated (default: 30; "
                             "bundled corpus: 4 of its 32 clips)")
    parser.add_argument("--train-sentences", type=int, default=8, help="training sentences also evaluated (0: none)")
    parser.add_argument("--length-scale", type=float, default=1.0, help="duration multiplier at synthesis")
    parser.add_argument("--vocoder", default="griffin-lim",
                        help="what the listening hears the runs through: griffin-lim (as every figure before), a "
                             "vocoder directory, or 'own' (the run's own: a warm start from the base inherits its)")
    parser.add_argument("--voice-texts", type=int, default=3, help="held-out texts per voice for speaker match")
    parser.add_argument("--espeak-sentences", type=int, default=1000, help="the issue asks >= 1,000")
    parser.add_argument("--voices", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=4, help="synthesis batch size")
    parser.add_argument("--init-from", default=None,
                        help="a base run (e.g. pretrained/base-espeak-tiny): each seed also trains a fine-tuned run "
                             "from it, chunk for chunk with the from-scratch one")
    parser.add_argument("--finetune-set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="config override of the fine-tuned runs only")
    parser.add_argument("--arms", nargs="+", choices=("scratch", "finetune"), default=None,
                        help="with --init-from: which runs to train (default both, alternated chunk by chunk)")
    parser.add_argument("--variant-set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="each seed also trains a 'variant' run with these overrides, chunk for chunk with the "
                             "others (a design compared at equal minutes): from scratch, or with --init-from the "
                             "fine-tuned run's config plus these")
    parser.add_argument("--variant-name", default="variant", help="with --variant-set: the name in the file names")
    parser.add_argument("--train-clips", type=int, default=None,
                        help="train on the first N clips of the LJSpeech corpus only (held-out: from the others)")
    args = parser.parse_args()
    args.held_out = HELD_OUT_DEFAULT[args.corpus] if args.held_out is None else args.held_out
    return args


def check_combinations(args) -> None:
    """Exit on options that only mean something together."""
    if args.arms and not args.init_from:
        sys.exit("Error: --arms chooses between the from-scratch and the fine-tuned runs; give --init-from.")
    if args.variant_name != "variant" and not args.variant_set:
        sys.exit("Error: --variant-name names the run of --variant-set; give --variant-set SECTION.KEY=VALUE.")


def plan_runs(args, root: Path) -> tuple[list[str], str, dict[tuple[str, int], Path]]:
    """(the arms trained per seed, the name of the output files, a new run directory per arm and seed)."""
    arms = ((args.arms or ["scratch", "finetune"]) if args.init_from else ["scratch"]) \
        + (["variant"] if args.variant_set else [])
    name = (f"{args.corpus}-{args.decoder}" + (f"-first{args.train_clips}" if args.train_clips else "")
            + ("-from-base" if args.init_from else "") + (f"-{args.variant_name}" if args.variant_set else ""))
    run_dirs = {(arm, seed): root / f"learning-{name}-{arm}-seed{seed}" if len(arms) > 1 or args.init_from else
                root / f"learning-{name}-seed{seed}" for arm in arms for seed in args.seeds}
    for run_dir in run_dirs.values():
        if (run_dir / "checkpoints").exists():
            sys.exit(f"Error: {run_dir} already holds a run; remove it or pass another --workdir.")
    return arms, name, run_dirs


@dataclasses.dataclass
class PreparedData:
    """The prepared corpus, its run config and the sentences every evaluation measures."""

    cfg: Any
    schedule_note: str | None  # how the config's schedule was changed for chunked training, if it was
    corpus: Path
    training: list  # training sentences also evaluated
    held_out: list  # never trained on
    pool: list  # every entry: where the reference voices come from
    source: str  # where the held-out sentences come from

    @property
    def sets(self) -> tuple[list, list, list]:
        return self.training, self.held_out, self.pool


def prepare_data(args, root: Path) -> PreparedData:
    """The corpus (the first --train-clips clips, when given), its cache and the evaluation sentences."""
    from learning_eval import evaluation_sets, held_out_sets

    from myxtts.data.prepare import prepare

    corpus, corpus_format = corpus_source(args)
    full_corpus, held_ids = corpus, None
    if args.train_clips:
        if corpus_format != "ljspeech":
            sys.exit("Error: --train-clips takes the first clips of an LJSpeech corpus (bundled, ljspeech-mini).")
        corpus, held_ids = first_clips_corpus(corpus, args.train_clips, args.held_out,
                                              root / f"learning-{args.corpus}-first{args.train_clips}-corpus")
    # the split is not part of the cache's feature hash: one cache per held-out count
    cache = root / (f"learning-{args.corpus}-first{args.train_clips}-cache" if args.train_clips else
                    f"learning-{args.corpus}-heldout{args.held_out}-cache")
    cfg, schedule_note = make_config(args, corpus, corpus_format, cache)
    if held_ids is not None:  # every clip of the folder trains; the held-out ones live in the full corpus
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, validation_size=0))
    print(prepare(cfg, progress=False).summary(), flush=True)
    if held_ids is None:
        training, held_out, pool, source = evaluation_sets(cfg, args.train_sentences)
    else:
        training, held_out, pool, source = held_out_sets(cfg, full_corpus, held_ids, args.train_sentences)
    if len(held_out) < args.held_out:
        print(f"note: only {len(held_out)} held-out clips ({source}), asked {args.held_out}", flush=True)
    return PreparedData(cfg, schedule_note, corpus, training, held_out, pool, source)


def speaker_judge(data: PreparedData) -> tuple[Any, str]:
    """(the Resemblyzer judge of the held-out speakers, or None without Resemblyzer; the note saying which)."""
    from learning_eval import SpeakerJudge

    from myxtts.evaluation.speaker_encoder import speaker_encoder_available

    similarity = speaker_encoder_available()
    note = ("Resemblyzer cosine of each output with the mean of the other held-out real clips of its speaker "
            "(leave-one-out, as speaker_encoder.reference_similarity)" if similarity else
            "skipped: Resemblyzer is not installed (pip install -e '.[judge]')")
    if not similarity:
        print(f"note: speaker similarity {note}", flush=True)
    return (SpeakerJudge(data.held_out, data.cfg.audio.sample_rate) if similarity else None), note


def arm_configs(args, cfg) -> dict[str, Any]:
    """The config of each arm: scratch as prepared; finetune from --init-from; variant with --variant-set."""
    from myxtts.config import apply_overrides, config_from_dict

    configs = {"scratch": cfg}
    if args.init_from:
        raw = apply_overrides(cfg.to_dict(), [f"training.init_from={Path(args.init_from).resolve()}",
                                              *args.finetune_set])
        configs["finetune"] = config_from_dict(raw, base_dir=cfg.base_dir)
    if args.variant_set:  # a design against the fine-tuned run when there is one, else against from scratch
        base = configs["finetune"] if args.init_from else cfg
        configs["variant"] = config_from_dict(apply_overrides(base.to_dict(), args.variant_set), base_dir=cfg.base_dir)
    return configs


def new_report(args, minutes: list[float], arms: list[str], data: PreparedData, judge: Any,
               similarity_note: str) -> dict:
    """The JSON's header: the setup, the machine, the config and the ceilings; ``runs`` filled as they train."""
    import tensorflow as tf
    from learning_eval import FOCUS_NOTE, ceiling

    from myxtts.machine import machine

    cfg = data.cfg
    return {"corpus": args.corpus, "decoder": args.decoder, "data": str(data.corpus), "evaluate_at_minutes": minutes,
            "arms": arms, "init_from": args.init_from, "finetune_set": args.finetune_set,
            "variant_set": args.variant_set,
            "train_clips": args.train_clips,
            "seeds": args.seeds, "length_scale": args.length_scale, "machine": machine(),
            "tensorflow": tf.__version__, "env": {key: os.environ.get(key) for key in ENV_KEYS},
            "config": cfg.to_dict(), "schedule_note": data.schedule_note, "focus_note": FOCUS_NOTE,
            "similarity_note": similarity_note,
            "held_out": {"count": len(data.held_out), "source": data.source, "ids": [e.id for e in data.held_out]},
            "train_sentences": [e.id for e in data.training],
            "ceiling": {"held_out": ceiling(cfg, data.held_out, judge is not None),
                        "train": ceiling(cfg, data.training, False) if data.training else None},
            "runs": []}


def main() -> None:
    args = parse_args()
    minutes = evaluation_minutes(args)

    from learning_eval import plot

    from myxtts.evaluation.listening_measures import recognizer_available
    from myxtts.training import run

    if not recognizer_available():
        sys.exit("Error: the benchmark needs pocketsphinx: pip install -e '.[bench]'.")
    root = Path(args.workdir)
    check_combinations(args)
    arms, name, run_dirs = plan_runs(args, root)
    data = prepare_data(args, root)
    judge, similarity_note = speaker_judge(data)
    configs = arm_configs(args, data.cfg)
    report = new_report(args, minutes, arms, data, judge, similarity_note)
    print(f"ceiling (recordings / Griffin-Lim resynthesis): {report['ceiling']}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = out / f"{name}.json", out / f"{name}.png"
    wall_started = time.perf_counter()
    for seed in args.seeds:
        entries = {arm: {"seed": seed, "arm": arm, "run_dir": str(run_dirs[arm, seed]), "points": []} for arm in arms}
        report["runs"] += list(entries.values())
        for budget in minutes:
            for arm in arms:  # alternated chunk by chunk: both runs meet the same machine load
                entry, run_dir = entries[arm], run_dirs[arm, seed]
                summary = run(with_seed(configs[arm], seed, budget), run_dir, resume=bool(entry["points"]),
                              progress=False)
                point = measure_point(args, summary, run_dir, budget, wall_started, data.sets, judge)
                entry["points"].append(point)
                print(f"seed {seed} {arm}: {describe(point)}", flush=True)
                json_path.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
                plot(report, png_path)
    print(f"wrote {json_path} and {png_path}")


if __name__ == "__main__":
    main()

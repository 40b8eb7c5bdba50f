"""`myxtts demo`: the README's first command, end to end on the bundled corpus.

Stages: prepare (validated cache) -> batching report (fixed vs buckets) -> train briefly (configs/demo.yaml
fine-tunes the shipped base) -> synthesize a sentence and a few training sentences with a reference clip, measure the alignment and
(with pocketsphinx) what a recognizer hears -> diagnostics summary (traces, fill, throughput, input wait,
alignment focus, CER). Each stage calls the library; this module only sequences them and prints.

The workdir is the demo's own run (``myxtts.outputs``): new or empty (then marked as the demo's), or a run an
earlier demo made, which it resumes; ``--fresh`` replaces that run (moved aside while the new one trains, put back
if the training fails, removed once it stands). Any other folder is refused before anything runs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click
import numpy as np

from myxtts.cli.common import config_option, load, override_option, vocoder_option
from myxtts.cli.failures import clean_errors
from myxtts.config import Config
from myxtts.errors import InputError
from myxtts.run_dir import RunDir

DEMO_TEXT = "Printing, in the only sense with which we are at present concerned, is a modern art."
TRAINING_SENTENCES = 5  # training-set sentences synthesized and listened to (their recordings are the ceiling)


def _stage(title: str) -> None:
    click.echo("")
    click.secho(f"== {title} ==", bold=True)


def _batching_report(cfg) -> dict:
    from myxtts.data.stats import cache_stats, format_stats

    report = cache_stats(cfg)
    click.echo(format_stats(report))
    return report


@dataclasses.dataclass(frozen=True)
class DemoSetup:
    """What the checks before stage 1 settled: the config, the run, whether it is new or replaced, the vocoder."""

    cfg: Config
    run_dir: Path  # resolved
    new: bool  # the workdir was new or empty (marked as the demo's when it trains)
    replacing: bool  # --fresh over a run with a checkpoint: that run is set aside while this one trains
    vocoder: Any  # the named vocoder, loaded (None: the run's own, else Griffin-Lim)


@dataclasses.dataclass(frozen=True)
class DemoSynthesis:
    """Stage 4's results: the synthesizer, the sentences listened to, the wav, the checks of what was heard."""

    synthesizer: Any  # myxtts.synthesis.Synthesizer of the run
    said_vocoder: str  # the vocoder, as the output names it
    sentences: list[tuple[str, Path]]  # (text, wav path) of the training sentences listened to
    reference: Path  # the reference voice: a training clip that is none of the sentences
    held_out: list[tuple[str, Path]]  # the validation sentence listened to (never trained on), if any
    wav_path: Path
    check: Any  # myxtts.evaluation.speech_check's result over --text, the sentences and the held-out one


@click.command("demo")
@config_option()
@override_option()
@click.option("--workdir", default="runs/demo", show_default=True, type=click.Path(file_okay=False),
              help="Run directory (checkpoints, TensorBoard logs, metrics.jsonl, the synthesized wav).")
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help="Training steps (default: training.max_steps of the config).")
@click.option("--text", default=DEMO_TEXT, show_default=False, help="Sentence to synthesize.")
@click.option("--fresh", is_flag=True,
              help="Train again (from training.init_from if set, else from scratch) even if the workdir has a "
                   "checkpoint: the earlier demo run there is replaced once the new one has trained.")
@click.option("--listen-sentences", type=click.IntRange(min=0), default=TRAINING_SENTENCES, show_default=True,
              help="Training sentences synthesized and listened to next to their recordings (0: only --text).")
@vocoder_option()
@clean_errors
def demo_command(config_path: str, overrides: tuple[str, ...], workdir: str, steps: int | None, text: str,
                 fresh: bool, listen_sentences: int, vocoder_path: str | None) -> None:
    """Prepare the corpus, train briefly, synthesize a wav and print the diagnostics summary.

    The five stages read top to bottom in the order the README describes them, each a function below."""
    setup = _check_setup(config_path, overrides, workdir, steps, fresh, vocoder_path)

    _stage("1/5 prepare the corpus")
    _prepare(setup.cfg)

    _stage("2/5 batching: fixed padding vs length buckets")
    report = _batching_report(setup.cfg)

    _stage("3/5 train")
    train_summary = _train(setup, fresh)

    _stage("4/5 synthesize")
    synthesis = _synthesize(setup, text, listen_sentences, vocoder_path)

    _stage("5/5 diagnostics summary")
    click.echo("\n".join(_diagnostics_lines(setup, report, train_summary, synthesis)))


def _check_setup(config_path: str, overrides: tuple[str, ...], workdir: str, steps: int | None, fresh: bool,
                 vocoder_path: str | None) -> DemoSetup:
    """The config, and every refusal that can come before the corpus is prepared (workdir, --fresh, vocoder)."""
    from myxtts.outputs import RUN, check_replaceable_run, check_workdir
    from myxtts.vocoder.neural import load_vocoder

    if steps is not None:
        overrides = (*overrides, f"training.max_steps={steps}")
    cfg = load(config_path, overrides)
    run_dir = Path(workdir).resolve()
    new = check_workdir(run_dir, "demo", RUN, own_only=True)  # the demo writes only into its own run
    replacing = fresh and not new and RunDir(run_dir).has_checkpoint()
    if replacing:  # refused now, not after the corpus is prepared
        check_replaceable_run(run_dir, "demo")
    # a named vocoder is read now, so a mismatched one is refused before training, not after; None: the run's own,
    # which the warm start from the shipped base gives it (the shipped vocoder), else Griffin-Lim
    vocoder = None if vocoder_path is None else load_vocoder(vocoder_path, cfg.audio, f"the config {config_path}")
    return DemoSetup(cfg=cfg, run_dir=run_dir, new=new, replacing=replacing, vocoder=vocoder)


def _prepare(cfg: Config) -> None:
    """Stage 1: the validated cache (incremental: an up-to-date one is said so and kept)."""
    from myxtts.data.prepare import prepare

    result = prepare(cfg, progress=True, echo=click.echo)
    click.echo(result.summary())


def _train(setup: DemoSetup, fresh: bool) -> dict[str, Any]:
    """Stage 3: train (or resume) the demo's run; with --fresh the earlier run is set aside meanwhile, put back if
    the training fails, discarded once it stands. A Ctrl-C ends the command here, its checkpoint saved."""
    from myxtts.outputs import RUN
    from myxtts.synthesis import Synthesizer
    from myxtts.training import run

    run_dir = setup.run_dir
    has_checkpoint = RunDir(run_dir).has_checkpoint()
    earlier = _set_earlier_run_aside(run_dir) if setup.replacing else None
    if setup.new or earlier is not None:
        from myxtts.outputs import write_marker

        run_dir.mkdir(parents=True, exist_ok=True)
        write_marker(run_dir, "demo", RUN)
    try:
        train_summary = run(setup.cfg, run_dir, resume=has_checkpoint and not fresh, stop_on_signals=True,
                            listen_with=Synthesizer)
    except BaseException:
        if earlier is not None:  # the new run failed: the earlier one comes back as it was
            from myxtts.outputs import put_back

            put_back(earlier, run_dir)
            click.echo(f"the earlier demo run is back in {run_dir}")
        raise
    if earlier is not None:
        from myxtts.outputs import discard

        discard(earlier)
    if train_summary["interrupted_by"]:  # Ctrl-C: the checkpoint is saved; the same command resumes from it
        from myxtts.training.interrupt import die_by
        click.echo("demo stopped; run the same command again to resume the training from its checkpoint")
        die_by(train_summary["interrupted_by"])
    return train_summary


def _synthesize(setup: DemoSetup, text: str, listen_sentences: int, vocoder_path: str | None) -> DemoSynthesis:
    """Stage 4: --text in the voice of a training clip, written as the run's demo wav; then the listening checks
    on it, on training sentences (next to their recordings) and on a held-out one."""
    from myxtts.synthesis import Synthesizer
    from myxtts.vocoder import write_wav
    from myxtts.vocoder.neural import GRIFFIN_LIM, vocoder_name

    cfg, run_dir = setup.cfg, setup.run_dir
    said_vocoder = None
    if vocoder_path not in (None, GRIFFIN_LIM):  # the run's own from now on: `synthesize --run RUN` uses it too
        from myxtts.vocoder.packing import install_own_vocoder
        install_own_vocoder(vocoder_path, run_dir)
        said_vocoder = f"{vocoder_path} (installed as {RunDir(run_dir).own_vocoder})"
    # a short demo run's duration predictor may ask for more frames than the largest bucket: cut, not an error
    synthesizer = Synthesizer.from_run(run_dir, truncate_long=True, vocoder=setup.vocoder)
    said_vocoder = said_vocoder or vocoder_name(synthesizer.vocoder, vocoder_path)
    sentences = _sentences(cfg, "train", listen_sentences + 1)
    # the reference voice: a training clip that is not one of the sentences listened to
    reference = sentences.pop()[1] if sentences else None
    if reference is None:
        raise InputError("The demo needs at least one prepared training clip as the reference voice.")
    waveform = synthesizer.synthesize(text, reference, batch_size=1)[0].waveform  # [samples]
    wav_path = RunDir(run_dir).demo_wav
    write_wav(wav_path, waveform, cfg.audio.sample_rate, made_by="demo")
    click.echo(f"text: {text!r}")
    click.echo(f"reference: {reference}")
    click.echo(f"vocoder: {said_vocoder}")
    click.echo(f"wrote {wav_path} ({len(waveform) / cfg.audio.sample_rate:.2f} s)")
    held_out = _sentences(cfg, "validation", 1)  # never trained on
    check = _listen(cfg, synthesizer, text, sentences + held_out, reference, run_dir)
    return DemoSynthesis(synthesizer=synthesizer, said_vocoder=said_vocoder, sentences=sentences, reference=reference,
                         held_out=held_out, wav_path=wav_path, check=check)


def _diagnostics_lines(setup: DemoSetup, report: dict, train_summary: dict[str, Any],
                       synthesis: DemoSynthesis) -> list[str]:
    """Stage 5: one line per figure of the batching report, the training and the listening."""
    fill = report["buckets"]["fill"]
    fixed = report["fixed"]["fill"]
    check, held_out = synthesis.check, synthesis.held_out
    held_out_cer = check.sentences[-1].cer if held_out else None
    return [
        f"traces at warm-up:          {train_summary.get('warmup_traces')}",
        f"retraces after warm-up:     {train_summary.get('retraces_after_warmup')}",
        f"batch shapes:               {fill['num_shapes']} (fixed padding: {fixed['num_shapes']})",
        f"mel fill (buckets / fixed): {fill['mel_fill']:.1%} / {fixed['mel_fill']:.1%}",
        f"text fill (buckets / fixed): {fill['text_fill']:.1%} / {fixed['text_fill']:.1%}",
        f"real mel frames/s:          {train_summary.get('mel_frames_per_second', 0):.0f}",
        f"input wait share:           {train_summary.get('input_wait_share', 0):.2%}",
        "loss first -> last:         " + (
            f"{train_summary['loss_first']:.3f} -> {train_summary['loss_last']:.3f}"
            if train_summary.get("loss_first") is not None else "no step this run (resumed at training.max_steps)"),
        _alignment_line(synthesis.synthesizer, check),
        _cer_line(check, len(held_out)),
        _wer_line(check, len(held_out)),
        f"CER of a held-out sentence: {held_out_cer:.2f} (never trained on)" if held_out_cer is not None else
        "CER of a held-out sentence: not measured (no validation clip, or no recognizer)",
        _similarity_line(setup.cfg, check.waveforms,
                         [path for _, path in synthesis.sentences] + [synthesis.reference]),
        f"alignment plot:             {check.sentences[0].plot}",
        f"vocoder:                    {synthesis.said_vocoder}",
        f"wav:                        {synthesis.wav_path}",
        f"TensorBoard:                tensorboard --logdir {RunDir(setup.run_dir).tensorboard}",
    ]


def _set_earlier_run_aside(run_dir: Path) -> Path:
    """``--fresh``: the earlier demo run renamed to a sibling (under its lock: no training writes it meanwhile)."""
    from myxtts.locks import lock_run_directory
    from myxtts.outputs import set_aside

    held = lock_run_directory(run_dir)
    try:
        aside = set_aside(run_dir)
    finally:
        held.release()
    click.echo(f"--fresh: the earlier demo run is kept in {aside} until this one has trained")
    return aside


def _sentences(cfg, split: str, count: int) -> list[tuple[str, Path]]:
    """(text, wav path) of the first ``count`` utterances of a split of the prepared corpus (sorted ids)."""
    from myxtts.data.cache_manifest import read_manifest
    from myxtts.data.corpus import read_config_corpus

    manifest = read_manifest(cfg.cache_dir) or {}
    ids = set(manifest.get("splits", {}).get(split, []))
    entries = [e for e in read_config_corpus(cfg).entries
               if e.id in ids]
    return [(e.text, Path(e.audio_path)) for e in sorted(entries, key=lambda e: e.id)[:count]]


def _listen(cfg, synthesizer, text: str, sentences: list[tuple[str, Path]], reference: Path, run_dir: Path):
    """Alignment and recognizer checks on the demo sentence + training sentences (with their recordings)."""
    from myxtts.audio import load_audio
    from myxtts.evaluation.listening_measures import recognizer_available
    from myxtts.evaluation.speech_check import check_speech

    plot_dir = RunDir(run_dir).listening
    plot_dir.mkdir(parents=True, exist_ok=True)
    recordings = [None] + [load_audio(path, cfg.audio.sample_rate) for _, path in sentences]
    texts = [text] + [sentence for sentence, _ in sentences]
    if not recognizer_available():
        click.echo("pocketsphinx is not installed: no CER (install the `listen` extra to hear the output).")
    check = check_speech(synthesizer, texts, reference, recordings, plot_dir=plot_dir)
    for item in check.sentences:
        heard = f" | heard: {item.heard!r} (CER {item.cer:.2f})" if item.heard is not None else ""
        heard += f" | Whisper: {item.whisper_heard!r} (WER {item.whisper_wer:.2f})" \
            if item.whisper_heard is not None else ""
        click.echo(f"- {item.text[:60]!r}: {item.seconds:.1f} s, {item.frames_per_token:.1f} frames per token{heard}")
    RunDir(run_dir).write_json(RunDir(run_dir).listening_record, check.to_dict())
    return check


def _alignment_line(synthesizer, check) -> str:
    return (f"alignment:                  predicted durations, {check.frames_per_token:.1f} frames per token "
            "(monotonic by construction: nothing skipped or repeated)")


def _similarity_line(cfg, outputs: list, clips: list[Path]) -> str:
    """Resemblyzer's cosine of the outputs to real clips of the voice, beside real clips' own (leave-one-out)."""
    from myxtts.evaluation import speaker_encoder

    if not speaker_encoder.speaker_encoder_available():
        return "speaker similarity:         not measured (install the `judge` extra: Resemblyzer)"
    if len(clips) < 2:
        return "speaker similarity:         not measured (needs 2 real clips of the voice: --listen-sentences >= 1)"
    from myxtts.audio import load_audio

    rate = cfg.audio.sample_rate
    real = [load_audio(path, rate) for path in clips]
    output = speaker_encoder.speaker_similarity(outputs, real, rate)
    reference = speaker_encoder.reference_similarity(real, rate, cfg.audio, griffin_lim=False)
    return f"speaker similarity:         {reference.summary(output)} (Resemblyzer)"


def _cer_line(check, held_out: int = 0) -> str:
    if check.cer is None:
        return "CER (recognizer):           not measured (pocketsphinx not installed)"
    ceiling = f"; their recordings {check.recording_cer:.2f}" \
        if check.recording_cer is not None else ""
    training = [s.cer for s in check.sentences[1:len(check.sentences) - held_out] if s.cer is not None]
    trained = f", training sentences {np.mean(training):.2f}" if training else ""
    return f"CER (pocketsphinx):         all {check.cer:.2f}{trained}{ceiling}"


def _wer_line(check, held_out: int = 0) -> str:
    if check.whisper_wer is None:
        return "WER (Whisper):              not measured (install the `whisper` or `judge` extra: faster-whisper)"
    ceiling = f"; their recordings {check.recording_whisper_wer:.2f}" if check.recording_whisper_wer is not None else ""
    last = check.sentences[-1].whisper_wer if held_out else None
    unseen = f", held-out sentence {last:.2f}" if last is not None else ""
    return f"WER (Whisper):              all {check.whisper_wer:.2f}{unseen}{ceiling}"


COMMANDS = [demo_command]

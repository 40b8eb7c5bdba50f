"""`myxtts demo`: the README's first command, end to end on the bundled corpus.

Stages: prepare (validated cache) -> batching report (fixed vs buckets) -> train the tiny preset briefly
-> synthesize a sentence with a reference clip -> diagnostics summary (traces, fill, throughput, input wait).
Each stage calls the library; this module only sequences them and prints.
"""

from __future__ import annotations

from pathlib import Path

import click

from myxtts.cli.common import clean_errors, config_option, load, override_option

DEMO_TEXT = "Printing, in the only sense with which we are at present concerned, is a modern art."


def _stage(title: str) -> None:
    click.echo("")
    click.secho(f"== {title} ==", bold=True)


def _batching_report(cfg) -> dict:
    from myxtts.data.stats import cache_stats, format_stats

    report = cache_stats(cfg)
    click.echo(format_stats(report))
    return report


@click.command("demo")
@config_option()
@override_option()
@click.option("--workdir", default="runs/demo", show_default=True, type=click.Path(file_okay=False),
              help="Run directory (checkpoints, TensorBoard logs, metrics.jsonl, the synthesized wav).")
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help="Training steps (default: training.max_steps of the config).")
@click.option("--text", default=DEMO_TEXT, show_default=False, help="Sentence to synthesize.")
@click.option("--fresh", is_flag=True, help="Start training from scratch even if the workdir has a checkpoint.")
@clean_errors(ValueError, OSError)
def demo_command(config_path: str, overrides: tuple[str, ...], workdir: str, steps: int | None, text: str,
                 fresh: bool) -> None:
    """Prepare the corpus, train briefly, synthesize a wav and print the diagnostics summary."""
    from myxtts.data.prepare import prepare

    if steps is not None:
        overrides = (*overrides, f"training.max_steps={steps}")
    cfg = load(config_path, overrides)
    run_dir = Path(workdir).resolve()

    _stage("1/5 prepare the corpus")
    result = prepare(cfg, progress=True, echo=click.echo)
    click.echo(result.summary())

    _stage("2/5 batching: fixed padding vs length buckets")
    report = _batching_report(cfg)

    _stage("3/5 train")
    from myxtts.train import run

    has_checkpoint = (run_dir / "checkpoints").is_dir() and any((run_dir / "checkpoints").iterdir())
    train_summary = run(cfg, run_dir, resume=has_checkpoint and not fresh)

    _stage("4/5 synthesize")
    from myxtts.synthesize import Synthesizer
    from myxtts.vocoder import write_wav

    synthesizer = Synthesizer.from_run(run_dir)
    reference = sorted((cfg.corpus_path / "wavs").glob("*.wav"))[0] if cfg.data.corpus_format == "ljspeech" \
        else None
    waveform = synthesizer.synthesize(text, reference)
    wav_path = run_dir / "demo.wav"
    write_wav(wav_path, waveform, cfg.audio.sample_rate)
    click.echo(f"text: {text!r}")
    click.echo(f"reference: {reference}")
    click.echo(f"wrote {wav_path} ({len(waveform) / cfg.audio.sample_rate:.2f} s)")

    _stage("5/5 diagnostics summary")
    fill = report["buckets"]["fill"]
    fixed = report["fixed"]["fill"]
    lines = [
        f"traces at warm-up:          {train_summary.get('warmup_traces')}",
        f"retraces after warm-up:     {train_summary.get('retraces_after_warmup')}",
        f"batch shapes:               {fill['num_shapes']} (fixed padding: {fixed['num_shapes']})",
        f"mel fill (buckets / fixed): {fill['mel_fill']:.1%} / {fixed['mel_fill']:.1%}",
        f"text fill (buckets / fixed): {fill['text_fill']:.1%} / {fixed['text_fill']:.1%}",
        f"real mel frames/s:          {train_summary.get('mel_frames_per_second', 0):.0f}",
        f"input wait share:           {train_summary.get('input_wait_share', 0):.2%}",
        f"loss first -> last:         {train_summary.get('loss_first', float('nan')):.3f} -> "
        f"{train_summary.get('loss_last', float('nan')):.3f}",
        f"wav:                        {wav_path}",
        f"TensorBoard:                tensorboard --logdir {run_dir / 'tensorboard'}",
    ]
    click.echo("\n".join(lines))


COMMANDS = [demo_command]

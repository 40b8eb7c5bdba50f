"""`myxtts train-vocoder`: train (or fine-tune) a neural vocoder on a prepared cache."""

from __future__ import annotations

from pathlib import Path

import click

from myxtts.cli.common import config_option, load, override_option
from myxtts.cli.failures import clean_errors


@click.command("train-vocoder")
@config_option()
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Vocoder run directory (checkpoints, vocoder.json, metrics.jsonl, tensorboard/). "
                   "Default: runs/<config name>.")
@click.option("--resume", is_flag=True, help="Continue from the newest checkpoint in the workdir.")
@click.option("--init-from", "init_from", type=click.Path(exists=True, file_okay=False), default=None,
              help="Start from another vocoder's weights (a run or a packed vocoder, e.g. "
                   "pretrained/vocoder-vocos-ljspeech): fine-tuning on this config's corpus.")
@click.option("--acoustic-run", "acoustic_run", type=click.Path(exists=True, file_okay=False), default=None,
              help="Train on this acoustic model's teacher-forced mels of the corpus (ground-truth aligned, written "
                   "once into WORKDIR/acoustic-mels), so the vocoder learns the mels it will read at synthesis; once "
                   "trained, its generator is installed as RUN/vocoder, so --workdir must lie outside RUN.")
@click.option("--no-progress", is_flag=True, help="No progress bar (for logs).")
@override_option()
@clean_errors
def train_vocoder_command(config_path: str, workdir: str | None, resume: bool, init_from: str | None,
                          acoustic_run: str | None, no_progress: bool, overrides: tuple[str, ...]) -> None:
    """Train a neural vocoder (log mel -> waveform) with GAN losses on fixed-length segments of the prepared cache.

    One compiled step per phase (generator alone, then with the discriminators), traced at warm-up. Ctrl-C (or
    SIGTERM) saves a checkpoint at the step it stops; --resume continues from it.
    """
    cfg = load(config_path, overrides)
    workdir = workdir or str(Path("runs") / Path(config_path).stem)
    from myxtts.outputs import check_outside_acoustic_run
    from myxtts.training.interrupt import die_by

    if acoustic_run is not None:  # refused before anything is loaded or written
        check_outside_acoustic_run(workdir, acoustic_run)
    from myxtts.synthesis.acoustic_mels import write_acoustic_mels
    from myxtts.training.vocoder_trainer import train_vocoder
    summary = train_vocoder(cfg, workdir, resume=resume, init_from=init_from, acoustic_run=acoustic_run,
                            write_acoustic_mels=write_acoustic_mels, progress=not no_progress, echo=click.echo,
                            stop_on_signals=True)
    if summary["interrupted_by"]:
        die_by(summary["interrupted_by"])
    return summary


COMMANDS = [train_vocoder_command]

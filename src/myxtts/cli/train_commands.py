"""`myxtts train`: train from a config (resume, overrides); prints and returns the training summary."""

from __future__ import annotations

from pathlib import Path

import click

from myxtts.cli.common import config_option, load, override_option
from myxtts.cli.failures import clean_errors


@click.command("train")
@config_option()
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Run directory (checkpoints, metrics.jsonl, tensorboard/): new, empty, or a training run (a folder "
                   "of other files is refused). Default: runs/<config name>.")
@click.option("--resume", is_flag=True, help="Continue from the newest checkpoint in the workdir.")
@click.option("--init-from", "init_from", type=click.Path(exists=True), default=None,
              help="Warm start: the model weights of another run (its directory, e.g. pretrained/base-espeak-tiny, "
                   "or a checkpoint prefix); fresh optimizer and schedule. Sets training.init_from.")
@click.option("--no-progress", is_flag=True, help="No progress bar (for logs).")
@override_option()
@clean_errors
def train_command(config_path: str, workdir: str | None, resume: bool, init_from: str | None, no_progress: bool,
                  overrides: tuple[str, ...]) -> None:
    """Train the model: compiled per-shape steps, all traced at warm-up; prints a training summary.

    Ctrl-C (or SIGTERM) finishes the step running, saves a checkpoint there and stops; --resume continues from it.
    """
    if init_from is not None:  # absolute: the config resolves relative paths against its own folder
        overrides = (*overrides, f"training.init_from={Path(init_from).resolve()}")
    cfg = load(config_path, overrides)
    workdir = workdir or str(Path("runs") / Path(config_path).stem)
    from myxtts.synthesis import Synthesizer
    from myxtts.training import run
    from myxtts.training.interrupt import die_by

    summary = run(cfg, workdir, resume=resume, progress=not no_progress, echo=click.echo, stop_on_signals=True,
                  listen_with=Synthesizer)
    if summary["interrupted_by"]:  # stopped by Ctrl-C / SIGTERM at a checkpoint: not a finished run
        die_by(summary["interrupted_by"])
    return summary


COMMANDS = [train_command]

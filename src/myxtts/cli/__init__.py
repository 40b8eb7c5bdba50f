"""The `myxtts` command line: a click group; each concern registers its subcommands from its own module.

Library code does the work; these modules parse flags and call it. An expected failure (bad input, a missing
package: ``myxtts.errors``) ends the command with one ``Error: ...`` line and exit code 2; anything else (a bug, a
full disk) with its traceback and exit code 1 (``failures.clean_errors``).
"""

from __future__ import annotations

import click

from myxtts import __version__
from myxtts.cli import (corpus_commands, data_commands, demo_command, diag_commands, synth_commands, train_commands,
                        vocoder_commands)
from myxtts.runtime import TF_LOG_VARIABLE, quiet_tensorflow_startup


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="myxtts")
@click.option("--verbose", is_flag=True,
              help=f"Show TensorFlow's start-up and C++ log lines (hidden by default; or set {TF_LOG_VARIABLE}=1).")
def main(verbose: bool) -> None:
    """myxtts: text + a reference voice clip -> speech, trained without retracing or input stalls."""
    quiet_tensorflow_startup(verbose)  # before anything imports TensorFlow


# each module owns the commands of one concern and lists them in COMMANDS; none imports TensorFlow at import time
# (``main`` quiets TensorFlow's start-up first)
for _module in (data_commands, train_commands, vocoder_commands, synth_commands, diag_commands, demo_command,
                corpus_commands):
    for _command in _module.COMMANDS:
        main.add_command(_command)

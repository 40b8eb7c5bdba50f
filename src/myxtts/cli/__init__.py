"""The `myxtts` command line: a click group; each concern registers its subcommands from its own module.

Library code does the work; these modules parse flags, call it and turn known errors into clean
messages (exit code 2 for bad input), never tracebacks.
"""

from __future__ import annotations

import importlib

import click

from myxtts import __version__
from myxtts.runtime import TF_LOG_VARIABLE, quiet_tensorflow_startup

# (module, attribute) pairs registered on the group; a module owns the commands of one concern.
_COMMAND_MODULES = (
    "myxtts.cli.data_commands",
    "myxtts.cli.train_commands",
    "myxtts.cli.vocoder_commands",
    "myxtts.cli.synth_commands",
    "myxtts.cli.diag_commands",
    "myxtts.cli.demo_command",
    "myxtts.cli.corpus_commands",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="myxtts")
@click.option("--verbose", is_flag=True,
              help=f"Show TensorFlow's start-up and C++ log lines (hidden by default; or set {TF_LOG_VARIABLE}=1).")
def main(verbose: bool) -> None:
    """myxtts: text + a reference voice clip -> speech, trained without retracing or input stalls."""
    quiet_tensorflow_startup(verbose)  # before anything imports TensorFlow


for _name in _COMMAND_MODULES:
    try:
        _module = importlib.import_module(_name)
    except ModuleNotFoundError as _err:  # a concern not built yet: its commands are absent
        if _err.name != _name:
            raise
        continue
    for _command in getattr(_module, "COMMANDS", ()):
        main.add_command(_command)

"""Shared CLI helpers: the --config / --set / --vocoder options and loading the config (errors: ``failures``)."""

from __future__ import annotations

from typing import Callable

import click
import yaml

from myxtts.cli.failures import is_expected
from myxtts.config import Config, load_config


def config_option(required: bool = True) -> Callable:
    return click.option("--config", "config_path", required=required, type=click.Path(dir_okay=False),
                        help="YAML config file (see configs/).")


def override_option() -> Callable:
    return click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
                        help="Override a config key, e.g. --set training.max_steps=50 (repeatable).")


def vocoder_option(default: str | None = None) -> Callable:
    """``--vocoder``; its default None means the run's own vocoder (``RUN/vocoder``), else Griffin-Lim."""
    shown = "griffin-lim" if default == "griffin-lim" else "the run's own (RUN/vocoder) if it has one, else griffin-lim"
    return click.option("--vocoder", "vocoder_path", default=default, show_default=shown,
                        help="A neural vocoder directory (a `myxtts train-vocoder` run or a packed vocoder, e.g. "
                             "pretrained/vocoder-vocos-ljspeech) or griffin-lim. Its audio settings must be the "
                             "acoustic model's.")


def load(config_path: str, overrides: tuple[str, ...] = ()) -> Config:
    """The config of ``--config`` with its ``--set`` overrides; a bad one is a usage error (exit 2, naming the file
    and key path), any other failure propagates (``failures.is_expected``)."""
    try:
        return load_config(config_path, list(overrides))
    except yaml.YAMLError as err:  # the config file's own YAML errors name it already: this is a --set value's
        raise click.UsageError(f"A --set value is not valid YAML: {' '.join(str(err).split())}") from None
    except UnicodeDecodeError as err:  # raised by the codec, not by myxtts.config: still the user's file
        raise click.UsageError(f"Config file {config_path} is not valid UTF-8 (at byte {err.start}); re-save it as "
                               "UTF-8.") from None
    except ValueError as err:
        if not is_expected(err):
            raise
        raise click.UsageError(str(err)) from None


"""Shared CLI helpers: config option, error reporting."""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import click

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
    try:
        return load_config(config_path, list(overrides))
    except ValueError as err:
        raise click.UsageError(str(err)) from None


def clean_errors(*error_types: type[BaseException]) -> Callable:
    """Turn the given (known, user-facing) exceptions into `Error: ...` and exit code 2."""
    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except error_types as err:
                click.echo(f"Error: {err}", err=True)
                sys.exit(2)
        return wrapper
    return decorate

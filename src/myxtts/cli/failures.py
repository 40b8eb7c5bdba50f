"""How a command's exception becomes its exit: an expected failure prints one ``Error: ...`` line and exits 2,
anything else (a bug, a full disk) propagates, so Python prints its traceback and exits 1.

What counts as expected is ``myxtts.errors``: an ``ExpectedError`` (``InputError``, ``SetupError``, ...), or an
``OSError`` about a path the user named (``USER_PATH_ERRORS``). ``clean_errors`` wraps every command with that rule;
``load`` (``myxtts.cli.common``) asks ``is_expected`` too.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import click

from myxtts.errors import USER_PATH_ERRORS, ExpectedError, describe_path_error


def is_expected(err: BaseException) -> bool:
    """True for a failure the user can act on (see the module docstring), False for a bug or a machine failure."""
    return isinstance(err, (ExpectedError, *USER_PATH_ERRORS))


def error_message(err: BaseException) -> str:
    """The one message printed for an expected failure: its own text, or for an OSError the OS's words and the
    path (no errno prefix)."""
    return describe_path_error(err) if isinstance(err, OSError) else str(err)


def clean_errors(fn: Callable) -> Callable:
    """Decorate a command: an expected failure (``is_expected``) prints ``Error: MESSAGE`` on stderr and exits 2;
    any other exception propagates unchanged (traceback, exit 1). Click's own usage errors pass through too."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - re-raised unless expected
            if not is_expected(err):
                raise
            click.echo(f"Error: {error_message(err)}", err=True)
            sys.exit(2)
    return wrapper

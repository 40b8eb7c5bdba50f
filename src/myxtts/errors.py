"""The two families of errors a myxtts command ends with, and how the CLI tells them apart.

- **Expected failures** (``ExpectedError``): the user can act on them, and the message says what failed, where
  (the file and line, the config key path, the option) and what to do. The CLI prints that one message as
  ``Error: ...`` and exits 2, with no traceback. Bad input is ``InputError`` (a ``ValueError``, so code catching
  ``ValueError`` still catches it): a config value, a file or folder, a command-line argument, a text, a corpus
  entry, a run directory in the way. ``SetupError`` (a ``RuntimeError``) is a piece of the installation that is
  missing or broken (a package, the bundled espeak-ng library, a Whisper model). A few ``RuntimeError`` classes
  whose message says what to do (a training that diverged, an unreadable checkpoint) subclass ``ExpectedError``
  directly.
- **Everything else** is a bug or a failure of the machine (a full disk, an I/O error): the CLI lets it propagate,
  so Python prints its traceback and the process exits 1.

``USER_PATH_ERRORS``: the ``OSError`` subclasses that are about a path the user named (it does not exist, is of the
wrong kind, is not readable or writable, already exists); the CLI reports them as expected failures too, naming the
path. Any other ``OSError`` (``ENOSPC``, ``EIO``, ...) is not bad input.

This module imports nothing from myxtts, so every module can import it.
"""

from __future__ import annotations


class ExpectedError(Exception):
    """A failure the user can act on; its message says what failed, where and what to do (CLI: exit 2)."""


class InputError(ExpectedError, ValueError):
    """Bad input: a config value, a file or folder, a command-line argument, a text, a corpus entry."""


class SetupError(ExpectedError, RuntimeError):
    """A part of the installation is missing or broken (a package, a bundled library, a model download)."""


USER_PATH_ERRORS: tuple[type[OSError], ...] = (FileNotFoundError, PermissionError, IsADirectoryError,
                                                NotADirectoryError, FileExistsError)


def describe_path_error(err: OSError) -> str:
    """``No such file or directory: PATH`` (and ``-> OTHER`` for a rename or link): the OS's words and the path,
    without the errno prefix ``str(err)`` starts with."""
    if err.filename is None:
        return str(err)
    other = f" -> {err.filename2}" if err.filename2 is not None else ""
    return f"{err.strerror or type(err).__name__}: {err.filename}{other}"

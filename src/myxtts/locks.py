"""Advisory locks on run and cache directories, so two processes cannot trample one directory.

The locks are ``flock`` locks on a file inside the directory: the kernel releases them when the process
ends, however it ends (``kill -9`` included), so there is never a stale lock to clean up. Next to the lock
the holder records its pid, host, start time and command line, which the error of a second process names.

- A run directory (``RunDir.LOCK``): one writer at a time (``train``, and anything that writes into a run).
  A second writer fails at once (``DirectoryBusyError``). Readers (synthesis, TensorBoard) take no lock.
- A cache directory: ``prepare`` holds ``CACHE_WRITE_LOCK`` (a second ``prepare`` waits for the first, then
  finds the cache up to date); ``train`` holds ``CACHE_READ_LOCK`` shared for as long as it reads the cache,
  and ``prepare`` needs it exclusive before it changes a file: a rebuild under a running training is refused,
  and a training started during a rebuild waits for it.

A reader's record under ``READERS_DIR`` outlives a killed reader (the kernel frees only the lock): records of
processes known dead are removed whenever the lock is taken, and every record is removed when the lock is taken
exclusively (then no reader holds it). Only files that are such records (named ``HOST-PID.json``, holding a holder
record or a torn one) are ever removed. A wait for a lock says once who holds it and, given a timeout, ends in
``DirectoryBusyError`` naming the holders then.

Lock files and records are opened without following links (``O_NOFOLLOW``): a link planted at ``run.lock`` (to a
user's notes, say) is refused (``LockFileError``), never truncated through.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import socket
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from myxtts.errors import InputError
from myxtts.run_dir import RunDir

CACHE_WRITE_LOCK = "prepare.lock"
CACHE_READ_LOCK = "readers.lock"
READERS_DIR = "readers"  # one holder record per process holding CACHE_READ_LOCK shared


class DirectoryBusyError(InputError):
    """Another process holds the lock; the message names it and says what to do."""


class LockFileError(DirectoryBusyError):
    """The lock cannot be taken because its file is not one (a link): handled wherever a busy lock is."""


_RECORD_NAME = re.compile(r"(.+)-(\d+)\.json")


def _open_no_follow(path: Path, flags: int) -> int:
    """``os.open`` of a lock file or record that refuses a link at ``path`` (LockFileError naming it)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as err:
        if err.errno == errno.ELOOP or path.is_symlink():
            target = os.readlink(path) if path.is_symlink() else "?"
            raise LockFileError(f"{path} is a link (to {target}), not a lock file: myxtts never writes through a "
                                "link. Remove the link (the file it names is left as it is), then run again.") from None
        raise


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    started: str
    command: str

    @classmethod
    def this_process(cls) -> "Holder":
        return cls(os.getpid(), socket.gethostname(), datetime.now(timezone.utc).isoformat(timespec="seconds"),
                   " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else "python")

    @classmethod
    def read(cls, path: Path) -> "Holder | None":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(int(data["pid"]), str(data["host"]), str(data["started"]), str(data["command"]))
        except (OSError, ValueError, KeyError, TypeError):  # none yet, or being written
            return None

    def write(self, path: Path) -> None:
        fd = _open_no_follow(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(self.__dict__))

    def alive(self) -> bool:
        """False only when the pid is known dead on this host (a record left by a killed process)."""
        if self.host != socket.gethostname():
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}, since {self.started} (`{self.command}`)"


class DirectoryLock:
    """One ``flock`` on ``directory / name``; a context manager. ``shared=True`` takes a shared lock, whose
    holders each record themselves under ``directory / READERS_DIR``."""

    def __init__(self, directory: Path | str, name: str, shared: bool = False):
        self.directory, self.name, self.shared = Path(directory), name, shared
        self.path = self.directory / name
        self._handle = None
        self._record: Path | None = None

    @property
    def held(self) -> bool:
        return self._handle is not None

    def holders(self) -> list[Holder]:
        """Who holds this lock now, as recorded: an exclusive holder writes itself into the lock file (and
        empties it on release); shared holders each leave a record under ``READERS_DIR`` (the live ones count)."""
        found = [h for h in [Holder.read(self.path)] if h is not None and h.alive()]
        for record in sorted((self.directory / READERS_DIR).glob("*.json")):
            holder = Holder.read(record)
            if holder is not None and holder.alive():
                found.append(holder)
        unique = {(h.host, h.pid): h for h in found if not (h.pid == os.getpid() and h.host == socket.gethostname())}
        return list(unique.values())

    def try_acquire(self) -> bool:
        """Take the lock if it is free; False if another process (or another handle) holds it."""
        if self.held:
            return True
        self.directory.mkdir(parents=True, exist_ok=True)
        # never truncated here (the record belongs to the holder), never opened through a link
        handle = os.fdopen(_open_no_follow(self.path, os.O_RDWR | os.O_CREAT), "r+", encoding="utf-8")
        try:
            fcntl.flock(handle.fileno(), (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as err:
            handle.close()
            if err.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                return False
            raise
        self._handle = handle
        if self.shared or self.name == CACHE_READ_LOCK:  # exclusive on the readers' lock: no reader is left
            self._clean_reader_records(every=not self.shared)
        me = Holder.this_process()
        if self.shared:
            self._record = self.directory / READERS_DIR / f"{me.host}-{me.pid}.json"
            self._record.parent.mkdir(exist_ok=True)
            me.write(self._record)
        else:
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps(me.__dict__))
            handle.flush()
        return True

    def _clean_reader_records(self, every: bool) -> None:
        """Remove reader records of processes known dead on this host (``every``: all of them, because this
        process holds the lock exclusively, so no reader holds it). A record's name says whose it is; a file
        that is not a record (another name, a link, JSON that is not a holder's) is left alone."""
        for record in (self.directory / READERS_DIR).glob("*.json"):
            named = _RECORD_NAME.fullmatch(record.name)
            if named is None or record.is_symlink() or not _is_reader_record(record):
                continue
            host, pid = named.group(1), int(named.group(2))
            if every or (host == socket.gethostname() and not Holder(pid, host, "", "").alive()):
                record.unlink(missing_ok=True)

    def acquire(self, wait: bool = False, on_wait: Callable[[str], None] | None = None,
                what: str = "", advice: str = "", poll_seconds: float = 0.5,
                timeout: float | None = None) -> "DirectoryLock":
        """Take the lock. Held elsewhere: ``wait=False`` raises ``DirectoryBusyError`` naming the holder(s),
        ``what`` (e.g. "the run directory runs/x is being written") and ``advice``; ``wait=True`` calls
        ``on_wait`` once with that message and polls until the lock is free, or until ``timeout`` seconds have
        passed (then ``DirectoryBusyError`` naming the holders of that moment)."""
        if self.try_acquire():
            return self
        message = self.busy_message(what, advice)
        if not wait:
            raise DirectoryBusyError(message)
        if on_wait is not None:
            on_wait(f"waiting: {message}" + (f" (giving up after {timeout:g} s)" if timeout is not None else ""))
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.try_acquire():
            if deadline is not None and time.monotonic() >= deadline:
                raise DirectoryBusyError(f"Gave up after waiting {timeout:g} s: {self.busy_message(what, advice)}")
            time.sleep(poll_seconds if deadline is None else max(0.0, min(poll_seconds, deadline - time.monotonic())))
        return self

    def busy_message(self, what: str, advice: str) -> str:
        holders = self.holders()
        named = "; ".join(h.describe() for h in holders) if holders else "a process that left no record"
        return f"{what or self.path} (lock {self.path}, held by {named}). {advice}".strip()

    def release(self) -> None:
        if self._handle is None:
            return
        if self._record is not None:
            self._record.unlink(missing_ok=True)
            self._record = None
        else:  # exclusive: the record says who holds it now, so it goes before the lock does
            self._handle.seek(0)
            self._handle.truncate()
            self._handle.flush()
        fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
        self._handle.close()
        self._handle = None

    def __enter__(self) -> "DirectoryLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _is_reader_record(path: Path) -> bool:
    """A holder record as ``Holder.write`` writes it, or one torn by a kill (not JSON yet)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return True  # torn mid-write
    except OSError:
        return False
    return isinstance(data, dict) and {"pid", "host", "started", "command"} <= set(data)


def lock_run_directory(workdir: Path | str) -> DirectoryLock:
    """The writer's lock on a run directory, taken at once or ``DirectoryBusyError``."""
    return DirectoryLock(workdir, RunDir.LOCK).acquire(
        what=f"the run directory {workdir} is being written by another process",
        advice="Wait for it to finish (or stop it), or choose another --workdir. Reading the run (synthesize, "
               "TensorBoard) needs no lock.")


def lock_cache_for_reading(cache_dir: Path | str, echo: Callable[[str], None] | None = None,
                           timeout: float | None = None) -> DirectoryLock:
    """A training's shared lock on its cache: waits (saying so) while ``prepare`` rewrites the cache, for at
    most ``timeout`` seconds when given."""
    return DirectoryLock(cache_dir, CACHE_READ_LOCK, shared=True).acquire(
        wait=True, on_wait=echo, what=f"the cache {cache_dir} is being rebuilt by `myxtts prepare`",
        advice="Training starts when it is done." if timeout is None else
        "Run again when it is done, or stop it.", timeout=timeout)


def lock_cache_for_writing(cache_dir: Path | str, echo: Callable[[str], None] | None = None,
                           timeout: float | None = None) -> DirectoryLock:
    """``prepare``'s lock: one writer at a time; a second ``prepare`` waits (saying so) for the first, for at
    most ``timeout`` seconds when given."""
    return DirectoryLock(cache_dir, CACHE_WRITE_LOCK).acquire(
        wait=True, on_wait=echo, what=f"another `myxtts prepare` is writing the cache {cache_dir}",
        advice="This one goes on when it is done (and reuses what it wrote)." if timeout is None else
        "Run this one again when it is done (it reuses what that one wrote), or stop that one; "
        "--lock-timeout sets how long to wait.", timeout=timeout)


def exclude_cache_readers(cache_dir: Path | str) -> DirectoryLock:
    """Taken by ``prepare`` before it changes any file of the cache: fails at once while a training reads it."""
    return DirectoryLock(cache_dir, CACHE_READ_LOCK).acquire(
        what=f"the cache {cache_dir} is being read by a training, and this prepare would change it",
        advice="Wait for the training to end (or stop it), or prepare into another data.cache_dir.")

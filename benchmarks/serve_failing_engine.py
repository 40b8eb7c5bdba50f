"""``myxtts`` with an engine that can be made to fail: the fault benchmark's server (``benchmarks/serve_faults.py``).

    python benchmarks/serve_failing_engine.py --trigger-file PATH serve --run RUN --voice voice=CLIP.wav ...

Everything after ``--trigger-file PATH`` is ``myxtts``'s own command line (``serve`` and its options), run by
myxtts's CLI as deployed; the trigger file may also be named by the ``MYXTTS_FAILURE_TRIGGER`` environment variable.
Before the CLI starts, ``myxtts.synthesis.engine.SynthesisEngine.decode_tokens`` (the public step the server's engine
thread decodes every batch with) is wrapped: once the trigger file exists, every call raises
``InjectedEngineFailure``, a ``BaseException`` and not an ``Exception``, so it escapes the engine's per-batch guard
(which fails one batch's requests and goes on) and kills the engine thread, as a broken runtime would. The server
should then answer ``/health`` and every request with 503 and log the traceback. Until the file exists the engine
is the shipped one, warm-up included.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

TRIGGER_VARIABLE = "MYXTTS_FAILURE_TRIGGER"


class InjectedEngineFailure(BaseException):
    """The failure this wrapper injects: a ``BaseException``, which the engine's ``except Exception`` per batch does
    not catch, so it reaches the engine thread's own guard as a failure of the runtime itself would."""


def install(trigger: Path) -> None:
    """Wrap ``SynthesisEngine.decode_tokens`` to raise ``InjectedEngineFailure`` once ``trigger`` exists."""
    from myxtts.synthesis.engine import SynthesisEngine

    original = SynthesisEngine.decode_tokens

    @functools.wraps(original)
    def decode_tokens(self, *args, **kwargs):
        if trigger.exists():  # one stat per batch: nothing against a decode's time
            raise InjectedEngineFailure(f"injected by benchmarks/serve_failing_engine.py ({trigger} exists)")
        return original(self, *args, **kwargs)

    SynthesisEngine.decode_tokens = decode_tokens


def main() -> None:
    arguments = sys.argv[1:]
    trigger = os.environ.get(TRIGGER_VARIABLE)
    if arguments[:1] == ["--trigger-file"] and len(arguments) > 1:
        trigger, arguments = arguments[1], arguments[2:]
    if not trigger:
        sys.exit(f"usage: {sys.argv[0]} --trigger-file PATH serve ... (or set {TRIGGER_VARIABLE})")
    from myxtts.runtime import quiet_tensorflow_startup

    quiet_tensorflow_startup()  # as myxtts's CLI does first: the engine's module imports TensorFlow
    install(Path(trigger))
    from myxtts.cli import main as myxtts_main

    myxtts_main(args=arguments, prog_name="myxtts")


if __name__ == "__main__":
    main()

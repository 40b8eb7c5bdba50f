"""The TensorFlow process environment myxtts runs in, recorded for reports and benchmarks.

myxtts leaves ``TF_ENABLE_ONEDNN_OPTS`` (TF's oneDNN rewrites, on by default in x86 CPU builds) as the
user set it. With static shapes grappler's remapper can fuse attention logits written as
``matmul(q, k) * scale + mask`` into ``_MklFusedBatchMatMulV2``, which oneDNN runs with its slow reference
kernel. The attention scales q before the matmul and masks with ``where`` (model/layers.py), so that
pattern never forms and the rewrites are safe to keep on (docs/training.md, "CPU performance";
benchmarks/onednn_profile.py).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile

ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"

_STATE: dict[str, object] = {}


def record_tensorflow_environment() -> None:
    """Remember the oneDNN setting as it was before TensorFlow was imported (TF reads it once, at import)."""
    if not _STATE:
        _STATE.update(user_value=os.environ.get(ONEDNN_VARIABLE),
                      tensorflow_imported_first="tensorflow" in sys.modules)


def onednn_enabled() -> bool:
    """Whether TensorFlow runs with oneDNN rewrites (TF's default on x86 is on)."""
    value = _STATE.get("user_value") if _STATE else os.environ.get(ONEDNN_VARIABLE)
    return value is None or str(value).strip().lower() not in ("0", "false", "off", "no")


def describe_environment() -> dict[str, object]:
    """oneDNN state and who chose it, and the thread settings (recorded by the benchmarks)."""
    user_value = _STATE.get("user_value")
    source = f"set by the user ({ONEDNN_VARIABLE}={user_value})" if user_value is not None else \
        "TensorFlow's default"
    return {"onednn": onednn_enabled(), "onednn_source": source,
            "intra_op_threads": os.environ.get("TF_NUM_INTRAOP_THREADS"),
            "inter_op_threads": os.environ.get("TF_NUM_INTEROP_THREADS")}


# ---- a quiet start -----------------------------------------------------------------------------------
# TensorFlow's C++ libraries print start-up lines while they load, before its log level is read: absl's
# "WARNING: All log messages before absl::InitializeLog() ..." and glog-style info lines such as the oneDNN
# notice, once per shared library. TF_CPP_MIN_LOG_LEVEL does not reach them. The CLI hides them by sending
# file descriptor 2 to a temporary file while `tensorflow` is first imported, then writing back every line
# that is not start-up chatter (a real error during the import still shows).

TF_LOG_VARIABLE = "MYXTTS_TF_LOG"  # set (to anything but 0) to see TensorFlow's start-up and C++ log lines
_CHATTER = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|[IW]\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\] .*"  # glog info / warning lines (oneDNN notice, CPU features, ...)
    r"|To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags\."
    r"|E\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\] Unable to register \w+ factory.*)$")  # CUDA plugin registration


def is_startup_chatter(line: str) -> bool:
    return bool(_CHATTER.match(line.rstrip("\r\n")))


class _QuietImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Wraps the first import of ``tensorflow``: its stderr output goes through ``is_startup_chatter``."""

    def __init__(self):
        self.inner = None

    def find_spec(self, name, path, target=None):
        if name != "tensorflow" or self.inner is not None:
            return None
        sys.meta_path.remove(self)  # one import only; the real finders take it from here
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        self.inner, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        module.__spec__.loader = module.__loader__ = self.inner
        with filtered_stderr():
            self.inner.exec_module(module)


@contextlib.contextmanager
def filtered_stderr():
    """File descriptor 2 goes to a temporary file inside the block; afterwards every line of it that is not
    start-up chatter is written to the real stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = [line for line in capture.read().decode("utf-8", "replace").splitlines(keepends=True)
                    if not is_startup_chatter(line)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


def quiet_tensorflow_startup(verbose: bool = False) -> bool:
    """Before TensorFlow is imported: silence its start-up chatter (``TF_CPP_MIN_LOG_LEVEL`` 2 unless set,
    and the lines above). ``verbose`` or ``MYXTTS_TF_LOG`` leaves everything as TensorFlow prints it.
    Returns whether the start-up is quiet."""
    if verbose or os.environ.get(TF_LOG_VARIABLE, "0") not in ("", "0"):
        return False
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "tensorflow" not in sys.modules and not any(isinstance(f, _QuietImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietImport())
    return True

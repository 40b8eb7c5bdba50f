"""The TensorFlow process environment myxtts runs in, recorded for reports and benchmarks.

History, and why myxtts no longer changes it: TF's oneDNN rewrites (``TF_ENABLE_ONEDNN_OPTS``, on by
default in x86 CPU builds) made the static-shape train step 7-15x slower than the same graph with
``None`` dims. The root cause (benchmarks/onednn_profile.py): with static shapes grappler's remapper
fused the attention logits ``matmul(q, k) * scale + mask`` into ``_MklFusedBatchMatMulV2``, which
oneDNN 3.7 runs with its reference kernel (3-4 s a step). The attention now scales q before the matmul
and masks with ``where`` (model/layers.py), so the pattern never forms, and with the rewrites on the
static step is the fastest of {oneDNN on, off} x {static, None dims} (docs/training.md, "CPU
performance"). So the default environment is left alone; whatever the user sets is respected.
"""

from __future__ import annotations

import os
import sys

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

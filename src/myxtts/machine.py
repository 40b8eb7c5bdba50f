"""What a measured figure depends on besides the code: the machine it ran on (no TensorFlow import, so a parent
process that drives TensorFlow children can record it)."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (platform.processor() is empty on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def cpu_flags_of_interest() -> list[str]:
    """The vector-extension flags oneDNN picks its kernels by (AVX2, AVX-512 variants, AMX)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return sorted(f for f in line.split(":", 1)[1].split() if f.startswith(("avx", "amx")))
    except OSError:
        pass
    return []


def machine() -> dict[str, Any]:
    """CPU, cores, the load on them now, Python: what a figure depends on besides the code (library versions are
    the caller's to add)."""
    return {"platform": platform.platform(), "cpu_model": cpu_model(), "cpu_flags": cpu_flags_of_interest(),
            "cores": os.cpu_count(), "python": platform.python_version(), "load_average": list(os.getloadavg())}

#!/usr/bin/env bash
# Create .venv (once) and install myxtts with the given extras. Sourced by demo.sh and test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EXTRAS="${1:-}"
PY="${PYTHON:-python3}"
if [ ! -x "$ROOT/.venv/bin/python" ]; then
  echo "[setup] creating $ROOT/.venv"
  "$PY" -m venv "$ROOT/.venv"
  # uv (from PyPI, into the venv) installs the same packages as pip in a fraction of the time (parallel downloads,
  # cached wheels linked rather than unpacked again: ~12 s against ~45 s for TensorFlow and the test extras here)
  "$ROOT/.venv/bin/python" -m pip install -q uv 2>/dev/null || echo "[setup] uv not installable: using pip"
fi
STAMP="$ROOT/.venv/.myxtts-installed${EXTRAS:+-$EXTRAS}"
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
  echo "[setup] installing myxtts${EXTRAS:+[$EXTRAS]} into .venv (first run downloads TensorFlow, ~1-2 min)"
  TARGET="$ROOT${EXTRAS:+[$EXTRAS]}"
  # --compile-bytecode: every process the tests and the demo start imports TensorFlow and Keras; without .pyc files
  # (uv writes none by default, and PYTHONDONTWRITEBYTECODE keeps Python from writing them) each one compiles
  # thousands of modules from source again (docs/benchmarks.md, "Test time")
  if ! { [ -x "$ROOT/.venv/bin/uv" ] && "$ROOT/.venv/bin/uv" pip install --python "$ROOT/.venv/bin/python" -q \
           --compile-bytecode -e "$TARGET"; }; then
    [ -x "$ROOT/.venv/bin/uv" ] && echo "[setup] uv failed: installing with pip"
    "$ROOT/.venv/bin/python" -m pip install -q -e "$TARGET" 2> >(grep -v "is ignored: it is neither" >&2)
  fi
  if [[ ",$EXTRAS," == *,test,* ]]; then
    # librosa (the tests' reference front-end) compiles its numba kernels on first use and caches them in the
    # venv: once here, like the bytecode above, instead of inside a test on every fresh clone
    "$ROOT/.venv/bin/python" -c "import numpy, librosa; librosa.stft(numpy.zeros(4096, numpy.float32))" \
      || echo "[setup] librosa's numba cache not warmed: the first test that uses it compiles it"
  fi
  touch "$STAMP"
fi
# espeak-ng (phonemes, `myxtts corpus espeak`) comes with the install: the espeakng-loader wheel bundles it.

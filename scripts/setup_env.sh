#!/usr/bin/env bash
# Create .venv (once) and install myxtts with the given extras. Sourced by demo.sh and test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EXTRAS="${1:-}"
supported() { "$1" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 13))' 2>/dev/null; }
if [ ! -x "$ROOT/.venv/bin/python" ]; then
  # the interpreter: $PYTHON if set; else the distribution's own /usr/bin/python3 when TensorFlow supports its
  # version; else python3 on PATH. Distributions build CPython with profile-guided and link-time optimisation,
  # which a build from source (pyenv's default) lacks, and tracing TensorFlow graphs is Python-bound: the tests and
  # the demo run faster on it (docs/benchmarks.md, "Test time")
  CANDIDATES=("${PYTHON:-}")
  [ -z "${PYTHON:-}" ] && CANDIDATES=(/usr/bin/python3 python3)
  for PY in "${CANDIDATES[@]}"; do
    command -v "$PY" >/dev/null 2>&1 && supported "$PY" || continue
    echo "[setup] creating $ROOT/.venv ($("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])'))"
    "$PY" -m venv "$ROOT/.venv" && break
    rm -rf "$ROOT/.venv"  # a distribution's Python without its venv package: try the next one
  done
  if [ ! -x "$ROOT/.venv/bin/python" ]; then
    echo "[setup] no Python 3.10-3.13 that can create a venv (tried: ${CANDIDATES[*]}); set PYTHON=/path/to/python3" >&2
    exit 1
  fi
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

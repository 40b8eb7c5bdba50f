#!/usr/bin/env bash
# Create .venv (once) and install myxtts with the given extras. Sourced by demo.sh and test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EXTRAS="${1:-}"
PY="${PYTHON:-python3}"
if [ ! -x "$ROOT/.venv/bin/python" ]; then
  echo "[setup] creating $ROOT/.venv"
  "$PY" -m venv "$ROOT/.venv"
  "$ROOT/.venv/bin/python" -m pip install -q --upgrade pip
fi
STAMP="$ROOT/.venv/.myxtts-installed${EXTRAS:+-$EXTRAS}"
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
  echo "[setup] installing myxtts${EXTRAS:+[$EXTRAS]} into .venv (first run downloads TensorFlow, ~1-2 min)"
  "$ROOT/.venv/bin/python" -m pip install -q -e "$ROOT${EXTRAS:+[$EXTRAS]}" 2> >(grep -v "is ignored: it is neither" >&2)
  touch "$STAMP"
fi
# espeak-ng (phonemes, `myxtts corpus espeak`) comes with the install: the espeakng-loader wheel bundles it.

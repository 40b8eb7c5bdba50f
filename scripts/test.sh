#!/usr/bin/env bash
# Install into .venv and run the test suite. Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup_env.sh" test
cd "$ROOT"
export TF_CPP_MIN_LOG_LEVEL=2
exec "$ROOT/.venv/bin/python" -m pytest "$@"

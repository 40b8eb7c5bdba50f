#!/usr/bin/env bash
# Install into .venv and run the test suite. Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup_env.sh" test
cd "$ROOT"
export TF_CPP_MIN_LOG_LEVEL=2
# three workers (pytest-xdist, work stealing) on 2 cores: most tests trace graphs in Python or wait on subprocesses,
# servers and timeouts, and two workers left about a fifth of the cores idle (docs/benchmarks.md, "Test time");
# every test also runs while others keep the cores busy, which is how the diagnostics tests must hold (load
# scheduling with the slow tests first was measured slower). MYXTTS_TEST_WORKERS=0 runs them in this process.
WORKERS="${MYXTTS_TEST_WORKERS:-3}"
if [ "$WORKERS" != "0" ] && [ "$WORKERS" != "1" ]; then
  # one TensorFlow thread per worker (and per process a test starts): with TF's default pools of one thread per
  # core, the workers would run twice as many busy threads as there are cores
  export TF_NUM_INTRAOP_THREADS="${TF_NUM_INTRAOP_THREADS:-1}" TF_NUM_INTEROP_THREADS="${TF_NUM_INTEROP_THREADS:-1}"
fi
exec "$ROOT/.venv/bin/python" -m pytest -n "$WORKERS" --dist worksteal "$@"

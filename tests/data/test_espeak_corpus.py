"""The espeak-ng multi-speaker corpus: rendered, accepted by `myxtts prepare` as 4 speakers, reused on rerun.

espeak-ng is the library bundled by the espeakng-loader wheel: these tests run everywhere."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile
import yaml
from click.testing import CliRunner

from myxtts.cli import main
from myxtts.data.espeak_corpus import (HELD_OUT_VOICES, VOICES, EspeakRenderError, EspeakVoice, Sentence, assign_voices,
                                       bundled_sentences, open_renderer, read_transcripts, render_corpus,
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
    assert info.samplerate == 22050 and info.channels == 1 and info.duration > 0.5 and info.subtype == "PCM_16"
    assert not list(out.rglob("*.partial"))

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
    voices = runner.invoke(main, ["corpus", "espeak", "--out", str(tmp_path / "out"), "--voices", "25"])
    assert voices.exit_code == 2 and "--voices" in voices.output


def _pitch(samples: np.ndarray, sample_rate: int = 22050) -> float:
    """Median f0 (Hz) of the voiced frames: the autocorrelation peak in 60-400 Hz."""
    frame, hop = 1024, 512
    signal = samples.astype(np.float64) / 32768.0
    pitches = []
    for start in range(0, signal.size - frame, hop):
        chunk = signal[start:start + frame] * np.hanning(frame)
        if np.sqrt(np.mean(chunk ** 2)) < 0.02:
            continue
        correlation = np.correlate(chunk, chunk, "full")[frame - 1:]
        low, high = sample_rate // 400, sample_rate // 60
        lag = low + int(np.argmax(correlation[low:high]))
        if correlation[lag] > 0.3 * correlation[0]:
            pitches.append(sample_rate / lag)
    return float(np.median(pitches))


def test_voices_render_real_different_speech(tmp_path: Path) -> None:
    """Two voices, one sentence: non-silent 22050 Hz mono 16-bit wavs that differ (a low male, a high female)."""
    text = "Printing, in the only sense with which we are at present concerned."
    low, high = VOICES[0], VOICES[3]  # us_m3 (pitch 35) and us_f4 (pitch 80)
    with open_renderer() as renderer:
        for voice in (low, high):
            voice.write(renderer, text, tmp_path / f"{voice.name}.wav")
        again = low.render(renderer, text)
    clips = {}
    for voice in (low, high):
        info = soundfile.info(str(tmp_path / f"{voice.name}.wav"))
        assert (info.samplerate, info.channels, info.subtype) == (22050, 1, "PCM_16")
        clips[voice.name], _ = soundfile.read(str(tmp_path / f"{voice.name}.wav"), dtype="int16")
        samples = clips[voice.name]
        assert 2.5 < samples.size / 22050 < 8.0  # ~4 s of speech at 165-185 words per minute
        assert np.sqrt(np.mean((samples / 32768.0) ** 2)) > 0.02  # speech, not silence
    np.testing.assert_array_equal(again, clips[low.name])  # a fresh library per clip: the same text, the same wav
    assert _pitch(clips[high.name]) > 1.5 * _pitch(clips[low.name])
    # every built-in voice renders, and the en-gb variants are applied (gb_f1 is a female voice, gb_m1 male)
    with open_renderer() as renderer:
        pitches = {voice.name: _pitch(voice.render(renderer, text)) for voice in VOICES + HELD_OUT_VOICES}
    assert pitches["gb_f1"] > 1.5 * pitches["gb_m1"]
    # both sexes among the base model's voices and among the held-out ones
    for voices in (VOICES, HELD_OUT_VOICES):
        female = [pitches[v.name] for v in voices if "+f" in v.voice]
        male = [pitches[v.name] for v in voices if "+m" in v.voice]
        assert female and male and np.median(female) > 1.3 * np.median(male)


def test_held_out_voices_are_never_training_voices(tmp_path: Path) -> None:
    assert len(VOICES) >= 24 and len(HELD_OUT_VOICES) == 4
    training = {(v.voice, v.pitch, v.speed) for v in VOICES}
    assert not {v.name for v in HELD_OUT_VOICES} & {v.name for v in VOICES}
    assert not {(v.voice, v.pitch, v.speed) for v in HELD_OUT_VOICES} & training
    accents = {v.voice.split("+")[0] for v in VOICES}
    assert len(accents) >= 6  # several accents, not one voice with 24 pitches
    result = CliRunner().invoke(main, ["corpus", "espeak", "--out", str(tmp_path / "zero-shot"), "--sentences", "8",
                                       "--held-out-voices", "--no-progress"])
    assert result.exit_code == 0, result.output
    speakers = {line.split("|")[2] for line in (tmp_path / "zero-shot" / "list.txt").read_text().splitlines()}
    assert speakers == {v.name for v in HELD_OUT_VOICES}


def test_unknown_voice_is_a_render_error(tmp_path: Path) -> None:
    voices = [VOICES[0], EspeakVoice("nobody", "xx-notalanguage+f2", pitch=50, speed=175)]
    sentences = bundled_sentences()[:2]
    with pytest.raises(EspeakRenderError, match="no voice 'xx-notalanguage\\+f2'"):
        render_corpus(sentences, voices, tmp_path, jobs=1, progress=False)
    assert not list(tmp_path.rglob("*.partial")) and not (tmp_path / "list.txt").exists()


def test_missing_espeak_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    from myxtts import espeak

    def broken():
        raise espeak.EspeakUnavailableError("The espeakng-loader package is not installed.")

    monkeypatch.setattr(espeak, "bundled_paths", broken)
    result = CliRunner().invoke(main, ["corpus", "espeak", "--out", str(tmp_path / "out"), "--sentences", "4"])
    assert result.exit_code == 2 and "espeakng-loader package is not installed" in result.output


def test_exclude_keeps_evaluation_sentences_out(tmp_path: Path) -> None:
    source = bundled_sentences()
    excluded = tmp_path / "held_out.csv"
    excluded.write_text("".join(f"{s.id}|{s.text}|{s.text}\n" for s in source[:28]), encoding="utf-8")
    result = CliRunner().invoke(main, ["corpus", "espeak", "--out", str(tmp_path / "out"), "--exclude", str(excluded),
                                       "--voices", "2", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "left out 28 of 32 sentences" in result.output
    ids = {Path(line.split("|")[0]).stem for line in (tmp_path / "out" / "list.txt").read_text().splitlines()}
    assert ids and not ids & {s.id for s in source[:28]}


def test_sentence_ids_never_name_a_wav_outside_the_corpus(tmp_path: Path) -> None:
    """Ids come from the transcripts file: `../escape`, an absolute path, `a/../../b` name wavs inside
    OUT/wavs/<voice>/ (``myxtts.outputs.safe_file_name``), which prepare reads back and a rerun reuses."""
    from myxtts.data.corpus import read_corpus
    from myxtts.outputs import safe_file_name

    ids = ["../escape", str(tmp_path / "abs"), "a/../../b"]
    sentences = [Sentence(identifier, text) for identifier, text in
                 zip(ids, ["The first sentence is short.", "A second one follows it.", "And this is the third."])]
    out = tmp_path / "corpus"
    result = render_corpus(sentences, 2, out, jobs=1, progress=False)
    wavs = sorted(tmp_path.rglob("*.wav"))
    assert len(wavs) == 3 and all(path.is_relative_to(out / "wavs") for path in wavs), wavs
    assert sorted(path.stem for path in wavs) == sorted(safe_file_name(identifier) for identifier in ids)
    assert len(read_corpus(result.list_file, "list").entries) == 3
    assert render_corpus(sentences, 2, out, jobs=1, progress=False).reused == 3

"""Corpus reading on the bundled clips: LJSpeech and list layouts, every bad line rejected with a reason."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from myxtts.data.corpus import read_corpus


def test_bundled_ljspeech_reads_every_line(bundled_corpus: Path) -> None:
    lines = [line for line in (bundled_corpus / "metadata.csv").read_text(encoding="utf-8").splitlines() if line]
    result = read_corpus(bundled_corpus, "ljspeech")
    assert result.rejections == []
    assert len(result.entries) == len(lines)
    first = result.entries[0]
    fields = lines[0].split("|")
    assert first.id == fields[0] and first.text == fields[2].strip()
    assert first.audio_path == bundled_corpus / "wavs" / f"{fields[0]}.wav" and first.line_number == 1
    assert first.speaker == "ljspeech" and first.language == "en"


def test_normalized_column_is_preferred(corpus_copy: Path) -> None:
    metadata = corpus_copy / "metadata.csv"
    lines = metadata.read_text(encoding="utf-8").splitlines()
    utterance_id = lines[0].split("|")[0]
    lines[0] = f"{utterance_id}|Dr. Smith paid $5|doctor smith paid five dollars"
    lines[1] = "|".join(lines[1].split("|")[:2])  # two fields: the raw text is used
    metadata.write_text("\n".join(lines) + "\n", encoding="utf-8")
    entries = read_corpus(corpus_copy, "ljspeech").entries
    assert entries[0].text == "doctor smith paid five dollars"
    assert entries[1].text == lines[1].split("|")[1].strip()


def test_bad_lines_are_rejected_with_reasons_and_the_rest_kept(corpus_copy: Path) -> None:
    metadata = corpus_copy / "metadata.csv"
    raw_lines = metadata.read_bytes().split(b"\n")
    raw_lines = [line for line in raw_lines if line]
    total = len(raw_lines)
    ids = [line.split(b"|")[0] for line in raw_lines]
    raw_lines[1] = ids[1] + b"|only two|fields|and more"  # 4 fields
    raw_lines[2] = ids[2] + b"|caf\xe9 latin-1 bytes|caf\xe9 latin-1 bytes"  # not UTF-8
    raw_lines[3] = ids[3] + b"|   |   "  # whitespace text
    raw_lines[4] = raw_lines[0]  # duplicate id (first occurrence kept)
    (corpus_copy / "wavs" / f"{ids[5].decode()}.wav").unlink()  # missing file
    metadata.write_bytes(b"\n".join(raw_lines) + b"\n")
    result = read_corpus(corpus_copy, "ljspeech")
    reasons = {rejection.line: rejection.reason for rejection in result.rejections}
    assert reasons == {2: "wrong_field_count", 3: "non_utf8", 4: "empty_text", 5: "duplicate_id", 6: "missing_file"}
    assert len(result.entries) == total - 5  # nothing dropped silently
    assert all(str(metadata) in r.message for r in result.rejections)
    missing = next(r for r in result.rejections if r.reason == "missing_file")
    assert missing.file.endswith(f"{ids[5].decode()}.wav")
    assert [e.line_number for e in result.entries][:2] == [1, 7]


def test_list_format_with_speakers_languages_and_relative_paths(tmp_path: Path, bundled_corpus: Path) -> None:
    wavs = sorted((bundled_corpus / "wavs").glob("*.wav"))[:4]
    for index, wav in enumerate(wavs):
        folder = tmp_path / "audio" / f"spk{index % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(wav, folder / "clip.wav" if index < 2 else folder / wav.name)
    (tmp_path / "lists").mkdir()
    list_file = tmp_path / "lists" / "train.txt"
    rows = ["../audio/spk0/clip.wav|first text|alice",
            "../audio/spk1/clip.wav|second text|bob|de",
            f"../audio/spk0/{wavs[2].name}|third text|alice|",
            "../audio/spk1/nothing.wav|fourth|bob",
            "no speaker field|x"]
    list_file.write_text("\n".join(rows) + "\n", encoding="utf-8")
    result = read_corpus(list_file, "list", language="fr")
    assert [e.id for e in result.entries] == ["../audio/spk0/clip.wav", "../audio/spk1/clip.wav",
                                              f"../audio/spk0/{wavs[2].name}"]
    assert [e.speaker for e in result.entries] == ["alice", "bob", "alice"]
    assert [e.language for e in result.entries] == ["fr", "de", "fr"]
    assert result.entries[0].audio_path == (tmp_path / "audio" / "spk0" / "clip.wav").resolve()
    assert [(r.line, r.reason) for r in result.rejections] == [(4, "missing_file"), (5, "wrong_field_count")]


def test_unusable_corpus_path_raises_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="metadata.csv not found"):
        read_corpus(tmp_path, "ljspeech")
    with pytest.raises(ValueError, match="not found"):
        read_corpus(tmp_path / "missing.txt", "list")


def test_list_ids_keep_the_extension_so_flac_and_ogg_do_not_collide(tmp_path: Path, bundled_corpus: Path) -> None:
    import soundfile

    wavs = sorted((bundled_corpus / "wavs").glob("*.wav"))
    (tmp_path / "audio").mkdir()
    for wav, suffix in zip(wavs[:2], ("flac", "ogg")):
        audio, rate = soundfile.read(str(wav), dtype="float32")
        soundfile.write(str(tmp_path / "audio" / f"clip.{suffix}"), audio, rate)
    list_file = tmp_path / "list.txt"
    list_file.write_text("audio/clip.flac|first text|alice\naudio/clip.ogg|second text|alice\n"
                         "audio/clip.flac|again|alice\n", encoding="utf-8")
    result = read_corpus(list_file, "list")
    assert [e.id for e in result.entries] == ["audio/clip.flac", "audio/clip.ogg"]
    assert [e.audio_path.suffix for e in result.entries] == [".flac", ".ogg"]
    assert [(r.line, r.reason) for r in result.rejections] == [(3, "duplicate_id")]
    assert "line 1" in result.rejections[0].message and f"{list_file}:3" in result.rejections[0].message

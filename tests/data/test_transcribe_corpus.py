"""`myxtts corpus transcribe`: one long recording made of bundled clips (pauses between them, and a long silence)
becomes clips cut near the clips' boundaries with their words, ready for prepare; a folder it did not write is
refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile

from myxtts.data.corpus import read_corpus
from myxtts.data.transcribe_corpus import cut_points, transcribe_recordings
from myxtts.evaluation.whisper_listener import corpus_word_error_rate, shared_listener

BUNDLED = Path(__file__).resolve().parents[2] / "data" / "ljspeech-bundled"
PAUSE, SILENCE = 0.6, 11.0  # seconds between clips; a stretch with no speech after the third clip


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """A FLAC of 6 bundled clips of 2-6 s in a row, and where each one starts and ends in it (seconds)."""
    rows = [line.split("|") for line in (BUNDLED / "metadata.csv").read_text(encoding="utf-8").splitlines()]
    pieces, spans, texts, position = [], [], [], 0.0
    for row in rows:
        audio, rate = soundfile.read(str(BUNDLED / "wavs" / f"{row[0]}.wav"), dtype="float32")
        if not 2.0 <= audio.size / rate <= 6.0:
            continue
        gap = SILENCE if len(spans) == 3 else PAUSE
        pieces += [np.zeros(int(gap * rate), np.float32), audio]
        spans.append((position + gap, position + gap + audio.size / rate))
        position += gap + audio.size / rate
        texts.append(row[2])
        if len(spans) == 6:
            break
    path = tmp_path_factory.mktemp("recording") / "reading.flac"
    soundfile.write(str(path), np.concatenate(pieces + [np.zeros(int(PAUSE * rate), np.float32)]), rate)
    return path, spans, texts


def test_a_recording_becomes_clips_cut_at_its_pauses(recording, tmp_path: Path) -> None:
    path, spans, texts = recording
    result = transcribe_recordings([path], tmp_path / "corpus", shared_listener(), speaker="reader",
                                   min_seconds=1.5, max_seconds=10.0, echo=lambda _: None)
    assert 4 <= len(result.kept) <= 8, result.kept
    # every cut lies in a pause between two bundled clips (or at most 0.3 s into a clip's own edge silence)
    boundaries = [(end, start) for (_, end), (start, _) in zip(spans, spans[1:])]
    for clip in result.kept:
        for edge in (clip.start, clip.end):
            inside = [s for s in spans if s[0] + 0.3 < edge < s[1] - 0.3]
            assert not inside or any(a - 0.3 <= edge <= b + 0.3 for a, b in boundaries), (edge, clip)
    heard = " ".join(clip.text for clip in result.kept)
    assert corpus_word_error_rate([" ".join(texts)], [heard]) < 0.2
    assert [s.reason for s in result.rejected] == ["silence"]  # the 11 s without a word
    corpus = read_corpus(result.list_file, "list")
    assert len(corpus.entries) == len(result.kept) and {e.speaker for e in corpus.entries} == {"reader"}
    for entry, clip in zip(corpus.entries, result.kept):
        info = soundfile.info(str(entry.audio_path))
        assert info.samplerate == 22050 and abs(info.duration - (clip.end - clip.start)) < 0.01
    # a second run into its own output replaces it; a folder of other files is refused, naming them
    again = transcribe_recordings([path], tmp_path / "corpus", shared_listener(), min_seconds=1.5, echo=lambda _: None)
    assert len(again.kept) == len(result.kept)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me", encoding="utf-8")
    with pytest.raises(ValueError, match="notes.txt"):
        transcribe_recordings([path], tmp_path / "mine", shared_listener(), echo=lambda _: None)
    assert (tmp_path / "mine" / "notes.txt").read_text(encoding="utf-8") == "keep me"


class _Word:
    def __init__(self, text: str, start: float, end: float) -> None:
        self.text, self.start, self.end, self.probability = text, start, end, 0.9


def test_cuts_prefer_a_sentence_end_and_keep_within_the_limits() -> None:
    # 1 s words; a comma pause at 3 s, a sentence end at 5 s, a long bare pause at 7 s
    words = [_Word("one", 0, 1), _Word("two", 1.1, 2), _Word("three,", 2.1, 3), _Word("four", 3.3, 4),
             _Word("five.", 4.1, 5), _Word("six", 5.3, 6), _Word("seven", 6.1, 7), _Word("eight", 8.0, 9),
             _Word("nine.", 9.1, 10)]
    clips = cut_points(words, min_seconds=2.0, max_seconds=6.0)
    assert clips == [(0, 4), (5, 8)]  # the sentence end at 5 s wins over the comma and the bare pauses
    assert all(words[b].end - words[a].start <= 6.0 for a, b in clips)


class _FixedListener:
    """Hears the same two sentences in any recording: the clips' names are under test, not Whisper."""

    model_name = "fixed"

    def transcribe_words(self, waveform, sample_rate):
        words = "This is the first sentence. And here is the second one.".split()
        return [_Word(word, 0.3 + 0.5 * index, 0.7 + 0.5 * index) for index, word in enumerate(words)]


def test_clip_names_from_any_recording_name_stay_plain_and_inside(tmp_path: Path) -> None:
    """A recording named with spaces and ':' gives clips named plainly (no space or '|' in list.txt) inside
    OUT/wavs/, which prepare reads back."""
    from myxtts.outputs import safe_file_name

    recording = tmp_path / "take 1: intro.wav"
    soundfile.write(str(recording), np.zeros(22050 * 6, np.float32), 22050)
    result = transcribe_recordings([recording], tmp_path / "corpus", _FixedListener(), min_seconds=1.0,
                                   max_seconds=4.0, echo=lambda _: None)
    assert result.kept and all(clip.file.startswith(f"wavs/{safe_file_name('take 1: intro')}_")
                               for clip in result.kept)
    assert all((tmp_path / "corpus" / clip.file).is_file() for clip in result.kept)
    assert len(read_corpus(result.list_file, "list").entries) == len(result.kept)

"""``myxtts corpus transcribe``: recordings of one speaker with no transcripts -> a list corpus ready for ``prepare``.

For each recording (any format libsndfile reads, minutes long), in order:

1. Whisper hears it with word timestamps (``evaluation.whisper_listener``, the ``whisper`` or ``judge`` extra).
2. The words are cut into clips of ``min_seconds`` to ``max_seconds`` at pauses between words: a clip ends at the
   gap that scores best among those that keep it within the limits (a sentence end beats a comma, which beats a
   bare pause; a longer gap beats a shorter one), and the cut lies in the middle of that gap, so no word is split.
   A run of words with no usable gap inside ``max_seconds`` is cut at its widest gap.
3. Each clip is kept or rejected, with the reason: ``silence`` (a stretch of at least ``max_seconds`` with no word,
   whatever it holds), ``music`` (Whisper's music marks or no letters), ``low_confidence`` (the mean word
   probability under ``min_confidence``), ``too_short`` / ``too_long`` (after cutting).
4. Kept clips are written as 16-bit WAV at the recording's own rate (``prepare`` resamples), ``list.txt``
   (``path|text|speaker``) and ``rejected.csv`` (recording, start, end, reason, text) beside them.

The output folder must be new or empty, or an earlier output of this command (its ``transcribed.json`` says so);
nothing else is ever overwritten.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import soundfile

from myxtts.durable import write_durably
from myxtts.errors import InputError
from myxtts.outputs import check_corpus_folder, path_in_folder, safe_file_name

MARKER_FILE = "transcribed.json"
SENTENCE_END = re.compile(r"[.!?]['\")\]]*$")
CLAUSE_END = re.compile(r"[,;:]['\")\]]*$")
MUSIC = re.compile(r"[♪♫]|\[(music|applause|laughter|noise)\]|\((music|applause)\)", re.IGNORECASE)
EDGE_SECONDS = 0.15  # audio kept before a clip's first word and after its last, at most (half the gap otherwise)


@dataclass(frozen=True)
class Segment:
    """One cut: seconds in its recording, the words' text and mean probability, and its verdict."""

    recording: str
    start: float
    end: float
    text: str
    confidence: float
    reason: str = ""  # "" = kept; else why it was rejected
    file: str = ""  # the clip's path relative to the output folder (kept clips)


@dataclass
class TranscribeResult:
    out_dir: Path
    list_file: Path
    kept: list[Segment] = field(default_factory=list)
    rejected: list[Segment] = field(default_factory=list)

    def summary(self) -> str:
        seconds = sum(s.end - s.start for s in self.kept)
        reasons: dict[str, int] = {}
        for segment in self.rejected:
            reasons[segment.reason] = reasons.get(segment.reason, 0) + 1
        rejected = ", ".join(f"{reason}: {count}" for reason, count in sorted(reasons.items())) or "none"
        return (f"kept {len(self.kept)} clip(s), {seconds / 60:.1f} minutes, in {self.list_file}; rejected "
                f"{len(self.rejected)} ({rejected}; see {self.out_dir / 'rejected.csv'})")


def cut_points(words: Sequence, min_seconds: float, max_seconds: float) -> list[tuple[int, int]]:
    """Clips as [first word, last word] index pairs (inclusive) over ``words`` (``.start``, ``.end``, ``.text``)."""
    clips, first = [], 0
    while first < len(words):
        best, best_score = None, None
        last = first
        while last < len(words) and words[last].end - words[first].start <= max_seconds:
            gap = (words[last + 1].start - words[last].end) if last + 1 < len(words) else float("inf")
            if words[last].end - words[first].start >= min_seconds and (gap >= 0.15 or last + 1 == len(words)):
                text = words[last].text
                kind = 2.0 if SENTENCE_END.search(text) else 1.0 if CLAUSE_END.search(text) else 0.0
                score = (kind, min(gap, 2.0))
                if best_score is None or score >= best_score:
                    best, best_score = last, score
            last += 1
        if best is None:  # no usable gap inside max_seconds: the widest gap in reach (or the end)
            reach = max(last, first + 1)
            gaps = [(words[i + 1].start - words[i].end, i) for i in range(first, min(reach, len(words) - 1))]
            best = max(gaps)[1] if gaps else len(words) - 1
        clips.append((first, best))
        first = best + 1
    return clips


def _clip_bounds(words: Sequence, first: int, last: int, duration: float) -> tuple[float, float]:
    """Audio seconds of a clip: its words, widened into the neighbouring gaps (half of each, at most EDGE_SECONDS)."""
    before = words[first - 1].end if first > 0 else 0.0
    after = words[last + 1].start if last + 1 < len(words) else duration
    start = max(words[first].start - min(EDGE_SECONDS, (words[first].start - before) / 2), 0.0)
    end = min(words[last].end + min(EDGE_SECONDS, (after - words[last].end) / 2), duration)
    return start, end


def segment_recording(name: str, words: Sequence, duration: float, min_seconds: float, max_seconds: float,
                      min_confidence: float) -> list[Segment]:
    """Every clip of one recording with its verdict, and the stretches without words (``silence``)."""
    segments = []
    previous_end = 0.0
    for first, last in cut_points(words, min_seconds, max_seconds):
        start, end = _clip_bounds(words, first, last, duration)
        if words[first].start - previous_end >= max_seconds:
            segments.append(Segment(name, previous_end, words[first].start, "", 0.0, "silence"))
        previous_end = words[last].end
        chosen = words[first:last + 1]
        text = " ".join(word.text for word in chosen).strip()
        confidence = float(np.mean([word.probability for word in chosen]))
        reason = ""
        if MUSIC.search(text) or not re.search(r"[A-Za-z]", text):
            reason = "music"
        elif confidence < min_confidence:
            reason = "low_confidence"
        elif end - start < min_seconds:
            reason = "too_short"
        elif end - start > max_seconds + 2 * EDGE_SECONDS:
            reason = "too_long"
        segments.append(Segment(name, round(start, 3), round(end, 3), text, round(confidence, 3), reason))
    if duration - previous_end >= max_seconds:
        segments.append(Segment(name, previous_end, duration, "", 0.0, "silence"))
    return segments


def check_out_dir(out_dir: Path) -> None:
    """A new or empty folder, or this command's earlier output (``outputs.check_corpus_folder``; its
    ``transcribed.json`` says so); anything else is refused, naming what is there."""
    check_corpus_folder(out_dir, "corpus transcribe", earlier=lambda folder: (folder / MARKER_FILE).is_file())


def _remove_earlier_clips(out_dir: Path) -> None:
    """An earlier output of this command: the clips its list.txt names go (nothing else in the folder)."""
    earlier = out_dir / "list.txt"
    if not (out_dir / MARKER_FILE).is_file() or not earlier.is_file():
        return
    for line in earlier.read_text(encoding="utf-8").splitlines():
        file = line.split("|", 1)[0]
        if re.fullmatch(r"wavs/[\w.\-]+\.wav", file):
            (out_dir / file).unlink(missing_ok=True)


def transcribe_recordings(recordings: Sequence[str | Path], out_dir: str | Path, listener, speaker: str = "speaker",
                          min_seconds: float = 2.0, max_seconds: float = 10.0, min_confidence: float = 0.5,
                          echo: Callable[[str], None] = print) -> TranscribeResult:
    """See the module docstring. ``listener``: a ``WhisperListener``."""
    if not 0.5 <= min_seconds < max_seconds:
        raise InputError(f"--min-seconds ({min_seconds}) must be at least 0.5 and below --max-seconds ({max_seconds}).")
    if not re.fullmatch(r"[\w.\-]+", speaker):
        raise InputError(f"--speaker {speaker!r}: letters, digits, '.', '-' or '_' only.")
    out_dir = Path(out_dir)
    check_out_dir(out_dir)
    paths = [Path(p) for p in recordings]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise InputError(f"Recording not found: {missing[0]}.")
    # each recording's clips are named from its file name, made a plain name (no space, '|' or ':' in list.txt)
    stems = {path: safe_file_name(path.stem) for path in paths}
    if len(set(stems.values())) != len(paths):
        raise InputError("Two recordings share a file name; their clips would collide: rename one.")
    _remove_earlier_clips(out_dir)
    (out_dir / "wavs").mkdir(parents=True, exist_ok=True)
    write_durably(out_dir / MARKER_FILE, json.dumps({"command": "myxtts corpus transcribe", "model": listener.model_name,
                                                     "recordings": [str(p) for p in paths]}, indent=1))
    result = TranscribeResult(out_dir, out_dir / "list.txt")
    for path in paths:
        try:
            audio, rate = soundfile.read(str(path), dtype="float32", always_2d=True)  # [samples, channels]
        except (soundfile.LibsndfileError, RuntimeError) as err:
            raise InputError(f"{path}: cannot decode the audio ({err}); convert it to WAV or FLAC.") from None
        mono = audio.mean(axis=1) if audio.shape[1] > 1 else audio[:, 0]  # [samples]
        words = listener.transcribe_words(mono, rate)
        duration = mono.size / rate
        echo(f"{path}: {duration / 60:.1f} minutes, {len(words)} words heard")
        if not words:
            result.rejected.append(Segment(path.name, 0.0, duration, "", 0.0, "silence"))
            continue
        for number, segment in enumerate(segment_recording(path.name, words, duration, min_seconds, max_seconds,
                                                           min_confidence)):
            if segment.reason:
                result.rejected.append(segment)
                continue
            target = path_in_folder(out_dir / "wavs", f"{stems[path]}_{number:04d}.wav")
            file = target.relative_to(out_dir).as_posix()
            piece = mono[int(segment.start * rate):int(np.ceil(segment.end * rate))]
            buffer = io.BytesIO()
            soundfile.write(buffer, piece, rate, format="WAV", subtype="PCM_16")
            write_durably(target, buffer.getvalue())
            result.kept.append(Segment(**{**segment.__dict__, "file": file}))
    lines = [f"{s.file}|{s.text}|{speaker}" for s in result.kept]
    write_durably(result.list_file, "\n".join(lines) + ("\n" if lines else ""))
    table = io.StringIO()
    writer = csv.writer(table)
    writer.writerow(["recording", "start", "end", "reason", "confidence", "text"])
    for s in result.rejected:
        writer.writerow([s.recording, s.start, s.end, s.reason, s.confidence, s.text])
    write_durably(out_dir / "rejected.csv", table.getvalue())
    return result

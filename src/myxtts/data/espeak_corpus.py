"""A synthetic multi-speaker corpus: sentences rendered by espeak-ng in clearly different voices.

espeak-ng is the library bundled by the ``espeakng-loader`` wheel (``myxtts.espeak``, no system package):
each clip is rendered by a freshly initialised instance, so it is what ``espeak-ng -w`` would write and does
not depend on the clips rendered before it.

Output (the ``list`` corpus layout of ``myxtts.data.corpus.read_list``)::

    OUT/list.txt                 wavs/<speaker>/<id>.wav|text|speaker   (paths relative to OUT)
    OUT/wavs/<speaker>/<id>.wav  22050 Hz mono 16-bit PCM (espeak-ng's native rate)

Each sentence is spoken by one voice; the assignment is a seeded shuffle dealt round-robin, so every
voice gets the same number of sentences (+-1) and the same seed gives the same corpus. Files already
on disk are reused, so a rerun (or a larger ``--sentences``) only renders what is missing. ``OUT`` must be new,
empty or an earlier output of this command (``outputs.check_corpus_folder``; its ``.myxtts.json`` says so, or for
one rendered before markers, a ``list.txt`` of this layout and nothing else): any other folder is refused before
anything is written.
Voices differ in espeak variant (formants, breathiness), accent, pitch and speed: a speaker-similarity
measure must be able to tell them apart (``tests/evaluation/test_listening.py`` checks it does).
"""

from __future__ import annotations

import os
import queue
import random
import re
import wave
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from tqdm import tqdm

from myxtts.durable import write_durably
from myxtts.errors import InputError, SetupError
from myxtts.espeak import EspeakUnavailableError, Renderer, UnknownVoiceError
from myxtts.outputs import CORPUS, check_corpus_folder, path_in_folder, safe_file_name, write_marker

LIST_FILE = "list.txt"
COMMAND = "corpus espeak"
_RENDERED_LINE = re.compile(r"wavs/([\w.\-]+)/[^/|]+\.wav\|[^|]*\|\1")  # OUT/list.txt's lines: path|text|voice
BUNDLED_TRANSCRIPTS = Path(__file__).resolve().parents[3] / "data" / "ljspeech-bundled" / "metadata.csv"


@dataclass(frozen=True)
class EspeakVoice:
    """A speaker of the corpus: its name (the list file's speaker field) and how espeak-ng renders it."""

    name: str
    voice: str  # espeak-ng voice: language + variant, e.g. en-us+f2 (variants: espeak-ng-data/voices/!v)
    pitch: int  # 0..99 (espeak's default 50; ``espeak-ng -p``)
    speed: int  # words per minute (espeak's default 175; ``espeak-ng -s``)

    def render(self, renderer, text: str) -> np.ndarray:
        """int16 samples at ``SAMPLE_RATE`` (``renderer``: a ``myxtts.espeak.Renderer``)."""
        return renderer.render(text, self.voice, rate=self.speed, pitch=self.pitch)

    def write(self, renderer, text: str, out_path: str | os.PathLike) -> None:
        """Render ``text`` into a 22050 Hz mono 16-bit wav (EspeakRenderError when no audio comes out)."""
        try:
            samples = self.render(renderer, text)
        except UnknownVoiceError as err:
            raise EspeakRenderError(f"espeak-ng cannot render {out_path}: {err} (voice {self.name!r}).") from None
        if samples.size == 0 or not np.any(samples):
            raise EspeakRenderError(f"espeak-ng wrote no audio for {out_path} with voice {self.voice!r} "
                                    f"(text {text[:60]!r}).")
        write_wav(out_path, samples, renderer.sample_rate)


# Ordered so that any prefix holds clearly different voices: male / female alternate, accents (American, New York,
# British, RP, Scottish, Lancastrian, West Midlands, Caribbean) and pitches spread out. The first 24 train the base
# model (configs/base-espeak.yaml); HELD_OUT_VOICES never do: the zero-shot voices.
VOICES = (
    EspeakVoice("us_m3", "en-us+m3", pitch=35, speed=165),
    EspeakVoice("us_f2", "en-us+f2", pitch=60, speed=175),
    EspeakVoice("gb_m1", "en-gb+m1", pitch=50, speed=160),
    EspeakVoice("us_f4", "en-us+f4", pitch=80, speed=185),
    EspeakVoice("scot_m7", "en-gb-scotland+m7", pitch=25, speed=160),
    EspeakVoice("rp_f3", "en-gb-x-rp+f3", pitch=35, speed=170),
    EspeakVoice("us_m6", "en-us+m6", pitch=65, speed=190),
    EspeakVoice("gb_f1", "en-gb+f1", pitch=70, speed=160),
    EspeakVoice("car_m2", "en-029+m2", pitch=45, speed=170),
    EspeakVoice("nyc_f5", "en-us-nyc+f5", pitch=55, speed=180),
    EspeakVoice("lan_m4", "en-gb-x-gbclan+m4", pitch=40, speed=175),
    EspeakVoice("wmd_f2", "en-gb-x-gbcwmd+f2", pitch=75, speed=165),
    EspeakVoice("rp_m5", "en-gb-x-rp+m5", pitch=30, speed=155),
    EspeakVoice("scot_f4", "en-gb-scotland+f4", pitch=60, speed=170),
    EspeakVoice("us_m8", "en-us+m8", pitch=50, speed=150),
    EspeakVoice("car_f1", "en-029+f1", pitch=85, speed=175),
    EspeakVoice("nyc_m1", "en-us-nyc+m1", pitch=60, speed=185),
    EspeakVoice("gb_f5", "en-gb+f5", pitch=45, speed=190),
    EspeakVoice("wmd_m3", "en-gb-x-gbcwmd+m3", pitch=20, speed=165),
    EspeakVoice("lan_f3", "en-gb-x-gbclan+f3", pitch=65, speed=155),
    EspeakVoice("us_klatt", "en-us+klatt", pitch=45, speed=170),
    EspeakVoice("rp_f1", "en-gb-x-rp+f1", pitch=50, speed=180),
    EspeakVoice("gb_m6", "en-gb+m6", pitch=35, speed=185),
    EspeakVoice("us_f3", "en-us+f3", pitch=70, speed=160),
)
HELD_OUT_VOICES = (
    EspeakVoice("scot_m2", "en-gb-scotland+m2", pitch=40, speed=175),
    EspeakVoice("nyc_f4", "en-us-nyc+f4", pitch=65, speed=165),
    EspeakVoice("car_m7", "en-029+m7", pitch=30, speed=180),
    EspeakVoice("wmd_f5", "en-gb-x-gbcwmd+f5", pitch=55, speed=170),
)


SAMPLE_RATE = 22050  # espeak-ng's output rate


class EspeakMissingError(SetupError):
    """The bundled espeak-ng library (``espeakng-loader``) cannot be loaded."""


class EspeakRenderError(SetupError):
    """espeak-ng wrote no audio (an unknown voice or variant, a failure of the library)."""


@dataclass(frozen=True)
class Sentence:
    id: str
    text: str


@dataclass
class RenderResult:
    list_file: Path
    clips: int
    rendered: int  # new files written by this call
    reused: int  # files already on disk
    speakers: dict[str, int]  # speaker -> clips

    def summary(self) -> str:
        voices = ", ".join(f"{name}: {count}" for name, count in self.speakers.items())
        return (f"{self.clips} clips ({self.rendered} rendered, {self.reused} reused) in {self.list_file}; "
                f"{len(self.speakers)} speakers ({voices})")


def open_renderer():
    """A ``myxtts.espeak.Renderer`` (a context manager); EspeakMissingError when the library cannot be loaded."""
    try:
        renderer = Renderer()
    except EspeakUnavailableError as err:
        raise EspeakMissingError(f"espeak-ng renders the synthetic corpus, but {err}") from None
    if renderer.sample_rate != SAMPLE_RATE:
        renderer.close()
        raise EspeakMissingError(f"The bundled espeak-ng renders at {renderer.sample_rate} Hz, not {SAMPLE_RATE} Hz.")
    return renderer


def write_wav(path: str | os.PathLike, samples: np.ndarray, sample_rate: int = SAMPLE_RATE) -> None:
    """Mono 16-bit PCM, written to ``path.partial`` then renamed (a killed run never leaves a truncated wav)."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    with wave.open(str(partial), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(sample_rate)
        out.writeframes(np.asarray(samples, dtype="<i2").tobytes())
    os.replace(partial, path)


def read_transcripts(path: str | os.PathLike) -> list[Sentence]:
    """Sentences of an LJSpeech-style ``id|text|normalized`` file (the normalized text when present)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"Transcripts file not found: {path} (expected 'id|text|normalized' lines).")
    try:
        content = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not valid UTF-8 at byte {err.start}; re-save the file as UTF-8.") from None
    sentences = []
    for line_number, line in enumerate(content.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) < 2 or not fields[0].strip():
            raise InputError(f"{path}:{line_number}: expected 'id|text|normalized' (or 'id|text'), got {line!r}.")
        text = (fields[2] if len(fields) > 2 and fields[2].strip() else fields[1]).strip()
        if text:
            sentences.append(Sentence(fields[0].strip(), text))
    if not sentences:
        raise InputError(f"{path} holds no sentence ('id|text|normalized' lines).")
    return sentences


def bundled_sentences() -> list[Sentence]:
    """The 32 transcripts of the bundled LJSpeech clips (always available, no download needed)."""
    return read_transcripts(BUNDLED_TRANSCRIPTS)


def select_sentences(sentences: Sequence[Sentence], count: int | None, seed: int = 0, min_chars: int = 10,
                     max_chars: int = 150) -> list[Sentence]:
    """``count`` sentences (all when None) with ``min_chars <= len(text) <= max_chars``, a seeded sample kept
    in source order. 150 characters (LJSpeech's 95th percentile) last at most ~9.5 s at 160 words per
    minute, the slowest voice: under ``data.max_mel_frames`` 880 (10.2 s), which would skip longer clips."""
    fitting = [s for s in sentences if min_chars <= len(s.text) <= max_chars]
    if count is None or count >= len(fitting):
        if count is not None and count > len(fitting):
            raise InputError(f"Asked for {count} sentences but only {len(fitting)} of {len(sentences)} have "
                             f"{min_chars}-{max_chars} characters.")
        return list(fitting)
    chosen = set(random.Random(seed).sample(range(len(fitting)), count))
    return [s for index, s in enumerate(fitting) if index in chosen]


def assign_voices(sentences: Sequence[Sentence], voices: Sequence[EspeakVoice], seed: int = 0) -> list[EspeakVoice]:
    """The voice of each sentence: a seeded shuffle dealt round-robin (each voice gets len / voices +-1)."""
    order = list(range(len(sentences)))
    random.Random(seed).shuffle(order)
    assigned: list[EspeakVoice | None] = [None] * len(sentences)
    for position, index in enumerate(order):
        assigned[index] = voices[position % len(voices)]
    return assigned  # type: ignore[return-value]


def _render_one(renderers: "queue.SimpleQueue", voice: EspeakVoice, text: str, target: Path) -> None:
    renderer = renderers.get()  # one renderer (its own copy of the library) per running thread
    try:
        voice.write(renderer, text, target)
    finally:
        renderers.put(renderer)


def is_earlier_render(out_dir: Path) -> bool:
    """A corpus this command rendered before its output was marked: ``list.txt`` of its layout and ``wavs/`` of
    voice folders, nothing else."""
    names = {path.name for path in out_dir.iterdir()}
    if not names <= {LIST_FILE, "wavs"} or LIST_FILE not in names:
        return False
    try:
        lines = (out_dir / LIST_FILE).read_text(encoding="utf-8").splitlines()
    except (OSError, ValueError):
        return False
    return bool(lines) and all(_RENDERED_LINE.fullmatch(line) for line in lines)


def render_corpus(sentences: Sequence[Sentence], voices: Sequence[EspeakVoice] | int, out_dir: str | os.PathLike,
                  jobs: int = 2, seed: int = 0, progress: bool = True) -> RenderResult:
    """Render each sentence with its assigned voice into ``out_dir`` and write ``out_dir/list.txt``.

    ``voices``: the voices, or how many of ``VOICES`` to use (2..24). ``jobs`` threads render at once, each
    with its own copy of the library. Existing wav files are kept (delete ``out_dir`` to re-render with
    changed voice settings).
    """
    if isinstance(voices, int):
        if not 2 <= voices <= len(VOICES):
            raise ValueError(f"voices must be between 2 and {len(VOICES)}, got {voices}.")
        voices = VOICES[:voices]
    voices = list(voices)
    if len({voice.name for voice in voices}) != len(voices):
        raise ValueError(f"Voice names must be unique: {[voice.name for voice in voices]}.")
    if len(sentences) < len(voices):
        raise InputError(f"{len(sentences)} sentences cannot give each of {len(voices)} voices a sentence: ask for "
                         "more sentences or fewer voices.")
    seen: set[str] = set()
    for sentence in sentences:
        if sentence.id in seen:
            raise InputError(f"Sentence ids must be unique (they name the wav files); {sentence.id!r} is repeated.")
        seen.add(sentence.id)
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}.")
    for sentence in sentences:
        if "|" in sentence.text or "\n" in sentence.text:
            raise InputError(f"Sentence {sentence.id!r} cannot go in a list file ('|' or a newline in its text).")
    out_dir = Path(out_dir)
    if check_corpus_folder(out_dir, COMMAND, earlier=is_earlier_render):
        out_dir.mkdir(parents=True, exist_ok=True)
        write_marker(out_dir, COMMAND, CORPUS)
    assigned = assign_voices(sentences, voices, seed)
    # a wav named from the sentence id, which the transcripts file chose: made a plain name, kept in its voice folder
    targets = [path_in_folder(out_dir / "wavs" / voice.name, f"{safe_file_name(sentence.id)}.wav")
               for sentence, voice in zip(sentences, assigned)]
    for voice in voices:
        (out_dir / "wavs" / voice.name).mkdir(parents=True, exist_ok=True)
    missing = [i for i, target in enumerate(targets) if not (target.is_file() and target.stat().st_size > 44)]

    renderers: queue.SimpleQueue = queue.SimpleQueue()
    opened = []
    try:
        for _ in range(min(jobs, len(missing)) if missing else 0):
            opened.append(open_renderer())
            renderers.put(opened[-1])
        with ThreadPoolExecutor(max_workers=max(1, len(opened))) as pool, \
                tqdm(total=len(missing), desc="espeak-ng", unit="clip", disable=not progress) as bar:
            futures = [pool.submit(_render_one, renderers, assigned[i], sentences[i].text, targets[i])
                       for i in missing]
            try:
                for future in futures:
                    future.result()  # re-raises the first failure, naming the file and voice
                    bar.update(1)
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
    finally:
        for renderer in opened:
            renderer.close()

    lines = [f"{target.relative_to(out_dir).as_posix()}|{sentence.text}|{voice.name}"
             for sentence, voice, target in zip(sentences, assigned, targets)]
    list_file = out_dir / LIST_FILE
    write_durably(list_file, "\n".join(lines) + "\n")
    speakers = {voice.name: sum(1 for other in assigned if other.name == voice.name) for voice in voices}
    return RenderResult(list_file, len(targets), len(missing), len(targets) - len(missing), speakers)

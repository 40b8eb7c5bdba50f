"""One clip of ``myxtts prepare``: validated (audio decodes, finite, duration within limits, not silent, text
encodes), its log mel and F0 track computed and written to its utterance file, or a ``Rejection`` naming why not;
and the verdicts of a whole corpus: known from the previous cache or the journal, or processed on threads."""

from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import soundfile
from tqdm import tqdm

from myxtts.cache_files import UTTERANCE_DIR
from myxtts.data.cache import audio_file, write_audio, write_utterance
from myxtts.data.corpus import CorpusEntry, Rejection
from myxtts.durable import reached
from myxtts.data.fingerprint import CorpusDiff
from myxtts.data.journal import PrepareJournal, clip_from_file
from myxtts.data.language import TextProcessors
from myxtts.text import TextError

# Reason codes added by prepare (audio reasons come from AudioError.reason, text ones from TextError.reason)
TOO_SHORT = "too_short"
TOO_LONG = "too_long"
SILENT = "silent"
NON_FINITE = "non_finite"


def validate_clip(entry: CorpusEntry, cfg: Any, text_processor: Any) -> tuple[np.ndarray, list[int]] | Rejection:
    """(waveform [samples] float32, token ids) for a usable clip, else the Rejection saying why."""
    # imports TensorFlow: an up-to-date prepare never loads it
    from myxtts.audio import AudioError, AudioTooLongError, load_audio

    d = cfg.data
    sample_rate = cfg.audio.sample_rate

    def reject(reason: str, detail: str, file: Path | str = entry.audio_path) -> Rejection:
        return Rejection(str(file), entry.line_number, reason, f"line {entry.line_number} ('{entry.id}'): {detail}")

    try:  # a clip over data.max_duration is refused from its header, before it is decoded
        waveform = load_audio(entry.audio_path, sample_rate, max_seconds=d.max_duration)  # [samples], mono, resampled
    except AudioTooLongError as err:
        return reject(TOO_LONG, f"{entry.audio_path}: {'' if err.exact else 'at least '}{err.seconds:.3f} s is "
                      f"longer than data.max_duration = {d.max_duration} s")
    except AudioError as err:
        return reject(err.reason, str(err))
    if not np.all(np.isfinite(waveform)):
        return reject(NON_FINITE, f"{entry.audio_path}: NaN or Inf samples after resampling")
    duration = waveform.shape[0] / sample_rate
    if duration < d.min_duration:
        return reject(TOO_SHORT, f"{entry.audio_path}: {duration:.3f} s is shorter than data.min_duration "
                      f"= {d.min_duration} s")
    peak = float(np.max(np.abs(waveform)))
    peak_db = 20.0 * np.log10(peak) if peak > 0 else -np.inf
    if peak_db < d.silence_threshold_db:
        return reject(SILENT, f"{entry.audio_path}: peak {peak_db:.1f} dBFS is below "
                      f"data.silence_threshold_db = {d.silence_threshold_db} dBFS (silent clip)")
    try:
        tokens = text_processor.encode(entry.text)
    except TextError as err:
        return reject(err.reason, f"text {entry.text!r}: {err}")
    return waveform, list(tokens)


@dataclass
class Clip:
    """What the cache index keeps per accepted utterance."""

    tokens: list[int]
    frames: int
    samples: int
    file: str  # relative to the cache dir


def _utterance_file(utterance_id: str, fingerprint: str, feature_hash: str) -> str:
    key = hashlib.sha256(f"{utterance_id}\0{fingerprint}\0{feature_hash}".encode("utf-8")).hexdigest()[:24]
    return f"{UTTERANCE_DIR}/{key[:2]}/{key}.utt"


def process_clip(entry: CorpusEntry, fingerprint: str, cfg: Any, processors: TextProcessors, frontend: Any,
                  cache_dir: Path, feature_hash: str) -> Clip | Rejection:
    """Validate, compute the mel and F0, write the clip's audio and utterance files (runs in a worker thread)."""
    from myxtts.f0.tracker import clip_f0  # imports TensorFlow: an up-to-date prepare never loads it

    checked = validate_clip(entry, cfg, processors.for_language(entry.language))
    if isinstance(checked, Rejection):
        return checked
    waveform, tokens = checked
    mel = frontend.batch([waveform])[0]  # [frames, n_mels] float32 (TF releases the GIL: threads overlap)
    file = _utterance_file(entry.id, fingerprint, feature_hash)
    write_audio(cache_dir / audio_file(file), waveform, cfg.audio.sample_rate)  # first: a whole .utt implies its audio
    # F0 of the audio as stored (16-bit), so the track is the one teacher forcing computes from the .wav later
    stored, _ = soundfile.read(str(cache_dir / audio_file(file)), dtype="float32")  # [samples]
    pitch = clip_f0(stored, mel.shape[0], cfg.audio.sample_rate, cfg.audio.hop_length)  # [frames] Hz, 0 unvoiced
    write_utterance(cache_dir / file, np.asarray(tokens, np.int32), mel, pitch)
    return Clip(list(tokens), int(mel.shape[0]), int(waveform.shape[0]), file)


def rejection_detail(utterance_id: str, rejection: Rejection) -> str:
    """The rejection's message without its "line N ('id'): " prefix (line numbers move when a corpus changes)."""
    prefix = f"line {rejection.line} ('{utterance_id}'): "
    return rejection.message[len(prefix):] if rejection.message.startswith(prefix) else rejection.message


def rejected_again(entry: CorpusEntry, reason: str, file: str, detail: str) -> Rejection:
    """A verdict recorded earlier, for the clip's line in the corpus as it is now."""
    return Rejection(file, entry.line_number, reason, f"line {entry.line_number} ('{entry.id}'): {detail}")


@dataclass
class Verdicts:
    """What became of each corpus entry: accepted clips and rejections, reused from the previous cache, resumed
    from the journal of a stopped prepare, or processed now."""

    clips: dict[str, Clip] = field(default_factory=dict)
    rejections: dict[str, Rejection] = field(default_factory=dict)
    todo: list[CorpusEntry] = field(default_factory=list)  # corpus entries this build processes
    reused: list[str] = field(default_factory=list)  # ids whose verdict the previous cache holds
    resumed: int = 0  # entries a stopped prepare had finished
    seconds: float = 0.0  # processing ``todo``


def known_verdicts(entries: list[CorpusEntry], previous: dict[str, Any], kept: dict[str, Clip], diff: CorpusDiff,
                   finished: dict[str, dict[str, Any]], cache_dir: Path) -> Verdicts:
    """The verdicts known without processing (an unchanged clip's from the previous cache, a finished one's from
    the journal); every other entry goes to ``todo``."""
    verdicts = Verdicts()
    unchanged = set(diff.unchanged)
    for entry in entries:
        old = previous.get(entry.id)
        if entry.id in unchanged and entry.id in kept:
            verdicts.clips[entry.id] = kept[entry.id]
            verdicts.reused.append(entry.id)
        elif entry.id in unchanged and old is not None and "rejected" in old:
            verdicts.rejections[entry.id] = rejected_again(entry, *old["rejected"])  # same verdict, new line number
            verdicts.reused.append(entry.id)
        elif entry.id in finished:
            record = finished[entry.id]
            verdicts.resumed += 1
            if "rejected" in record:
                verdicts.rejections[entry.id] = rejected_again(entry, *record["rejected"])
            else:
                tokens, frames = clip_from_file(cache_dir, record["file"])
                verdicts.clips[entry.id] = Clip(tokens, frames, int(record["samples"]), record["file"])
        else:
            verdicts.todo.append(entry)
    return verdicts


def process_clips(cfg: Any, cache_dir: Path, verdicts: Verdicts, fingerprints: dict[str, str],
                  processors: TextProcessors, journal: PrepareJournal, *, progress: bool, workers: int) -> None:
    """Process the ``todo`` entries on ``workers`` threads, journalling each verdict as it is final (``journal``
    open)."""
    from myxtts.mel import MelFrontend  # imports TensorFlow: an up-to-date prepare never loads it

    frontend = MelFrontend(cfg.audio)
    feature_hash = cfg.feature_hash()
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = pool.map(lambda e: process_clip(e, fingerprints[e.id], cfg, processors, frontend, cache_dir,
                                                   feature_hash), verdicts.todo)
        for entry, result in tqdm(zip(verdicts.todo, results), total=len(verdicts.todo), desc="prepare",
                                  unit="clip", disable=not progress, leave=False):
            if isinstance(result, Rejection):
                verdicts.rejections[entry.id] = result
                journal.rejected(entry.id, fingerprints[entry.id], result.reason, result.file,
                                 rejection_detail(entry.id, result))
            else:
                verdicts.clips[entry.id] = result
                journal.accepted(entry.id, fingerprints[entry.id], result.file, result.samples)
            reached("clip")
    verdicts.seconds = time.perf_counter() - started

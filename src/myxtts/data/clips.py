"""One clip of ``myxtts prepare``: validated (audio decodes, finite, duration within limits, not silent, text
encodes), its log mel computed and written to its utterance file, or a ``Rejection`` naming why not."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from myxtts.data.cache import UTTERANCE_DIR, audio_file, write_audio, write_utterance
from myxtts.data.corpus import CorpusEntry, Rejection
from myxtts.data.language import TextProcessors

# Reason codes added by prepare (audio reasons come from AudioError.reason, text ones from TextError.reason)
TOO_SHORT = "too_short"
TOO_LONG = "too_long"
SILENT = "silent"
NON_FINITE = "non_finite"


def validate_clip(entry: CorpusEntry, cfg: Any, text_processor: Any) -> tuple[np.ndarray, list[int]] | Rejection:
    """(waveform [samples] float32, token ids) for a usable clip, else the Rejection saying why."""
    from myxtts.audio import AudioError, load_audio
    from myxtts.text import TextError

    d = cfg.data
    sample_rate = cfg.audio.sample_rate

    def reject(reason: str, detail: str, file: Path | str = entry.audio_path) -> Rejection:
        return Rejection(str(file), entry.line_number, reason, f"line {entry.line_number} ('{entry.id}'): {detail}")

    try:
        waveform = load_audio(entry.audio_path, sample_rate)  # [samples], mono, resampled
    except AudioError as err:
        return reject(err.reason, str(err))
    if not np.all(np.isfinite(waveform)):
        return reject(NON_FINITE, f"{entry.audio_path}: NaN or Inf samples after resampling")
    duration = waveform.shape[0] / sample_rate
    if duration < d.min_duration:
        return reject(TOO_SHORT, f"{entry.audio_path}: {duration:.3f} s is shorter than data.min_duration "
                      f"= {d.min_duration} s")
    if duration > d.max_duration:
        return reject(TOO_LONG, f"{entry.audio_path}: {duration:.3f} s is longer than data.max_duration "
                      f"= {d.max_duration} s")
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
    """Validate, compute the mel, write the clip's audio and utterance files (runs in a worker thread)."""
    checked = validate_clip(entry, cfg, processors.for_language(entry.language))
    if isinstance(checked, Rejection):
        return checked
    waveform, tokens = checked
    mel = frontend.batch([waveform])[0]  # [frames, n_mels] float32 (TF releases the GIL: threads overlap)
    file = _utterance_file(entry.id, fingerprint, feature_hash)
    write_audio(cache_dir / audio_file(file), waveform, cfg.audio.sample_rate)  # first: a whole .utt implies its audio
    write_utterance(cache_dir / file, np.asarray(tokens, np.int32), mel)
    return Clip(list(tokens), int(mel.shape[0]), int(waveform.shape[0]), file)


def rejection_detail(utterance_id: str, rejection: Rejection) -> str:
    """The rejection's message without its "line N ('id'): " prefix (line numbers move when a corpus changes)."""
    prefix = f"line {rejection.line} ('{utterance_id}'): "
    return rejection.message[len(prefix):] if rejection.message.startswith(prefix) else rejection.message


def rejected_again(entry: CorpusEntry, reason: str, file: str, detail: str) -> Rejection:
    """A verdict recorded earlier, for the clip's line in the corpus as it is now."""
    return Rejection(file, entry.line_number, reason, f"line {entry.line_number} ('{entry.id}'): {detail}")

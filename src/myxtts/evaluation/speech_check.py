"""Does a trained model speak? Synthesize sentences and measure what a person would check.

For each sentence: its length and speaking rate (mel frames per token, from the predicted durations), and,
when pocketsphinx is installed (the ``listen`` extra), the character
error rate (CER) of what an offline recognizer hears, next to the recognizer's CER on the real
recordings of the same sentences (the ceiling: the recognizer itself errs on real speech); when faster-whisper is
installed (the ``judge`` extra), Whisper's word error rate (WER) beside it, on the outputs and the recordings. Writes
a plot per sentence of the frames each token got (matplotlib, labelled axes) that a person can look at.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from myxtts.evaluation import listening_measures, whisper_listener
from myxtts.evaluation.plots import plot_alignment



@dataclass
class SentenceCheck:
    text: str
    seconds: float
    frames_per_token: float  # the predicted durations' mean: the speaking rate
    heard: str | None = None  # what the recognizer heard (None: no recognizer installed)
    cer: float | None = None
    recording_heard: str | None = None
    recording_cer: float | None = None
    whisper_heard: str | None = None  # what Whisper heard (None: faster-whisper not installed)
    whisper_wer: float | None = None
    recording_whisper_wer: float | None = None
    plot: str | None = None


@dataclass
class SpeechCheck:
    sentences: list[SentenceCheck] = field(default_factory=list)
    recognizer: bool = False
    cer: float | None = None  # corpus CER of the synthesized audio (sum of edits / sum of lengths)
    recording_cer: float | None = None  # the recognizer's CER on the real recordings of the same texts
    whisper_model: str | None = None  # the Whisper model that listened (None: not installed)
    whisper_wer: float | None = None  # Whisper's corpus WER of the synthesized audio
    recording_whisper_wer: float | None = None
    waveforms: list[np.ndarray] = field(default_factory=list, repr=False)  # the synthesized audio, in order

    @property
    def frames_per_token(self) -> float:
        return float(np.mean([s.frames_per_token for s in self.sentences]))

    def to_dict(self) -> dict[str, Any]:
        record = {key: value for key, value in asdict(self).items() if key != "waveforms"}
        return {**record, "frames_per_token": self.frames_per_token}


def check_speech(synthesizer: Any, texts: Sequence[str], reference: Any,
                 recordings: Sequence[np.ndarray | None] | None = None, plot_dir: str | Path | None = None,
                 listen: bool = True) -> SpeechCheck:
    """Synthesize ``texts`` with ``reference`` and measure them (see the module docstring).

    ``recordings``: the real waveforms of the same texts at the synthesizer's sample rate (None entries for
    texts without one), for the recognizer's ceiling. ``listen``: use the recognizers that are installed.
    """
    sample_rate = synthesizer.cfg.audio.sample_rate
    results = synthesizer.synthesize(list(texts), reference)
    use_recognizer = listen and listening_measures.recognizer_available()
    check = SpeechCheck(recognizer=use_recognizer, waveforms=[result.waveform for result in results])
    whisper = whisper_listener.shared_listener() if listen and whisper_listener.whisper_available() else None
    if whisper is not None:
        check.whisper_model = whisper.model_name
    recordings = list(recordings) if recordings is not None else [None] * len(results)
    for index, (text, result, recording) in enumerate(zip(texts, results, recordings)):
        alignment = np.asarray(result.alignment, dtype=np.float64)  # [frames, tokens]
        item = SentenceCheck(text=text, seconds=len(result.waveform) / sample_rate,
                             frames_per_token=float(np.mean(result.durations)))
        if plot_dir is not None:
            item.plot = str(plot_alignment(Path(plot_dir) / f"alignment_{index:02d}.png", alignment, text))
        if use_recognizer:
            item.heard = listening_measures.transcribe(result.waveform, sample_rate)
            item.cer = listening_measures.character_error_rate(text, item.heard)
            if recording is not None:
                item.recording_heard = listening_measures.transcribe(recording, sample_rate)
                item.recording_cer = listening_measures.character_error_rate(text, item.recording_heard)
        if whisper is not None:
            item.whisper_heard = whisper.transcribe(result.waveform, sample_rate)
            item.whisper_wer = whisper_listener.word_error_rate(text, item.whisper_heard)
            if recording is not None:
                heard = whisper.transcribe(recording, sample_rate)
                item.recording_whisper_wer = whisper_listener.word_error_rate(text, heard)
        check.sentences.append(item)
    if whisper is not None:
        check.whisper_wer = whisper_listener.corpus_word_error_rate(texts, [s.whisper_heard for s in check.sentences])
        with_recording = [s for s in check.sentences if s.recording_whisper_wer is not None]
        if with_recording:  # the recordings' corpus WER from their per-sentence rates, weighted by words
            words = [len(listening_measures.normalize_for_cer(s.text).split()) for s in with_recording]
            check.recording_whisper_wer = float(np.average([s.recording_whisper_wer for s in with_recording],
                                                           weights=words))
    if use_recognizer:
        check.cer = listening_measures.corpus_character_error_rate(texts, [s.heard for s in check.sentences])
        with_recording = [s for s in check.sentences if s.recording_heard is not None]
        if with_recording:
            check.recording_cer = listening_measures.corpus_character_error_rate(
                [s.text for s in with_recording], [s.recording_heard for s in with_recording])
    return check

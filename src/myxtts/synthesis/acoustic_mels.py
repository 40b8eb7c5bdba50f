"""An acoustic model's teacher-forced mels of a prepared corpus, for fine-tuning a vocoder on what it will read.

A vocoder trained on recordings' mels meets slightly different mels at synthesis: the acoustic model's, smoother
than the real ones. Peers (coqui, NeMo, Piper) fine-tune the vocoder on the acoustic model's ground-truth-aligned
(teacher-forced) output: the model reads each clip's text and its real mel through its aligner, so its output has
exactly the clip's frames, aligned with the clip's audio. ``write_acoustic_mels`` writes those mels in the cache's
utterance-file layout (same relative paths) under a folder of the vocoder run, which ``VocoderSegments(mel_dir=)``
reads instead of the cache's own mels. Clips longer than the model's ``data.max_mel_frames`` keep their first frames.

It runs a trained acoustic model, so it lives with synthesis; ``train-vocoder --acoustic-run`` hands it to the vocoder
trainer (``VocoderTrainer(write_acoustic_mels=)``), which imports no synthesis code.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable

import numpy as np
import soundfile
from tqdm import tqdm

from myxtts.data.cache import FeatureCache, audio_file, write_utterance
from myxtts.data.corpus import pick_reference, read_config_corpus
from myxtts.errors import InputError
from myxtts.synthesis.synthesizer import Synthesizer
from myxtts.synthesis.teacher_forcing import TeacherForcing
from myxtts.vocoder.neural import audio_settings, check_audio_match

logger = logging.getLogger(__name__)

SOURCE_FILE = "source.json"  # which run and checkpoint made the mels: reused only when they are the same


def write_acoustic_mels(cfg: Any, acoustic_run: str | Path, out_dir: Path, progress: bool = True,
                        echo: Callable[[str], None] = logger.info) -> Path:
    """Teacher-forced mels of every clip of ``cfg``'s cache by the newest checkpoint of ``acoustic_run``, as utterance
    files under ``out_dir``; reused when ``out_dir`` already holds those of the same checkpoint and cache."""
    cache = FeatureCache.load(cfg)
    synthesizer = Synthesizer.from_run(acoustic_run, vocoder="griffin-lim")  # its mels alone: no vocoder loaded
    check_audio_match(f"this config's cache {cache.cache_dir}", audio_settings(cfg.audio),
                      f"the acoustic run {acoustic_run}", synthesizer.cfg.audio)
    source = {"run": str(Path(acoustic_run).resolve()), "checkpoint": synthesizer.checkpoint,
              "cache": str(cache.cache_dir), "feature_hash": cache.manifest["feature_hash"],
              "clips": len(cache)}
    out_dir = Path(out_dir)
    if (out_dir / SOURCE_FILE).is_file() and json.loads((out_dir / SOURCE_FILE).read_text()) == source:
        echo(f"acoustic mels: reusing {out_dir} ({source['checkpoint']})")
        return out_dir
    entries = {entry.id: entry for entry in read_config_corpus(cfg).entries}
    pool = [entries[utterance_id] for utterance_id in cache.ids if utterance_id in entries]
    rows = {utterance_id: row for row, utterance_id in enumerate(cache.ids)}
    teacher = TeacherForcing(synthesizer)
    echo(f"acoustic mels: teacher-forcing {len(cache)} clips through {synthesizer.checkpoint} into {out_dir}")
    (out_dir / SOURCE_FILE).unlink(missing_ok=True)  # written last: a stopped run is redone, never half reused
    for row in tqdm(range(len(cache)), desc="acoustic mels", unit="clip", disable=not progress, leave=False):
        entry = entries.get(cache.ids[row])
        if entry is None:
            raise InputError(f"Clip {cache.ids[row]} of {cache.cache_dir} is not in {cfg.corpus_path} any more: run "
                             "`myxtts prepare` again.")
        mel = cache.utterance_mel(row).astype(np.float32)  # [frames, n_mels] real log mel
        reference = cache.cache_dir / audio_file(cache.files[rows[pick_reference(entry, pool).id]])
        waveform = None
        if synthesizer.cfg.model.pitch_conditioning:  # the clip's own pitch, as the model read it in training
            waveform, _ = soundfile.read(str(cache.cache_dir / audio_file(cache.files[row])), dtype="float32")
        forced = teacher(entry.text, mel, str(reference), waveform)  # .mel: [frames', n_mels] real log mel
        pitch = cache.utterance_pitch(row)[:forced.mel.shape[0]]  # the recording's F0 beside its forced mel
        pitch = np.pad(pitch, (0, forced.mel.shape[0] - pitch.shape[0]))  # [frames']
        write_utterance(out_dir / cache.files[row], np.asarray(forced.tokens, np.int32), forced.mel, pitch)
    (out_dir / SOURCE_FILE).write_text(json.dumps(source, indent=1), encoding="utf-8")
    return out_dir

"""Evaluate a run on held-out clips: free-running quality and teacher-forced fit.

Per clip (the run's validation split by default, or every clip of a corpus folder / list file):

- ``mcd_dtw_db``: MCD-DTW between the real audio and the free-running synthesis (Griffin-Lim), the
  reference voice being another clip of the same speaker (the clip itself when it is the only one);
- ``teacher_forced_mel_l1``: mean |mel_after - real mel| over real frames with the aligner's durations on the
  real audio (and, for the autoregressive decoder, the true previous frames): what the training loss measures,
  here on held-out audio, in log-mel units (denormalised with the run's mel statistics first, so the figure
  compares across runs and statistics);
- ``duration_error``: mean |log(1 + predicted frames) - log(1 + aligner frames)| over the clip's tokens;
- ``aligner_focus_rate`` / ``aligner_diagonality``: how peaked and how diagonal the aligner's soft alignment of
  the real audio is (``myxtts.evaluation.metrics``);
- ``pitch_spread`` / ``pitch_correlation`` (pitch conditioning): over the tokens with a voiced frame, the spread
  (standard deviation) of the contour the model says (the predicted token pitch times ``model.pitch_variation``)
  over the recordings', and the correlation of the predicted contour with theirs;
- ``real_time_factor``: (compiled decoding + vocoder seconds) / seconds of audio produced;
- ``length_ratio``: synthesized / real frames; ``cut_at_maximum``: the predicted durations overran
  ``data.max_mel_frames``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from myxtts.audio import load_audio
from myxtts.config import Config
from myxtts.data.cache_manifest import read_manifest
from myxtts.data.corpus import pick_reference, read_config_corpus, read_corpus
from myxtts.data.splits import validation_ids
from myxtts.errors import InputError
from myxtts.evaluation.metrics import attention_diagonality, focus_rate, mel_cepstral_distortion
from myxtts.evaluation.plots import plot_alignment, plot_mel_comparison
from myxtts.machine import machine
from myxtts.outputs import path_in_folder, safe_file_name
from myxtts.synthesis.synthesizer import Synthesizer
from myxtts.synthesis.teacher_forcing import TeacherForced, TeacherForcing
from myxtts.vocoder.neural import load_vocoder

SUMMARY_KEYS = ("mcd_dtw_db", "teacher_forced_mel_l1", "duration_error", "aligner_focus_rate", "aligner_diagonality",
                "real_time_factor", "length_ratio", "cut_at_maximum")
PITCH_KEYS = ("pitch_spread", "pitch_correlation")


def corpus_entries(cfg: Config, data: str | os.PathLike | None) -> tuple[list[CorpusEntry], list[CorpusEntry], str]:
    """(clips to evaluate, clips usable as references, description of the source)."""
    if data is not None:
        path = Path(data)
        if not path.exists():
            raise InputError(f"Evaluation data not found: {path} (--data: a corpus folder or a list file).")
        corpus_format = "ljspeech" if path.is_dir() else "list"
        read = read_corpus(path, corpus_format, cfg.data.language)
        if not read.entries:
            first = f"; the first line refused: {read.rejections[0].message}" if read.rejections else "."
            raise InputError(f"No usable clip in {path} (format {corpus_format}){first}")
        return read.entries, read.entries, f"corpus {path}"
    entries = read_config_corpus(cfg).entries
    manifest = read_manifest(cfg.cache_dir)
    if manifest is not None and manifest.get("splits", {}).get("validation"):
        held_out = set(manifest["splits"]["validation"])
        source = f"validation split of {cfg.cache_dir}"
    else:  # no cache: the same deterministic choice prepare makes
        held_out = set(validation_ids([e.id for e in entries], cfg.data.validation_size))
        source = f"validation ids (data.validation_size={cfg.data.validation_size}) of {cfg.corpus_path}"
    selected = [e for e in entries if e.id in held_out]
    if not selected:
        raise InputError(f"The run has no held-out clips ({source}); pass --data CORPUS.")
    return selected, entries, source


def teacher_forced_fit(forced: TeacherForced, real_mel: np.ndarray) -> dict[str, float]:
    """The fit measures of one teacher-forced clip (see the module docstring)."""
    frames = forced.mel.shape[0]
    aligner_log = np.log1p(forced.aligner_durations.astype(np.float64))
    return {"teacher_forced_mel_l1": float(np.mean(np.abs(forced.mel - real_mel[:frames]))),
            "duration_error": float(np.mean(np.abs(forced.log_duration_predictions - aligner_log))),
            "aligner_diagonality": attention_diagonality(forced.alignment),
            "aligner_focus_rate": focus_rate(forced.alignment)}


def pitch_fit(forced: TeacherForced, pitch_variation: float) -> dict[str, float]:
    """How the contour the model says compares with the recordings', over the tokens with a voiced frame (a
    pitch-conditioned model, the clip's audio given; {} otherwise, or with fewer than 3 such tokens)."""
    if forced.token_pitch is None:
        return {}
    voiced = forced.token_pitch != 0
    real, predicted = forced.token_pitch[voiced].astype(np.float64), forced.pitch_predictions[voiced]
    if voiced.sum() < 3 or real.std() == 0:
        return {}
    correlation = float(np.corrcoef(real, predicted)[0, 1]) if predicted.std() > 0 else 0.0
    return {"pitch_spread": float(pitch_variation * predicted.std() / real.std()), "pitch_correlation": correlation}


def evaluate(synthesizer: Synthesizer, entries: list[CorpusEntry], pool: list[CorpusEntry],
             plots_dir: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """Metrics per clip (see the module docstring)."""
    rate = synthesizer.sample_rate
    teacher = TeacherForcing(synthesizer)
    items = []
    for entry in entries:
        real_wave = load_audio(entry.audio_path, rate)  # [samples]
        real_mel = synthesizer.frontend(real_wave).numpy()  # [frames, n_mels]
        reference = pick_reference(entry, pool)
        for _ in range(2):  # a call that compiled is done again: the real-time factor excludes compilation
            traced = synthesizer.tracing_count()
            result = synthesizer.synthesize(entry.text, reference.audio_path, batch_size=1)[0]
            if synthesizer.tracing_count() == traced:
                break
        seconds, compute_seconds = len(result.waveform) / rate, result.decode_seconds + result.vocoder_seconds
        forced = teacher(entry.text, real_mel, reference.audio_path, real_wave)
        item = {"id": entry.id, "reference_id": reference.id, "tokens": int(len(result.tokens)),
                "real_frames": int(real_mel.shape[0]), "synthesized_frames": result.frames,
                "length_ratio": result.frames / real_mel.shape[0],
                "cut_at_maximum": result.ended_by == "maximum length",
                "mcd_dtw_db": mel_cepstral_distortion(real_wave, result.waveform, rate),
                "real_time_factor": compute_seconds / max(seconds, 1e-9), "seconds": seconds,
                **teacher_forced_fit(forced, real_mel), **pitch_fit(forced, synthesizer.model.pitch_variation)}
        if plots_dir is not None:
            item["plots"] = [
                str(plot_mel_comparison(plot_path(plots_dir, entry.id, "mel"), real_mel, result.mel, entry.text)),
                str(plot_alignment(plot_path(plots_dir, entry.id, "alignment"), result.alignment,
                                   f"predicted durations: {entry.text}")),
                str(plot_mel_comparison(plot_path(plots_dir, entry.id, "teacher_forced_mel"), real_mel, forced.mel,
                                        entry.text, "teacher-forced"))]
        items.append(item)
    return items


def plot_path(plots_dir: str | os.PathLike, utterance_id: str, kind: str) -> Path:
    """Where the ``kind`` plot of a clip goes: ``PLOTS/<safe id>_<kind>.png``, inside ``plots_dir`` whatever the id
    (a list corpus' id is its path as written, ``../x.wav`` or ``/abs/x.wav`` too)."""
    return path_in_folder(plots_dir, f"{safe_file_name(utterance_id)}_{kind}.png")


def summarize(items: list[dict[str, Any]]) -> dict[str, float]:
    """Means over the clips; the pitch measures over the clips that have them (pitch conditioning)."""
    summary = {key: float(np.mean([float(item[key]) for item in items])) for key in SUMMARY_KEYS}
    for key in PITCH_KEYS:
        values = [float(item[key]) for item in items if key in item]
        if values:
            summary[key] = float(np.mean(values))
    return summary


def evaluate_run(run_dir: str | os.PathLike, data: str | os.PathLike | None = None,
                 config: str | os.PathLike | None = None, limit: int | None = None,
                 plots_dir: str | os.PathLike | None = None, synthesizer: Synthesizer | None = None,
                 vocoder: str | os.PathLike | None = None) -> dict[str, Any]:
    """The evaluation report (JSON-ready): summary means, per-clip items, run / machine description. ``vocoder``: a
    neural vocoder directory or ``griffin-lim`` for the audio; None: the run's own (``RUN/vocoder``) when it has
    one, else Griffin-Lim (a given ``synthesizer`` keeps its own)."""
    if synthesizer is None:  # an overlong prediction is a finding of the report (cut_at_maximum), not a stop
        synthesizer = Synthesizer.from_run(run_dir, config=config, truncate_long=True, vocoder=vocoder)
    elif vocoder is not None:
        synthesizer.vocoder = load_vocoder(vocoder, synthesizer.cfg.audio, f"the acoustic model {run_dir}")
    entries, pool, source = corpus_entries(synthesizer.cfg, data)
    if limit is not None:
        entries = entries[:limit]
    started = time.perf_counter()
    items = evaluate(synthesizer, entries, pool, plots_dir)
    return {"run": str(run_dir), "checkpoint": synthesizer.checkpoint, "data": source, "clips": len(items),
            "vocoder": getattr(synthesizer.vocoder, "path", "") or "griffin-lim",
            "summary": summarize(items), "items": items, "synthesis": synthesizer.describe(),
            "decoder_traces": synthesizer.tracing_count(), "seconds": time.perf_counter() - started,
            "plots": str(plots_dir) if plots_dir is not None else None,
            "machine": {**machine(), "tensorflow": tf.__version__}}


def format_report(report: dict[str, Any]) -> str:
    """A readable table: one row per clip, then the means."""
    columns = [("id", "id", "{}"), ("MCD dB", "mcd_dtw_db", "{:.2f}"), ("TF L1", "teacher_forced_mel_l1", "{:.3f}"),
               ("dur err", "duration_error", "{:.3f}"), ("focus", "aligner_focus_rate", "{:.3f}"),
               ("diag", "aligner_diagonality", "{:.3f}"), ("RTF", "real_time_factor", "{:.3f}"),
               ("len ratio", "length_ratio", "{:.2f}"), ("cut", "cut_at_maximum", "{}")]
    if "pitch_spread" in report["summary"]:  # pitch conditioning: the said contour against the recordings'
        columns[4:4] = [("pitch spread", "pitch_spread", "{:.2f}"), ("pitch corr", "pitch_correlation", "{:.2f}")]
    rows = [[fmt.format(item[key]) if key in item else "-" for _, key, fmt in columns] for item in report["items"]]
    summary = report["summary"]
    rows.append(["mean"] + [fmt.format(summary[key]) if key != "cut_at_maximum" else f"{summary[key]:.0%}"
                            for _, key, fmt in columns[1:]])
    widths = [max(len(header), *(len(row[i]) for row in rows)) for i, (header, _, _) in enumerate(columns)]
    lines = [f"evaluation of {report['checkpoint']} on {report['clips']} clips ({report['data']})",
             "  ".join(header.ljust(width) for (header, _, _), width in zip(columns, widths))]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in rows]
    if report.get("plots"):
        lines.append(f"plots: {report['plots']}")
    return "\n".join(lines)

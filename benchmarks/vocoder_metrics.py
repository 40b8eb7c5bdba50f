"""The vocoder benchmark's judges: a resynthesis compared with its recording, clip by clip.

- ``pesq_wb``: PESQ wide-band (ITU-T P.862.2, the ``pesq`` package) at 16 kHz.
- ``stoi``: short-time objective intelligibility (``pystoi``).
- ``mcd``: mel-cepstral distortion with DTW (``myxtts.evaluation.metrics``), dB.
- ``f0_rmse`` (Hz, frames voiced in both), ``vuv_f1`` (the recording's voicing as truth) and ``periodicity_rmse``
  (RMSE of pYIN's voicing probability: how periodic each frame sounds): the pitch set of the Vocos paper, with
  librosa's pYIN as the pitch tracker.
- ``naturalness``: NISQA-TTS MOS (a judge outside the project, run in a child process from the folder given) of
  each clip scaled to its recording's active speech level (``level_matched``): the judge rates quieter audio higher
  (the recordings at half their amplitude score far above themselves), so systems are compared at one level, the
  recordings'. ``naturalness_own_level``: the same judge on the clips as the system made them; ``level_db``: each
  clip's active level against its recording's.
- ``cer``: pocketsphinx's character error rate; ``similarity``: Resemblyzer cosine of each clip to the mean of the
  *other* recordings (leave-one-out, so a recording is not compared with itself).
PESQ, mel and cepstral distances reward reproducing the magnitude exactly, which Griffin-Lim does: they show what is
left, naturalness is the target.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soxr

PITCH_RANGE_HZ = (60.0, 500.0)
LEVEL_FRAME_SECONDS = 0.02  # active speech level: RMS over the 20-ms frames ...
LEVEL_RANGE_DB = 30.0  # ... within 30 dB of the clip's loudest one (pauses and silence left out)


def active_level(wave: np.ndarray, sample_rate: int) -> float:
    """RMS of the frames that hold speech (within ``LEVEL_RANGE_DB`` of the loudest frame): a level that does not
    depend on how long the pauses are."""
    frame = max(1, int(LEVEL_FRAME_SECONDS * sample_rate))
    count = max(1, len(wave) // frame)
    powers = np.mean(np.square(np.asarray(wave[: count * frame], np.float64)).reshape(count, -1), axis=1)
    active = powers[powers >= powers.max() * 10 ** (-LEVEL_RANGE_DB / 10)]
    return float(np.sqrt(np.mean(active))) if active.size else 0.0


def level_matched(waves: list[np.ndarray], recordings: list[np.ndarray], sample_rate: int) -> list[np.ndarray]:
    """Each wave scaled so that its active level is its recording's."""
    return [wave * (active_level(recording, sample_rate) / max(active_level(wave, sample_rate), 1e-9))
            for wave, recording in zip(waves, recordings)]


def pesq_wb(reference: np.ndarray, degraded: np.ndarray, sample_rate: int) -> float:
    from pesq import pesq

    return float(pesq(16000, soxr.resample(reference, sample_rate, 16000), soxr.resample(degraded, sample_rate, 16000),
                      "wb"))


def stoi(reference: np.ndarray, degraded: np.ndarray, sample_rate: int) -> float:
    from pystoi import stoi as short_time_intelligibility

    return float(short_time_intelligibility(reference, degraded, sample_rate, extended=False))


def pitch_track(wave: np.ndarray, sample_rate: int, hop_length: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """(f0 Hz with NaN where unvoiced, voicing probability) per frame, librosa's pYIN."""
    import librosa

    f0, _, probability = librosa.pyin(wave, fmin=PITCH_RANGE_HZ[0], fmax=PITCH_RANGE_HZ[1], sr=sample_rate,
                                      frame_length=1024, hop_length=hop_length)
    return f0, probability


def pitch_errors(reference_track: tuple, degraded_track: tuple) -> dict[str, float]:
    (f0_ref, prob_ref), (f0_deg, prob_deg) = reference_track, degraded_track
    frames = min(len(f0_ref), len(f0_deg))
    f0_ref, f0_deg, prob_ref, prob_deg = f0_ref[:frames], f0_deg[:frames], prob_ref[:frames], prob_deg[:frames]
    voiced_ref, voiced_deg = ~np.isnan(f0_ref), ~np.isnan(f0_deg)
    both = voiced_ref & voiced_deg
    true_positive = float(np.sum(both))
    precision = true_positive / max(float(np.sum(voiced_deg)), 1.0)
    recall = true_positive / max(float(np.sum(voiced_ref)), 1.0)
    return {"f0_rmse": float(np.sqrt(np.mean((f0_ref[both] - f0_deg[both]) ** 2))) if both.any() else float("nan"),
            "vuv_f1": 2 * precision * recall / max(precision + recall, 1e-9),
            "periodicity_rmse": float(np.sqrt(np.mean((prob_ref - prob_deg) ** 2)))}


def naturalness(waves: list[np.ndarray], sample_rate: int, nisqa_dir: Path) -> list[float]:
    """NISQA-TTS MOS per clip, from ``nisqa_dir/nisqa_mos.py`` in a child process (this Python: torch, librosa and
    pandas installed)."""
    import soundfile

    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for index, wave in enumerate(waves):
            path = Path(folder) / f"{index:03d}.wav"
            soundfile.write(str(path), np.clip(wave, -1.0, 1.0), sample_rate, subtype="PCM_16")
            paths.append(str(path))
        done = subprocess.run([sys.executable, str(Path(nisqa_dir) / "nisqa_mos.py"), *paths], capture_output=True,
                              text=True, timeout=1800)
        if done.returncode:
            raise RuntimeError(f"NISQA failed: {done.stderr[-1500:]}")
        scores = {}
        for line in done.stdout.splitlines():
            match = re.fullmatch(r"([0-9.]+)\t(\d+)\.wav", line.strip())
            if match:
                scores[int(match.group(2))] = float(match.group(1))
    return [scores[index] for index in range(len(waves))]


def leave_one_out_similarity(waves: list[np.ndarray], recordings: list[np.ndarray], sample_rate: int) -> list[float]:
    """Cosine of each wave's Resemblyzer embedding to the mean embedding of the recordings other than its own."""
    from myxtts.evaluation.speaker_encoder import voice_embedding

    real = np.stack([voice_embedding(clip, sample_rate) for clip in recordings])  # [clips, 256]
    scores = []
    for index, wave in enumerate(waves):
        others = np.delete(real, index, axis=0)
        centroid = np.mean(others / np.linalg.norm(others, axis=1, keepdims=True), axis=0)
        embedding = voice_embedding(wave, sample_rate)
        scores.append(float(np.dot(embedding, centroid) / (np.linalg.norm(embedding) * np.linalg.norm(centroid))))
    return scores

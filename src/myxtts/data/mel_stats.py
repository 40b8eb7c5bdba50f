"""Per-mel-bin statistics of the training split: the model reads and writes normalised log mels.

The cache stores raw log mels (natural log, floored at ``audio.log_floor``). The model works on
``(log_mel - mean) / std`` per mel bin, so no bin's scale (nor the floor) dominates the L1 loss:

- ``prepare`` computes ``mean`` / ``std`` over every real frame of the manifest's **train** split
  (never validation), in float64, one utterance at a time (memory flat in the corpus size), and
  stores them in ``manifest.json`` under ``mel_stats``;
- the input pipeline normalises the target and the reference mel (TF ops) before padding, so
  padding stays exactly 0;
- the trainer copies them into the run directory (``mel_stats.json``); synthesis normalises the
  reference mel it computes and denormalises the model's output before the vocoder.

``std`` is floored at ``STD_FLOOR`` (log-mel units) so a constant bin cannot divide by zero.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from myxtts.durable import write_durably
from myxtts.errors import InputError

STD_FLOOR = 1e-2  # log-mel units: a constant (or near-constant) bin is scaled by at most 1 / STD_FLOOR


class MelStatsError(InputError):
    """Statistics that are missing or malformed."""


def _is_tensor(value: Any) -> bool:
    tf = sys.modules.get("tensorflow")  # numpy callers (prepare, tests) never import TF through this module
    return tf is not None and tf.is_tensor(value)


@dataclass(frozen=True, eq=False)
class MelStats:
    """``mean`` / ``std`` ``[n_mels]`` float32 of the log mel; ``frames`` / ``utterances``: what they cover."""

    mean: np.ndarray
    std: np.ndarray
    frames: int = 0
    utterances: int = 0

    def __post_init__(self) -> None:
        mean = np.asarray(self.mean, dtype=np.float32).reshape(-1)
        std = np.asarray(self.std, dtype=np.float32).reshape(-1)
        if mean.shape != std.shape or mean.size == 0:
            raise MelStatsError(f"mel statistics need mean and std of one equal length, got {mean.shape} and "
                                f"{std.shape}.")
        if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(std))) or np.any(std < 0):
            raise MelStatsError("mel statistics hold NaN / Inf or a negative standard deviation.")
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", np.maximum(std, np.float32(STD_FLOOR)))

    @property
    def n_mels(self) -> int:
        return int(self.mean.size)

    @classmethod
    def identity(cls, n_mels: int) -> "MelStats":
        """mean 0, std 1: normalising changes nothing (a model trained on raw log mels)."""
        return cls(np.zeros(n_mels, np.float32), np.ones(n_mels, np.float32))

    @classmethod
    def from_mels(cls, mels: Iterable[Any]) -> "MelStats":
        """The statistics of every frame of ``mels`` (each ``[frames, n_mels]``), streamed (MelStatsAccumulator)."""
        accumulator = None
        for mel in mels:
            mel = np.asarray(mel)
            accumulator = accumulator or MelStatsAccumulator(mel.shape[-1])
            accumulator.add(mel)
        if accumulator is None:
            raise MelStatsError("no mel to compute statistics from.")
        return accumulator.result()

    # ---- (de)normalisation: numpy arrays or TF tensors, any leading shape [..., n_mels] ----------------
    def normalize(self, log_mel: Any) -> Any:
        """``(log_mel - mean) / std``: TF ops for a tensor (usable in Dataset.map / tf.function), else numpy
        float32."""
        if _is_tensor(log_mel):
            import tensorflow as tf  # a tensor came, so TF is loaded; prepare imports this module without it

            return (log_mel - tf.constant(self.mean, log_mel.dtype)) / tf.constant(self.std, log_mel.dtype)
        return (np.asarray(log_mel, dtype=np.float32) - self.mean) / self.std

    def denormalize(self, normalized: Any) -> Any:
        """``normalized * std + mean``: the real log mel (what the vocoder and the metrics take)."""
        if _is_tensor(normalized):
            import tensorflow as tf  # a tensor came, so TF is loaded; prepare imports this module without it

            return normalized * tf.constant(self.std, normalized.dtype) + tf.constant(self.mean, normalized.dtype)
        return np.asarray(normalized, dtype=np.float32) * self.std + self.mean

    # ---- storage -----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"mean": [float(v) for v in self.mean], "std": [float(v) for v in self.std], "frames": self.frames,
                "utterances": self.utterances, "std_floor": STD_FLOOR}

    @classmethod
    def from_dict(cls, data: Any, source: str = "mel statistics") -> "MelStats":
        """Rebuild from ``to_dict()``; MelStatsError naming ``source`` when malformed."""
        try:
            return cls(np.asarray(data["mean"], np.float32), np.asarray(data["std"], np.float32),
                       int(data.get("frames", 0)), int(data.get("utterances", 0)))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise MelStatsError(f"{source}: malformed mel statistics ({err}).") from None

    def save(self, path: str | Path) -> Path:
        """Write ``to_dict()`` as JSON, whole or not at all (temporary name, fsync, rename): a run's copy is
        rewritten on every start and resume."""
        path = Path(path)
        write_durably(path, json.dumps(self.to_dict(), indent=1))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "MelStats":
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise MelStatsError(f"{path} is missing.") from None
        except (OSError, json.JSONDecodeError) as err:
            raise MelStatsError(f"Cannot read {path}: {err}") from None
        return cls.from_dict(data, str(path))


def reference_crop(log_mel: np.ndarray, frames: int, mel_stats: MelStats) -> tuple[np.ndarray, int]:
    """A real log mel ``[time, n_mels]`` -> the normalised conditioning mel ``[frames, n_mels]`` and its true length:
    the middle ``frames`` (away from leading / trailing silence), or the whole mel zero-padded after normalising (as
    the training pipeline pads). What synthesis and the trainer's listener give the conditioning encoder."""
    mel = mel_stats.normalize(np.asarray(log_mel, np.float32))
    if mel.shape[0] >= frames:
        start = (mel.shape[0] - frames) // 2
        return mel[start:start + frames].astype(np.float32), frames
    padded = np.zeros([frames, mel.shape[1]], np.float32)
    padded[: mel.shape[0]] = mel
    return padded, int(mel.shape[0])


def reference_windows(log_mel: np.ndarray, frames: int, mel_stats: MelStats,
                      windows: int) -> list[tuple[np.ndarray, int]]:
    """Up to ``windows`` consecutive ``frames``-long windows from the middle of a real log mel (as many as fit, at
    least one: ``reference_crop`` when one), each normalised, with its true length: what averaging a long reference
    clip's latents over several windows reads, instead of its middle window alone."""
    count = max(1, min(int(windows), int(np.asarray(log_mel).shape[0]) // frames))
    if count == 1:
        return [reference_crop(log_mel, frames, mel_stats)]
    mel = mel_stats.normalize(np.asarray(log_mel, np.float32))
    start = (mel.shape[0] - count * frames) // 2
    return [(mel[start + i * frames:start + (i + 1) * frames].astype(np.float32), frames) for i in range(count)]


class MelStatsAccumulator:
    """Per-bin mean and variance over many utterances in float64, without holding them.

    Each utterance contributes (frames, mean, sum of squared deviations); these are merged exactly
    (Chan, Golub & LeVeque's pairwise update), which stays accurate where sum / sum-of-squares cancels.
    """

    def __init__(self, n_mels: int) -> None:
        self.n_mels = int(n_mels)
        self.frames = 0
        self.utterances = 0
        self.mean = np.zeros(self.n_mels, np.float64)
        self.m2 = np.zeros(self.n_mels, np.float64)

    @staticmethod
    def moments(mel: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
        """(frames, mean [n_mels], sum of squared deviations [n_mels]) of one utterance, in float64."""
        x = np.asarray(mel, dtype=np.float64)  # [frames, n_mels]
        if x.shape[0] == 0:
            return 0, np.zeros(x.shape[-1], np.float64), np.zeros(x.shape[-1], np.float64)
        mean = x.mean(axis=0)
        return int(x.shape[0]), mean, np.square(x - mean).sum(axis=0)

    def add(self, mel: np.ndarray) -> None:
        self.merge(*self.moments(mel))

    def merge(self, frames: int, mean: np.ndarray, m2: np.ndarray) -> None:
        if mean.shape != (self.n_mels,):
            raise MelStatsError(f"a mel with {mean.shape[-1]} bins among statistics of {self.n_mels} bins.")
        if frames == 0:
            return
        total = self.frames + frames
        delta = mean - self.mean
        self.mean = self.mean + delta * (frames / total)
        self.m2 = self.m2 + m2 + np.square(delta) * (self.frames * frames / total)
        self.frames = total
        self.utterances += 1

    def result(self) -> MelStats:
        if self.frames == 0:
            raise MelStatsError("no frame to compute mel statistics from.")
        return MelStats(self.mean, np.sqrt(self.m2 / self.frames), self.frames, self.utterances)

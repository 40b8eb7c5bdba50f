"""PNG images without matplotlib: a colour-mapped array encoded with ``tf.io.encode_png``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf

# viridis sampled at 6 points (dark blue -> yellow); linear interpolation in between
_ANCHORS = np.array([[68, 1, 84], [65, 68, 135], [42, 120, 142], [34, 168, 132], [122, 209, 81], [253, 231, 37]],
                    dtype=np.float64)


def colour_map(values: np.ndarray, low: float | None = None, high: float | None = None) -> np.ndarray:
    """``[rows, cols]`` floats -> ``[rows, cols, 3]`` uint8 (viridis-like), scaled to [low, high]."""
    values = np.asarray(values, dtype=np.float64)
    low = float(np.min(values)) if low is None else low
    high = float(np.max(values)) if high is None else high
    scaled = np.clip((values - low) / max(high - low, 1e-9), 0.0, 1.0) * (len(_ANCHORS) - 1)
    index = np.minimum(np.floor(scaled).astype(int), len(_ANCHORS) - 2)
    fraction = (scaled - index)[..., None]
    rgb = _ANCHORS[index] * (1.0 - fraction) + _ANCHORS[index + 1] * fraction
    return np.round(rgb).astype(np.uint8)


def write_png(path: str | Path, image: np.ndarray, scale: int = 2) -> Path:
    """Write ``[rows, cols]`` floats (colour-mapped) or ``[rows, cols, 3]`` uint8; row 0 at the bottom."""
    image = np.asarray(image)
    if image.ndim == 2:
        image = colour_map(image)
    image = np.flipud(image)  # low mel bins / first tokens at the bottom, like a spectrogram plot
    if scale > 1:
        image = np.repeat(np.repeat(image, scale, axis=0), scale, axis=1)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tf.io.write_file(str(path), tf.io.encode_png(tf.constant(np.ascontiguousarray(image))))
    return path


def mel_comparison_image(real_mel: np.ndarray, synthesized_mel: np.ndarray, gap: int = 4) -> np.ndarray:
    """Real mel above synthesized mel (``[frames, n_mels]`` each, same colour scale) -> ``[rows, cols, 3]``."""
    low = float(min(real_mel.min(), synthesized_mel.min()))
    high = float(max(real_mel.max(), synthesized_mel.max()))
    width = max(real_mel.shape[0], synthesized_mel.shape[0])

    def panel(mel: np.ndarray) -> np.ndarray:
        canvas = np.full([mel.shape[1], width], low)
        canvas[:, : mel.shape[0]] = mel.T  # [n_mels, frames]
        return colour_map(canvas, low, high)

    separator = np.full([gap, width, 3], 255, np.uint8)
    # flipud in write_png puts the first rows at the bottom: synthesized (bottom), real (top)
    return np.concatenate([panel(synthesized_mel), separator, panel(real_mel)], axis=0)

"""Plots a person reads to judge an output (matplotlib, files only, labelled axes): an alignment, and a real mel
above a synthesized one on one colour scale."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib  # heavy (pyplot ~0.3 s): only when plotting; its backend is chosen before pyplot loads

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt  # heavy: only when plotting, after matplotlib.use

    return plt


def _short(title: str) -> str:
    return title if len(title) < 80 else title[:77] + "..."


def plot_alignment(path: str | Path, alignment: np.ndarray, title: str) -> Path:
    """PNG of an alignment ``[mel frames, text tokens]`` (0/1 from the durations, or an aligner's soft one): text
    position against mel frame."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(8, 4.5), dpi=100)
    image = axes.imshow(np.asarray(alignment).T, origin="lower", aspect="auto", interpolation="nearest",
                        cmap="viridis")
    axes.set_xlabel("mel frame")
    axes.set_ylabel("text position (token)")
    axes.set_title(_short(title), fontsize=9)
    figure.colorbar(image, ax=axes, label="alignment weight")
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path


def plot_mel_comparison(path: str | Path, real_mel: np.ndarray, synthesized_mel: np.ndarray, title: str,
                        synthesized_label: str = "synthesized") -> Path:
    """PNG of the real log mel above the synthesized one (``[frames, n_mels]`` each), one colour scale, one
    time axis (the longer of the two)."""
    plt = _pyplot()
    low = float(min(real_mel.min(), synthesized_mel.min()))
    high = float(max(real_mel.max(), synthesized_mel.max()))
    frames = max(real_mel.shape[0], synthesized_mel.shape[0])
    figure, axes = plt.subplots(2, 1, figsize=(9, 5.5), dpi=100, sharex=True)
    for axis, mel, label in ((axes[0], real_mel, "recording"), (axes[1], synthesized_mel, synthesized_label)):
        image = axis.imshow(np.asarray(mel).T, origin="lower", aspect="auto", interpolation="nearest",
                            cmap="viridis", vmin=low, vmax=high, extent=(0, mel.shape[0], 0, mel.shape[1]))
        axis.set_xlim(0, frames)
        axis.set_ylabel(f"mel bin ({label})")
    axes[1].set_xlabel("frame")
    axes[0].set_title(_short(title), fontsize=9)
    figure.colorbar(image, ax=list(axes), label="log mel")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path

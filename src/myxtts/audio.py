"""Waveform loading (the mel front-end is ``myxtts.mel``).

Two loaders:
- ``load_audio`` (numpy, used by ``prepare`` and tools): any libsndfile format, downmixed to mono and
  resampled with soxr from the file's own rate. Every way a file can be bad raises ``AudioError`` with a
  ``reason`` so ``prepare`` can write it to rejected.csv instead of silently skipping it. A clip longer than
  ``max_seconds`` is refused before decoding: memory is bounded by the bound, not by the file.
- ``tf_load_wav`` (TF ops, the on-the-fly path): 16-bit PCM WAV at the configured rate only; it cannot
  resample, so a mismatch fails with a message naming the fix (``myxtts prepare`` converts).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import soundfile
import soxr
import tensorflow as tf

from myxtts.errors import InputError

AUDIO_ERROR_REASONS = ("missing_file", "zero_length", "not_audio", "truncated", "non_finite", "unreadable",
                       "too_long")

UNKNOWN_FRAMES = 2 ** 63 - 1  # libsndfile's frame count when the header gives no length (e.g. a streamed FLAC)
BLOCK_FRAMES = 1 << 16  # frames per read of a file of unknown length


class AudioError(InputError):
    """A clip that cannot be used; ``reason`` is one of ``AUDIO_ERROR_REASONS``."""

    def __init__(self, path: str | os.PathLike, reason: str, detail: str) -> None:
        if reason not in AUDIO_ERROR_REASONS:
            raise ValueError(f"unknown AudioError reason {reason!r}")  # programming error
        self.path = str(path)
        self.reason = reason
        self.detail = detail
        super().__init__(f"{self.path}: {detail} (reason: {reason})")


class AudioTooLongError(AudioError):
    """A clip longer than the ``max_seconds`` it was loaded with (reason ``too_long``): ``seconds`` is its duration
    (``exact`` false: at least that, as the header gave no length and decoding stopped past the bound)."""

    def __init__(self, path: str | os.PathLike, seconds: float, max_seconds: float, limit_name: str,
                 exact: bool = True) -> None:
        self.seconds, self.max_seconds, self.exact = seconds, max_seconds, exact
        super().__init__(path, "too_long", f"{'' if exact else 'at least '}{seconds:.3f} s is longer than "
                         f"{limit_name} ({max_seconds:g} s); trim or split the clip")


# ---------------------------------------------------------------------------------------------
# numpy loader
# ---------------------------------------------------------------------------------------------

def _wav_data_shortfall(path: Path) -> tuple[int, int] | None:
    """For a RIFF/WAVE file: (bytes the data chunk declares, bytes actually present) when fewer are present.

    libsndfile quietly returns fewer frames for a truncated WAV (or fails with a generic message), so the
    chunk sizes are compared with the file size here. Returns None for non-WAV files, complete files and
    streaming headers (data size 0 or 0xFFFFFFFF, meaning "unknown").
    """
    file_size = path.stat().st_size
    with open(path, "rb") as handle:
        header = handle.read(12)
        if len(header) < 12 or header[:4] not in (b"RIFF", b"RIFX") or header[8:12] != b"WAVE":
            return None
        endian = "<" if header[:4] == b"RIFF" else ">"
        offset = 12
        while offset + 8 <= file_size:
            handle.seek(offset)
            chunk_id, chunk_size = struct.unpack(endian + "4sI", handle.read(8))
            if chunk_id == b"data":
                if chunk_size in (0, 0xFFFFFFFF):
                    return None
                present = file_size - (offset + 8)
                return (chunk_size, present) if present < chunk_size else None
            offset += 8 + chunk_size + (chunk_size & 1)  # chunks are word aligned
        return None  # no data chunk found: a malformed header, libsndfile names the problem


def _decode(path: Path, frames: int, max_frames: int | None) -> np.ndarray:
    """The file's audio ``[frames, channels]`` float32: one read of the header's ``frames`` (checked against the bound
    already), or, when the header gives no length, blocks until the file ends or ``max_frames`` (None: no bound) is
    passed, so at most ``max_frames + BLOCK_FRAMES`` frames are held."""
    with soundfile.SoundFile(str(path)) as handle:
        if frames != UNKNOWN_FRAMES:
            return handle.read(dtype="float32", always_2d=True)
        blocks = [handle.read(BLOCK_FRAMES, dtype="float32", always_2d=True)]  # each [<= BLOCK_FRAMES, channels]
        while len(blocks[-1]) == BLOCK_FRAMES and (max_frames is None or len(blocks) * BLOCK_FRAMES <= max_frames):
            blocks.append(handle.read(BLOCK_FRAMES, dtype="float32", always_2d=True))
        return np.concatenate(blocks)


def load_audio(path: str | os.PathLike, sample_rate: int, max_seconds: float | None = None,
               limit_name: str = "the limit") -> np.ndarray:
    """Read any libsndfile format, downmix to mono, resample with soxr from the file's own rate.

    Returns float32 ``[samples]`` in [-1, 1]. Raises ``AudioError`` (reason missing_file, zero_length,
    not_audio, truncated, non_finite or unreadable), or ``AudioTooLongError`` (too_long) when ``max_seconds`` is
    given and the clip at ``sample_rate`` lasts longer (``limit_name`` names the bound in the message): decided
    from the header's length before decoding when the header gives it, else once decoding passes the bound.
    """
    path = Path(path)
    if not path.is_file():
        raise AudioError(path, "missing_file", "file not found; check the corpus path and the clip id "
                         "in the metadata")
    if path.stat().st_size == 0:
        raise AudioError(path, "zero_length", "file is empty (0 bytes); re-export or remove the clip")
    shortfall = _wav_data_shortfall(path)
    if shortfall is not None:
        declared, present = shortfall
        raise AudioError(path, "truncated", f"WAV header declares {declared} bytes of audio but the file "
                         f"holds {present}; the copy was cut short, copy or re-export the file")
    try:
        info = soundfile.info(str(path))
    except (soundfile.LibsndfileError, RuntimeError) as err:
        text = str(err).lower()
        if "format not recognised" in text or "unknown format" in text or "not a valid" in text:
            raise AudioError(path, "not_audio", f"not an audio file libsndfile can read ({err}); "
                             "check the file is really audio (WAV/FLAC/OGG) and not, e.g., a text or "
                             "HTML file with an audio extension") from None
        raise AudioError(path, "unreadable", f"cannot read the audio header ({err}); re-export the "
                         "clip as WAV or FLAC") from None
    file_rate, known = info.samplerate, info.frames != UNKNOWN_FRAMES
    max_frames = None  # the most frames at the file's rate that could resample to max_seconds (2 samples' slack)
    if max_seconds is not None:
        max_frames = int((max_seconds * sample_rate + 2) * file_rate / sample_rate)
        if known and info.frames > max_frames:  # refused from the header: nothing decoded
            raise AudioTooLongError(path, info.frames / file_rate, max_seconds, limit_name)
    try:
        data = _decode(path, info.frames, max_frames)  # [samples, channels]
    except (soundfile.LibsndfileError, RuntimeError) as err:
        reason = "truncated" if "unexpected end" in str(err).lower() else "unreadable"
        raise AudioError(path, reason, f"cannot decode the audio ({err}); re-export the clip as WAV or "
                         "FLAC") from None
    if max_frames is not None and data.shape[0] > max_frames:  # no length in the header: decoding stopped past it
        raise AudioTooLongError(path, data.shape[0] / file_rate, max_seconds, limit_name, exact=False)
    if known and 0 < info.frames and data.shape[0] < info.frames and info.format in ("WAV", "WAVEX", "RF64", "W64"):
        raise AudioError(path, "truncated", f"header declares {info.frames} frames but only "
                         f"{data.shape[0]} could be read; copy or re-export the file")
    if data.shape[0] == 0:
        raise AudioError(path, "zero_length", "file holds no audio samples; re-export or remove the clip")
    if not np.all(np.isfinite(data)):
        count = int(np.size(data) - np.count_nonzero(np.isfinite(data)))
        raise AudioError(path, "non_finite", f"{count} samples are NaN or Inf (a broken float WAV); "
                         "re-export the clip as 16-bit PCM")
    mono = data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0]  # [samples]
    if file_rate != sample_rate:
        mono = soxr.resample(mono, file_rate, sample_rate, quality="HQ")
    if max_seconds is not None and mono.shape[0] / sample_rate > max_seconds:  # the exact verdict, at sample_rate
        raise AudioTooLongError(path, mono.shape[0] / sample_rate, max_seconds, limit_name)
    return np.ascontiguousarray(mono, dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# TF loader (on-the-fly path)
# ---------------------------------------------------------------------------------------------

def tf_load_wav(path: tf.Tensor | str, sample_rate: int) -> tf.Tensor:
    """Read a 16-bit PCM WAV with TF ops; returns float32 ``[samples]`` (channels averaged).

    TF cannot resample, so a file whose rate differs from ``sample_rate`` fails (eagerly or when the
    dataset element is produced) with a message naming the file and the fix.
    """
    path = tf.convert_to_tensor(path, dtype=tf.string)
    contents = tf.io.read_file(path)
    audio, file_rate = tf.audio.decode_wav(contents)  # audio [samples, channels] float32, file_rate scalar
    check = tf.debugging.Assert(
        tf.equal(file_rate, tf.constant(sample_rate, tf.int32)),
        ["Sample rate mismatch in", path, "file rate:", file_rate, "config audio.sample_rate:",
         tf.constant(sample_rate, tf.int32),
         "The TF-native loader cannot resample: run `myxtts prepare` (it converts every clip to the "
         "configured rate) or set data.use_tf_native_loading: false."],
        summarize=8)
    with tf.control_dependencies([check]):
        return tf.reduce_mean(audio, axis=1)  # [samples]

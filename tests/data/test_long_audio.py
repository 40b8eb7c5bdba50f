"""A clip longer than its bound is refused from its header, before decoding: ``load_audio(max_seconds=...)``, prepare's
``too_long`` and a file whose header gives no length (decoded in bounded blocks). Real FLAC files written here; every
frame decoded is counted by wrapping ``soundfile.SoundFile.read`` (which ``soundfile.read`` and ``blocks`` call)."""

from __future__ import annotations

import csv
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile

from myxtts.audio import BLOCK_FRAMES, UNKNOWN_FRAMES, AudioError, AudioTooLongError, load_audio

RATE, CHANNELS, MINUTES = 8000, 8, 10
SAMPLE_RATE = 22050


def write_long_flac(path: Path, minutes: int = MINUTES) -> Path:
    """``minutes`` of 8-channel noise at 8 kHz, 16-bit samples of -2..2: small to encode, and written a second at a
    time, so the test holds one second of it."""
    second = np.random.default_rng(0).integers(-2, 3, (RATE, CHANNELS), dtype=np.int16)  # [frames, channels]
    with soundfile.SoundFile(str(path), "w", RATE, CHANNELS, "PCM_16", format="FLAC") as out:
        for _ in range(minutes * 60):
            out.write(second)
    return path


def without_length(path: Path) -> Path:
    """The FLAC with STREAMINFO's total-samples field zeroed ("unknown", as a streamed encode writes it)."""
    raw = bytearray(path.read_bytes())
    packed = struct.unpack(">Q", bytes(raw[18:26]))[0]  # rate 20 bits, channels 3, bits 5, total samples 36
    raw[18:26] = struct.pack(">Q", packed & ~((1 << 36) - 1))
    path.write_bytes(bytes(raw))
    return path


@pytest.fixture
def frames_read(monkeypatch) -> dict[str, int]:
    """File name -> frames decoded from it (every read, whatever reads it)."""
    counts: dict[str, int] = {}
    original = soundfile.SoundFile.read

    def counting(self, *args, **kwargs):
        data = original(self, *args, **kwargs)
        counts[Path(str(self.name)).name] = counts.get(Path(str(self.name)).name, 0) + len(data)
        return data

    monkeypatch.setattr(soundfile.SoundFile, "read", counting)
    return counts


@pytest.fixture(scope="module")
def long_flac(tmp_path_factory) -> Path:
    return write_long_flac(tmp_path_factory.mktemp("long") / "long.flac")


def test_a_long_clip_is_refused_from_its_header_without_decoding(long_flac, frames_read):
    info = soundfile.info(str(long_flac))
    assert (info.frames, info.channels) == (MINUTES * 60 * RATE, CHANNELS)
    with pytest.raises(AudioTooLongError) as caught:
        load_audio(long_flac, SAMPLE_RATE, max_seconds=12.0, limit_name="data.max_duration")
    error = caught.value
    assert isinstance(error, AudioError) and error.reason == "too_long" and error.exact
    assert error.seconds == MINUTES * 60 and error.max_seconds == 12.0
    assert str(error) == (f"{long_flac}: 600.000 s is longer than data.max_duration (12 s); trim or split the clip "
                          "(reason: too_long)")
    assert frames_read == {}  # nothing decoded


def test_a_header_without_length_is_decoded_in_bounded_blocks(tmp_path, frames_read):
    path = without_length(write_long_flac(tmp_path / "streamed.flac"))
    assert soundfile.info(str(path)).frames == UNKNOWN_FRAMES  # libsndfile: length unknown
    with pytest.raises(AudioTooLongError) as caught:
        load_audio(path, SAMPLE_RATE, max_seconds=12.0)
    assert not caught.value.exact and "at least" in str(caught.value)
    bound = int((12.0 * SAMPLE_RATE + 2) * RATE / SAMPLE_RATE)  # the bound's frames at the file's rate
    assert bound < frames_read["streamed.flac"] <= bound + BLOCK_FRAMES  # stopped once past the bound


def test_clips_within_the_bound_load_as_without_it(bundled_corpus):
    for path in sorted((bundled_corpus / "wavs").glob("*.wav"))[:2]:
        seconds = soundfile.info(str(path)).duration
        np.testing.assert_array_equal(load_audio(path, SAMPLE_RATE, max_seconds=seconds + 0.01),
                                      load_audio(path, SAMPLE_RATE))
        with pytest.raises(AudioTooLongError):  # the verdict at the output rate: a shade shorter bound refuses it
            load_audio(path, SAMPLE_RATE, max_seconds=seconds - 0.01)


def test_prepare_rejects_the_long_clip_as_too_long_without_decoding_it(tmp_path, bundled_corpus, long_flac,
                                                                        frames_read):
    from myxtts.config import config_from_dict
    from myxtts.data.prepare import prepare

    root = tmp_path / "corpus"
    (root / "wavs").mkdir(parents=True)
    lines = [line for line in (bundled_corpus / "metadata.csv").read_text(encoding="utf-8").splitlines() if line][:3]
    for line in lines:
        shutil.copy(bundled_corpus / "wavs" / f"{line.split('|')[0]}.wav", root / "wavs")
    shutil.copy(long_flac, root / "wavs" / "long.wav")  # libsndfile goes by the contents: a FLAC named .wav
    lines.append("long|a perfectly fine sentence|a perfectly fine sentence")
    (root / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = config_from_dict({"data": {"corpus_path": str(root), "cache_dir": str(root / "cache"),
                                     "validation_size": 1}}, base_dir=root)
    prepare(cfg, progress=False)
    with open(cfg.cache_dir / "rejected.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(Path(row["file"]).name, row["reason"]) for row in rows] == [("long.wav", "too_long")]
    assert rows[0]["message"].endswith(f"{root / 'wavs' / 'long.wav'}: 600.000 s is longer than data.max_duration "
                                       f"= {cfg.data.max_duration} s")
    assert "long.wav" not in frames_read  # refused from its header
    assert len([name for name in frames_read if name.endswith(".wav")]) >= 3  # the good clips were decoded

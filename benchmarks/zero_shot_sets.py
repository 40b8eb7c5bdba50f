"""The zero-shot benchmark's development speakers and judge (``benchmarks/zero_shot.py`` runs them).

- ``held_out_sets``: a prepared cache's held-out speakers (``splits.held_out`` of its manifest; never trained on),
  grouped by the corpus before the ":" of their names (``librispeech-251``, ``commonvoice-en``), each speaker's clips
  sorted by utterance id, read from the 22,050 Hz WAV stored beside each utterance file.
- ``seen_sets``: as many speakers of each set that the base trained on, for comparison (memorised voices).
- ``split_voice``: the reference and the centroid clips of one speaker: the first clip conditions the model, the
  others make the centroid; a speaker with one clip gives its first half as the reference, its second half as the
  centroid.
- ``condition_audio``: a reference condition (``full``, a crop ``3s`` / ``6s`` / ``10s``, ``3clips``) of a voice:
  the reference waveforms and the centroid clips it is judged against, or None where it cannot be measured.
- ``judge``: Resemblyzer embeddings against a set's centroids: identified (nearest centroid is the own one), margin
  (own cosine minus the mean cosine to the others) and the own cosine.
- ``pitch_point``: how outputs keep their references' pitch: the share of frames voiced and the median distance in
  semitones between an output's median F0 and its reference's (myxtts.f0's tracker): a voice said an octave low, or
  without voicing, shows here before it shows in the judges' figures.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

CONDITIONS = ("full", "3s", "6s", "10s", "3clips")
CROP_SECONDS = {"3s": 3.0, "6s": 6.0, "10s": 10.0}
SEVERAL_REFERENCES = 3  # the 3clips condition: three references averaged, at least one more clip for the centroid


@dataclass
class Speaker:
    """One held-out speaker of the cache: its name and its clips (utterance ids and audio files), sorted by id."""

    name: str  # "librispeech-251:196"
    ids: list[str]
    audio_paths: list[Path]

    @property
    def set_name(self) -> str:
        return self.name.split(":", 1)[0]


@dataclass
class Voice:
    """One speaker's audio as the protocol splits it (waveforms at the model's rate)."""

    name: str
    reference: np.ndarray  # the first clip, or the first half of the only clip
    centroid_clips: list[np.ndarray]  # the other clips, or the second half of the only clip
    clips: list[np.ndarray]  # every clip whole, in id order (the 3clips condition)
    halved: bool  # True: one clip, split in two


def read_manifest(cache_dir: Path) -> dict:
    """The cache's manifest; SystemExit naming the file when it is missing."""
    manifest_path = cache_dir / "manifest.json"
    if not manifest_path.is_file():
        raise SystemExit(f"Error: {manifest_path} does not exist: give a prepared cache (myxtts prepare).")
    return json.loads(manifest_path.read_text(encoding="utf-8"))


def speaker_clips(cache_dir: Path, manifest: dict, split: str) -> dict[str, list[tuple[str, Path]]]:
    """Speaker name -> its (utterance id, audio file) pairs in the manifest's ``split``."""
    from myxtts.data.cache import audio_file
    from myxtts.data.cache_manifest import load_index

    wanted = set(manifest.get("splits", {}).get(split, []))
    index = load_index(cache_dir, manifest)
    names = manifest["speakers"]
    clips: dict[str, list[tuple[str, Path]]] = {}
    for utterance_id, file, speaker_id in zip(index["ids"], index["files"], index["speaker_ids"]):
        if str(utterance_id) in wanted:
            clips.setdefault(names[int(speaker_id)], []).append((str(utterance_id), cache_dir / audio_file(str(file))))
    return clips


def held_out_sets(cache_dir: Path) -> tuple[dict[str, list[Speaker]], dict]:
    """The cache's held-out speakers by set (speakers in the manifest's ``held_out_speakers`` order), and the
    manifest. SystemExit naming what is missing when the cache has no held-out split."""
    manifest = read_manifest(cache_dir)
    if not manifest.get("splits", {}).get("held_out"):
        raise SystemExit(f"Error: the cache {cache_dir} has no held-out speakers (manifest splits.held_out).")
    clips = speaker_clips(cache_dir, manifest, "held_out")
    order = [name for name in manifest.get("held_out_speakers", []) if name in clips]
    order += sorted(set(clips) - set(order))
    return speaker_sets(clips, order), manifest


def seen_sets(cache_dir: Path, count: int) -> dict[str, list[Speaker]]:
    """``count`` speakers of each set that the base trained on (the manifest's train split), for comparison with
    the held-out ones: memorised voices against voices generalised to. The speakers with the most training clips
    first (ties by name), so the centroid is another clip wherever the corpus has one; the set is named
    ``SET seen``."""
    manifest = read_manifest(cache_dir)
    clips = speaker_clips(cache_dir, manifest, "train")
    by_set: dict[str, list[str]] = {}
    for name in sorted(clips, key=lambda name: (-len(clips[name]), name)):
        by_set.setdefault(name.split(":", 1)[0], []).append(name)
    order = [name for names in by_set.values() for name in names[:count]]
    return {f"{set_name} seen": speakers for set_name, speakers in speaker_sets(clips, order).items()}


def speaker_sets(clips: dict[str, list[tuple[str, Path]]], order: list[str]) -> dict[str, list[Speaker]]:
    """The speakers of ``order`` grouped by set, each one's clips sorted by id; SystemExit when audio is missing."""
    sets: dict[str, list[Speaker]] = {}
    for name in order:
        ordered = sorted(clips[name])
        missing = [str(path) for _, path in ordered if not path.is_file()]
        if missing:
            raise SystemExit(f"Error: the cache holds no audio for {missing[0]} (a cache of format 4 or later "
                             "stores each clip's audio beside its utterance file).")
        speaker = Speaker(name, [i for i, _ in ordered], [p for _, p in ordered])
        sets.setdefault(speaker.set_name, []).append(speaker)
    return sets


def split_voice(speaker: Speaker, load: Callable[[Path], np.ndarray]) -> Voice:
    """``load``: a path -> its waveform at the model's rate."""
    clips = [np.asarray(load(path), np.float32) for path in speaker.audio_paths]
    if len(clips) == 1:
        middle = len(clips[0]) // 2
        return Voice(speaker.name, clips[0][:middle], [clips[0][middle:]], clips, halved=True)
    return Voice(speaker.name, clips[0], clips[1:], clips, halved=False)


def condition_audio(voice: Voice, condition: str,
                    sample_rate: int) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
    """(reference waveforms, centroid clips) of ``voice`` under ``condition``; None when it does not apply: a crop
    longer than the reference, or 3clips for a speaker with fewer than four clips."""
    if condition == "full":
        return [voice.reference], voice.centroid_clips
    if condition in CROP_SECONDS:
        samples = int(round(CROP_SECONDS[condition] * sample_rate))
        return ([voice.reference[:samples]], voice.centroid_clips) if len(voice.reference) >= samples else None
    if condition == "3clips":
        if len(voice.clips) <= SEVERAL_REFERENCES:
            return None
        # the centroid leaves out every reference, so no clip is both what the model heard and the judge's truth
        return voice.clips[:SEVERAL_REFERENCES], voice.clips[SEVERAL_REFERENCES:]
    raise ValueError(f"Unknown condition {condition!r}: use {', '.join(CONDITIONS)}.")


def held_out_texts(metadata: Path, count: int) -> list[str]:
    """The normalised text (third column) of the last ``count`` rows of an LJSpeech-style ``metadata.csv``."""
    with open(metadata, encoding="utf-8", newline="") as handle:
        rows = [row for row in csv.reader(handle, delimiter="|", quoting=csv.QUOTE_NONE) if len(row) >= 3]
    if len(rows) < count:
        raise SystemExit(f"Error: {metadata} has {len(rows)} rows, fewer than the {count} texts asked for.")
    return [row[2] for row in rows[len(rows) - count:]]


def unit(vector: np.ndarray) -> np.ndarray:
    return vector / max(float(np.linalg.norm(vector)), 1e-12)


def unit_mean(embeddings: Sequence[np.ndarray]) -> np.ndarray:
    """A speaker's centroid: the mean of unit embeddings, made unit."""
    return unit(np.mean(np.stack([unit(e) for e in embeddings]), axis=0))


def judge(embeddings: Sequence[tuple[str, np.ndarray]], centroids: dict[str, np.ndarray]) -> tuple[dict, list[dict]]:
    """(summary, one row per embedding) of (speaker, embedding) pairs against ``centroids`` (speaker -> unit
    vector): identified share, margin and own cosine; margin is None with a single centroid (no other voice)."""
    names = list(centroids)
    table = np.stack([centroids[name] for name in names])  # [speakers, 256] unit rows
    rows = []
    for speaker, embedding in embeddings:
        scores = table @ unit(embedding)
        own = names.index(speaker)
        others = np.delete(scores, own)
        rows.append({"speaker": speaker, "own_cosine": float(scores[own]), "nearest": names[int(np.argmax(scores))],
                     "margin": float(scores[own] - others.mean()) if others.size else None})
    margins = [row["margin"] for row in rows if row["margin"] is not None]
    summary = {"identified": float(np.mean([row["nearest"] == row["speaker"] for row in rows])) if rows else None,
               "margin": float(np.mean(margins)) if margins else None,
               "own_cosine": float(np.mean([row["own_cosine"] for row in rows])) if rows else None,
               "items": len(rows), "speakers": len({row["speaker"] for row in rows}), "centroids": len(names),
               "chance": 1.0 / len(names)}
    return summary, rows


def voiced_pitch(wave: np.ndarray, sample_rate: int, hop_length: int) -> tuple[float | None, float]:
    """(median F0 in Hz over the voiced frames, None without one; the share of frames voiced) of one waveform."""
    from myxtts.f0.tracker import clip_f0

    f0 = clip_f0(np.asarray(wave, np.float32), len(wave) // hop_length, sample_rate, hop_length)
    voiced = f0[f0 > 0]
    return (float(np.median(voiced)) if voiced.size else None), float(voiced.size / max(f0.size, 1))


def pitch_point(pitches: Sequence[tuple[float | None, float]],
                reference_pitches: Sequence[tuple[float | None, float]]) -> tuple[dict, list[dict]]:
    """(summary, one row per output) of outputs' ``voiced_pitch`` against their references': voiced share and the
    median |12 log2(output F0 / reference F0)| over the outputs with voiced frames on both sides."""
    rows, errors = [], []
    for (f0, voiced), (reference_f0, _) in zip(pitches, reference_pitches):
        error = abs(12.0 * np.log2(f0 / reference_f0)) if f0 and reference_f0 else None
        rows.append({"f0_hz": f0, "voiced_share": voiced, "pitch_error_semitones": error})
        errors += [] if error is None else [error]
    return {"voiced_share": float(np.mean([voiced for _, voiced in pitches])) if pitches else None,
            "pitch_error_semitones": float(np.median(errors)) if errors else None}, rows

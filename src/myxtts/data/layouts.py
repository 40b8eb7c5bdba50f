"""Published multi-speaker layouts read as they are downloaded: VCTK and LibriTTS / LibriTTS-R.

- ``vctk`` (``data.corpus_path`` = the VCTK root): transcripts ``txt/<speaker>/<utterance>.txt``;
  audio ``wav48_silence_trimmed/<speaker>/<utterance>_mic1.flac`` (VCTK 0.92, the first microphone)
  or ``wav48/<speaker>/<utterance>.wav`` (VCTK 0.80). Id ``<speaker>/<utterance>``, speaker = the folder.
- ``libritts`` (``data.corpus_path`` = the LibriTTS root or one subset such as ``train-clean-100``):
  ``<speaker>/<chapter>/<speaker>_<chapter>_<n>_<n>.wav`` with ``.normalized.txt`` (used) or
  ``.original.txt`` beside it; LibriTTS-R has the same layout. Id = the path of the clip without
  suffixes relative to ``corpus_path``, speaker = the first field of the file name.

One text file per clip: a file that is not UTF-8 or empty, an audio file without a transcript and
a transcript without audio each become a ``Rejection`` naming the file (line 1: the transcript's
only line). Files are visited in sorted order, so the corpus order is stable.
"""

from __future__ import annotations

from pathlib import Path

from myxtts.data.entries import NON_UTF8, CorpusEntry, CorpusReadResult, Rejection, accept_entry

MISSING_TEXT = "missing_text"
VCTK_AUDIO_DIRS = (("wav48_silence_trimmed", "_mic1.flac"), ("wav48", ".wav"))


def _read_text(path: Path, result: CorpusReadResult) -> str | None:
    raw = path.read_bytes()
    try:
        return " ".join(raw.decode("utf-8-sig").split())
    except UnicodeDecodeError as err:
        result.rejections.append(Rejection(str(path), 1, NON_UTF8, f"{path}:1: not valid UTF-8 at byte {err.start}; "
                                                                   "re-save the file as UTF-8."))
        return None


def read_vctk(root: Path, language: str = "en") -> CorpusReadResult:
    text_dir = root / "txt"
    audio = [(root / folder, suffix) for folder, suffix in VCTK_AUDIO_DIRS if (root / folder).is_dir()]
    if not text_dir.is_dir() or not audio:
        raise ValueError(f"VCTK corpus {root}: expected txt/ and wav48_silence_trimmed/ (VCTK 0.92) or wav48/ "
                         "(VCTK 0.80) inside data.corpus_path.")
    audio_dir, suffix = audio[0]
    result = CorpusReadResult(source=text_dir)
    seen: dict[str, int] = {}
    transcribed = set()
    for text_file in sorted(text_dir.glob("*/*.txt")):
        speaker, utterance = text_file.parent.name, text_file.stem
        transcribed.add((speaker, utterance))
        text = _read_text(text_file, result)
        if text is None:
            continue
        entry = CorpusEntry(f"{speaker}/{utterance}", audio_dir / speaker / f"{utterance}{suffix}", text, speaker,
                            language, 1)
        accept_entry(entry, text_file, seen, result)
    for audio_file in sorted(audio_dir.glob(f"*/*{suffix}")):
        utterance = audio_file.name[:-len(suffix)]
        if (audio_file.parent.name, utterance) not in transcribed:
            result.rejections.append(Rejection(str(audio_file), 1, MISSING_TEXT,
                                               f"{audio_file}: no transcript {text_dir / audio_file.parent.name}/"
                                               f"{utterance}.txt"))
    return result


def read_libritts(root: Path, language: str = "en") -> CorpusReadResult:
    if not root.is_dir():
        raise ValueError(f"LibriTTS corpus {root} not found (data.corpus_path must be the LibriTTS root or a subset "
                         "folder such as train-clean-100).")
    result = CorpusReadResult(source=root)
    seen: dict[str, int] = {}
    transcribed = set()
    texts = {}
    for kind in (".original.txt", ".normalized.txt"):  # normalized wins when both exist
        for text_file in root.rglob(f"*{kind}"):
            texts[text_file.with_name(text_file.name[:-len(kind)])] = text_file
    if not texts:
        raise ValueError(f"LibriTTS corpus {root}: no <speaker>/<chapter>/*.normalized.txt transcript found.")
    for stem in sorted(texts):
        text_file = texts[stem]
        transcribed.add(stem)
        text = _read_text(text_file, result)
        if text is None:
            continue
        audio = next((stem.with_name(stem.name + s) for s in (".wav", ".flac") if stem.with_name(stem.name + s).is_file()),
                     stem.with_name(stem.name + ".wav"))
        entry = CorpusEntry(stem.relative_to(root).as_posix(), audio, text, stem.name.split("_")[0], language, 1)
        accept_entry(entry, text_file, seen, result)
    for audio_file in sorted(p for s in ("*.wav", "*.flac") for p in root.rglob(s)):
        if audio_file.with_suffix("") not in transcribed:
            result.rejections.append(Rejection(str(audio_file), 1, MISSING_TEXT,
                                               f"{audio_file}: no transcript {audio_file.with_suffix('')}"
                                               ".normalized.txt"))
    return result


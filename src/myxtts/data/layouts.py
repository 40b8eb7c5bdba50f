"""Published multi-speaker layouts read as they are downloaded: VCTK, LibriTTS / LibriTTS-R, LibriSpeech and
Common Voice.

- ``vctk`` (``data.corpus_path`` = the VCTK root): transcripts ``txt/<speaker>/<utterance>.txt``;
  audio ``wav48_silence_trimmed/<speaker>/<utterance>_mic1.flac`` (VCTK 0.92, the first microphone)
  or ``wav48/<speaker>/<utterance>.wav`` (VCTK 0.80). Id ``<speaker>/<utterance>``, speaker = the folder.
- ``libritts`` (``data.corpus_path`` = the LibriTTS root or one subset such as ``train-clean-100``):
  ``<speaker>/<chapter>/<speaker>_<chapter>_<n>_<n>.wav`` with ``.normalized.txt`` (used) or
  ``.original.txt`` beside it; LibriTTS-R has the same layout. Id = the path of the clip without
  suffixes relative to ``corpus_path``, speaker = the first field of the file name.

- ``librispeech`` (``data.corpus_path`` = the LibriSpeech root or one subset): ``<speaker>/<chapter>/
  <speaker>-<chapter>.trans.txt`` with one ``<speaker>-<chapter>-<n> TEXT`` line per clip and the clip
  ``<speaker>-<chapter>-<n>.flac`` beside it. Id = the utterance name, speaker = its first field.
- ``commonvoice`` (``data.corpus_path`` = the folder holding ``validated.tsv`` and ``clips/``): tab-separated,
  a header line naming the columns (``client_id``, ``path``, ``sentence``, ``up_votes``, ``down_votes`` are
  read); ``client_id`` is the speaker, ``path`` the clip under ``clips/`` (mp3 as published) and the id.
  A clip with fewer up-votes or more down-votes than the corpus' thresholds is rejected (``voted_down``).

VCTK and LibriTTS have one text file per clip: a file that is not UTF-8 or empty, an audio file without a transcript and
a transcript without audio each become a ``Rejection`` naming the file (line 1: the transcript's
only line). Files are visited in sorted order, so the corpus order is stable.
"""

from __future__ import annotations

from pathlib import Path

from myxtts.data.entries import (NON_UTF8, WRONG_FIELD_COUNT, CorpusEntry, CorpusError, CorpusReadResult, Rejection,
                                 accept_entry, decoded_lines)

MISSING_TEXT = "missing_text"
VOTED_DOWN = "voted_down"
COMMONVOICE_COLUMNS = ("client_id", "path", "sentence", "up_votes", "down_votes")
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
        raise CorpusError(f"VCTK corpus {root}: expected txt/ and wav48_silence_trimmed/ (VCTK 0.92) or wav48/ "
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
        raise CorpusError(f"LibriTTS corpus {root} not found (data.corpus_path must be the LibriTTS root or a subset "
                         "folder such as train-clean-100).")
    result = CorpusReadResult(source=root)
    seen: dict[str, int] = {}
    transcribed = set()
    texts = {}
    for kind in (".original.txt", ".normalized.txt"):  # normalized wins when both exist
        for text_file in root.rglob(f"*{kind}"):
            texts[text_file.with_name(text_file.name[:-len(kind)])] = text_file
    if not texts:
        raise CorpusError(f"LibriTTS corpus {root}: no <speaker>/<chapter>/*.normalized.txt transcript found.")
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



def read_librispeech(root: Path, language: str = "en") -> CorpusReadResult:
    if not root.is_dir():
        raise CorpusError(f"LibriSpeech corpus {root} not found (data.corpus_path must be the LibriSpeech root or a "
                         "subset folder such as train-clean-100).")
    transcripts = sorted(root.rglob("*.trans.txt"))
    if not transcripts:
        raise CorpusError(f"LibriSpeech corpus {root}: no <speaker>/<chapter>/<speaker>-<chapter>.trans.txt found.")
    result = CorpusReadResult(source=root)
    seen: dict[str, int] = {}
    transcribed = set()
    for transcript in transcripts:
        for line_number, line in decoded_lines(transcript, result):
            utterance, _, text = line.strip().partition(" ")
            audio = transcript.parent / f"{utterance}.flac"
            transcribed.add(audio)
            entry = CorpusEntry(utterance, audio, " ".join(text.split()), utterance.split("-")[0], language,
                                line_number)
            accept_entry(entry, transcript, seen, result)
    for audio_file in sorted(root.rglob("*.flac")):
        if audio_file not in transcribed:
            result.rejections.append(Rejection(str(audio_file), 1, MISSING_TEXT,
                                               f"{audio_file}: no line '{audio_file.stem} ...' in a .trans.txt "
                                               "of its folder"))
    return result


def read_commonvoice(root: Path, language: str = "en", min_up_votes: int = 2,
                     max_down_votes: int = 0) -> CorpusReadResult:
    table = root / "validated.tsv"
    if not table.is_file() or not (root / "clips").is_dir():
        raise CorpusError(f"Common Voice corpus {root}: expected validated.tsv and clips/ inside data.corpus_path "
                         "(the folder of one language of a Common Voice release).")
    result = CorpusReadResult(source=table)
    seen: dict[str, int] = {}
    lines = decoded_lines(table, result)
    header = next(lines, (1, ""))[1].rstrip("\r").split("\t")
    missing = [column for column in COMMONVOICE_COLUMNS if column not in header]
    if missing:
        raise CorpusError(f"{table}:1: the header names no column {missing[0]!r} (Common Voice's validated.tsv has "
                         f"{', '.join(COMMONVOICE_COLUMNS)}).")
    column = {name: header.index(name) for name in COMMONVOICE_COLUMNS}
    for line_number, line in lines:
        fields = line.rstrip("\r").split("\t")
        where = f"{table}:{line_number}"
        if len(fields) != len(header):
            result.rejections.append(Rejection(str(table), line_number, WRONG_FIELD_COUNT,
                                               f"{where}: expected {len(header)} tab-separated fields as the header "
                                               f"names, got {len(fields)}."))
            continue
        speaker, path, text = (fields[column[k]].strip() for k in ("client_id", "path", "sentence"))
        try:
            up_votes, down_votes = int(fields[column["up_votes"]] or 0), int(fields[column["down_votes"]] or 0)
        except ValueError:
            result.rejections.append(Rejection(str(table), line_number, WRONG_FIELD_COUNT,
                                               f"{where}: up_votes / down_votes must be whole numbers."))
            continue
        if up_votes < min_up_votes or down_votes > max_down_votes:
            result.rejections.append(Rejection(str(table), line_number, VOTED_DOWN,
                                               f"{where}: '{path}' has {up_votes} up-vote(s) and {down_votes} "
                                               f"down-vote(s); the corpus takes >= {min_up_votes} up and <= "
                                               f"{max_down_votes} down (data.corpora[].min_up_votes / "
                                               "max_down_votes)."))
            continue
        if not speaker or not path or "/" in path or path.startswith("."):
            result.rejections.append(Rejection(str(table), line_number, WRONG_FIELD_COUNT,
                                               f"{where}: client_id and path must be set, path a file name under "
                                               "clips/."))
            continue
        accept_entry(CorpusEntry(path, root / "clips" / path, " ".join(text.split()), speaker, language,
                                 line_number), table, seen, result)
    return result

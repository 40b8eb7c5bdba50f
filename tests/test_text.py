"""myxtts.text: normalisation, vocabulary, encoding of the bundled LJSpeech transcripts, phonemes."""

from __future__ import annotations

import csv
import json

import pytest

from conftest import BUNDLED_CORPUS, requires_espeak
from myxtts.config import TextConfig
from myxtts.text import (BOS_ID, EOS_ID, PAD_ID, PhonemizerError, TextError, TextProcessor, Vocabulary,
                         normalize_text)
from myxtts.text_numbers import cardinal, ordinal, year


def bundled_transcripts() -> list[str]:
    with open(BUNDLED_CORPUS / "metadata.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="|", quoting=csv.QUOTE_NONE))
    assert len(rows) == 32
    return [row[2] for row in rows]


# ---- normalisation ------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("Hello   WORLD\t\n again ", "hello world again"),
    ("Café naïve Zoë façade", "cafe naive zoe facade"),
    ("\u201cQuoted\u201d \u2018single\u2019 \u2014 dash", '"quoted" \'single\' - dash'),
    ("I have 3 cats and 21 dogs.", "i have three cats and twenty-one dogs."),
    ("It weighs 3.14 kilos", "it weighs three point one four kilos"),
    ("1,234,567 people", "one million two hundred thirty-four thousand five hundred sixty-seven people"),
    ("5000000000 stars", "five billion stars"),
    ("the 1st, 2nd, 3rd, 4th, 11th, 12th, 23rd and 101st", "the first, second, third, fourth, eleventh, "
     "twelfth, twenty-third and one hundred first"),
    ("In 1884 and 1900 and 1905 and 2000 and 2008", "in eighteen eighty-four and nineteen hundred and "
     "nineteen oh five and two thousand and two thousand eight"),
    ("It cost $3.50.", "it cost three dollars, fifty cents."),
    ("$1 or $0.01 or $2.00", "one dollar or one cent or two dollars"),
    ("a $5 million loan", "a five million dollars loan"),
    ("\u00a33.50 and \u00a31", "three pounds, fifty pence and one pound"),
    ("50% off", "fifty percent off"),
    ("Mr. and Mrs. Smith met Dr. Jones at St. Paul's", "mister and missus smith met doctor jones at saint paul's"),
    ("Smith & Co. and Smith Jr., etc.", "smith and company and smith junior, et cetera"),
])
def test_english_cleaner(text, expected):
    assert normalize_text(text, "english") == expected


def test_basic_cleaner_only_lowercases_and_collapses():
    assert normalize_text("  Mr. SMITH paid $3.50  ", "basic") == "mr. smith paid $3.50"


def test_unknown_cleaner():
    with pytest.raises(ValueError, match="text.cleaner"):
        normalize_text("x", "french")


def test_number_words():
    assert cardinal(0) == "zero"
    assert cardinal(-7) == "minus seven"
    assert cardinal(100) == "one hundred"
    assert cardinal(1_000_001) == "one million one"
    assert cardinal(999_999_999_999) == ("nine hundred ninety-nine billion nine hundred ninety-nine million "
                                         "nine hundred ninety-nine thousand nine hundred ninety-nine")
    assert ordinal(20) == "twentieth" and ordinal(42) == "forty-second" and ordinal(1000) == "one thousandth"
    assert year(1776) == "seventeen seventy-six" and year(2010) == "twenty ten"


# ---- vocabulary ---------------------------------------------------------------------------------

def test_character_vocabulary_layout():
    vocabulary = Vocabulary()
    assert (PAD_ID, BOS_ID, EOS_ID) == (0, 1, 2) == (Vocabulary.PAD, Vocabulary.BOS, Vocabulary.EOS)
    assert vocabulary.symbols[:3] == ["<pad>", "<bos>", "<eos>"]
    assert vocabulary.symbols[3] == " "
    assert vocabulary.symbols[4:30] == list("abcdefghijklmnopqrstuvwxyz")
    assert set("!'(),-.:;?\"") <= set(vocabulary.symbols)
    assert len(vocabulary) == 3 + 1 + 26 + 11


def test_vocabulary_save_load_and_mismatch(tmp_path):
    path = tmp_path / "vocab.json"
    vocabulary = Vocabulary.for_config(TextConfig())
    vocabulary.save(path)
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert saved["kind"] == "characters" and saved["cleaner"] == "english"
    assert Vocabulary.load(path, TextConfig()) == vocabulary
    with pytest.raises(ValueError, match="kind: vocabulary has 'characters', config wants 'phonemes'"):
        Vocabulary.load(path, TextConfig(use_phonemes=True))
    with pytest.raises(ValueError, match="cleaner"):
        TextProcessor(TextConfig(cleaner="basic"), Vocabulary.load(path))
    phonemes = Vocabulary.for_config(TextConfig(use_phonemes=True))
    phonemes.save(tmp_path / "phonemes.json")
    assert Vocabulary.load(tmp_path / "phonemes.json") == phonemes
    with pytest.raises(ValueError, match="myxtts prepare"):
        Vocabulary.load(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="not a valid vocabulary"):
        Vocabulary.load(tmp_path / "broken.json")


# ---- encode / decode ----------------------------------------------------------------------------

def test_every_bundled_transcript_round_trips():
    processor = TextProcessor(TextConfig())
    known = set(processor.vocabulary.symbols)
    for text in bundled_transcripts():
        ids = processor.encode(text)
        assert ids[0] == BOS_ID and ids[-1] == EOS_ID
        assert all(3 <= index < len(processor.vocabulary) for index in ids[1:-1])
        normalized = normalize_text(text, "english")
        assert set(normalized) <= known, f"unknown symbols in {normalized!r}"
        assert processor.decode(ids) == normalized
    assert processor.encode_many(bundled_transcripts()[:3]) == [processor.encode(t) for t in bundled_transcripts()[:3]]


def test_unknown_characters_are_dropped():
    processor = TextProcessor(TextConfig())
    ids = processor.encode("hello {world} #1 @ ~")
    assert processor.decode(ids) == "hello world one"


def test_decode_skips_specials_and_rejects_bad_ids():
    processor = TextProcessor(TextConfig())
    ids = processor.encode("abc") + [PAD_ID, PAD_ID]
    assert processor.decode(ids) == "abc"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        processor.decode([1, 999, 2])


@pytest.mark.parametrize("text,reason", [("", "empty_text"), ("   \n", "empty_text"),
                                         ("日本語のテキスト", "no_known_characters"), ("{}#@", "no_known_characters")])
def test_text_errors(text, reason):
    with pytest.raises(TextError) as caught:
        TextProcessor(TextConfig()).encode(text)
    assert caught.value.reason == reason
    assert isinstance(caught.value, ValueError)


# ---- phonemes -----------------------------------------------------------------------------------

@requires_espeak
def test_phonemes_of_bundled_transcripts():
    processor = TextProcessor(TextConfig(use_phonemes=True))
    transcripts = bundled_transcripts()[:12]
    symbol_strings = processor.to_symbols_many(transcripts)
    assert symbol_strings == [processor.to_symbols(text) for text in transcripts[:2]] + symbol_strings[2:]
    known = set(processor.vocabulary.symbols)
    for text, symbols in zip(transcripts, symbol_strings):
        ids = processor.encode(text)
        assert ids[0] == BOS_ID and ids[-1] == EOS_ID
        assert set(symbols) <= known, f"espeak symbols missing from the vocabulary: {set(symbols) - known}"
        assert processor.decode(ids) == symbols
        assert "ˈ" in symbols  # stress marks: really IPA, not letters
        # punctuation survives phonemisation
        assert [c for c in symbols if c in ",.;"] == [c for c in normalize_text(text) if c in ",.;"]


@requires_espeak
def test_phoneme_vocabulary_mismatch_with_characters():
    with pytest.raises(ValueError, match="kind"):
        TextProcessor(TextConfig(use_phonemes=True), Vocabulary.for_config(TextConfig()))


def test_missing_espeak_binary(monkeypatch, tmp_path):
    empty = tmp_path / "empty_bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(PhonemizerError, match="espeak-ng.*not on PATH.*use_phonemes: false"):
        TextProcessor(TextConfig(use_phonemes=True))
    TextProcessor(TextConfig())  # characters need no binary


@requires_espeak
def test_unknown_phoneme_language():
    processor = TextProcessor(TextConfig(use_phonemes=True, phoneme_language="xx-notalanguage"))
    with pytest.raises(PhonemizerError, match="text.phoneme_language"):
        processor.encode("hello")

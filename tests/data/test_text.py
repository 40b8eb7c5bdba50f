"""myxtts.text: normalisation, vocabulary, encoding of the bundled LJSpeech transcripts, phonemes (the espeak-ng
library bundled by the espeakng-loader wheel: these tests run everywhere)."""

from __future__ import annotations

import csv
import json
import re

import pytest

from conftest import BUNDLED_CORPUS
from myxtts.config import TextConfig
from myxtts.text import (BOS_ID, EOS_ID, PAD_ID, PhonemizerError, TextError, TextProcessor, Vocabulary,
                         normalize_text)
from myxtts.text_numbers import cardinal, ordinal, year


def bundled_transcripts() -> list[str]:
    with open(BUNDLED_CORPUS / "metadata.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="|", quoting=csv.QUOTE_NONE))
    assert len(rows) == 32
    return [row[2] for row in rows]


CHARACTERS = TextConfig(use_phonemes=False)


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


def test_phonemes_are_the_default():
    assert TextConfig().use_phonemes and Vocabulary.for_config(TextConfig()).kind == "phonemes"
    assert Vocabulary.for_config(CHARACTERS).kind == "characters"  # characters remain a choice


def test_vocabulary_save_load_and_mismatch(tmp_path):
    path = tmp_path / "vocab.json"
    vocabulary = Vocabulary.for_config(CHARACTERS)
    vocabulary.save(path)
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert saved["kind"] == "characters" and saved["cleaner"] == "english"
    assert Vocabulary.load(path, CHARACTERS) == vocabulary
    with pytest.raises(ValueError, match="kind: vocabulary has 'characters', config wants 'phonemes'"):
        Vocabulary.load(path, TextConfig(use_phonemes=True))
    with pytest.raises(ValueError, match="cleaner"):
        TextProcessor(TextConfig(cleaner="basic", use_phonemes=False), Vocabulary.load(path))
    phonemes = Vocabulary.for_config(TextConfig())
    phonemes.save(tmp_path / "phonemes.json")
    saved = json.loads((tmp_path / "phonemes.json").read_text(encoding="utf-8"))
    # the phoneme symbol set travels with the vocabulary file (the cache's and the run's vocab.json)
    assert saved["kind"] == "phonemes" and saved["phoneme_language"] == "en-us"
    assert {"ð", "æ", "ˈ", "ˌ", "ː"} <= set(saved["symbols"])
    assert Vocabulary.load(tmp_path / "phonemes.json", TextConfig()) == phonemes
    with pytest.raises(ValueError, match="myxtts prepare"):
        Vocabulary.load(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="not a valid vocabulary"):
        Vocabulary.load(tmp_path / "broken.json")


# ---- encode / decode ----------------------------------------------------------------------------

def test_every_bundled_transcript_round_trips():
    processor = TextProcessor(CHARACTERS)
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
    processor = TextProcessor(CHARACTERS)
    ids = processor.encode("hello {world} #1 @ ~")
    assert processor.decode(ids) == "hello world one"
    # phonemes: the same symbols are dropped, not read out by espeak-ng ("hash", "at")
    phonemes = TextProcessor(TextConfig())
    assert phonemes.to_symbols("hello {world} #1 @ ~") == phonemes.to_symbols("hello world one")


@pytest.mark.parametrize("use_phonemes", [True, False])
def test_letters_of_another_script_are_refused_naming_them_never_dropped(use_phonemes):
    processor = TextProcessor(TextConfig(use_phonemes=use_phonemes))
    for text, named in (("We landed in 北京 on Monday.", ["北", "京"]), ("A trip to Москва.", ["М", "о"]),
                        ("It costs ¥500.", ["¥"])):
        with pytest.raises(TextError) as caught:
            processor.encode(text)
        assert caught.value.reason == "unpronounceable"
        assert all(repr(char) in str(caught.value) for char in named), str(caught.value)
    # Latin letters that NFKD leaves whole are spoken, and a sign after its amount is read
    assert normalize_text("Straße in Århus, 5€.") == "strasse in arhus, five euros."
    assert processor.encode("Café au lait, naïve.")  # accents fold away: no refusal


def test_long_digit_strings_are_read_in_groups_and_never_reach_int():
    assert normalize_text("call 1234567890123456") == ("call one, two three four, five six seven, eight nine zero, "
                                                        "one two three, four five six")
    assert normalize_text("1234567") == "one million two hundred thirty-four thousand five hundred sixty-seven"
    huge = normalize_text("9" * 5000)  # Python's int() refuses 4,301 digits or more: never called on them
    assert huge.count("nine") == 5000 and huge.count(",") == 5000 // 3 - (5000 % 3 == 0)
    assert normalize_text("$" + "1" * 20).endswith("one one, one one one dollars")
    assert normalize_text("the " + "1" * 20 + "th").startswith("the number one one, one one one")


def test_decode_skips_specials_and_rejects_bad_ids():
    processor = TextProcessor(CHARACTERS)
    ids = processor.encode("abc") + [PAD_ID, PAD_ID]
    assert processor.decode(ids) == "abc"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        processor.decode([1, 999, 2])


@pytest.mark.parametrize("use_phonemes", [True, False])
@pytest.mark.parametrize("text,reason", [("", "empty_text"), ("   \n", "empty_text"),
                                         ("日本語のテキスト", "unpronounceable"), ("{}#@", "no_known_characters"),
                                         ("...", "nothing_to_pronounce"), ("?! -- (\"')", "nothing_to_pronounce")])
def test_text_errors(text, reason, use_phonemes):
    with pytest.raises(TextError) as caught:
        TextProcessor(TextConfig(use_phonemes=use_phonemes)).encode(text)
    assert caught.value.reason == reason
    assert isinstance(caught.value, ValueError)
    if reason == "nothing_to_pronounce":
        assert "nothing to pronounce" in str(caught.value) and text[:3] in str(caught.value)


# ---- phonemes -----------------------------------------------------------------------------------

def test_phonemes_of_a_real_sentence():
    processor = TextProcessor(TextConfig())
    symbols = processor.to_symbols("The cat sat on the mat.")
    assert "ð" in symbols and "æ" in symbols and "ˈ" in symbols  # IPA with stress marks, not letters
    assert symbols.endswith(".") and " " in symbols  # punctuation and word boundaries kept
    assert processor.decode(processor.encode("The cat sat on the mat.")) == symbols  # one token per IPA character
    assert processor.to_symbols("Don't stop, ne-plus-ultra!") == processor.to_symbols("don't stop, ne-plus-ultra!")
    assert "oʊnt" in processor.to_symbols("don't")  # the apostrophe stays with its word: "don't", not "don t"


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


def test_phoneme_vocabulary_mismatch_with_characters():
    with pytest.raises(ValueError, match="kind"):
        TextProcessor(TextConfig(use_phonemes=True), Vocabulary.for_config(CHARACTERS))


def test_espeak_library_unavailable(monkeypatch):
    from myxtts import espeak

    def broken():
        raise espeak.EspeakUnavailableError("The espeakng-loader package is not installed.")

    monkeypatch.setattr(espeak, "_shared", None)
    monkeypatch.setattr(espeak, "bundled_paths", broken)
    with pytest.raises(PhonemizerError, match="espeak-ng library cannot be used.*espeakng-loader.*use_phonemes: false"):
        TextProcessor(TextConfig(use_phonemes=True))
    TextProcessor(CHARACTERS)  # characters need no library


@pytest.mark.parametrize("language", ["xx-notalanguage", "en-us+novariant", ""])
def test_unknown_phoneme_language(language):
    with pytest.raises(ValueError, match=rf"no voice .*{re.escape(repr(language))}.*text\.phoneme_language.*data\.language") as caught:
        TextProcessor(TextConfig(use_phonemes=True, phoneme_language=language))
    assert not isinstance(caught.value, TextError)
    TextProcessor(TextConfig(use_phonemes=False, phoneme_language=language))  # characters use no voice


def test_phoneme_languages_and_voice_switches():
    english = TextProcessor(TextConfig(phoneme_language="en-us"))
    british = TextProcessor(TextConfig(phoneme_language="en-gb"))  # found by language (not a voice file name)
    german = TextProcessor(TextConfig(phoneme_language="de", cleaner="basic"))
    # the shared library switches voice between calls: each processor keeps its own pronunciation
    first = [english.to_symbols("tomato"), british.to_symbols("tomato"), german.to_symbols("Bahnhof")]
    again = [english.to_symbols("tomato"), british.to_symbols("tomato"), german.to_symbols("Bahnhof")]
    assert first == again and first[0] != first[1]
    assert "eɪ" in first[0] and "ɑː" in first[1]
    assert german.to_symbols("5") != ""  # basic cleaner: espeak-ng reads digits in the voice's language


def test_phonemes_from_several_threads():
    from concurrent.futures import ThreadPoolExecutor

    processor = TextProcessor(TextConfig())
    transcripts = bundled_transcripts()
    expected = processor.encode_many(transcripts)
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(processor.encode, transcripts)) == expected

"""data.language and a list line's language field drive the text front-end and give language ids."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from myxtts.data.cache import FeatureCache
from myxtts.data.language import TextProcessors, text_config_for


def _list_corpus(root: Path, bundled_corpus: Path, rows: list[tuple[str, str]]) -> Path:
    wavs = sorted((bundled_corpus / "wavs").glob("*.wav"))
    lines = []
    for wav, (text, language) in zip(wavs, rows):
        shutil.copy(wav, root / wav.name)
        lines.append(f"{wav.name}|{text}|alice" + (f"|{language}" if language else ""))
    path = root / "list.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("default_language", ["en", "de"])
def test_language_picks_the_cleaner_and_gets_an_id(tmp_path: Path, bundled_corpus: Path, make_config,
                                                   default_language: str) -> None:
    from myxtts.data.prepare import prepare

    corpus = _list_corpus(tmp_path, bundled_corpus, [("It costs 5 euros.", "en"), ("Das kostet 5 Euro.", "de"),
                                                     ("Number 7 please.", None)])
    cfg = make_config(data={"corpus_path": str(corpus), "corpus_format": "list", "validation_size": 0,
                            "language": default_language},
                      text={"use_phonemes": False})  # characters: the decoded tokens show each cleaner's output
    result = prepare(cfg, progress=False)
    cache = FeatureCache.load(cfg)
    processor = TextProcessors(cfg).default
    decoded = [processor.decode(cache.utterance_tokens(i)) for i in range(len(cache))]
    # English: numbers spelled out; German: the basic cleaner (the English one would say "five")
    assert decoded[0] == "it costs five euros." and decoded[1] == "das kostet euro."
    # the third line names no language: data.language decides
    assert decoded[2] == ("number seven please." if default_language == "en" else "number please.")
    expected = ["en", "de"]
    assert cache.languages == expected and result.manifest["languages"] == expected
    np.testing.assert_array_equal(cache.language_ids, [0, 1, expected.index(default_language)])
    assert "languages: en, de" in result.summary()


def test_text_config_per_language(make_config) -> None:
    cfg = make_config(text={"use_phonemes": False, "phoneme_language": "en-us"})
    assert text_config_for(cfg, "en").phoneme_language == "en-us" and text_config_for(cfg, "en").cleaner == "english"
    assert text_config_for(cfg, "en-gb").phoneme_language == "en-us"
    german = text_config_for(cfg, "de")
    assert german.phoneme_language == "de" and german.cleaner == "basic"


def test_phonemes_use_the_voice_of_each_language(make_config) -> None:
    cfg = make_config(text={"use_phonemes": True, "phoneme_language": "en-us"})
    processors = TextProcessors(cfg)
    english = processors.for_language("en").to_symbols("Bahnhof")
    german = processors.for_language("de").to_symbols("Bahnhof")
    assert english != german and processors.for_language("de").cfg.phoneme_language == "de"
    assert processors.for_language("de").encode("Bahnhof")[1:-1]  # every symbol is in the shared vocabulary
    # the basic cleaner leaves digits to the voice: German reads "5" as "fünf", English text says "five"
    assert "fˈʏnf" in processors.for_language("de").to_symbols("Das kostet 5 Euro.")
    assert "fˈaɪv" in processors.for_language("en").to_symbols("It costs 5 euros.")


@pytest.mark.parametrize("language, heard", [("en", "it costs five euros."), ("de", "it costs euros.")])
def test_synthesis_reads_text_like_prepare_did_for_the_run_language(make_config, language, heard) -> None:
    """A run prepared with data.language: de cleaned its transcripts with the basic cleaner; synthesis must too."""
    from myxtts.data.language import run_text_processor
    from myxtts.text import Vocabulary

    cfg = make_config(data={"language": language}, text={"use_phonemes": False})  # characters show the cleaner
    processor = run_text_processor(cfg, Vocabulary.for_config(cfg.text))
    assert processor.decode(processor.encode("It costs 5 euros.")) == heard
    assert processor.normalize("It costs 5 euros.") == TextProcessors(cfg).for_language(language).normalize(
        "It costs 5 euros.")

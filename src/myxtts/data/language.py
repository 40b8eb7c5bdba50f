"""Languages: ``data.language`` (and a list line's language field) drive the text front-end.

An entry's language picks its text configuration:

- the cleaner: ``text.cleaner`` for English (``en``, ``en-us``, ...); ``basic`` for any other
  language, since the English cleaner spells numbers and abbreviations out in English;
- the espeak-ng voice (``text.use_phonemes``): ``text.phoneme_language`` when it is a voice of the
  entry's language (``en`` entries with ``en-us``), else the entry's own language code (espeak-ng
  voices are language codes: ``de``, ``fr``, ``en-gb``, ...).

Every accepted utterance also gets a language id (its index in the manifest's ``languages`` table,
stored in the cache index as ``language_ids``) for models that condition on the language.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from myxtts.text import TextProcessor


def base_language(language: str) -> str:
    """``en-us`` -> ``en``, ``pt_BR`` -> ``pt``."""
    return language.lower().replace("_", "-").split("-")[0]


def is_english(language: str) -> bool:
    return base_language(language) == "en"


def text_config_for(cfg: Any, language: str) -> Any:
    """The TextConfig used for transcripts in ``language`` (see the module docstring)."""
    text = cfg.text
    cleaner = text.cleaner if is_english(language) else "basic"
    voice = text.phoneme_language if base_language(language) == base_language(text.phoneme_language) else language
    return dataclasses.replace(text, cleaner=cleaner, phoneme_language=voice)


class TextProcessors:
    """One TextProcessor per language, created on first use, sharing the default vocabulary's symbols."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.default = TextProcessor(cfg.text)  # its vocabulary is the one saved with the cache
        self._by_language: dict[str, Any] = {}

    @property
    def vocabulary(self) -> Any:
        return self.default.vocabulary

    def for_language(self, language: str) -> Any:
        if language not in self._by_language:
            text_cfg = text_config_for(self.cfg, language)
            self._by_language[language] = self.default if text_cfg == self.cfg.text else TextProcessor(text_cfg)
        return self._by_language[language]


def run_text_processor(cfg: Any, vocabulary: Any) -> Any:
    """The TextProcessor synthesis uses for a run: ``vocabulary`` checked against ``text.*``, and the cleaner /
    espeak-ng voice of ``data.language``, as ``prepare`` used for that language's transcripts (a German run
    must not hear "5" spelled out in English at synthesis when it never was in training)."""
    checked = TextProcessor(cfg.text, vocabulary)  # raises when the vocabulary is not the run's
    language_cfg = text_config_for(cfg, cfg.data.language)
    return checked if language_cfg == cfg.text else TextProcessor(language_cfg)

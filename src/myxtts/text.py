"""Text front-end: normalisation, a fixed vocabulary, and text -> token ids (phonemes or characters).

Phonemes (``text.use_phonemes``, the default) come from libespeak-ng 1.52 bundled by the ``espeakng-loader``
wheel (``myxtts.espeak``): IPA with stress marks, one token per character, punctuation kept.

Token ids are cached by ``prepare``, so the symbol set is fixed in code and saved next to the cache
(``Vocabulary.save``) with its kind and cleaner; loading it under a different text config fails with a
message instead of silently training on shifted ids.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from pathlib import Path
from typing import Iterable, Sequence

from myxtts import espeak
from myxtts.config import TextConfig
from myxtts.errors import InputError, SetupError
from myxtts.text_numbers import expand_numbers

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
SPECIAL_SYMBOLS = ["<pad>", "<bos>", "<eos>"]
PUNCTUATION = "!'(),-.:;?\""
CHARACTER_SYMBOLS = [" "] + list("abcdefghijklmnopqrstuvwxyz") + list(PUNCTUATION)
# IPA as espeak-ng writes it: vowels, consonants, stress/length marks, modifiers, combining diacritics.
_IPA_VOWELS = "iyɨʉɯuɪʏʊeøɘəɵɤoɛœɜɞʌɔæɐaɶɑɒᵻɚɝ"
_IPA_CONSONANTS = "pbtdʈɖcɟkɡqɢʔmɱnɳɲŋɴʙrʀⱱɾɽɸβfvθðszʃʒʂʐçʝxɣχʁħʕhɦɬɮʋɹɻjɰlɭʎʟʍwɥʜʢʡɕʑɺɧɓɗʄɠʛ"
_IPA_MARKS = "ˈˌːˑʼʴʰʱʲʷˠˤ˞↓↑→↗↘" + "\u0303\u0361\u0329\u032f\u0325\u030a\u031a"
PHONEME_SYMBOLS = [" "] + list(PUNCTUATION) + list(_IPA_VOWELS + _IPA_CONSONANTS + _IPA_MARKS)

_WHITESPACE = re.compile(r"\s+")
_ABBREVIATIONS = [(re.compile(rf"\b{short}\.", re.IGNORECASE), long) for short, long in [
    ("mrs", "missus"), ("mr", "mister"), ("dr", "doctor"), ("st", "saint"), ("co", "company"),
    ("jr", "junior"), ("maj", "major"), ("gen", "general"), ("drs", "doctors"), ("rev", "reverend"),
    ("lt", "lieutenant"), ("hon", "honorable"), ("sgt", "sergeant"), ("capt", "captain"), ("esq", "esquire"),
    ("ltd", "limited"), ("col", "colonel"), ("ft", "fort"), ("etc", "et cetera"), ("vs", "versus")]]
# typographic characters NFKD leaves alone, mapped to the ASCII the vocabulary has
_TYPOGRAPHIC = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
                              "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u00ab": '"', "\u00bb": '"',
                              "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-",
                              "\u2015": "-", "\u2026": "...", "&": " and ", "[": "(", "]": ")"})
# Latin letters NFKD leaves whole, spoken as the ASCII an English reader says for them (the english cleaner)
_LATIN_LETTERS = str.maketrans({"ß": "ss", "æ": "ae", "Æ": "Ae", "ø": "o", "Ø": "O", "œ": "oe", "Œ": "Oe",
                                "ł": "l", "Ł": "L", "đ": "d", "Đ": "D", "þ": "th", "Þ": "Th", "ð": "dh",
                                "Ð": "Dh", "ı": "i", "ħ": "h", "ŋ": "ng"})
CLEANERS = ("english", "basic")


class TextError(InputError):
    """A transcript that cannot be encoded; ``reason`` is ``empty_text``, ``unpronounceable`` (letters of another
    script or a currency sign the english cleaner has no word for: refused, never dropped), ``no_known_characters``
    (nothing the front-end knows after normalisation) or ``nothing_to_pronounce`` (only punctuation, or no
    phonemes)."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class PhonemizerError(SetupError):
    """The bundled espeak-ng library cannot be loaded (a setup problem, not a bad transcript)."""


def normalize_text(text: str, cleaner: str = "english") -> str:
    """Normalise a transcript. ``basic``: lowercase + whitespace. ``english``: also ASCII transliteration,
    numbers / currency / ordinals / years spelled out, common abbreviations expanded."""
    if cleaner not in CLEANERS:
        raise InputError(f"Unknown text cleaner {cleaner!r} (config key 'text.cleaner'); use one of {CLEANERS}.")
    if cleaner == "english":
        text = unicodedata.normalize("NFKD", text).translate(_TYPOGRAPHIC).translate(_LATIN_LETTERS)
        text = expand_numbers(text)  # before ASCII: '£' and '€' have no ASCII form
        text = "".join(char for char in text if not unicodedata.combining(char))
        text = text.encode("ascii", "ignore").decode("ascii")
        text = text.lower()
        for pattern, replacement in _ABBREVIATIONS:
            text = pattern.sub(replacement, text)
    else:
        text = text.lower()
    return _WHITESPACE.sub(" ", text).strip()


def unpronounceable_characters(text: str, cleaner: str = "english") -> list[str]:
    """The letters, digits and currency signs of ``text`` that the english cleaner cannot turn into English words
    (another script: "北京", "Москва"; a currency sign it has no word for), in order of first appearance: what
    ``TextProcessor`` refuses rather than drop silently. Other symbols ('#', '@', emoji) carry no word and are
    left out as punctuation is. [] for the basic cleaner (its vocabulary decides)."""
    if cleaner != "english":
        return []
    folded = unicodedata.normalize("NFKD", text).translate(_TYPOGRAPHIC).translate(_LATIN_LETTERS)
    spoken = set(expand_numbers(folded))  # currency signs followed or preceded by an amount become words
    found: list[str] = []
    for char in folded:
        category = unicodedata.category(char)
        if (category[0] in "LN" or category == "Sc") and not char.isascii() and not unicodedata.combining(char):
            if category == "Sc" and char not in spoken:
                continue  # an amount's sign, spelled out by expand_numbers
            if char not in found:
                found.append(char)
    return found


class Vocabulary:
    """Fixed symbol table: ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2, then the symbols of ``kind``."""

    def __init__(self, kind: str = "characters", cleaner: str = "english", phoneme_language: str | None = None,
                 symbols: Sequence[str] | None = None) -> None:
        if kind not in ("characters", "phonemes"):
            raise ValueError(f"Vocabulary kind must be 'characters' or 'phonemes', got {kind!r}.")
        self.kind = kind
        self.cleaner = cleaner
        self.phoneme_language = phoneme_language if kind == "phonemes" else None
        default = CHARACTER_SYMBOLS if kind == "characters" else PHONEME_SYMBOLS
        self.symbols: list[str] = list(symbols) if symbols is not None else SPECIAL_SYMBOLS + default
        if self.symbols[:3] != SPECIAL_SYMBOLS or len(set(self.symbols)) != len(self.symbols):
            raise ValueError("A vocabulary must start with <pad>, <bos>, <eos> and hold each symbol once.")
        self.symbol_to_id = {symbol: index for index, symbol in enumerate(self.symbols)}

    PAD = PAD_ID
    BOS = BOS_ID
    EOS = EOS_ID

    @classmethod
    def for_config(cls, text_cfg: TextConfig) -> "Vocabulary":
        kind = "phonemes" if text_cfg.use_phonemes else "characters"
        return cls(kind, text_cfg.cleaner, text_cfg.phoneme_language)

    def __len__(self) -> int:
        return len(self.symbols)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self.to_dict() == other.to_dict()

    def to_dict(self) -> dict:
        return {"kind": self.kind, "cleaner": self.cleaner, "phoneme_language": self.phoneme_language,
                "symbols": self.symbols}

    def save(self, path: str | os.PathLike) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False, indent=1), encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike, text_cfg: TextConfig | None = None) -> "Vocabulary":
        """Read a saved vocabulary; with ``text_cfg``, also check it was made for that text config."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            vocabulary = cls(data["kind"], data["cleaner"], data.get("phoneme_language"), data["symbols"])
        except FileNotFoundError:
            raise InputError(f"Vocabulary file not found: {path}; run `myxtts prepare` to create it.") from None
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise InputError(f"Vocabulary file {path} is not a valid vocabulary ({err}); delete it and run "
                             "`myxtts prepare` again.") from None
        if text_cfg is not None:
            vocabulary.check_config(text_cfg, source=str(path))
        return vocabulary

    def check_config(self, text_cfg: TextConfig, source: str = "the given vocabulary") -> None:
        """Raise InputError when this vocabulary was not made for ``text_cfg`` (kind, cleaner, language)."""
        expected = Vocabulary.for_config(text_cfg)
        mismatches = [f"{name}: vocabulary has {getattr(self, name)!r}, config wants {getattr(expected, name)!r}"
                      for name in ("kind", "cleaner", "phoneme_language")
                      if getattr(self, name) != getattr(expected, name)]
        if mismatches:
            raise InputError(f"{source} does not match the text config ({'; '.join(mismatches)}). Token ids "
                             "would mean different symbols: use the config the cache was prepared with, or "
                             "run `myxtts prepare` again (text.cleaner / text.use_phonemes / "
                             "text.phoneme_language).")


# ---------------------------------------------------------------------------------------------
# espeak-ng phonemes (the library bundled by the espeakng-loader wheel, myxtts.espeak)
# ---------------------------------------------------------------------------------------------

# word runs vs punctuation kept verbatim (espeak drops punctuation; apostrophes and hyphens inside words
# stay with the word so "don't" and "ne-plus-ultra" are pronounced right)
_PHONEME_SPLIT = re.compile(r"""([!(),.:;?"]+|(?<!\w)['-]+|['-]+(?!\w))""")
_LANGUAGE_SWITCH = re.compile(r"\([a-z]{2,3}(?:-[a-z0-9]+)*\)")  # espeak's "(fr)...(en)" markers
_SPOKEN_PUNCTUATION = set(PUNCTUATION) | {" "}


def _phonemizer_setup_error(err: Exception) -> PhonemizerError:
    return PhonemizerError(f"text.use_phonemes is true but the espeak-ng library cannot be used: {err} "
                           "Or set text.use_phonemes: false to train on characters.")


def check_phoneme_language(language: str) -> None:
    """InputError naming ``language`` when espeak-ng has no such voice; PhonemizerError: no library."""
    try:
        espeak.check_voice(language)
    except espeak.UnknownVoiceError:
        raise InputError(f"espeak-ng has no voice for the phoneme language {language!r} (config key "
                         "'text.phoneme_language', or 'data.language' / a list line's language field, which "
                         "pick the voice of other languages). Voices are language codes such as en-us, en-gb, "
                         "de, fr, es, pt-br; or set text.use_phonemes: false.") from None
    except espeak.EspeakUnavailableError as err:
        raise _phonemizer_setup_error(err) from None


def phonemize(chunks: Sequence[str], language: str) -> list[str]:
    """IPA (stress marks kept, language-switch markers removed) of each punctuation-free chunk, in one pass
    through the bundled libespeak-ng with the voice set once."""
    if not chunks:
        return []
    check_phoneme_language(language)
    try:
        lines = espeak.phonemize(chunks, language)
    except espeak.EspeakUnavailableError as err:
        raise _phonemizer_setup_error(err) from None
    return [_WHITESPACE.sub(" ", _LANGUAGE_SWITCH.sub("", line)).strip() for line in lines]


def _pronounceable(text: str) -> str:
    """Letters, digits, whitespace and the vocabulary's punctuation: symbols such as '#' or '@' are dropped as
    they are for characters, not read out by espeak-ng ("hash", "at")."""
    kept = "".join(char for char in text if char.isalnum() or char.isspace() or char in PUNCTUATION)
    return _WHITESPACE.sub(" ", kept).strip()


def _phoneme_pieces(text: str) -> list[tuple[str, bool]]:
    """Split normalised text into (piece, is_words) with the whitespace kept on the punctuation side."""
    return [(piece, not _PHONEME_SPLIT.fullmatch(piece)) for piece in _PHONEME_SPLIT.split(text) if piece]


# ---------------------------------------------------------------------------------------------
# text processor
# ---------------------------------------------------------------------------------------------

class TextProcessor:
    """Transcript -> ``[bos] + ids + [eos]`` (espeak-ng phonemes with ``text.use_phonemes``, else characters).

    Raises ValueError at construction when ``text.phoneme_language`` is not an espeak-ng voice."""

    def __init__(self, text_cfg: TextConfig, vocabulary: Vocabulary | None = None) -> None:
        self.cfg = text_cfg
        if vocabulary is None:
            vocabulary = Vocabulary.for_config(text_cfg)
        else:
            vocabulary.check_config(text_cfg)
        self.vocabulary = vocabulary
        if text_cfg.use_phonemes:
            check_phoneme_language(text_cfg.phoneme_language)  # fail at construction, not at the first transcript

    def normalize(self, text: str) -> str:
        return normalize_text(text, self.cfg.cleaner)

    def to_symbols(self, text: str) -> str:
        """The symbol string ``encode`` maps to ids: normalised text, or its phonemes (before filtering)."""
        return self.to_symbols_many([text])[0]

    def to_symbols_many(self, texts: Sequence[str]) -> list[str]:
        normalized = [self.normalize(text) for text in texts]
        if not self.cfg.use_phonemes:
            return normalized
        pieces = [_phoneme_pieces(_pronounceable(text)) for text in normalized]
        word_chunks = [piece.strip() for text_pieces in pieces for piece, is_words in text_pieces
                       if is_words and piece.strip()]
        phonemes = iter(phonemize(word_chunks, self.cfg.phoneme_language))
        results = []
        for text_pieces in pieces:
            out = []
            for piece, is_words in text_pieces:
                if is_words and piece.strip():
                    lead = " " if piece[0].isspace() else ""
                    trail = " " if piece[-1].isspace() else ""
                    out.append(lead + next(phonemes) + trail)
                else:
                    out.append(piece)
            results.append(_WHITESPACE.sub(" ", "".join(out)).strip())
        return results

    def encode(self, text: str) -> list[int]:
        return self.encode_many([text])[0]

    def encode_many(self, texts: Iterable[str]) -> list[list[int]]:
        """Encode many transcripts (phonemes: one pass through espeak-ng for all). Raises TextError."""
        texts = list(texts)
        for text in texts:
            if not text or not text.strip():
                raise TextError("empty_text", "Transcript is empty; give the clip a transcript or remove it "
                                "from the metadata.")
            unknown = unpronounceable_characters(text, self.cfg.cleaner)
            if unknown:
                raise TextError("unpronounceable", f"Text {text[:60]!r} holds characters the {self.cfg.cleaner} "
                                f"front-end cannot say: {' '.join(repr(char) for char in unknown[:8])}"
                                f"{' ...' if len(unknown) > 8 else ''} (another script, or a symbol with no English "
                                "word); write them in English (a transliteration) or remove them.")
        encoded = []
        for text, symbols in zip(texts, self.to_symbols_many(texts)):
            table = self.vocabulary.symbol_to_id
            # drop unknown symbols, then collapse the whitespace they leave ("a @ b" -> "a b")
            kept = _WHITESPACE.sub(" ", "".join(char for char in symbols if char in table)).strip()
            ids = [table[char] for char in kept]
            if not ids:
                raise TextError("no_known_characters", f"Transcript {text[:60]!r} has no character the "
                                f"{self.vocabulary.kind} vocabulary knows after normalisation (cleaner "
                                f"{self.cfg.cleaner!r}); check the text's language/encoding or the "
                                "text.cleaner / text.use_phonemes settings.")
            if all(char in _SPOKEN_PUNCTUATION for char in kept):
                raise TextError("nothing_to_pronounce", f"Transcript {text[:60]!r} has nothing to pronounce "
                                f"({'its phonemes are' if self.vocabulary.kind == 'phonemes' else 'it is'} "
                                f"only punctuation: {kept[:40]!r}); give the clip a transcript of its words or "
                                "remove it from the metadata.")
            encoded.append([BOS_ID] + ids + [EOS_ID])
        return encoded

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> symbol string, skipping pad/bos/eos."""
        out = []
        for index in ids:
            index = int(index)
            if not 0 <= index < len(self.vocabulary):
                raise ValueError(f"Token id {index} is outside the vocabulary (size {len(self.vocabulary)}).")
            if index > EOS_ID:
                out.append(self.vocabulary.symbols[index])
        return "".join(out)

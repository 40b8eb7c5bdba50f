"""Any length of text: split a paragraph or a chapter into pieces the model can say in one go.

The order of cuts, each used only where the previous one leaves a piece too long:

    paragraphs (a blank line)  ->  sentences (. ! ? ...)  ->  clauses (, ; : and dashes)  ->  words

Clauses and words are packed greedily, so a long sentence becomes as few pieces as fit. Each piece records
the pause that follows it: longest after a paragraph, then a sentence, a clause, and a cut between words.
A word that does not fit alone is an ``UnsplittableTextError`` (a ``ValueError``) naming it.

Whether a piece fits is measured one of two ways:

- ``split_text(text, fits)``: a predicate asked of every candidate piece (the greedy loop as written: each part
  added to a piece means one more call on the grown piece; the tests' character budgets);
- ``split_speakable(text, budget)``: a ``TokenBudget`` over the text front-end, linear in the text: each sentence,
  clause and word is encoded once (the parts of a sentence in one front-end pass) and kept; a piece starts as the
  most parts whose tokens, added up, fit, and is then checked exactly, one part fewer while it does not fit and one
  more while that still fits, which gives the greedy piece in about two checks. The pieces are ``split_text``'s with
  the budget's predicate (a longer text never having fewer tokens), the punctuation-only ones left out, each with its
  token ids; ``max_pieces`` is checked as each piece is found (the rest of the text is never split), and the budget's
  ``checkpoint`` runs before every front-end pass (the server's: it raises once the client has left or the request
  is past its time).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from myxtts.errors import InputError
from myxtts.text import TextError

# seconds of silence after a piece, by the cut that ended it
PARAGRAPH_PAUSE = 0.6
SENTENCE_PAUSE = 0.3
CLAUSE_PAUSE = 0.15
WORD_PAUSE = 0.05

# a "." after one of these (or after a single letter: an initial) does not end a sentence
ABBREVIATIONS = frozenset({
    "mr", "mrs", "ms", "dr", "st", "jr", "sr", "vs", "etc", "prof", "gen", "col", "lt", "sgt", "capt", "rev",
    "hon", "no", "mt", "ft", "fig", "inc", "ltd", "co", "corp", "dept", "est", "approx", "e.g", "i.e", "a.m", "p.m",
    "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "u.s", "u.k"})

_SENTENCE_END = re.compile(r"([.!?\u2026]+)([\"'\u201d\u2019)\]]*)\s+")
_CLAUSE_END = re.compile(r"(?:[,;:]|\s[\u2014\u2013-])\s+")
_PARAGRAPH = re.compile(r"\n\s*\n")


class UnsplittableTextError(InputError):
    """A word longer than the longest text the model can say in one piece."""


class TooManyPiecesError(InputError):
    """A text with more pieces than its caller takes (``split_speakable``'s ``max_pieces``), found while splitting:
    the text after the piece that passed the limit is never split."""

    def __init__(self, max_pieces: int) -> None:
        super().__init__(f"The text splits into more than {max_pieces} pieces.")
        self.max_pieces = max_pieces


@dataclass(frozen=True)
class TextPiece:
    text: str
    pause_after: float  # seconds of silence after it (0 after the last piece)
    paragraph: int  # 0-based index of its paragraph
    sentence: int  # 0-based index of its sentence in the whole text


class TokenBudget:
    """Pieces measured by the text front-end: ``encode_many(texts)`` gives each text's ids (bos + ids + eos, as
    ``TextProcessor.encode_many``) and a piece fits with at most ``limit`` of them (a text with nothing to pronounce
    on its own, a ``TextError``, fits: it is never a reason to cut). Each text is encoded once and its ids kept for
    the split's lifetime (a request's text: bounded by the server's ``max_characters``); ``checkpoint()`` runs before
    every front-end pass and may raise to stop the split; ``passes`` counts the passes."""

    OVERHEAD = 2  # bos + eos: once per encoded text
    SEPARATOR = 1  # the space between two joined parts

    def __init__(self, encode_many: Callable[[list[str]], list[list[int]]], limit: int,
                 checkpoint: Callable[[], None] | None = None) -> None:
        self.encode_many, self.limit = encode_many, limit
        self.checkpoint = checkpoint if checkpoint is not None else (lambda: None)
        self.passes = 0
        self._encoded: dict[str, "list[int] | TextError"] = {}

    def encoded(self, texts: Sequence[str]) -> list["list[int] | TextError"]:
        """Each text's ids, or the ``TextError`` that refuses it alone; the texts not seen yet in one pass (one at a
        time when one of them is refused, to know which)."""
        missing = [text for text in dict.fromkeys(texts) if text not in self._encoded]
        if missing:
            self.checkpoint()
            self.passes += 1
            try:
                results: list = list(self.encode_many(missing))
            except TextError:
                results = []
                for text in missing:
                    self.checkpoint()
                    self.passes += 1
                    try:
                        results.append(self.encode_many([text])[0])
                    except TextError as err:
                        results.append(err)
            self._encoded.update(zip(missing, results))
        return [self._encoded[text] for text in texts]

    def fits(self, text: str) -> bool:
        (ids,) = self.encoded([text])
        return isinstance(ids, TextError) or len(ids) <= self.limit

    def sizes(self, parts: Sequence[str]) -> list[int]:
        """Each part's share of the tokens of the parts joined: its own without bos and eos, plus the separator
        before it (0 for a part with nothing to pronounce alone). An estimate (a word's phonemes may differ in
        context): ``_pack`` checks each piece exactly."""
        return [0 if isinstance(ids, TextError) else len(ids) - self.OVERHEAD + self.SEPARATOR
                for ids in self.encoded(parts)]


class _Predicate:
    """``split_text``'s measure: a ``fits`` predicate alone, no estimate (every growing candidate is asked)."""

    def __init__(self, fits: Callable[[str], bool]) -> None:
        self.fits = fits

    def sizes(self, parts: Sequence[str]) -> None:
        return None


def split_sentences(paragraph: str) -> list[str]:
    """The sentences of one paragraph (whitespace collapsed), ending punctuation kept."""
    text = " ".join(paragraph.split())
    sentences, start = [], 0
    for match in _SENTENCE_END.finditer(text + " "):
        if match.start() >= len(text):
            break
        if match.group(1) == "." and _is_abbreviation(text[start:match.start()]):
            continue
        if text[match.end():match.end() + 1].islower():  # '"Done?" he asked', "e.g. this": no sentence starts so
            continue
        sentences.append(text[start:match.end()].strip())
        start = match.end()
    rest = text[start:].strip()
    return sentences + ([rest] if rest else [])


def _is_abbreviation(before: str) -> bool:
    # the last word alone counts: the sentence's last characters (an abbreviation is far shorter), so a long
    # sentence of many "." is not read again at each of them
    words = before[-64:].split()
    if not words:
        return False
    word = words[-1].lstrip("(\"'\u201c\u2018").lower()
    return word in ABBREVIATIONS or (len(word) == 1 and word.isalpha())


def _pack(parts: list[str], measure: "TokenBudget | _Predicate") -> list[tuple[str, bool]]:
    """Greedy: consecutive ``parts`` joined (with a space) while the result fits, as (piece, checked): ``checked``
    when the piece was measured and fits, False for a lone part (taken unmeasured: its caller decides). With sizes
    (a ``TokenBudget``) a piece starts as the most parts whose sizes fit and is then checked exactly, one part fewer
    while it does not fit, one more while that still fits (module docstring), and a part too long alone (known from
    its own measure) is never joined; without, from one part upwards."""
    sizes = measure.sizes(parts)
    # with sizes, each part alone was measured exactly: one too long alone makes any piece holding it too long
    alone = [measure.fits(part) for part in parts] if sizes is not None else [True] * len(parts)
    pieces: list[tuple[str, bool]] = []
    start = 0
    while start < len(parts):
        end = start + 1  # the piece is parts[start:end]
        if sizes is not None and alone[start]:
            tokens = TokenBudget.OVERHEAD - TokenBudget.SEPARATOR + sizes[start]
            while end < len(parts) and alone[end] and tokens + sizes[end] <= measure.limit:
                tokens += sizes[end]
                end += 1
        if end - start > 1 and not measure.fits(" ".join(parts[start:end])):
            end -= 1
            while end - start > 1 and not measure.fits(" ".join(parts[start:end])):
                end -= 1
        elif alone[start]:
            while end < len(parts) and alone[end] and measure.fits(" ".join(parts[start:end + 1])):
                end += 1
        pieces.append((" ".join(parts[start:end]), end - start > 1))
        start = end
    return pieces


def _split_words(clause: str, measure: "TokenBudget | _Predicate") -> list[str]:
    words = clause.split()
    measure.sizes(words)  # a TokenBudget encodes all the words in one pass here, and keeps them for the checks below
    for word in words:
        if not measure.fits(word):
            raise UnsplittableTextError(f"The word {word[:80]!r} alone is longer than the longest text the model "
                                        "can say in one piece (data.max_text_length): it cannot be split further.")
    return [piece for piece, _ in _pack(words, measure)]


def _split_sentence(sentence: str, measure: "TokenBudget | _Predicate") -> list[tuple[str, float]]:
    """(piece, pause after it) for one sentence; the last piece's pause is the caller's."""
    if measure.fits(sentence):
        return [(sentence, 0.0)]
    clauses, start = [], 0
    for match in _CLAUSE_END.finditer(sentence):
        clauses.append(sentence[start:match.end()].strip())
        start = match.end()
    clauses.append(sentence[start:].strip())
    pieces: list[tuple[str, float]] = []
    for clause_group, checked in _pack([c for c in clauses if c], measure):
        if checked or measure.fits(clause_group):
            pieces.append((clause_group, CLAUSE_PAUSE))
        else:  # one clause too long on its own: between words
            words = _split_words(clause_group, measure)
            pieces.extend((piece, WORD_PAUSE) for piece in words[:-1])
            pieces.append((words[-1], CLAUSE_PAUSE))
    return pieces[:-1] + [(pieces[-1][0], 0.0)]


def _pieces(text: str, measure: "TokenBudget | _Predicate") -> Iterator[TextPiece]:
    """The pieces of ``text`` in order, each found only when the one before has been taken; the last one's pause is
    still its sentence's or paragraph's (the callers make it 0)."""
    sentence_index = 0
    paragraphs = [p for p in _PARAGRAPH.split(text.strip()) if p.strip()]
    for paragraph_index, paragraph in enumerate(paragraphs):
        sentences = split_sentences(paragraph)
        for position, sentence in enumerate(sentences):
            last_of_paragraph = position == len(sentences) - 1
            parts = _split_sentence(sentence, measure)
            for part_index, (piece, pause) in enumerate(parts):
                if part_index == len(parts) - 1:
                    pause = PARAGRAPH_PAUSE if last_of_paragraph else SENTENCE_PAUSE
                yield TextPiece(piece, pause, paragraph_index, sentence_index)
            sentence_index += 1


def split_text(text: str, fits: Callable[[str], bool]) -> list[TextPiece]:
    """Pieces of ``text`` that each fit, in order, with the pause after each (see the module docstring)."""
    pieces = list(_pieces(text, _Predicate(fits)))
    if pieces:
        pieces[-1] = dataclasses.replace(pieces[-1], pause_after=0.0)
    return pieces


def unspeakable_piece_error(text: str, err: TextError) -> TextError:
    """The error for a piece the front-end refuses (``err``), naming the piece."""
    if err.reason == "unpronounceable":  # names the characters
        return TextError(err.reason, f"The piece {text[:80]!r} cannot be spoken: {err}")
    return TextError(err.reason, f"The piece {text[:80]!r} cannot be spoken by this model: it has no character its "
                     "vocabulary can say (after normalisation only unknown characters or punctuation remain: another "
                     "language or script?). Transliterate or remove it.")


def split_speakable(text: str, budget: TokenBudget,
                    max_pieces: int | None = None) -> tuple[list[TextPiece], list[list[int]]]:
    """The pieces of ``text`` measured by ``budget`` (module docstring) and each one's token ids. A piece of
    punctuation alone (a lone "...") is left out; any other piece the front-end refuses is a ``TextError`` naming it
    (never dropped); a word too long for any piece is an ``UnsplittableTextError``; a text with nothing to say at all
    raises the ``TextError`` that says why; ``TooManyPiecesError`` as soon as a piece past ``max_pieces`` is found."""
    pieces: list[TextPiece] = []
    tokens: list[list[int]] = []

    def keep(piece: TextPiece) -> None:
        (ids,) = budget.encoded([piece.text])  # measured while splitting: no new front-end pass
        if isinstance(ids, TextError):
            if not any(char.isalnum() for char in piece.text):
                return  # punctuation alone: nothing to say, nothing lost
            raise unspeakable_piece_error(piece.text, ids) from None
        if max_pieces is not None and len(pieces) >= max_pieces:
            raise TooManyPiecesError(max_pieces)
        pieces.append(piece)
        tokens.append(ids)

    previous = None  # each piece is kept once the next is found: the last one's pause is 0
    for piece in _pieces(text, budget):
        if previous is not None:
            keep(previous)
        previous = piece
    if previous is not None:
        keep(dataclasses.replace(previous, pause_after=0.0))
    if not pieces:
        (whole,) = budget.encoded([text])
        if isinstance(whole, TextError):
            raise whole
    return pieces, tokens

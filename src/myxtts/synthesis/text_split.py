"""Any length of text: split a paragraph or a chapter into pieces the model can say in one go.

The order of cuts, each used only where the previous one leaves a piece too long (``fits`` says whether a
piece fits, by its token count: the synthesizer's largest text bucket and the frames it may take):

    paragraphs (a blank line)  ->  sentences (. ! ? ...)  ->  clauses (, ; : and dashes)  ->  words

Clauses and words are packed greedily, so a long sentence becomes as few pieces as fit. Each piece records
the pause that follows it: longest after a paragraph, then a sentence, a clause, and a cut between words.
A word that does not fit alone is an ``UnsplittableTextError`` (a ``ValueError``) naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from myxtts.errors import InputError

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


@dataclass(frozen=True)
class TextPiece:
    text: str
    pause_after: float  # seconds of silence after it (0 after the last piece)
    paragraph: int  # 0-based index of its paragraph
    sentence: int  # 0-based index of its sentence in the whole text


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
    words = before.split()
    if not words:
        return False
    word = words[-1].lstrip("(\"'\u201c\u2018").lower()
    return word in ABBREVIATIONS or (len(word) == 1 and word.isalpha())


def _pack(parts: list[str], fits: Callable[[str], bool]) -> list[str]:
    """Greedy: join consecutive ``parts`` (with a space) while the result fits; parts that fit alone only."""
    pieces: list[str] = []
    current = ""
    for part in parts:
        candidate = f"{current} {part}" if current else part
        if not current or fits(candidate):
            current = candidate
        else:
            pieces.append(current)
            current = part
    return pieces + ([current] if current else [])


def _split_words(clause: str, fits: Callable[[str], bool]) -> list[str]:
    words = clause.split()
    for word in words:
        if not fits(word):
            raise UnsplittableTextError(f"The word {word[:80]!r} alone is longer than the longest text the model "
                                        "can say in one piece (data.max_text_length): it cannot be split further.")
    return _pack(words, fits)


def _split_sentence(sentence: str, fits: Callable[[str], bool]) -> list[tuple[str, float]]:
    """(piece, pause after it) for one sentence; the last piece's pause is the caller's."""
    if fits(sentence):
        return [(sentence, 0.0)]
    clauses, start = [], 0
    for match in _CLAUSE_END.finditer(sentence):
        clauses.append(sentence[start:match.end()].strip())
        start = match.end()
    clauses.append(sentence[start:].strip())
    pieces: list[tuple[str, float]] = []
    for clause_group in _pack([c for c in clauses if c], fits):
        if fits(clause_group):
            pieces.append((clause_group, CLAUSE_PAUSE))
        else:  # one clause too long on its own: between words
            words = _split_words(clause_group, fits)
            pieces.extend((piece, WORD_PAUSE) for piece in words[:-1])
            pieces.append((words[-1], CLAUSE_PAUSE))
    return pieces[:-1] + [(pieces[-1][0], 0.0)]


def split_text(text: str, fits: Callable[[str], bool]) -> list[TextPiece]:
    """Pieces of ``text`` that each fit, in order, with the pause after each (see the module docstring)."""
    pieces: list[TextPiece] = []
    sentence_index = 0
    paragraphs = [p for p in _PARAGRAPH.split(text.strip()) if p.strip()]
    for paragraph_index, paragraph in enumerate(paragraphs):
        sentences = split_sentences(paragraph)
        for position, sentence in enumerate(sentences):
            last_of_paragraph = position == len(sentences) - 1
            parts = _split_sentence(sentence, fits)
            for part_index, (piece, pause) in enumerate(parts):
                if part_index == len(parts) - 1:
                    pause = PARAGRAPH_PAUSE if last_of_paragraph else SENTENCE_PAUSE
                pieces.append(TextPiece(piece, pause, paragraph_index, sentence_index))
            sentence_index += 1
    if pieces:
        last = pieces[-1]
        pieces[-1] = TextPiece(last.text, 0.0, last.paragraph, last.sentence)
    return pieces

"""Any length of text: paragraphs -> sentences -> clauses -> words, on real transcripts."""

from __future__ import annotations

import pytest

from conftest import BUNDLED_CORPUS
from myxtts.synthesis.text_split import (CLAUSE_PAUSE, PARAGRAPH_PAUSE, SENTENCE_PAUSE, WORD_PAUSE, split_sentences,
                                         split_text)

TRANSCRIPTS = [line.split("|")[2]
               for line in (BUNDLED_CORPUS / "metadata.csv").read_text(encoding="utf-8").splitlines()]


def test_sentences_end_at_sentence_punctuation_not_at_abbreviations_or_initials():
    text = ('Mr. Smith met Dr. J. Watson at 5 p.m. on the street. "Is it done?" he asked... It was! '
            "They left, e.g. by the back door.")
    assert split_sentences(text) == ["Mr. Smith met Dr. J. Watson at 5 p.m. on the street.",
                                     '"Is it done?" he asked...', "It was!", "They left, e.g. by the back door."]


def test_real_transcripts_split_into_pieces_that_fit_with_every_word_kept_in_order():
    paragraphs = [" ".join(TRANSCRIPTS[:10]), " ".join(TRANSCRIPTS[10:20])]
    document = "\n\n".join(paragraphs)
    for budget in (400, 120, 60, 25):
        pieces = split_text(document, lambda piece, budget=budget: len(piece) <= budget)
        assert all(len(p.text) <= budget for p in pieces)
        assert " ".join(p.text for p in pieces).split() == document.split()
        assert {p.paragraph for p in pieces} == {0, 1}
        assert pieces[-1].pause_after == 0.0
        ends = [p for p in pieces[:-1] if p.paragraph != pieces[pieces.index(p) + 1].paragraph]
        assert len(ends) == 1 and ends[0].pause_after == PARAGRAPH_PAUSE
        # a piece that ends a sentence inside a paragraph pauses for a sentence; inside a sentence, shorter
        for piece, following in zip(pieces, pieces[1:]):
            if piece.paragraph == following.paragraph:
                inside = piece.sentence == following.sentence
                assert piece.pause_after in ((CLAUSE_PAUSE, WORD_PAUSE) if inside else (SENTENCE_PAUSE,))
    # the tighter the budget, the more pieces; clauses are cut at their punctuation first
    counts = [len(split_text(document, lambda piece, b=b: len(piece) <= b)) for b in (400, 120, 60, 25)]
    assert counts == sorted(counts) and counts[0] < counts[-1]
    clause_cut = split_text(TRANSCRIPTS[1], lambda piece: len(piece) <= 60)
    assert clause_cut[0].text.endswith(",") and clause_cut[0].pause_after == CLAUSE_PAUSE


def test_a_word_longer_than_any_piece_is_a_clear_error():
    with pytest.raises(ValueError, match="alone is longer than the longest text"):
        split_text("A short start, then " + "x" * 50 + " and more.", lambda piece: len(piece) <= 30)


def test_split_by_real_token_counts(make_config):
    from myxtts.data.language import run_text_processor
    from myxtts.text import Vocabulary

    cfg = make_config()
    processor = run_text_processor(cfg, Vocabulary.for_config(cfg.text))
    document = " ".join(TRANSCRIPTS[:12])
    pieces = split_text(document, lambda piece: len(processor.encode(piece)) <= 64)
    assert len(pieces) > 12 and all(len(processor.encode(p.text)) <= 64 for p in pieces)

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


class _CountingFrontEnd:
    """A text processor's ``encode_many`` that counts its passes and the characters they were given."""

    def __init__(self, processor) -> None:
        self.processor, self.passes, self.characters = processor, 0, 0

    def __call__(self, texts):
        self.passes += 1
        self.characters += sum(len(text) for text in texts)
        return self.processor.encode_many(texts)


@pytest.fixture(scope="module")
def processor(tmp_path_factory):
    from myxtts.config import config_from_dict
    from myxtts.data.language import run_text_processor
    from myxtts.text import Vocabulary

    root = tmp_path_factory.mktemp("split")
    cfg = config_from_dict({"data": {"corpus_path": str(BUNDLED_CORPUS), "cache_dir": str(root / "cache")}},
                           base_dir=root)
    return run_text_processor(cfg, Vocabulary.for_config(cfg.text))


def _token_fits(processor, limit: int):
    """The predicate ``SynthesisEngine.split`` asks of every candidate: at most ``limit`` tokens, or nothing to say."""
    from myxtts.text import TextError

    def fits(piece: str) -> bool:
        try:
            return len(processor.encode(piece)) <= limit
        except TextError:
            return True

    return fits


def test_measured_split_gives_the_predicates_pieces_with_their_tokens(processor):
    from myxtts.synthesis.text_split import TokenBudget, split_speakable

    document = " ".join(TRANSCRIPTS[:10]) + "\n\n" + " ".join(TRANSCRIPTS[10:20])
    for limit in (200, 64, 32, 24):  # whole sentences, clauses, words
        expected = split_text(document, _token_fits(processor, limit))
        pieces, tokens = split_speakable(document, TokenBudget(processor.encode_many, limit))
        assert pieces == expected, limit
        assert tokens == [processor.encode(piece.text) for piece in pieces]


def test_the_measured_split_is_linear_in_the_text_and_the_predicates_is_not(processor):
    """Each sentence, clause and word is encoded about once: the front-end reads a few times the text's characters
    at any budget, and four times the sentences cost about four times the passes. A predicate asked of every growing
    candidate reads each piece again for every word added to it: the longer the pieces, the more it reads."""
    from myxtts.synthesis.text_split import TokenBudget, split_speakable

    def work(text: str, limit: int) -> tuple[int, int]:
        front_end = _CountingFrontEnd(processor)
        split_speakable(text, TokenBudget(front_end, limit))
        return front_end.passes, front_end.characters

    short, long = " ".join(TRANSCRIPTS[:6]), " ".join(TRANSCRIPTS[6:30])  # 6 and 24 sentences
    # one sentence of every transcript's words (no punctuation: packed word by word)
    sentence = " ".join(word.strip(".,;:!?\"'()") for word in " ".join(TRANSCRIPTS).split()) + "."
    for limit in (200, 100, 48, 24):  # whole sentences, then clauses, then words
        for text in (short, long, sentence):
            assert work(text, limit)[1] <= 5 * len(text), (limit, text[:40])
    (short_passes, _), (long_passes, _) = work(short, 200), work(long, 200)
    assert long_passes <= 5 * short_passes
    asked = []
    split_text(sentence, lambda piece: asked.append(piece) or _token_fits(processor, 200)(piece))
    assert sum(len(piece) for piece in asked) > 3 * work(sentence, 200)[1]


def test_the_measured_split_stops_at_max_pieces_and_at_its_checkpoint(processor):
    from myxtts.synthesis.text_split import TokenBudget, TooManyPiecesError, split_speakable

    text = " ".join(f"This is sentence {number}." for number in range(100))  # one pass and one piece each
    front_end = _CountingFrontEnd(processor)
    with pytest.raises(TooManyPiecesError, match="more than 3 pieces"):
        split_speakable(text, TokenBudget(front_end, 200), max_pieces=3)
    assert front_end.passes == 5  # the fourth piece found, and the one after it: the other 95 sentences never read

    class Stopped(Exception):
        pass

    front_end = _CountingFrontEnd(processor)

    def checkpoint() -> None:
        if front_end.passes == 2:
            raise Stopped

    with pytest.raises(Stopped):
        split_speakable(text, TokenBudget(front_end, 200, checkpoint))
    assert front_end.passes == 2


def test_the_measured_split_leaves_out_punctuation_alone_and_names_what_cannot_be_said(processor):
    from myxtts.synthesis.text_split import TokenBudget, split_speakable
    from myxtts.text import TextError

    pieces, _ = split_speakable(f"{TRANSCRIPTS[0]} ... {TRANSCRIPTS[3]}", TokenBudget(processor.encode_many, 200))
    assert [piece.text for piece in pieces] == [TRANSCRIPTS[0], TRANSCRIPTS[3]]
    with pytest.raises(TextError, match="'Привет, как дела\\?' cannot be spoken"):
        split_speakable("Hello. Привет, как дела? Goodbye.", TokenBudget(processor.encode_many, 200))
    with pytest.raises(TextError):
        split_speakable("... --- ...", TokenBudget(processor.encode_many, 200))

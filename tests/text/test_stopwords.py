"""clanker_rag._text._stopwords: shape and contents of the English stop list."""

from __future__ import annotations

import pytest

from clanker_rag._text._stopwords import ENGLISH_STOPWORDS


def test_is_a_frozenset_of_reasonable_size() -> None:
    assert isinstance(ENGLISH_STOPWORDS, frozenset)
    assert 120 <= len(ENGLISH_STOPWORDS) <= 180


def test_entries_are_lowercase_single_tokens() -> None:
    bad = [w for w in ENGLISH_STOPWORDS if not w or w != w.lower() or any(c.isspace() for c in w)]
    assert bad == []


@pytest.mark.parametrize(
    "word",
    [
        "the",
        "a",
        "an",
        "and",
        "of",
        "to",
        "in",
        "is",
        "it",
        "was",
        "be",
        "i",
        "you",
        "they",
        "what",
        "which",
        "not",
        "no",
        "very",
        # pieces left by splitting contractions at the apostrophe
        "s",
        "t",
        "don",
        "ll",
        "ve",
        "re",
        "d",
        "m",
        "didn",
        "isn",
        "won",
        # whole contractions for tokenizers that keep the apostrophe
        "don't",
        "it's",
        "can't",
    ],
)
def test_contains_function_words_and_contraction_pieces(word: str) -> None:
    assert word in ENGLISH_STOPWORDS


@pytest.mark.parametrize(
    "word",
    [
        "wing",
        "pressure",
        "python",
        "search",
        "index",
        "model",
        "data",
        "computer",
        "may",
        "must",
        "us",
        "mine",
        "one",
        "two",
        "0",
        "1",
    ],
)
def test_content_words_are_not_stop_words(word: str) -> None:
    assert word not in ENGLISH_STOPWORDS

"""Passages for the sentence-choosing tests: a hit over a whole text, and a retriever that returns fixed hits."""

from __future__ import annotations

from clanker_rag._types import Hit


class Fixed:
    """A retriever returning the same hits, best first."""

    def __init__(self, *hits: Hit) -> None:
        self.hits = list(hits)

    def search(self, query: str, k: int = 10, **kwargs: object) -> list[Hit]:
        return self.hits[:k]


def hit(text: str, source: str, score: float) -> Hit:
    return Hit(text, source, score, start=0, end=len(text), start_line=1, end_line=text.count("\n") + 1)

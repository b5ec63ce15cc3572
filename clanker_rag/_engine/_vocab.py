"""The two dicts an index fills as it builds: term -> id (creating ids on first lookup), term id -> pending postings."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Pending", "Vocabulary"]


class Pending(dict[int, list[int]]):
    """A term's postings waiting to be packed, as chunk id, tf, chunk id, tf, ... (a list made on first use)."""

    __slots__ = ()

    def __missing__(self, tid: int) -> list[int]:
        pending: list[int] = []
        self[tid] = pending
        return pending


class Vocabulary(dict[str, int]):
    """Term -> id: a term not yet looked up is found in the saved dictionary (``saved_id``)
    or given a new id (``new_term``) on first lookup."""

    __slots__ = ("_new_term", "_saved_id")

    def __init__(self, saved_id: Callable[[str], int | None], new_term: Callable[[str], int]) -> None:
        super().__init__()
        self._saved_id = saved_id
        self._new_term = new_term

    def __missing__(self, term: str) -> int:
        tid = self._saved_id(term)
        if tid is None:
            return self._new_term(term)
        self[term] = tid
        return tid

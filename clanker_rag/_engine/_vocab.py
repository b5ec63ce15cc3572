"""The two dicts an index fills as it builds: term -> id (creating ids on first lookup), term id -> pending postings."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

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

    __slots__ = ("_new_term", "_owner", "_saved_id")

    def __init__(
        self, owner: Any, saved_id: Callable[[Any, str], int | None], new_term: Callable[[Any, str], int]
    ) -> None:
        super().__init__()
        # ``saved_id`` and ``new_term`` are the owning index's methods, taken unbound, and the
        # index is held weakly: bound methods would make every index a reference cycle, kept
        # with its mapped files and open descriptors until the cyclic collector runs.
        self._owner = weakref.ref(owner)
        self._saved_id = saved_id
        self._new_term = new_term

    def __missing__(self, term: str) -> int:
        owner = self._owner()
        if owner is None:
            raise ReferenceError("the index this vocabulary belongs to is gone")
        tid = self._saved_id(owner, term)
        if tid is None:
            return self._new_term(owner, term)
        self[term] = tid
        return tid

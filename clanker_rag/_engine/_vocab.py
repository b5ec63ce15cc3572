"""The two dicts an index fills as it builds: term -> id (creating ids on first lookup), term id -> pending postings.

A load's segments after the first stay in their data files: their postings
join the pending ones term by term, the first time anything reads the term
(:class:`LazyPending`), and all at once only before something reads every list.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from _collections_abc import dict_items, dict_keys, dict_values

__all__ = ["LazyPending", "Pending", "PendingSource", "Vocabulary"]


class Pending(dict[int, list[int]]):
    """A term's postings waiting to be packed, as chunk id, tf, chunk id, tf, ... (a list made on first use)."""

    __slots__ = ()

    def __missing__(self, tid: int) -> list[int]:
        pending: list[int] = []
        self[tid] = pending
        return pending

    def present(self) -> list[int]:
        """The terms with postings here now (a :class:`LazyPending`'s not yet read are not)."""
        return list(dict.keys(self))

    def holds(self, term: str) -> bool:
        """Whether postings not yet read hold ``term`` (see :class:`LazyPending`)."""
        return False

    def read_all(self) -> None:
        """Read every posting not yet read (see :class:`LazyPending`)."""


class PendingSource(Protocol):
    """Postings kept elsewhere until read: each term's once."""

    def holds(self, term: str) -> bool:
        """Whether ``term`` has postings here (read or not)."""

    def take(self, tid: int) -> list[int] | None:
        """Term ``tid``'s postings as chunk id, tf, ... (None: none)."""

    def take_all(self, taken: set[int]) -> dict[int, list[int]]:
        """Every term's postings but those of ``taken`` (term ids created for terms new to the index)."""


class LazyPending(Pending):
    """:class:`Pending` postings of which some are still in ``source``, all of lower
    chunk ids than any added since: a term's are read (ahead of its others) the
    first time anything looks for the term here, every term's before anything
    reads the whole (its length, keys, values, items).

    A term is here only once read: ``__missing__`` (an add), ``in`` and ``get``
    read it first, so an add appends after the term's earlier postings and a
    read sees them all."""

    __slots__ = ("_source", "_taken")

    def __init__(self, pending: dict[int, list[int]], source: PendingSource) -> None:
        super().__init__(pending)
        self._source: PendingSource | None = source
        self._taken: set[int] = set()  # the terms read from ``source``

    def _read(self, tid: int) -> bool:
        """Read term ``tid``'s postings from the source, once; whether it had any."""
        source, taken = self._source, self._taken
        if source is None or tid in taken:
            return False
        got = source.take(tid)
        taken.add(tid)
        if got is None:
            return False
        have = dict.get(self, tid)
        dict.__setitem__(self, tid, got if have is None else got + have)
        return True

    def __missing__(self, tid: int) -> list[int]:
        if self._read(tid):
            return dict.__getitem__(self, tid)
        return super().__missing__(tid)

    def __contains__(self, tid: object) -> bool:
        # (Inline: every read of a list asks.)
        if dict.__contains__(self, tid):
            return True
        if self._source is None or tid in self._taken or not isinstance(tid, int):
            return False
        return self._read(tid)

    def get(self, tid: int, default: Any = None) -> Any:
        if dict.__contains__(self, tid) or self._read(tid):
            return dict.__getitem__(self, tid)
        return default

    def holds(self, term: str) -> bool:
        return self._source is not None and self._source.holds(term)

    def read_all(self) -> None:
        source = self._source
        if source is None:
            return
        for tid, got in source.take_all(self._taken).items():
            have = dict.get(self, tid)
            dict.__setitem__(self, tid, got if have is None else got + have)
        self._source = None
        self._taken = set()

    def __len__(self) -> int:
        self.read_all()
        return dict.__len__(self)

    def __iter__(self) -> Iterator[int]:
        self.read_all()
        return dict.__iter__(self)

    def keys(self) -> dict_keys[int, list[int]]:
        self.read_all()
        return dict.keys(self)

    def values(self) -> dict_values[int, list[int]]:
        self.read_all()
        return dict.values(self)

    def items(self) -> dict_items[int, list[int]]:
        self.read_all()
        return dict.items(self)


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

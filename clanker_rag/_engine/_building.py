"""The inverted index's columns and how they grow: the term dictionary, each term's lists, the statistics.

:class:`IndexColumns` holds, per term id, its chunk ids, term frequencies and
impacts as last computed (a view of the packed lists until the list changes,
then arrays of its own), the postings added since and not yet folded in
(``pending``), each chunk's length, and the collection statistics.  Adding a
chunk appends to the pending postings; a term's list is cut out of the packed
lists, or copied to change it, on demand.  Reading and sweeping the lists is
:mod:`._sweeping`, impacts and the search's accessors :mod:`._index`.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping
from itertools import accumulate, chain, compress, repeat
from operator import is_
from typing import Any

from .._exceptions import IndexFormatError
from .._storage._codec import Floats, Ints, TermList, copy_array
from ._held import Held
from ._packed_lists import PackedLists
from ._scoring import BM25
from ._term_column import TermColumn
from ._vocab import Pending, Vocabulary

__all__ = ["IndexColumns"]

# While building, a term's postings wait in one list as chunk id, tf, chunk
# id, tf, ...: one C-level extend per posting, and the ints are the chunk's
# one id object and small cached tfs, so packing them later stays in cache
# (a fresh int per posting, e.g. ``id << 32 | tf``, costs a cache miss each).
_list_extend = list.extend
_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend


class IndexColumns:
    """Each term's lists, the pending postings and the statistics, for chunks identified by non-negative int ids."""

    def __init__(self, bm25: BM25) -> None:
        self.bm25 = bm25
        self.vocab: dict[str, int] = Vocabulary(self, IndexColumns.saved_id, IndexColumns._new_term)
        # A loaded index keeps its terms in the data file (TermList);
        # ``vocab`` then fills in as terms are looked up.
        self.terms: list[str] | TermList = []
        # None: not yet cut out of the packed lists (see _adopt_lists).
        # A view of the packed lists until the list changes, then an array of its own.
        self.docs: TermColumn[Ints | None] = TermColumn(0, None)
        self.tfs: TermColumn[Ints | None] = TermColumn(0, None)
        self.imps: TermColumn[Floats | None] = TermColumn(0, None)
        # The packed lists (mapped at load, or packed by a bulk pass) and their impact orders.
        self.packed_lists: PackedLists | None = None
        # Largest impact of each list; -1.0: not computed yet.
        self.maxes: TermColumn[float] = TermColumn(0, 0.0)
        # The generation each term's impacts were computed in (-1: stale).
        self.imp_gen: TermColumn[int] = TermColumn(0, -1)
        # (A load's later segments join it term by term as read: see _vocab.LazyPending.)
        self.pending: Pending = Pending()
        # Terms whose pending postings were folded into their lists since the
        # last commit: with ``pending``, the terms a commit's new segment holds.
        self.touched: set[int] = set()
        self.dl: array[int] = array("i")
        self.n_docs = 0
        # The sum of ``dl``: a load takes the saved one, checked against the saved
        # lengths when first read (see :meth:`trust_total`).
        self._total_len = 0
        self._unchecked_total: tuple[Ints, str] | None = None
        self._saved_total = 0
        self.gen = 0
        # The one record of removed chunks (see _held): those whose postings stay in the lists
        # until each list is next read, and those removed since the lists were packed.
        self.held = Held()

    @property
    def total_len(self) -> int:
        if self._unchecked_total is not None:
            lengths, where = self._unchecked_total
            if sum(lengths) != self._saved_total:
                raise IndexFormatError(f"{where}: statistics do not match the chunk table")
            self._unchecked_total = None
        return self._total_len

    @total_len.setter
    def total_len(self, value: int) -> None:
        self.grow_total(value - self.total_len)

    def grow_total(self, by: int) -> None:
        """Add ``by`` to the collection's length (an add, a removal) without reading the total."""
        self._total_len += by

    def trust_total(self, saved: int, lengths: Ints, where: str) -> None:
        """Take ``saved`` as the sum of the loaded ``lengths`` (the first of ``dl``): checked
        against them the first time the total is read, not at load (an O(chunks) pass)."""
        self._total_len = self._saved_total = saved
        self._unchecked_total = (lengths, where)

    def _new_term(self, term: str) -> int:
        return self._new_terms([term])

    def _new_terms(self, terms: list[str]) -> int:
        """Give ``terms`` (distinct, all unknown) the next ids; returns the first."""
        tid, n = len(self.terms), len(terms)
        self.vocab.update(zip(terms, range(tid, tid + n)))
        self.terms.extend(terms)
        # Arrays are created on first use (fold): most terms of a big build
        # only ever live in the packed lists that refresh() makes.
        for column in (self.docs, self.tfs, self.imps):
            column.grow(None, n)
        self.maxes.grow(0.0, n)
        self.imp_gen.grow(-1, n)
        return tid

    def ids_of(self, terms: list[str]) -> list[int]:
        """The ids of ``terms`` (distinct), unknown ones created in the given order:
        what looking each up in :attr:`vocab` in turn gives, in a few C-level passes."""
        vocab = self.vocab
        ids: list[Any] = list(map(vocab.get, terms))
        if None not in ids:
            return ids
        at = list(compress(range(len(ids)), map(is_, ids, repeat(None))))
        if isinstance(self.terms, TermList):  # a loaded dictionary holds some of them
            for i, tid in zip(list(at), self.terms.find_all(list(map(terms.__getitem__, at)))):
                if tid is not None:
                    ids[i] = vocab[terms[i]] = tid
            at = list(compress(range(len(ids)), map(is_, ids, repeat(None))))
        first = self._new_terms(list(map(terms.__getitem__, at)))
        _consume(map(ids.__setitem__, at, range(first, first + len(at))))
        return ids

    def saved_id(self, term: str) -> int | None:
        """The id of ``term`` in a loaded dictionary not yet in ``vocab``, or None.  A term only
        a later segment holds, its lists not yet read (see ``_vocab.LazyPending``), gets its id here."""
        terms = self.terms
        tid = terms.find(term) if isinstance(terms, TermList) else None
        if tid is None and self.pending.holds(term):
            return self._new_term(term)
        return tid

    def term_id(self, term: str) -> int | None:
        """The id of ``term``, or None when the index has never seen it."""
        tid = self.vocab.get(term)
        if tid is None:
            tid = self.saved_id(term)
            if tid is not None:
                self.vocab[term] = tid
        return tid

    def add(self, cid: int, counts: Mapping[int, int]) -> int:
        """Index chunk ``cid`` (larger than every id added before) with its term-id counts.

        Term ids come from ``vocab``, which creates them on first lookup.
        """
        return self.add_runs(cid, counts, counts.values())

    def add_runs(self, cid: int, tids: Iterable[int], tfs: Collection[int]) -> int:
        """:meth:`add` with the distinct term ids and their counts side by side."""
        _consume(map(_list_extend, map(self.pending.__getitem__, tids), zip(repeat(cid), tfs)))
        dl = sum(tfs)
        gap = cid + 1 - len(self.dl)
        if gap > 0:
            self.dl.extend(repeat(0, gap))
        self.dl[cid] = dl
        self.n_docs += 1
        self._total_len += dl
        self.gen += 1
        return dl

    def add_chunks(self, first: int, sizes: Collection[int], tids: Iterable[int], tfs: array[int]) -> None:
        """:meth:`add_runs` of chunks ``first``, ``first + 1``... holding ``sizes``
        distinct terms each, whose ids and counts are laid end to end in
        ``tids`` and ``tfs``: the same index, without a Python step per chunk."""
        n = len(sizes)
        if first < len(self.dl):
            raise ValueError(f"chunk {first} is not larger than every chunk added before")
        cids = chain.from_iterable(map(repeat, range(first, first + n), sizes))
        _consume(map(_list_extend, map(self.pending.__getitem__, tids), zip(cids, tfs)))
        ends = list(accumulate(sizes))
        dls = array("i", map(sum, map(tfs.__getitem__, map(slice, [0, *ends[:-1]], ends))))
        self.dl.extend(repeat(0, first - len(self.dl)))
        self.dl.extend(dls)
        self.n_docs += n
        self._total_len += sum(dls)
        self.gen += n

    def _cut(self, tid: int) -> Ints:
        lists = self.packed_lists
        if lists is None or not lists.holds(tid):
            d0: array[int] = array("i")
            self.docs[tid], self.tfs[tid], self.imps[tid] = d0, array("I"), array("f")
            return d0
        d, self.tfs[tid], self.imps[tid] = lists.cut(tid)
        self.docs[tid] = d
        return d

    def _owned(self, tid: int) -> tuple[array[int], array[int]]:
        """The term's chunk ids and tfs as arrays of its own, ready to change
        (a loaded list is a read-only view of the data file until then)."""
        docs, tfs = self.docs[tid], self.tfs[tid]
        if docs is None:
            docs = self._cut(tid)
            tfs = self.tfs[tid]
        assert tfs is not None
        if not isinstance(docs, array) or not isinstance(tfs, array) or tfs.typecode != "I":
            # The impacts are not copied: every caller changes the list, which
            # makes them stale (imp_gen -1), and they are recomputed before use.
            # (A swept list keeps its frequencies as narrow as saved: widened here.)
            docs, tfs = docs if isinstance(docs, array) else copy_array("i", docs), copy_array("I", tfs)
            self.docs[tid], self.tfs[tid], self.imps[tid] = docs, tfs, array("f")
        return docs, tfs

    @property
    def avgdl(self) -> float:
        return self.total_len / self.n_docs if self.n_docs else 0.0

    def imps_of(self, tid: int) -> Floats:
        """The term's impacts as last computed (current after :meth:`impacts`)."""
        imps = self.imps[tid]
        assert imps is not None
        return imps

    def tfs_of(self, tid: int) -> Ints:
        """The term's frequencies, beside :meth:`fold`'s chunk ids."""
        return self._tf(tid)

    def _tf(self, tid: int) -> Ints:
        tfs = self.tfs[tid]
        assert tfs is not None
        return tfs

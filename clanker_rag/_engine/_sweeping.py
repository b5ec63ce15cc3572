"""Reading a term's list as it is now: pending postings folded in, removed chunks swept out.

:class:`SweptColumns` adds to :class:`._building.IndexColumns` the reads that
bring a list up to date (:meth:`~SweptColumns.fold`) and the removals: a chunk
dropped from the lists of its terms at once (``remove``, ``purge``), or held
(``hold``, see ``_held``) and swept out of each list when next read, and the
statistics it leaves (``forget``).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from .._storage._codec import Ints
from .._storage._tf_column import TF_TYPES, extend_ints
from ._building import IndexColumns

if TYPE_CHECKING:
    from ._sources import Doc

__all__ = ["SweptColumns"]


class SweptColumns(IndexColumns):
    """The index's columns read up to date, and chunks removed from them."""

    def fold(self, tid: int) -> Ints:
        """The term's chunk ids, after moving pending postings into its arrays."""
        docs = self.docs[tid]
        if docs is None:
            docs = self._cut(tid)
        if tid in self.pending:
            pending = self.pending.pop(tid)
            self.touched.add(tid)
            docs, tfs = self._owned(tid)
            docs.fromlist(pending[0::2])
            tfs.fromlist(pending[1::2])
            self.imp_gen[tid] = -1
        held = self.held
        if held.cids and held.swept.get(tid, 0) < len(held.cids):  # (Held.due, inline: every read asks)
            docs = self._sweep(tid, docs)
        return docs

    def _sweep(self, tid: int, docs: Ints) -> Ints:
        """The term's list without the chunks held since it was last swept (see ``_held``)."""
        held = self.held
        at = held.positions(tid, docs, self.dl)
        if not at:
            held.swept_of(tid, (), ())
            return docs
        tfs = self._tf(tid)
        gone, gone_tfs = list(map(docs.__getitem__, at)), list(map(tfs.__getitem__, at))
        # The runs between the removed postings, copied whole (a memcpy each).
        # Frequencies as narrow as they were saved (widening costs a pass item by item; see _owned).
        narrow = memoryview(tfs).format
        new_docs, new_tfs = array("i"), array(narrow if narrow in TF_TYPES else "I")
        for a, b in zip([0, *[p + 1 for p in at]], [*at, len(docs)]):
            extend_ints(new_docs, docs[a:b])
            extend_ints(new_tfs, tfs[a:b])  # a loaded list's may be saved narrower
        # The columns change together, and the counts after: an interrupt leaves the
        # list as it was (swept again) or its counts short (see drop_held).
        self.docs[tid], self.tfs[tid], self.imps[tid] = new_docs, new_tfs, array("f")
        self.imp_gen[tid] = -1
        held.swept_of(tid, gone, gone_tfs)
        return new_docs

    @property
    def dead(self) -> set[int]:
        """Chunks removed since the lists were packed: stale terms' packed lists still hold them."""
        return self.held.since_packed

    def hold(self, cid: int, doc: Doc | None = None) -> None:
        """Chunk ``cid`` (of ``doc``), about to be forgotten, keeps its postings until each list is next read."""
        self.held.hold(cid, self.dl[cid], doc)

    def drop_held(self, terms_of: Callable[[int], Iterable[str]]) -> list[int]:
        """Sweep every held chunk out of the lists now (a whole save reads every list
        raw): the lists of the terms ``terms_of(cid)`` gives each.  Returns the chunks
        those left postings of (an analyser that no longer reproduces what was
        indexed); then every list was swept."""
        held = self.held
        for cid in held.cids:
            for term in set(terms_of(cid)):
                tid = self.term_id(term)
                if tid is not None:
                    self.fold(tid)
        short = held.short()
        if short:
            self.fold_all()
        held.swept_all()
        return short

    def fold_all(self) -> None:
        self.pending.read_all()  # every term known first
        for tid in range(len(self.terms)):
            self.fold(tid)
        self.held.swept_all()  # no list holds a held chunk any more

    def remove(self, cid: int, terms: Iterable[str]) -> int:
        """Drop chunk ``cid`` from the postings of ``terms``; returns the summed tf removed.

        The caller compares that sum with the chunk's length to be sure every
        posting went, then calls :meth:`forget`.
        """
        removed = 0
        for term in set(terms):
            tid = self.term_id(term)
            if tid is None:
                continue
            removed += self._drop(tid, cid)
        return removed

    def _drop(self, tid: int, cid: int) -> int:
        """Drop chunk ``cid`` from the term's list; returns its tf there (0: absent)."""
        docs = self.fold(tid)
        i = bisect_left(docs, cid)
        if i == len(docs) or docs[i] != cid:
            return 0
        docs, tfs = self._owned(tid)
        tf = tfs[i]
        del docs[i], tfs[i]
        self.imp_gen[tid] = -1
        return tf

    def purge(self, cid: int) -> None:
        """Drop chunk ``cid`` from every posting list (a full scan: the slow path of a removal)."""
        self.pending.read_all()
        for tid in range(len(self.terms)):
            self._drop(tid, cid)

    def forget(self, cid: int) -> None:
        """Take chunk ``cid`` out of the collection statistics."""
        self.n_docs -= 1
        self.grow_total(-self.dl[cid])
        self.dl[cid] = 0
        self.gen += 1
        lists = self.packed_lists
        if lists is not None and lists.stats is not None and cid < lists.stats.n_chunks:
            self.held.since_packed.add(cid)

"""The inverted index: postings and cached BM25 impacts, and the accessors the search reads.

Each term has three parallel arrays: chunk ids (ascending), term frequencies,
and *impacts*, the term's precomputed BM25 contribution to each chunk stored
as float32.  Impacts depend on the collection statistics (``N`` and
``avgdl``), so they carry the generation they were computed for and are
recomputed lazily, one term at a time, after the collection changes: statistics
stay exact under any sequence of adds and removes, and nothing is rebuilt.
Lists longer than ``ORDER_MIN`` also keep their positions sorted by impact,
and long lists keep lookup tables (impact by chunk id); the exact top-k
search over these accessors is :mod:`._search`.

The hot loops are written as ``map``/``zip``/``dict`` pipelines over builtin
callables so that CPython runs them without executing Python bytecode per
posting; that is the whole trick behind the speed.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Container, Iterable, Mapping
from functools import partial
from itertools import accumulate, compress, repeat
from operator import mul

from .._exceptions import IndexFormatError
from .._storage._codec import Floats, Ints, Postings, TermList, copy_array
from .._storage._impact_tables import StoredTables
from .._storage._impact_tables import lookup as saved_lookup
from .._storage._lists import order_offsets_of, walk_postings
from .._storage._tf_column import extend_ints
from . import _search
from ._bulk_impacts import impacts_and_orders, pack_pending
from ._held import Held
from ._lookups import ImpactLookups, TermImpacts
from ._norms import LengthNorms
from ._orders import ImpactOrders
from ._packed_lists import BaseStats, PackedLists, PackedOrders, TermLists, packed_postings
from ._pruning import Ranked
from ._scoring import BM25, TermExplanation, term_impacts
from ._stale import StaleTerm, saved_under, stale_term
from ._sweeping import SweptColumns
from ._term_column import TermColumn, floats

__all__ = ["InvertedIndex", "TermExplanation"]

# Lists longer than ORDER_MIN also keep their positions sorted by impact
# (largest first), so the chunks where a term contributes at least some value
# are a prefix found by binary search (see _search).
ORDER_MIN = 32
# Terms whose packed impacts are checked before the packed lists serve stale terms (see _stale).
_TRUSTED = 3


class InvertedIndex(SweptColumns):
    """Postings, statistics and cached impacts for chunks identified by non-negative int ids, and
    the accessors the search reads (the columns and their growth: ``_building``; reads and
    removals: ``_sweeping``)."""

    def __init__(self, bm25: BM25) -> None:
        super().__init__(bm25)
        # A load's generation (no add expected to follow): stale orders sort on first use in it.
        self.settled = -1
        self.norms = LengthNorms(bm25)
        # Impact orders of the long lists: packed, sorted and cached, or wanted.
        self.orders = ImpactOrders()
        # Saved and built lookup tables, and the probes that decide when to build one.
        self.lookups = ImpactLookups()
        # The tables saved with the packed lists (a load's), for the stale terms' positions,
        # and the lookups of the packed impacts, which bound the current ones (see _stale).
        self.base_tables: StoredTables | None = None
        self.base_lookups = ImpactLookups()
        # tid -> the term under the current statistics over its packed impacts
        # (see _stale), or the generation it was found not to serve in.
        self.stale_terms: dict[int, StaleTerm | int] = {}
        # Terms whose top posting's packed impact was checked against the packed
        # statistics (negative: one failed, the packed impacts are not used so).
        self.stale_trust = 0

    @classmethod
    def from_packed(
        cls, bm25: BM25, postings: Postings, lengths: Ints, *, where: str = "index", total: int | None = None
    ) -> InvertedIndex:
        """An index over loaded postings for chunks ``0..len(lengths)-1`` with those lengths.

        Every list is read in place from ``postings`` (views of the mapped
        data file) until a change needs an array of its own.  ``total``: the
        lengths' saved sum, checked against them when the total is first read.
        """
        index = cls(bm25)
        index.dl = copy_array("i", lengths)
        index.n_docs = len(index.dl)
        if total is None:
            index.total_len = sum(index.dl)
        else:
            index.trust_total(total, lengths, where)
        terms = postings.terms
        if isinstance(terms, TermList):
            index.terms = terms
        else:
            index.terms = list(terms)
            index.vocab.update(zip(index.terms, range(len(index.terms))))
            if len(index.vocab) != len(index.terms):
                raise IndexFormatError(f"{where}: duplicate terms in the vocabulary")
        checks = postings.checks
        index._adopt_lists(
            PackedLists(
                postings.offsets,
                postings.chunks,
                postings.tfs,
                postings.impacts,
                index.gen,
                n_chunks=index.n_docs,
                where=where,
                checks=checks,
                # A segment is scored (saved whole) under its own chunks' statistics.
                stats=BaseStats(index.n_docs, index._total_len, len(index.dl)),
            )
        )
        if postings.maxes is not None:  # read in place, each checked when first read
            index.maxes = TermColumn(
                len(postings.maxes), -1.0, postings.maxes, None if checks is None else checks.maxes
            )
        if postings.order_offsets is not None and postings.positions is not None:
            index.orders.packed = PackedOrders(
                postings.order_offsets, postings.positions, index.gen, checks=checks, wide=postings.wide_orders
            )
        if postings.tables is not None:
            index.base_tables = StoredTables(postings.tables, where)
            index.lookups.use_saved(index.base_tables, index.gen)
            index.base_lookups.use_saved(index.base_tables, index.gen)
        return index

    def _adopt_lists(self, lists: PackedLists) -> None:
        """Read every term's lists from ``lists`` (views until changed, see :meth:`_owned`)."""
        self.packed_lists = lists
        self.lookups.use_saved(None, self.gen)  # tables of the lists replaced, if any
        self.base_tables = None
        self.base_lookups = ImpactLookups()
        self.stale_terms = {}
        self.stale_trust = 0
        self.held.since_packed = set()
        # Nothing per term until a term is read (see _term_column): -1.0, a maximum not computed yet.
        n = lists.n_terms
        self.docs, self.tfs, self.imps = TermColumn(n, None), TermColumn(n, None), TermColumn(n, None)
        self.maxes = TermColumn(n, -1.0)
        self.imp_gen = TermColumn(n, self.gen)

    def df(self, term: str) -> int:
        tid = self.term_id(term)
        return 0 if tid is None else len(self.fold(tid))

    def impacts(self, tid: int) -> tuple[Floats, float]:
        """The term's impacts (current generation) and their maximum."""
        docs = self.fold(tid)
        if self.imp_gen[tid] == self.gen:
            imps = self.imps[tid]
            assert imps is not None
            mx = self.maxes[tid]
            if mx < 0:  # loaded from disk: the maximum is computed on first use
                mx = self.maxes[tid] = max(imps) if imps else 0.0
            return imps, mx
        tfs = self.tfs[tid]
        assert tfs is not None
        bm = self.bm25
        idf = bm.idf(self.n_docs, len(docs)) if docs else 0.0
        imps = term_impacts(bm, idf, tfs, self.norms.of(docs, self.gen, self.dl, self.avgdl), docs, self.dl, self.avgdl)
        self.imps[tid] = imps
        self.maxes[tid] = max(imps) if imps else 0.0
        self.imp_gen[tid] = self.gen
        return imps, self.maxes[tid]

    def refresh(self) -> None:
        """Bring every term's impacts and impact order up to date (before a save)."""
        self.pending.read_all()  # a load's later segments, every term of them
        if self.held.cids:
            # The bulk passes read lists raw: none may hold a removed chunk.  Each removal
            # changed the statistics, so every list is repacked anyway: the held chunks
            # go in that pass (see _refreeze), not list by list.
            self._refreeze()
            return
        if self.packed_lists is None and self.docs.count_not(None) == 0:
            self._freeze()
            return
        if self._packed_current():
            return  # nothing changed since the lists were packed (or loaded)
        if 2 * self.imp_gen.count_not(self.gen) > len(self.terms):
            # Most terms are stale (any add or remove changes N and the
            # average length for all of them): repack and recompute in bulk.
            self._refreeze()
            return
        for tid in range(len(self.terms)):
            self.impacts(tid)
            self.order(tid)

    def _refreeze(self) -> None:
        """Repack every list (packed views, cut arrays, pending postings) and
        recompute all impacts and orders in bulk, as :meth:`_freeze` does.

        Removed chunks still in the lists (held, or in a stale term's packed
        list) are dropped here, in C-level passes over all the lists laid end
        to end (a removed chunk's length is 0, a live one's never is): sweeping
        them out list by list costs a copy of every list they touch, which
        after replacing a large share of the sources is most of them.
        """
        docs, tfs, lengths = array("i"), array("I"), array("i")
        lists = self.packed_lists
        pending = self.pending
        held = self.held
        cut = self.docs.values  # the lists cut out of the packed ones (a C-level lookup a term)
        # The pass drops what ``held`` records from every list: reads meanwhile need not sweep.
        self.held = Held()
        try:
            for tid in range(len(self.terms)):
                if lists is not None and cut.get(tid) is None and lists.holds(tid) and tid not in pending:
                    raw_docs, raw_tfs = lists.raw(tid)  # (checks the blocks of both)
                    docs.frombytes(raw_docs)
                    extend_ints(tfs, raw_tfs)  # may be saved narrower
                    lengths.append(len(raw_docs) // docs.itemsize)
                else:
                    d = self.fold(tid)
                    docs.frombytes(memoryview(d).cast("B"))
                    extend_ints(tfs, self._tf(tid))
                    lengths.append(len(d))
            if held.cids or held.since_packed:
                live = bytes(map(bool, map(self.dl.__getitem__, docs)))
                if live.count(0):
                    ends = list(accumulate(lengths))
                    lengths = array("i", map(live.count, repeat(1), [0, *ends[:-1]], ends))
                    docs, tfs = array("i", compress(docs, live)), array("I", compress(tfs, live))
            self._pack(lengths, docs, tfs)
        except BaseException:
            self.held = held
            raise

    def _freeze(self) -> None:
        """Pack a fresh build into the loaded-index layout in a few C-level passes
        (see :func:`pack_pending`): the same values as :meth:`impacts` term by term."""
        self.touched.update(self.pending)
        packed = pack_pending(  # empties self.pending
            self.pending,
            len(self.terms),
            self.bm25,
            self.n_docs,
            self.norms.every(self.gen, self.dl, self.avgdl),
            self.dl,
            self.avgdl,
            ORDER_MIN,
        )
        self._adopt(*packed)

    def _pack(self, lengths: array[int], docs: array[int], tfs: array[int]) -> None:
        """Adopt ``docs``/``tfs`` (lists laid end to end) as the packed lists, with
        impacts and orders computed in a few C-level passes: the same values
        as :meth:`impacts` and :meth:`order` term by term (same operations in
        the same order)."""
        norms = self.norms.every(self.gen, self.dl, self.avgdl)
        imps, positions = impacts_and_orders(
            self.bm25, self.n_docs, lengths, tfs, docs, norms, self.dl, self.avgdl, ORDER_MIN
        )
        self._adopt(lengths, docs, tfs, imps, positions)

    def _adopt(
        self,
        lengths: array[int],
        docs: array[int],
        tfs: array[int],
        imps: array[float],
        positions: Ints,
        maxes: array[float] | None = None,
    ) -> None:
        """Adopt packed lists with their impacts and orders (all laid end to end) as the packed
        lists (``maxes``: their largest impacts, when the bulk pass found them)."""
        stats = BaseStats(self.n_docs, self.total_len, len(self.dl))
        offsets = array("q", accumulate(lengths, initial=0))
        self._adopt_lists(PackedLists(offsets, docs, tfs, imps, self.gen, stats=stats))
        if maxes is not None and 0 not in lengths:
            self.maxes = TermColumn(len(maxes), -1.0, maxes)
        elif 0 not in lengths:
            # Every list's largest impact, which a save writes, in C-level passes over views of the
            # lists (a Python step per term otherwise, once the save asks for them).
            view = memoryview(imps)
            tops = array("f", map(max, map(view.__getitem__, map(slice, offsets[:-1], offsets[1:]))))
            self.maxes = TermColumn(len(tops), -1.0, tops)
        self.orders.packed = PackedOrders(order_offsets_of(lengths, ORDER_MIN), positions, self.gen)

    def live_terms(self) -> int:
        """How many terms some chunk holds: counted on the packed lists' lengths while they hold
        every list as it is (a loaded index: no list is cut out), else by folding every list."""
        lists = self.packed_lists
        if lists is not None and self._packed_current():
            return sum(map(bool, lists.lengths()))
        self.fold_all()
        return sum(1 for d in self.docs if d)

    def _packed_current(self) -> bool:
        """Whether the packed lists and orders still hold every list as it is."""
        lists, orders = self.packed_lists, self.orders.packed
        return not (
            lists is None
            or lists.gen != self.gen
            or lists.n_terms != len(self.terms)
            or self.pending
            or orders is None
            or orders.gen != self.gen
        )

    def packed(self) -> Postings | None:
        """The postings as a save writes them, straight from the packed lists, or None.

        Terms whose lists are empty are left out (the rest numbered densely),
        when nothing changed since the lists were packed (a bulk build, a
        load, a bulk refresh): a save then copies them whole instead of
        walking every term.  None when any list, statistic or order moved on.
        """
        if not self._packed_current():
            return None
        lists, orders = self.packed_lists, self.orders.packed
        assert lists is not None and orders is not None
        return packed_postings(self.terms, lists, orders, floats(self.maxes), ORDER_MIN)

    def saved_postings(self, renumber: list[int] | None = None) -> Postings:
        """What a save writes (see :meth:`packed`), after a :meth:`refresh`:
        the packed lists when they are current, else a walk over every
        term.  ``renumber`` maps chunk ids to their saved ids (when chunks
        were removed)."""
        packed = self.packed()
        if packed is not None:
            if renumber is None:
                return packed
            return packed._replace(chunks=array("i", map(renumber.__getitem__, packed.chunks)))
        return walk_postings(self, renumber)

    def _term(self, tid: int) -> TermImpacts:
        """The term's lists with its impacts brought up to date."""
        docs = self.fold(tid)
        if self.imp_gen[tid] != self.gen:  # (a search's terms are current: no call on its path)
            self.impacts(tid)
        imps = self.imps[tid]
        assert imps is not None
        return TermImpacts(tid, docs, imps, isinstance(docs, array))

    def order_ready(self, tid: int) -> bool:
        """Whether the term's impact order is at hand, or worth sorting now (see ``ImpactOrders.ready``)."""
        if self.length(tid) <= ORDER_MIN or self._stale_of(tid) is not None:
            return True
        return self.orders.ready(self._term(tid), self.imp_gen[tid], self.settled)

    def order(self, tid: int) -> Ints | None:
        """Positions in the term's lists by decreasing impact (ties: lower position first).

        ``None`` for lists of at most ``ORDER_MIN`` postings.
        """
        if len(self.fold(tid)) <= ORDER_MIN:
            return None
        return self.orders.of(self._term(tid), self.imp_gen[tid])

    # -- search (see _search) ----------------------------------------------------
    def top_k(
        self, weights: Mapping[int, float], k: int, allowed: Container[int] | None = None
    ) -> list[tuple[int, float]]:
        """The ``k`` best ``(chunk id, score)`` pairs, best first, ties by lower id (exact)."""
        return _search.top_k(self, weights, k, allowed)

    def score_all(self, weights: Mapping[int, float]) -> dict[int, float]:
        """Exhaustive scores of every matching chunk (the reference for tests)."""
        return _search.score_all(self, weights)

    def explain(self, weights: Mapping[int, float], cid: int) -> tuple[float, list[TermExplanation]]:
        """Per-term breakdown of chunk ``cid``'s score; the parts sum to the score exactly."""
        return _search.explain(self, weights, cid)

    # -- what the search reads -------------------------------------------------
    def _stale_of(self, tid: int) -> StaleTerm | None:
        """The term over its packed impacts under the current statistics (see
        ``_stale``), when the packed impacts are stale and that serves; else None."""
        gen = self.gen
        # Any change to a list changes the generation: an entry of this one is current.
        found = self.stale_terms.get(tid)
        if found is not None:
            if isinstance(found, int):
                if found == gen:
                    return None
            elif found.gen == gen:
                return found
        lists = self.packed_lists
        term = None if lists is None or lists.gen == gen else self._make_stale(tid)
        self.stale_terms[tid] = gen if term is None else term
        return term

    def _make_stale(self, tid: int) -> StaleTerm | None:
        lists, orders = self.packed_lists, self.orders.packed
        if (
            lists is None
            or lists.stats is None
            or orders is None
            or orders.gen != lists.gen
            or not lists.holds(tid)
            or not orders.has(tid)
            or not self.n_docs
            or self.stale_trust < 0
        ):
            return None
        new_docs: Ints
        new_tfs: Ints
        split = self._split(tid)
        if split is not None:  # the packed views, and the later postings beside them (not appended)
            base, later = split
            kept, new_docs, new_tfs = len(base.docs), array("i", later[0::2]), array("I", later[1::2])
        else:
            docs = self.fold(tid)
            tfs, imps = self._tf(tid), self.imps[tid]
            # A list unchanged since it was packed is still its packed views.
            base = TermLists(docs, tfs, imps) if not isinstance(docs, array) and imps is not None else lists.cut(tid)
            kept = bisect_left(docs, lists.stats.n_chunks)
            new_docs, new_tfs = docs[kept:], tfs[kept:]
        order = orders.read(tid, len(base.docs))
        gen, dl = self.gen, self.dl
        if self.stale_trust < _TRUSTED:
            # The packed impacts must be those of their statistics: checked on a few terms' top postings.
            ok = saved_under(self.bm25, lists.stats, base, order, dl)
            if ok is None:
                return None
            self.stale_trust = self.stale_trust + 1 if ok else -1
            if not ok:
                return None
        table = None if self.base_tables is None else self.base_tables.table(tid, len(base.docs))
        return stale_term(
            self.bm25, gen, base, order, lists.stats, (self.n_docs, self.total_len), kept, new_docs, new_tfs,
            dl, partial(self.norms.of, gen=gen, dl=dl, avgdl=self.avgdl), table,
        )  # fmt: skip

    def _split(self, tid: int) -> tuple[TermLists, list[int]] | None:
        """The term's packed lists as saved and its postings added since (chunk id, tf, ...;
        all past the packed chunks), when that is all it holds and some were added: a
        search reads them as two runs (see _stale) without copying the packed list to
        append them (at 1.09M chunks with 20 segments, a query term's first-segment list
        copied for the later segments' few postings cost a fifth of the CPU and 500 MB)."""
        lists, held = self.packed_lists, self.held
        if lists is None or lists.stats is None or held.cids or held.since_packed or not lists.holds(tid):
            return None
        docs = self.docs[tid]
        if isinstance(docs, array) or tid not in self.pending:
            return None  # a list of its own already, or nothing to append
        later = self.pending[tid]
        if not later or later[0] < lists.stats.n_chunks:
            return None
        if docs is None:
            docs = self._cut(tid)
        tfs, imps = self.tfs[tid], self.imps[tid]
        if imps is None or tfs is None or isinstance(tfs, array):
            return None
        return TermLists(docs, tfs, imps), later

    def length(self, tid: int) -> int:
        """How many postings :meth:`fold` holds, without appending postings added since to a packed list."""
        split = self._split(tid)
        if split is None:
            return len(self.fold(tid))
        return len(split[0].docs) + len(split[1]) // 2

    def top_impact(self, tid: int) -> float:
        """The term's largest current impact (0.0 for an empty list)."""
        stale = None if self.imp_gen[tid] == self.gen else self._stale_of(tid)
        return stale.top if stale is not None else self.impacts(tid)[1]

    def runs(self, tid: int) -> list[Ranked] | None:
        """The term's postings ranked for pruning (see ``_pruning.Ranked``); None
        for a short list, which a search takes whole."""
        if self.length(tid) <= ORDER_MIN:
            return None
        stale = None if self.imp_gen[tid] == self.gen else self._stale_of(tid)
        if stale is not None:
            return stale.runs
        docs = self.fold(tid)
        if self.imp_gen[tid] == self.gen:
            order = self.orders.known(tid, self.gen, len(docs))
            if order is not None:
                return [Ranked(docs, order, self.imps_of(tid), 1.0)]
        stale = self._stale_of(tid)
        if stale is not None:
            return stale.runs
        order = self.order(tid)
        assert order is not None
        return [Ranked(docs, order, self.imps_of(tid), 1.0)]

    def scales(self, tid: int) -> tuple[float, float]:
        """``(lo, hi)``: the current impacts lie within ``lo`` and ``hi`` times :meth:`bound`'s values."""
        stale = self._stale_of(tid) if self.imp_gen[tid] != self.gen else None
        return (1.0, 1.0) if stale is None else (stale.lo, stale.hi)

    def bound(self, tid: int, w: float, cands: list[int], highest: int = -1) -> Iterable[float]:
        """``w`` times the term's packed impact at each of ``cands`` when stale (see
        :meth:`scales`), else :meth:`lookup` (``highest``: at least the largest of ``cands``, or -1)."""
        stale = self._stale_of(tid) if cands and self.imp_gen[tid] != self.gen else None
        if stale is None:
            return self.lookup(tid, w, cands)
        if stale.saved is None:
            lists = self.packed_lists
            assert lists is not None  # a stale term's
            base = stale.base
            term = TermImpacts(tid, base.docs, base.imps, False)
            lookups, gen, n = self.base_lookups, lists.gen, stale.first_new
            stale.use_packed(lambda below: lookups.lookup(term, 1.0, below, gen, n))
        return stale.bound(w, cands, highest)

    def contributions(self, tid: int, w: float) -> Iterable[float]:
        """``w`` times each current impact, beside :meth:`fold`'s chunk ids."""
        imps = self.impacts(tid)[0]
        return imps if w == 1.0 else map(mul, imps, repeat(w))

    def lookup(self, tid: int, w: float, cands: list[int], highest: int = -1) -> Iterable[float]:
        """The term's contribution to each of ``cands`` (0.0 where absent; ``highest``: at
        least the largest of ``cands``, or -1)."""
        # Lists as the saved tables describe them (nothing changed since the load): a table read
        # before answers at once, as ImpactLookups.lookup would, without folding the term again.
        table = self.lookups.ready(tid, self.gen)
        if table is not None:
            found = saved_lookup(table, cands)
            return found if w == 1.0 else map(mul, found, repeat(w))
        stale = self._stale_of(tid) if cands else None  # (folds the term when it builds one)
        if stale is not None and self.imp_gen[tid] != self.gen and stale.worth_looking(len(cands)):
            return stale.lookup(self.bm25, w, cands, self.dl, highest)
        return self.lookups.lookup(self._term(tid), w, cands, self.gen, len(self.dl))

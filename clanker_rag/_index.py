"""The inverted index: postings, cached BM25 impacts and exact top-k search.

Each term has three parallel arrays: chunk ids (ascending), term frequencies,
and *impacts*, the term's precomputed BM25 contribution to each chunk stored
as float32.  Impacts depend on the collection statistics (``N`` and
``avgdl``), so they carry the generation they were computed for and are
recomputed lazily, one term at a time, after the collection changes: statistics
stay exact under any sequence of adds and removes, and nothing is rebuilt.

Search is term-at-a-time with MaxScore-style pruning.  Terms are visited in
decreasing order of their largest impact.  Once the impacts still to come
cannot lift an unseen chunk above the current k-th best score, the remaining
terms only update the surviving candidates, found by binary search, and
candidates that cannot reach the top k are dropped.  The ranking equals
exhaustive scoring (a property test checks it); scores are summed in the same
term order either way, so they are bit-identical too.

The hot loops are written as ``map``/``zip``/``dict`` pipelines over builtin
callables so that CPython runs them without executing Python bytecode per
posting; that is the whole trick behind the speed.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from itertools import accumulate, chain, compress, repeat
from operator import add, and_, eq, ge, mul, or_, rshift, sub, truediv
from typing import Any

from ._exceptions import IndexFormatError
from ._scoring import BM25, length_norm, tf_weight

__all__ = ["InvertedIndex", "TermExplanation"]

_list_append = list.append
_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend
# While building, a posting is one int, ``chunk_id << 32 | tf``, appended to a
# per-term list: one C-level append per posting instead of two array appends.
_SHIFT = 32
_TF_MASK = (1 << _SHIFT) - 1
# Terms at least this long get "champion" lists: the chunks where the term's
# impact is among its CHAMPIONS largest.  A query made only of such terms is
# first answered from the union of their champions (the threshold algorithm
# of Fagin, Lotem and Naor, in one batch); that answer is provably exact when
# the k-th best score beats the sum of the best impacts left outside the
# champions, else the query falls back to term-at-a-time.
LONG_LIST = 4096
CHAMPIONS = 512
MAX_POOL = 8000
CHAMPION_MAX_K = CHAMPIONS // 4
TABLE_CACHE = 256
# Relative and absolute slack on upper bounds: the pruned and the exhaustive
# sums may round differently in the last bit.
_UB_SLACK = 1e-9


class _Pending(dict[int, list[int]]):
    __slots__ = ()

    def __missing__(self, tid: int) -> list[int]:
        pending: list[int] = []
        self[tid] = pending
        return pending


class _Vocab(dict[str, int]):
    __slots__ = ("_index",)

    def __init__(self, index: InvertedIndex) -> None:
        super().__init__()
        self._index = index

    def __missing__(self, term: str) -> int:
        return self._index._new_term(term)


@dataclass(frozen=True, slots=True)
class TermExplanation:
    """One query term's part of a chunk's score."""

    term: str
    weight: float
    tf: int
    df: int
    idf: float
    tf_weight: float
    contribution: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "term": self.term,
            "weight": self.weight,
            "tf": self.tf,
            "df": self.df,
            "idf": self.idf,
            "tf_weight": self.tf_weight,
            "contribution": self.contribution,
        }


class InvertedIndex:
    """Postings and statistics for chunks identified by non-negative int ids."""

    def __init__(self, bm25: BM25) -> None:
        self.bm25 = bm25
        self.vocab: dict[str, int] = _Vocab(self)
        self.terms: list[str] = []
        # None: not yet cut out of the loaded buffers (see attach_buffers).
        self.docs: list[array[int] | None] = []
        self.tfs: list[array[int] | None] = []
        self.imps: list[array[float] | None] = []
        self._buffers: tuple[memoryview, memoryview, memoryview, array[int]] | None = None
        self._n_buffered = 0
        self._check_chunks: tuple[int, str] | None = None
        self.maxes: list[float] = []
        self.imp_gen: list[int] = []
        self.pending: dict[int, list[int]] = _Pending()
        self.dl: array[int] = array("i")
        self.n_docs = 0
        self.total_len = 0
        self.gen = 0
        self._norms_gen = -1
        self._norms: list[float] = []
        # tid -> (impact generation it was computed for, (chunk ids, outside bound) or None)
        self._champions: dict[int, tuple[int, tuple[array[int], float] | None]] = {}
        # tid -> (impact generation, {chunk id: impact}) for long terms: one C-level
        # dict lookup per candidate instead of a binary search; bounded cache.
        self._tables: dict[int, tuple[int, dict[int, float]]] = {}

    # -- building -------------------------------------------------------------
    def _new_term(self, term: str) -> int:
        tid = len(self.terms)
        self.vocab[term] = tid
        self.terms.append(term)
        # Arrays are created on first use (fold): most terms of a big build
        # only ever live in the buffers that refresh() packs them into.
        self.docs.append(None)
        self.tfs.append(None)
        self.imps.append(None)
        self.maxes.append(0.0)
        self.imp_gen.append(-1)
        return tid

    def add(self, cid: int, counts: Mapping[str, int]) -> int:
        """Index chunk ``cid`` (larger than every id added before) with its term counts."""
        _consume(
            map(
                _list_append,
                map(self.pending.__getitem__, map(self.vocab.__getitem__, counts)),
                map(or_, repeat(cid << _SHIFT), counts.values()),
            )
        )
        dl = sum(counts.values())
        gap = cid + 1 - len(self.dl)
        if gap > 0:
            self.dl.extend(repeat(0, gap))
        self.dl[cid] = dl
        self.n_docs += 1
        self.total_len += dl
        self.gen += 1
        return dl

    def attach_buffers(
        self,
        lengths: array[int],
        docs: array[int],
        tfs: array[int],
        imps: array[float],
        *,
        n_chunks: int | None = None,
        where: str = "index",
    ) -> None:
        """Adopt postings loaded from disk; each term's arrays are cut out on first use.

        With ``n_chunks``, each list is checked against it when it is cut out
        (its ends suffice: lists are sorted), so a damaged index fails clearly.
        """
        self._check_chunks = (n_chunks, where) if n_chunks is not None else None
        offsets = array("q", accumulate(lengths, initial=0))
        self._buffers = (memoryview(docs).cast("B"), memoryview(tfs).cast("B"), memoryview(imps).cast("B"), offsets)
        n = len(lengths)
        self._n_buffered = n
        self.docs = [None] * n
        self.tfs = [None] * n
        self.imps = [None] * n
        self.maxes = [-1.0] * n
        self.imp_gen = [self.gen] * n

    def _cut(self, tid: int) -> array[int]:
        if self._buffers is None or tid >= self._n_buffered:
            d0: array[int] = array("i")
            self.docs[tid], self.tfs[tid], self.imps[tid] = d0, array("I"), array("f")
            return d0
        mv_d, mv_t, mv_i, offsets = self._buffers
        a, b = offsets[tid] * 4, offsets[tid + 1] * 4
        d, t, i = array("i"), array("I"), array("f")
        d.frombytes(mv_d[a:b])
        t.frombytes(mv_t[a:b])
        i.frombytes(mv_i[a:b])
        if self._check_chunks is not None and d and (d[0] < 0 or d[-1] >= self._check_chunks[0]):
            raise IndexFormatError(f"{self._check_chunks[1]}: a posting points at a chunk that does not exist")
        self.docs[tid], self.tfs[tid], self.imps[tid] = d, t, i
        return d

    def fold(self, tid: int) -> array[int]:
        """The term's chunk ids, after moving pending postings into its arrays."""
        docs = self.docs[tid]
        if docs is None:
            docs = self._cut(tid)
        if tid in self.pending:
            pending = self.pending.pop(tid)
            tfs = self.tfs[tid]
            assert tfs is not None
            docs.extend(map(rshift, pending, repeat(_SHIFT)))
            tfs.extend(map(and_, pending, repeat(_TF_MASK)))
            self.imp_gen[tid] = -1
        return docs

    def fold_all(self) -> None:
        for tid in range(len(self.terms)):
            self.fold(tid)

    def remove(self, cid: int, terms: Iterable[str]) -> int:
        """Drop chunk ``cid`` from the postings of ``terms``; returns the summed tf removed.

        The caller compares that sum with the chunk's length to be sure every
        posting went, then calls :meth:`forget`.
        """
        vocab_get = self.vocab.get
        removed = 0
        for term in set(terms):
            tid = vocab_get(term)
            if tid is None:
                continue
            docs = self.fold(tid)
            i = bisect_left(docs, cid)
            if i < len(docs) and docs[i] == cid:
                del docs[i]
                tfs = self.tfs[tid]
                assert tfs is not None
                removed += tfs[i]
                del tfs[i]
                self.imp_gen[tid] = -1
        return removed

    def forget(self, cid: int) -> None:
        """Take chunk ``cid`` out of the collection statistics."""
        self.n_docs -= 1
        self.total_len -= self.dl[cid]
        self.dl[cid] = 0
        self.gen += 1

    # -- statistics and impacts ------------------------------------------------
    @property
    def avgdl(self) -> float:
        return self.total_len / self.n_docs if self.n_docs else 0.0

    def df(self, term: str) -> int:
        tid = self.vocab.get(term)
        return 0 if tid is None else len(self.fold(tid))

    def _length_norms(self) -> list[float]:
        if self._norms_gen != self.gen:
            bm, avgdl = self.bm25, self.avgdl
            if avgdl > 0:
                # Same operations, in the same order, as length_norm().
                self._norms = list(
                    map(
                        mul,
                        repeat(bm.k1),
                        map(add, repeat(1.0 - bm.b), map(truediv, map(mul, repeat(bm.b), self.dl), repeat(avgdl))),
                    )
                )
            else:
                self._norms = [bm.k1] * len(self.dl)
            self._norms_gen = self.gen
        return self._norms

    def impacts(self, tid: int) -> tuple[array[float], float]:
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
        norms = self._length_norms()
        idf = bm.idf(self.n_docs, len(docs)) if docs else 0.0
        if bm.variant == "lucene":
            weights: Iterable[float] = map(truediv, tfs, map(add, tfs, map(norms.__getitem__, docs)))
        else:
            k1, b, delta, avgdl, dls = bm.k1, bm.b, bm.delta_value, self.avgdl, self.dl
            weights = [tf_weight(bm.variant, tf, norms[d], k1, b, delta, dls[d], avgdl) for d, tf in zip(docs, tfs)]
        imps = array("f", map(mul, repeat(idf), weights))
        self.imps[tid] = imps
        self.maxes[tid] = max(imps) if imps else 0.0
        self.imp_gen[tid] = self.gen
        return imps, self.maxes[tid]

    def refresh(self) -> None:
        """Bring every term's impacts and champions up to date (before a save)."""
        if self._buffers is None and self.docs.count(None) == len(self.docs):
            self._freeze()
            for tid, length in enumerate(self._lengths()):
                if length >= LONG_LIST:
                    self.champions(tid)
            return
        for tid in range(len(self.terms)):
            self.impacts(tid)
            self.champions(tid)

    def _lengths(self) -> Iterable[int]:
        if self._buffers is None:
            return map(len, map(self.fold, range(len(self.terms))))
        offsets = self._buffers[3]
        return map(sub, offsets[1:], offsets[:-1])

    def _freeze(self) -> None:
        """Pack a fresh build into the loaded-index layout in a few C-level passes.

        Same values as :meth:`impacts` term by term (same operations in the
        same order), without a Python-level loop over the postings.
        """
        n = len(self.terms)
        plists = list(map(self.pending.get, range(n), repeat(())))
        lengths = array("i", map(len, plists))
        flat = list(chain.from_iterable(plists))
        self.pending.clear()
        del plists
        docs = array("i", map(rshift, flat, repeat(_SHIFT)))
        tfs = array("I", map(and_, flat, repeat(_TF_MASK)))
        del flat
        bm = self.bm25
        norms = self._length_norms()
        idfs = [bm.idf(self.n_docs, df) for df in lengths]
        if bm.variant == "lucene":
            weights: Iterable[float] = map(truediv, tfs, map(add, tfs, map(norms.__getitem__, docs)))
        else:
            k1, b, delta, avgdl, dls = bm.k1, bm.b, bm.delta_value, self.avgdl, self.dl
            weights = [tf_weight(bm.variant, tf, norms[d], k1, b, delta, dls[d], avgdl) for d, tf in zip(docs, tfs)]
        imps = array("f", map(mul, chain.from_iterable(map(repeat, idfs, lengths)), weights))
        self.attach_buffers(lengths, docs, tfs, imps)

    # -- search ----------------------------------------------------------------
    def _plan(self, weights: Mapping[int, float]) -> list[tuple[float, int, float]]:
        plan = []
        for tid, w in weights.items():
            if w <= 0 or not self.fold(tid):
                continue
            _, mx = self.impacts(tid)
            plan.append((mx * w, tid, w))
        # Largest upper bound first; the term itself breaks ties, so the order,
        # and so the floating-point sum, is the same for pruned and exhaustive
        # scoring and for any history of adds and removes.
        terms = self.terms
        plan.sort(key=lambda item: (-item[0], terms[item[1]]))
        return plan

    def _imp(self, tid: int) -> array[float]:
        imps = self.imps[tid]
        assert imps is not None
        return imps

    def _tf(self, tid: int) -> array[int]:
        tfs = self.tfs[tid]
        assert tfs is not None
        return tfs

    def _contribs(self, tid: int, w: float) -> Iterable[float]:
        imps = self._imp(tid)
        return imps if w == 1.0 else map(mul, imps, repeat(w))

    def champions(self, tid: int) -> tuple[array[int], float] | None:
        """For a long term: the chunk ids whose impact is among its ``CHAMPIONS``
        largest (ascending), and the largest impact outside them.  ``None`` for
        a short term, or when ties at the cut make the set too big to help."""
        docs = self.fold(tid)
        if len(docs) < LONG_LIST:
            return None
        imps, _ = self.impacts(tid)
        cached = self._champions.get(tid)
        if cached is not None and cached[0] == self.imp_gen[tid]:
            return cached[1]
        ranked = sorted(imps)
        tau = ranked[-CHAMPIONS] if len(ranked) > CHAMPIONS else ranked[0]
        i = bisect_left(ranked, tau)
        result: tuple[array[int], float] | None = None
        if len(ranked) - i <= 4 * CHAMPIONS:
            chosen = array("i", compress(docs, map(ge, imps, repeat(tau))))
            result = (chosen, ranked[i - 1] if i else 0.0)
        self._champions[tid] = (self.imp_gen[tid], result)
        return result

    def set_champions(self, tid: int, chosen: array[int], bound: float) -> None:
        """Install champions loaded from disk (valid for the loaded generation)."""
        self._champions[tid] = (self.imp_gen[tid], (chosen, bound))

    def _finish_with_champions(
        self, acc: dict[int, float], rest: list[tuple[float, int, float]], k: int, allowed: Container[int] | None
    ) -> list[tuple[int, float]] | None:
        """Exact top k when the terms still to visit are long, or None.

        ``acc`` holds every chunk of the terms already visited (with their
        partial scores).  Candidates are those chunks, the champions of the
        long terms left and the lists of any short ones.  A chunk outside them
        scores at most the sum of the long terms' outside bounds; when the
        k-th best candidate beats that sum, nothing else can rank.
        """
        bound = 0.0
        pool: set[int] = set(acc)
        for _, tid, w in rest:
            champ = self.champions(tid)
            if champ is None:
                docs = self.fold(tid)
                if len(docs) >= LONG_LIST:
                    return None
                pool.update(docs)
            else:
                pool.update(champ[0])
                bound += champ[1] * w
            if len(pool) > MAX_POOL:
                return None
        if allowed is not None:
            pool = {d for d in pool if d in allowed}
        if len(pool) < k:
            return None
        cands = sorted(pool)
        scores = list(map(acc.get, cands, repeat(0.0)))
        for _, tid, w in rest:
            scores = list(map(add, scores, self._lookup(tid, w, cands)))
        theta = heapq.nlargest(k, scores)[-1]
        if theta <= bound * (1 + _UB_SLACK) + _UB_SLACK:
            return None
        best = sorted(
            compress(zip(cands, scores), map(ge, scores, repeat(theta))), key=lambda item: (-item[1], item[0])
        )
        return best[:k]

    def _table(self, tid: int) -> dict[int, float] | None:
        """``{chunk id: impact}`` of a long term (cached), else None."""
        docs = self.fold(tid)
        if len(docs) < LONG_LIST:
            return None
        imps, _ = self.impacts(tid)
        cached = self._tables.get(tid)
        if cached is not None and cached[0] == self.imp_gen[tid]:
            return cached[1]
        if len(self._tables) >= TABLE_CACHE:
            self._tables.clear()
        table = dict(zip(docs, imps))
        self._tables[tid] = (self.imp_gen[tid], table)
        return table

    def _lookup(self, tid: int, w: float, cands: list[int]) -> Iterable[float]:
        """The term's contribution to each of ``cands`` (0.0 where absent)."""
        docs = self.fold(tid)
        cached = self._tables.get(tid)
        table = cached[1] if cached is not None and cached[0] == self.imp_gen[tid] else None
        if table is None:
            if len(cands) * 16 < len(docs):
                # Few candidates: binary search beats building any table.
                return self._probe(tid, w, cands)
            table = self._table(tid)
        if table is not None:
            vals: Iterable[float] = map(table.get, cands, repeat(0.0))
            # w * 0.0 is 0.0 and w * impact is what the other paths add, bit for bit.
            return vals if w == 1.0 else map(mul, vals, repeat(w))
        local = dict(zip(docs, self._contribs(tid, w)))
        return map(local.get, cands, repeat(0.0))

    def _probe(self, tid: int, w: float, cands: list[int]) -> Iterable[float]:
        """The term's contribution to each of ``cands`` (0.0 where absent), by binary search."""
        docs = self.fold(tid)
        last = len(docs) - 1
        idx = list(map(min, map(bisect_left, repeat(docs), cands), repeat(last)))
        found = map(eq, map(docs.__getitem__, idx), cands)
        vals: Iterable[float] = map(self._imp(tid).__getitem__, idx)
        if w != 1.0:
            vals = map(mul, vals, repeat(w))
        return map(mul, vals, found)

    def top_k(
        self, weights: Mapping[int, float], k: int, allowed: Container[int] | None = None
    ) -> list[tuple[int, float]]:
        """The ``k`` best ``(chunk id, score)`` pairs, best first, ties by lower id."""
        plan = self._plan(weights)
        if k <= 0 or not plan:
            return []
        remaining = [0.0] * len(plan)
        total = 0.0
        for i in range(len(plan) - 1, 0, -1):
            total += plan[i][0]
            remaining[i - 1] = total * (1 + _UB_SLACK) + _UB_SLACK
        acc: dict[int, float] = {}
        and_mode = False
        seen_ub = 0.0
        try_champions = k <= CHAMPION_MAX_K
        for i, (ub, tid, w) in enumerate(plan):
            docs = self.fold(tid)
            if try_champions and not and_mode and len(docs) >= LONG_LIST:
                # Merging a long list in full is the expensive step: first try
                # to finish from the champions (once per query).
                try_champions = False
                found = self._finish_with_champions(acc, plan[i:], k, allowed)
                if found is not None:
                    return found
            if not and_mode:
                contribs = self._contribs(tid, w)
                if acc:
                    contribs = map(add, map(acc.get, docs, repeat(0.0)), contribs)
                pairs: Iterable[tuple[int, float]] = zip(docs, contribs)
                if allowed is not None:
                    pairs = compress(pairs, map(allowed.__contains__, docs))
                acc.update(pairs)
            else:
                acc = self._update_candidates(acc, tid, w)
            rest = remaining[i]
            seen_ub += ub
            if len(acc) >= k and (and_mode or rest < seen_ub):
                theta = heapq.nlargest(k, acc.values())[-1]
                if rest < theta:
                    and_mode = True
                    if len(acc) > k:
                        acc = dict(compress(acc.items(), map(ge, map(add, acc.values(), repeat(rest)), repeat(theta))))
        if len(acc) > k:
            theta = heapq.nlargest(k, acc.values())[-1]
            acc = dict(compress(acc.items(), map(ge, acc.values(), repeat(theta))))
        best = sorted(acc.items(), key=lambda item: (-item[1], item[0]))
        return best[:k]

    def _update_candidates(self, acc: dict[int, float], tid: int, w: float) -> dict[int, float]:
        cands = list(acc)
        return dict(zip(cands, map(add, acc.values(), self._lookup(tid, w, cands))))

    def score_all(self, weights: Mapping[int, float]) -> dict[int, float]:
        """Exhaustive scores of every matching chunk (the reference for tests)."""
        acc: dict[int, float] = {}
        for _, tid, w in self._plan(weights):
            for d, c in zip(self.fold(tid), self._contribs(tid, w)):
                acc[d] = acc.get(d, 0.0) + c
        return acc

    def explain(self, weights: Mapping[int, float], cid: int) -> tuple[float, list[TermExplanation]]:
        """Per-term breakdown of chunk ``cid``'s score; the parts sum to the score exactly."""
        score = 0.0
        parts = []
        bm = self.bm25
        avgdl = self.avgdl
        dl = self.dl[cid] if cid < len(self.dl) else 0
        for _, tid, w in self._plan(weights):
            docs = self.fold(tid)
            i = bisect_left(docs, cid)
            if i >= len(docs) or docs[i] != cid:
                continue
            imp = self._imp(tid)[i]
            contribution = imp if w == 1.0 else imp * w
            score = score + contribution
            tf = self._tf(tid)[i]
            norm = length_norm(bm.k1, bm.b, dl, avgdl)
            parts.append(
                TermExplanation(
                    term=self.terms[tid],
                    weight=w,
                    tf=tf,
                    df=len(docs),
                    idf=bm.idf(self.n_docs, len(docs)),
                    tf_weight=tf_weight(bm.variant, tf, norm, bm.k1, bm.b, bm.delta_value, dl, avgdl),
                    contribution=contribution,
                )
            )
        return score, parts

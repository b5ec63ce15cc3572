"""A term's impact at given chunks: saved tables, built tables or binary search.

The search scores candidates one term at a time (``_search.full_scores``),
and each term answers by the cheapest way at hand: a table saved with the
index (one C-level subscript), a table built at query time and kept in a
least-recently-used cache, or a binary search over the sorted chunk ids
while too few candidates have been asked for to pay for a table (like a ski
rental).  All three give ``w * impact`` (``0.0`` where absent) bit for bit.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from itertools import repeat
from operator import mul
from typing import NamedTuple

from .._storage._codec import Floats, Ints
from .._storage._impact_tables import DENSE_SLOT_BYTES, Built, StoredTables, Table, TableCache, build_table, gather
from .._storage._impact_tables import lookup as saved_lookup
from ._pruning import probe

__all__ = ["ImpactLookups", "TermImpacts"]

# Terms at least TABLE_MIN long keep a lookup table once a query needs many
# of their impacts: a least-recently-used cache of at most TABLE_BYTES in
# all.  A term in at least 1/DENSE_SHARE of the chunks gets a dense float32
# array indexed by chunk id (4 bytes a slot, and indexing it is faster than a
# dict lookup); a rarer one a {chunk id: impact} dict (about 90 bytes an
# entry with its float).
TABLE_MIN = 256
TABLE_BYTES = 96_000_000
# Beside tables saved with the index (see _impact_tables) only shorter lists
# need built ones: at 225k chunks a sixth of the budget held them, with the
# same cold queries/s and 14 MB less memory.  (Saved only down to 1/8 of the
# chunks, the lists between need the whole budget: at 30k chunks a sixth cost
# 12 % of the cold queries/s.)
TABLE_BYTES_BESIDE_SAVED = 16_000_000
DENSE_SHARE = 16
# A term's table is built once its binary-searched candidates pass 1/PROBE_SHARE
# of its list (a binary search over an array costs about as much as putting 20
# to 40 postings in a table, and the table serves later queries too).
PROBE_SHARE = 24
# Measured with bench_scale.py: at 30k chunks (120 kB dense tables) building
# them eagerly is 4% faster; at 225k chunks (900 kB) waiting for three times
# the candidates gives 9-12% more cold queries/s, with the same answers.
CACHED_TABLE_BYTES = 256_000
# A saved slot table (compressed) is inflated at its first lookup: binary search
# until its candidates would have paid for inflating it (1.2 us a candidate against 0.4-2 ms a
# table at 225k chunks) cost 5 % more instructions over 500 cold queries, not less, because
# most first lookups ask for hundreds of candidates.


class TermImpacts(NamedTuple):
    """One term as a lookup reads it: its lists with impacts current for the index's generation."""

    tid: int
    docs: Ints  # sorted chunk ids
    imps: Floats  # impacts beside them, for the current generation
    changed: bool  # the list has changed since it was loaded or packed


class ImpactLookups:
    """The lookup state of one index: built tables, saved tables, probe counts."""

    def __init__(self) -> None:
        # Tables built at query time: one C-level lookup per candidate
        # instead of a binary search.
        self.cache = TableCache()
        # Tables saved with the index and the generation they hold: a term
        # uses its table while its impacts are still that one.
        self.saved: tuple[StoredTables, int] | None = None
        # tid -> candidates looked up by binary search so far.
        self.probed: dict[int, int] = {}
        self.restamps: dict[int, tuple[int, Table]] = {}  # tid -> (generation, saved slots, new impacts)

    def use_saved(self, tables: StoredTables | None, gen: int) -> None:
        """Serve lookups from ``tables`` (saved with the lists of generation ``gen``), or from none."""
        self.saved = None if tables is None else (tables, gen)

    def ready(self, tid: int, gen: int) -> Table | None:
        """The term's saved table when it serves generation ``gen`` and was read before: what
        :meth:`lookup` would use, found without the term's lists (the search's common case)."""
        saved = self.saved
        return saved[0].known(tid) if saved is not None and saved[1] == gen else None

    def lookup(self, term: TermImpacts, w: float, cands: list[int], gen: int, n_slots: int) -> Iterable[float]:
        """``w`` times the term's impact at each of ``cands`` (0.0 where absent).

        ``gen`` is the index's generation, ``n_slots`` one past its largest chunk id.
        """
        tid, docs = term.tid, term.docs
        saved = self.saved
        if saved is not None and (saved[1] == gen or not term.changed):
            table = saved[0].table(tid, len(docs))
            if table is not None and saved[1] != gen:
                # Stale impacts, but a list unchanged since load keeps its slots: new impacts behind them.
                slots = table[1]
                ok = slots is not None and max(cands, default=0) < len(slots)
                table = self._restamped(term, slots, gen) if ok and slots is not None else None
            if table is not None:
                found = saved_lookup(table, cands)
                return found if w == 1.0 else map(mul, found, repeat(w))
        built = self.cache.get(tid, gen)
        if built is None:
            probed = self.probed.get(tid, 0) + len(cands)
            share = PROBE_SHARE
            if len(docs) * DENSE_SHARE >= n_slots and n_slots * DENSE_SLOT_BYTES > CACHED_TABLE_BYTES:
                # A dense table larger than the CPU cache takes a cache miss
                # per posting to fill: wait for three times the candidates.
                share = max(1, share // 3)
            if probed * share < len(docs):
                # Few candidates so far: binary search beats building a table.
                self.probed[tid] = probed
                return probe(docs, term.imps, w, cands)
            if len(docs) >= TABLE_MIN:
                built = self._built(term, gen, n_slots)
            else:
                imps = term.imps
                local = dict(zip(docs, imps if w == 1.0 else map(mul, imps, repeat(w))))
                return map(local.get, cands, repeat(0.0))
        vals: Iterable[float] = gather(built, cands) if isinstance(built, array) else map(built.get, cands, repeat(0.0))
        # w * 0.0 is 0.0 and w * impact is what the other paths add, bit for bit.
        return vals if w == 1.0 else map(mul, vals, repeat(w))

    def _built(self, term: TermImpacts, gen: int, n_slots: int) -> Built:
        """The term's impacts by chunk id, cached: a dense array or a dict."""
        table = self.cache.get(term.tid, gen)
        if table is None:
            docs = term.docs
            table, size = build_table(docs, term.imps, n_slots, len(docs) * DENSE_SHARE >= n_slots)
            saved = self.saved
            budget = TABLE_BYTES if saved is None or saved[1] != gen else TABLE_BYTES_BESIDE_SAVED
            self.cache.put(term.tid, gen, table, size, budget)
        return table

    def _restamped(self, term: TermImpacts, slots: Ints, gen: int) -> Table:
        """A saved slot table's slots with the term's current impacts behind them (0.0 in front)."""
        found = self.restamps.get(term.tid)
        if found is None or found[0] != gen:
            imps = array("f", [0.0])
            imps.frombytes(memoryview(term.imps).cast("B"))
            found = self.restamps[term.tid] = (gen, (imps, slots, None))
        return found[1]

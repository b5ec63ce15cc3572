"""Impact orders: each long list's positions sorted by impact, largest first.

The search's seeding reads a term's best chunks off the top of its order and
finds MaxScore's essential chunks as a prefix of it, by binary search.  An
order belongs to one impact generation: a packed or saved one (``PackedOrders``)
serves while the generation it was made in lasts, a sorted one is cached for
its generation, and a stale one is sorted again only on the term's second use
in a generation, so a search after each add (an agent's memory loop) does not
pay for sorting lists the next add makes stale again.
"""

from __future__ import annotations

from .._storage._codec import Ints
from ._lookups import TermImpacts
from ._packed_lists import PackedOrders
from ._scoring import impact_order as _impact_order

__all__ = ["ImpactOrders"]


class ImpactOrders:
    """The impact orders of one index's long lists: packed, cached and wanted."""

    def __init__(self) -> None:
        # The orders packed with the lists (mapped at load or bulk-computed).
        self.packed: PackedOrders | None = None
        # tid -> (impact generation it was computed for, positions by impact, largest first)
        self.cached: dict[int, tuple[int, Ints]] = {}
        # tid -> impact generation a search last found its order stale in.
        self.wanted: dict[int, int] = {}

    def known(self, tid: int, gen: int, length: int) -> Ints | None:
        """The term's order for impact generation ``gen``, cached or packed, else None."""
        cached = self.cached.get(tid)
        if cached is not None and cached[0] == gen:
            return cached[1]
        packed = self.packed
        if packed is None or packed.gen != gen or not packed.has(tid):
            return None
        order = packed.read(tid, length)
        self.cached[tid] = (gen, order)
        return order

    def ready(self, term: TermImpacts, gen: int, settled: int) -> bool:
        """Whether the order of ``term`` (impacts of generation ``gen``) is at hand, or worth sorting now.

        An order made stale by adds since it was sorted is sorted again on
        the term's second use in the current generation: the first search
        is told False and scores term at a time.  A term that never had an
        order (a fresh bulk ingest) is sorted on first use: its next search
        will likely find it still current; so is every term in a load's
        generation (``settled``), when no add is expected to follow.
        """
        tid = term.tid
        if self.known(tid, gen, len(term.docs)) is not None:
            return True
        packed = self.packed
        never_sorted = tid not in self.cached and not (packed is not None and packed.has(tid))
        if never_sorted or self.wanted.get(tid) == gen or gen == settled:
            return True
        self.wanted[tid] = gen
        return False

    def of(self, term: TermImpacts, gen: int) -> Ints:
        """The order of ``term`` (impacts of generation ``gen``): positions by decreasing impact,
        ties by lower position."""
        order = self.known(term.tid, gen, len(term.docs))
        if order is None:
            # A list unchanged since load keeps most of its saved order: a hint, used when still exact.
            packed = self.packed
            hint = None
            if packed is not None and not term.changed and packed.has(term.tid):
                hint = packed.hint(term.tid)
            order = _impact_order(term.imps, hint)
            self.cached[term.tid] = (gen, order)
        return order

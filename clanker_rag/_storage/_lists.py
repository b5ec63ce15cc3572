"""Posting lists as a save writes them: the walk over every term, and the helpers on list lengths."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate, compress, repeat
from operator import gt, mul, sub
from typing import Protocol

from ._codec import Floats, Ints, Postings, TermList
from ._tf_column import extend_ints

__all__ = ["PostingLists", "kept", "lengths_of", "order_offsets_of", "walk_postings", "without_empty_lists"]


class PostingLists(Protocol):
    """What :func:`walk_postings` reads of an index, list by list."""

    @property
    def terms(self) -> Sequence[str] | TermList: ...
    def fold(self, tid: int) -> Ints: ...
    def order(self, tid: int) -> Ints | None: ...
    def tfs_of(self, tid: int) -> Ints: ...
    def impacts(self, tid: int) -> tuple[Floats, float]: ...


def walk_postings(lists: PostingLists, renumber: list[int] | None = None) -> Postings:
    """Every non-empty list of ``lists``, term by term, packed as a save writes
    them (the slow path, when an index's packed buffers are not current).
    ``renumber`` maps chunk ids to their saved ids (when chunks were removed)."""
    terms: list[str] = []
    lengths, p_docs, p_tfs, o_lengths, o_positions = array("q"), array("i"), array("I"), array("q"), array("i")
    p_imps: array[float] = array("f")
    p_maxes: array[float] = array("f")
    for tid, term in enumerate(lists.terms):
        docs = lists.fold(tid)
        if not docs:
            continue
        order = lists.order(tid)
        # Positions within the list: the renumbering keeps chunk order.
        o_lengths.append(0 if order is None else len(order))
        if order is not None:
            extend_ints(o_positions, order)  # a load reads most orders as uint16
        terms.append(term)
        lengths.append(len(docs))
        if renumber is None:
            p_docs.frombytes(memoryview(docs).cast("B"))
        else:
            p_docs.extend(map(renumber.__getitem__, docs))
        extend_ints(p_tfs, lists.tfs_of(tid))  # a loaded list's may be saved narrower
        imps, top = lists.impacts(tid)
        p_imps.frombytes(memoryview(imps).cast("B"))
        p_maxes.append(top)
    return Postings(
        terms,
        array("q", accumulate(lengths, initial=0)),
        p_docs,
        p_tfs,
        p_imps,
        p_maxes,
        array("q", accumulate(o_lengths, initial=0)),
        o_positions,
    )


def without_empty_lists(post: Postings, lengths: Sequence[int], order_lengths: Sequence[int]) -> Postings:
    """``post`` without the terms whose lists are empty, the rest numbered densely
    (what a save writes after removals emptied some lists)."""
    assert post.maxes is not None
    return post._replace(
        terms=list(compress(post.terms, lengths)),
        offsets=array("q", accumulate(filter(None, lengths), initial=0)),
        maxes=array("f", compress(post.maxes, lengths)),
        order_offsets=array("q", accumulate(compress(order_lengths, lengths), initial=0)),
    )


def order_offsets_of(lengths: Iterable[int], order_min: int) -> array[int]:
    """Order offsets for lists of ``lengths`` where every list longer than ``order_min`` has an order."""
    # length * (length > order_min): the length or 0, without a Python call per list.
    lengths = list(lengths)
    return array("q", accumulate(map(mul, lengths, map(gt, lengths, repeat(order_min))), initial=0))


def lengths_of(offsets: Ints) -> Iterator[int]:
    """List lengths from their offsets."""
    return map(sub, offsets[1:], offsets[:-1])


def kept(values: Iterable[int], lengths: Sequence[int]) -> Iterator[int]:
    """``values`` of the terms whose lists are not empty."""
    return compress(values, lengths)

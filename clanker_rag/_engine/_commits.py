"""What a knowledge base committed, and what changed since: a cheap save's bookkeeping.

A knowledge base loaded from (or saved as) a commit keeps its
:class:`Commits`: the segments of that commit, the first chunk id added since
(``committed``), the sources added since and the names of committed sources
removed since.  A commit (:meth:`Commits.commit`) then writes the added
sources as one new segment (term frequencies only), marks the removed ones
deleted in the segment that holds them (found by name, newest segment
first, so merges never need the knowledge base to renumber anything), runs
the merges the policy asks for, and writes the new commit point.  A load
replays every segment after the first into the index (:func:`replay`): its
sources, chunks and statistics at once, its lists as the index reads them.

A committed chunk that is removed (by a load's deletion marks or by
``remove``) leaves the statistics at once but its postings only when the
index is next read (the index holds it, see ``_held``): the commit writes
deletion marks by name and needs neither, so a process that loads, removes
a source and saves never analyses a text or copies a list.  A chunk added
since the commit is dropped from its lists at once (:func:`drop_postings`).
"""

from __future__ import annotations

import logging
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import accumulate, chain, compress, count, repeat
from operator import add, attrgetter, is_not, sub
from pathlib import Path
from typing import Any

from .._storage import _codec, _segments, _writer
from ._index import InvertedIndex
from ._replay import TailLists, add_stats, postings_since
from ._sources import ChunkTable, Doc

__all__ = ["Commits", "drop_postings", "replay", "whole_snapshot"]

log = logging.getLogger(__name__)

_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend


class Commits:
    """The commit a knowledge base holds and its changes since (see the module docstring)."""

    __slots__ = ("committed", "new_docs", "removed", "segments")

    def __init__(self, segments: list[_codec.Segment], committed: int) -> None:
        self.segments = segments
        self.committed = committed
        self.new_docs: dict[str, Doc] = {}
        self.removed: set[str] = set()

    def added(self, doc: Doc) -> None:
        self.new_docs[doc.source] = doc

    def dropped(self, doc: Doc) -> None:
        """``doc`` was removed: forgotten if added since the commit, else marked for deletion."""
        if self.new_docs.get(doc.source) is doc:
            del self.new_docs[doc.source]
        else:
            self.removed.add(doc.source)

    def commit(
        self, folder: Path, settings: dict[str, Any], ct: ChunkTable, index: InvertedIndex, *, merge: bool,
        whole: Callable[[], str],
    ) -> str:  # fmt: skip
        """Write the changes as a commit into ``folder``; returns the revision.  When the policy
        asks for a full merge, ``whole()`` writes everything as one segment instead."""
        segs = list(self.segments)
        deleted = [set(seg.record.deleted if seg.record is not None else ()) for seg in segs]
        for name in self.removed:
            for i in reversed(range(len(segs))):
                names = segs[i].names
                number = None if names is None else names.find(name)
                if number is not None and number not in deleted[i]:
                    deleted[i].add(number)
                    break
        records = [_marked(seg, gone) for seg, gone in zip(segs, deleted)]
        new = self._new_segment(settings, ct, index)
        live = [r.live_chunks for r in records] + ([len(new.chunks.source)] if new is not None else [])
        dead = sum(r.deleted_chunks for r in records)
        plan = _segments.plan_merges(live, dead) if merge else _segments.MergePlan(False, [])
        if plan.full:
            return whole()
        if new is not None:
            records.append(_writer.write_segment(folder, new, scored=False))
            segs.append(_codec.open_segment(folder, records[-1], str(folder)))
        segs = [seg._replace(record=rec) for seg, rec in zip(segs, records)]
        for first, last in reversed(plan.runs):
            merged = _writer.write_segment(folder, _writer.merge_segments(segs[first:last]), scored=False)
            segs[first:last] = [_codec.open_segment(folder, merged, str(folder))]
        revision = _writer.commit(folder, settings, [seg.record for seg in segs if seg.record is not None])
        self.reset(segs, len(ct))
        index.touched.clear()
        return revision

    def reset(self, segments: list[_codec.Segment], committed: int) -> None:
        """Everything up to chunk ``committed`` is now in the commit of ``segments``."""
        self.segments = segments
        self.committed = committed
        self.new_docs = {}
        self.removed = set()

    def _new_segment(self, settings: dict[str, Any], ct: ChunkTable, index: InvertedIndex) -> _codec.Snapshot | None:
        """The sources added since the commit, as an unscored segment (None: there are none)."""
        if not self.new_docs:
            return None
        docs = sorted(self.new_docs.values(), key=lambda doc: doc.cids[0] if doc.cids else -1)
        cids = [cid for doc in docs for cid in doc.cids]
        ordinal, starts, ends, start_lines, end_lines = ct.added_rows(self.committed, cids)  # (no loaded one read)
        chunks = _codec.ChunkColumns(
            array("i", chain.from_iterable(repeat(i, len(doc.cids)) for i, doc in enumerate(docs))),
            array("i", ordinal),
            array("q", starts),
            array("q", ends),
            array("i", start_lines),
            array("i", end_lines),
            array("i", map(index.dl.__getitem__, cids)),
            list(map(ct.section.__getitem__, cids)),
        )
        sources = _codec.SourceColumns(
            [doc.source for doc in docs],
            [doc.stored for doc in docs],
            array("q", [doc.chars for doc in docs]),
            [doc.metadata for doc in docs],
            [doc.fingerprint for doc in docs],
        )
        postings = postings_since(index, self.committed, dict(zip(cids, range(len(cids)))))
        return _codec.Snapshot(
            settings["analyzer"], settings["bm25"], settings["chunking"], sources, chunks, postings,
            sum(chunks.length), settings["created_by"],
        )  # fmt: skip


def _marked(seg: _codec.Segment, deleted: set[int]) -> _segments.SegmentRecord:
    """``seg``'s record with ``deleted`` as its deletion marks."""
    assert seg.record is not None
    if set(seg.record.deleted) == deleted:
        return seg.record
    src = seg.snap.sources
    assert src.first_chunks is not None  # saves always write them
    gone = sum(b - a for a, b in map(_codec.source_run, repeat(src), deleted))
    return seg.record._replace(deleted=tuple(sorted(deleted)), deleted_chunks=gone)


def replay(
    seg: _codec.Segment, ct: ChunkTable, index: InvertedIndex, put: Callable[[Doc], None], tails: TailLists
) -> None:  # fmt: skip
    """Add a loaded segment after the first: its live sources (each given to ``put``), chunks and
    statistics; its lists go to ``tails``, read into the index term by term (see ``_replay``)."""
    snap = seg.snap
    src, cols = snap.sources, snap.chunks
    firsts = src.first_chunks
    assert firsts is not None and seg.record is not None  # checked by open_segment
    deleted = set(seg.record.deleted)
    texts, fps = src.texts, src.fingerprints
    # A source's text and fingerprint stay in the mapped segment until something reads them
    # (as the first segment's do): a merged tail segment can hold an eighth of the index.
    store = texts if isinstance(texts, _codec.SourceStore) else None
    n_sources = len(src.chars)
    numbers: Sequence[int] = range(n_sources) if not deleted else [i for i in range(n_sources) if i not in deleted]
    # Each live source's run of chunks, and its chunks' ids here: C-level passes, no step per
    # source or chunk in Python (a merged tail segment holds tens of thousands of each).
    firsts_of = list(map(firsts.__getitem__, numbers))
    ends_of = list(map(firsts.__getitem__, map(add, numbers, repeat(1))))
    counts = list(map(sub, ends_of, firsts_of))
    starts = list(accumulate(counts, initial=len(ct)))
    names = list(src.names)  # decoded together
    docs = list(
        map(
            Doc,
            map(names.__getitem__, numbers),
            repeat(None) if isinstance(texts, _codec.SourceStore) else (str(texts[i]) for i in numbers),
            map(src.metadata.__getitem__, numbers),
            repeat(None) if isinstance(fps, _codec.SourceStore) else map(fps.__getitem__, numbers),
            numbers if store is not None else repeat(-1),
            repeat(store),
            map(range, starts, starts[1:]),
        )
    )
    _consume(map(put, docs))
    live = list(chain.from_iterable(map(range, firsts_of, ends_of)))
    renumber = array("i", repeat(-1, len(cols.source)))
    _consume(map(renumber.__setitem__, live, range(starts[0], starts[-1])))
    # Each live chunk's start, end, start line and end line.
    columns = (cols.start, cols.end, cols.start_line, cols.end_line)
    bounds = array("q", chain.from_iterable(zip(*(map(col.__getitem__, live) for col in columns))))
    per_chunk = list(chain.from_iterable(map(repeat, docs, counts)))
    ct.extend(per_chunk, map(cols.ordinal.__getitem__, live), bounds, map(cols.section.__getitem__, live))
    add_stats(index, array("i", map(cols.length.__getitem__, live)))
    tails.add(snap.postings, renumber, seg.record.file)


def drop_postings(
    index: InvertedIndex, analyze: Callable[[str], Iterable[str]], ct: ChunkTable, doc: Doc, cid: int, length: int
) -> None:
    """Take chunk ``cid`` of ``doc`` (``length`` terms) out of the posting lists of the terms its text gives."""
    terms = list(analyze(doc.text[ct.start[cid] : ct.end[cid]]))
    section = ct.section[cid]
    if section:
        terms.extend(analyze(section))
    if index.remove(cid, terms) != length:
        # The analyser no longer reproduces what was indexed (a custom,
        # non-deterministic one): purge the id from every posting list.
        log.warning("analyser output changed for %s chunk %d; purging by full scan", doc.source, ct.index[cid])
        index.purge(cid)


def whole_snapshot(
    settings: Mapping[str, Any], ct: ChunkTable, docs: Mapping[str, Doc], index: InvertedIndex,
    postings: Callable[[list[int] | None], _codec.Postings],
) -> _codec.Snapshot:  # fmt: skip
    """The whole index as a save writes it: live chunks renumbered densely, sources in chunk
    order; ``postings(renumber)`` gives the lists (``index`` already refreshed)."""
    # C-level passes over the chunks' sources (a loaded chunk's is found, not stored).
    by_chunk = list(ct.doc)
    n = len(by_chunk)
    whole = None not in by_chunk
    live: Sequence[int] = range(n) if whole else list(compress(range(n), map(is_not, by_chunk, repeat(None))))
    names = list(map(attrgetter("source"), by_chunk if whole else map(by_chunk.__getitem__, live)))
    doc_order = dict(zip(dict.fromkeys(names), count()))
    c_doc = array("i", map(doc_order.__getitem__, names))
    if len(doc_order) < len(docs):  # sources without chunks (empty texts) still round-trip
        for name in docs:
            doc_order.setdefault(name, len(doc_order))
    ordered = list(map(docs.__getitem__, doc_order))
    sources = _codec.SourceColumns(
        list(doc_order),
        list(map(attrgetter("stored"), ordered)),
        array("q", map(attrgetter("chars"), ordered)),
        list(map(attrgetter("metadata"), ordered)),
        list(map(attrgetter("fingerprint"), ordered)),
    )
    # Chunk ids close up over removed chunks when saved; without removals
    # they stay as they are, the columns and lists are copied whole.
    renumber: list[int] | None = None
    if not whole:
        renumber = [-1] * n
        for new_cid, cid in enumerate(live):
            renumber[cid] = new_cid

    def column(typecode: str, values: Any) -> array[int]:
        return array(typecode, values[:n] if whole else map(values.__getitem__, live))

    chunks = _codec.ChunkColumns(
        c_doc,
        column("i", ct.index),
        column("q", ct.start),
        column("q", ct.end),
        column("i", ct.start_line),
        column("i", ct.end_line),
        column("i", index.dl),
        list(ct.section[:n] if whole else map(ct.section.__getitem__, live)),
    )
    return _codec.Snapshot(
        settings["analyzer"], settings["bm25"], settings["chunking"], sources, chunks, postings(renumber),
        index.total_len, settings["created_by"],
    )  # fmt: skip

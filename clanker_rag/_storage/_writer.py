"""Writing an index: whole (one scored segment), a segment of what changed, a commit point.

The on-disk layout is :mod:`._codec`'s (this module writes what it reads) and
the segments and commit points are :mod:`._segments`'; this module turns
typed values into them, and merges adjacent segments on disk
(:func:`merge_segments`) without the knowledge base that wrote them.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate, compress, repeat
from pathlib import Path
from typing import Any

from . import _segments, _store
from ._codec import (
    ChunkColumns,
    Postings,
    Segment,
    Snapshot,
    SourceColumns,
    SourceNames,
    SourceStore,
    first_chunks,
    section_runs,
)
from ._impact_tables import PackedParts, pack_tables
from ._offset_column import int_part, offset_part
from ._order_column import order_parts
from ._segments import SegmentRecord
from ._texts_child import Texts, start_texts
from ._tf_column import tf_part

__all__ = ["FORK_TEXTS", "Texts", "commit", "merge_segments", "settings_of", "start_texts", "write", "write_segment"]


def settings_of(snap: Snapshot) -> dict[str, Any]:
    """What a commit point records of an index besides its segments."""
    return {"created_by": snap.created_by, "analyzer": snap.analyzer, "bm25": snap.bm25, "chunking": snap.chunking}


def write(
    folder: str | Path, snap: Snapshot, *, fork: bool = False, texts: Texts | None = None
) -> tuple[str, SegmentRecord]:
    """Atomically write ``snap`` as the folder's whole index: one scored segment and
    a commit point naming it; returns the new revision and the segment's record.
    ``fork``: a core is idle for a child compressing the texts (see ``_texts_child``);
    ``texts``: the snapshot's texts already being compressed (:func:`start_texts`
    called before the snapshot was made), used only when they are exactly its texts."""
    folder = Path(folder)
    record = write_segment(folder, snap, scored=True, fork=fork, texts=texts)
    return commit(folder, settings_of(snap), [record]), record


def commit(folder: Path, settings: dict[str, Any], records: Sequence[SegmentRecord]) -> str:
    """Write the commit point naming ``records``; returns the new revision.  Data files it
    does not name are deleted once it is in place (see ``_segments``: readers keep theirs)."""
    body = {**settings, "stats": {"chunks": sum(r.live_chunks for r in records), "segments": len(records)}}
    return _segments.write_commit(folder, body, records)


def write_segment(
    folder: Path, snap: Snapshot, *, scored: bool, fork: bool = False, texts: Texts | None = None
) -> SegmentRecord:
    """Write ``snap`` as one immutable segment file.  A *scored* segment also holds
    impacts, impact orders and lookup tables (the first segment of a commit); the
    others hold term frequencies only: their impacts are computed at load.
    ``texts``: as :func:`write` takes them."""
    blob = _store.Blob()
    stored = snap.sources.texts
    pending: Texts
    if texts is not None and not isinstance(stored, SourceStore) and texts.holds(stored):
        pending = texts  # started earlier, on exactly these texts: the same bytes
    else:
        if texts is not None:
            texts.abandon()
        # The texts compress (in a child, when one may fork) while the rest is laid out.  Only texts
        # held in memory: a loaded segment's would be read (and inflated) all at once first.
        pending = (
            start_texts(map(stored.raw, range(len(stored))), fork=False)
            if isinstance(stored, SourceStore)
            else start_texts(stored, fork=fork and len(stored) >= FORK_TEXTS)
        )
    try:
        return _write_segment(folder, snap, scored, blob, pending)
    finally:
        pending.abandon()
        blob.release()


# Fewer texts are compressed in this process: a fork costs more than it saves.
FORK_TEXTS = 20_000


def _write_segment(folder: Path, snap: Snapshot, scored: bool, blob: _store.Blob, pending: Texts) -> SegmentRecord:
    src = snap.sources
    fps = src.fingerprints
    fp_items = map(fps.fingerprint, range(len(fps))) if isinstance(fps, SourceStore) else fps
    names = list(src.names)
    name_ref, name_offsets = blob.run(names)
    fp_ref, fp_offsets = blob.run(fp_items)
    firsts = first_chunks(snap.chunks.source, len(names))
    # Offsets, lengths and bounds as uint32 when they fit (their types in the body's "types").
    types: dict[str, str] = {}

    def narrow(name: str, values: Any) -> list[int]:
        ref, types[name] = int_part(blob, values)
        return ref

    sources = {
        "count": len(names),
        "names": name_ref,
        "name_offsets": narrow("sources.name_offsets", name_offsets),
        # Source numbers in name order: a commit finds a removed source's number by binary search.
        "sorted": blob.array(array("i", sorted(range(len(names)), key=names.__getitem__)), "i"),
        "texts": None,  # (added last, below)
        "text_offsets": None,
        "text_blocks": None,
        "chars": narrow("sources.chars", src.chars),
        "fingerprints": fp_ref,
        "fingerprint_offsets": narrow("sources.fingerprint_offsets", fp_offsets),
        "first_chunks": None if firsts is None else narrow("sources.first_chunks", firsts),
        # Sparse: most sources of a big index have none.
        "metadata": {str(i): meta for i, meta in enumerate(src.metadata) if meta},
    }
    cols = snap.chunks
    post = snap.postings
    n_terms = len(post.terms)
    terms = list(post.terms)
    encoded = [t.encode("utf-8", "surrogatepass") for t in terms]
    term_offsets = array("q", accumulate(map(len, encoded), initial=0))
    sorted_ids = array("i", sorted(range(n_terms), key=terms.__getitem__))
    body: dict[str, Any] = {
        "created_by": snap.created_by,
        "analyzer": snap.analyzer,
        "bm25": snap.bm25,
        "chunking": snap.chunking,
        "stats": {"chunks": len(cols.source), "total_length": snap.total_length, "terms": n_terms},
        "sources": sources,
        "chunks": {
            "source": blob.array(cols.source, "i"),
            "index": blob.array(cols.ordinal, "i"),
            "start": narrow("chunks.start", cols.start),
            "end": narrow("chunks.end", cols.end),
            "start_line": blob.array(cols.start_line, "i"),
            "end_line": blob.array(cols.end_line, "i"),
            "length": blob.array(cols.length, "i"),
            "section": section_runs(cols.section),
        },
        "dictionary": {
            "text": blob.add(b"".join(encoded)),
            **_offsets(blob, term_offsets),
            "sorted": blob.array(sorted_ids, "i"),
        },
        "postings": {**_offsets(blob, post.offsets), "chunks": blob.array(post.chunks, "i"), **tf_part(blob, post.tfs)},
    }
    if scored:
        assert post.maxes is not None and post.order_offsets is not None and post.positions is not None
        body["postings"]["impacts"] = blob.array(post.impacts, "f")
        body["postings"]["maxes"] = blob.array(post.maxes, "f")
        body["orders"] = order_parts(blob, post.positions, post.order_offsets)
        body["tables"] = _write_tables(blob, pack_tables(post.offsets, post.chunks, post.impacts, len(cols.source)))
    text_ref, text_offsets, packed = pending.add_to(blob)
    sources.update(texts=text_ref, text_offsets=narrow("sources.text_offsets", text_offsets), text_blocks=packed)
    body["types"] = types
    return _segments.write_segment(folder, body, blob)


def _offsets(blob: _store.Blob, offsets: Any) -> dict[str, Any]:
    ref, code = offset_part(blob, offsets)
    return {"offsets": ref, "offsets_type": code}


def _bytes_of(arrays: Iterable[array[Any]]) -> Iterator[memoryview]:
    return (memoryview(a).cast("B") for a in arrays)


def _write_tables(blob: _store.Blob, parts: PackedParts) -> dict[str, Any]:
    # A slot table's impacts are its list's (postings.impacts), not saved again; each slot
    # table is compressed on its own, found by its span.
    slots, spans = blob.run(parts.slots)
    return {
        "dense_terms": blob.array(parts.dense_terms, "i"),
        "dense": blob.run(_bytes_of(parts.dense))[0],
        "slot_terms": blob.array(parts.slot_terms, "i"),
        "slots": slots,
        "slot_spans": blob.array(spans, "q"),
    }


def merge_segments(segments: Sequence[Segment]) -> Snapshot:
    """The live sources and chunks of adjacent ``segments`` as one unscored snapshot
    (chunk order kept, deleted sources and their postings left out)."""
    first = segments[0].snap
    names: list[str] = []
    texts: list[bytes | memoryview | str] = []
    chars: array[int] = array("q")
    metadata: list[dict[str, Any] | None] = []
    fps: list[str] = []
    cols: list[Any] = [array("i"), array("i"), array("q"), array("q"), array("i"), array("i"), array("i"), []]
    lists: dict[str, tuple[array[int], array[int]]] = {}
    base = 0
    for seg in segments:
        snap = seg.snap
        if snap.blocks is not None:  # a big segment read whole: check it whole
            snap.blocks.check_all()
        src = snap.sources
        n_src, n_chunks = len(src.chars), len(snap.chunks.source)
        firsts = src.first_chunks if src.first_chunks is not None else first_chunks(snap.chunks.source, n_src)
        assert firsts is not None  # saves lay chunks out source by source
        deleted = set(seg.record.deleted)
        mask = bytearray(b"\1") * n_chunks
        src_map = array("i", repeat(-1, n_src))
        for s in range(n_src):
            if s in deleted:
                mask[firsts[s] : firsts[s + 1]] = bytes(firsts[s + 1] - firsts[s])
                continue
            src_map[s] = len(names)
            names.append(_name(src.names, s))
            texts.append(src.texts.raw(s) if isinstance(src.texts, SourceStore) else src.texts[s])
            chars.append(src.chars[s])
            metadata.append(src.metadata[s])
            fps.append(
                src.fingerprints.fingerprint(s) if isinstance(src.fingerprints, SourceStore) else src.fingerprints[s]
            )
        renumber = array("i", repeat(-1, n_chunks))
        live = list(compress(range(n_chunks), mask))
        for new, old in enumerate(live, base):
            renumber[old] = new
        cc = snap.chunks
        cols[0].extend(map(src_map.__getitem__, compress(cc.source, mask)))
        for i, column in enumerate(cc[1:7], 1):
            cols[i].extend(compress(column, mask))
        cols[7].extend(compress(cc.section, mask))
        post = snap.postings
        offsets, chunks, tfs = post.offsets, post.chunks, post.tfs
        for tid, term in enumerate(post.terms):
            a, b = offsets[tid], offsets[tid + 1]
            docs = chunks[a:b]
            keep = list(map(mask.__getitem__, docs))
            kept = list(compress(docs, keep))
            if not kept:
                continue
            entry = lists.get(term)
            if entry is None:
                entry = lists[term] = (array("i"), array("I"))
            entry[0].extend(map(renumber.__getitem__, kept))
            entry[1].extend(compress(tfs[a:b], keep))
        base += len(live)
    terms = list(lists)
    lengths = [len(lists[t][0]) for t in terms]
    p_docs, p_tfs = array("i"), array("I")
    for t in terms:
        p_docs.extend(lists[t][0])
        p_tfs.extend(lists[t][1])
    postings = Postings(
        terms, array("q", accumulate(lengths, initial=0)), p_docs, p_tfs, array("f"), None, None, None, scored=False
    )
    return Snapshot(
        first.analyzer,
        first.bm25,
        first.chunking,
        SourceColumns(names, texts, chars, metadata, fps),
        ChunkColumns(*cols),
        postings,
        sum(cols[6]),
        first.created_by,
    )


def _name(names: Sequence[str] | SourceNames, i: int) -> str:
    return names[i]

"""A knowledge base's corpus and its index writer: adds, removals, loads and commits.

:class:`Corpus` is what a knowledge base reads: its analyser, chunker and
BM25, the inverted index, the chunk table and the sources by name.  The
:class:`IndexWriter` is the one thing that changes it: it adds and replaces
sources (one at a time, a file the ingest already read, or a batch counted
by worker processes), removes them, opens a saved index into it and writes
it back (a whole save, or a commit of what changed; see ``_commits``).  It
also knows when a change was stopped midway (``torn``), after which it
refuses to save.

A committed chunk that is removed leaves the statistics and the chunk table
at once; its postings stay in the lists until each list is next read (the
index's ``held`` chunks, see ``_held``, the one record of removed chunks),
or until a whole save drops them all (it repacks every list, and leaves them
out in that pass) or a writer's backlog does (:meth:`IndexWriter.settle`,
which finds them by the terms of their text).
"""

from __future__ import annotations

import json
import logging
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain, repeat
from pathlib import Path
from typing import Any

from .._exceptions import ConfigError, IndexFormatError, IndexLockedError
from .._storage import _codec, _segments, _store, _writer
from .._storage._lock import IndexLock
from .._text._analysis import Analyzer
from .._text._chunking import Chunker
from .._types import Sections, StrPath
from .._validate import check_metadata, check_sections
from ._bulk_impacts import spare_core
from ._commits import Commits, drop_postings, replay, whole_snapshot
from ._counting import CountedChunk, CountedTexts, TermIds, span_counts
from ._index import InvertedIndex
from ._prepared import Counted, TextItem
from ._replay import TailLists
from ._scoring import BM25
from ._sources import ChunkDocs, ChunkTable, Doc, LoadedSources, SourceMap, source_fingerprint
from ._vocab import LazyPending

__all__ = ["Corpus", "IndexWriter"]

log = logging.getLogger(__name__)

# Removed chunks whose postings may wait for the next read (see drop); beyond, they are dropped at once.
_WAITING_MAX = 50_000
_PURGED = "analyser output changed for %s chunk %d; purging by full scan"


@dataclass(slots=True)
class Corpus:
    """What a knowledge base reads: its settings, index, chunks and sources (the writer changes them)."""

    analyzer: Analyzer
    chunker: Chunker
    bm25: BM25
    index: InvertedIndex
    term_ids: TermIds
    sources: SourceMap = field(default_factory=SourceMap)
    chunks: ChunkTable = field(default_factory=ChunkTable)

    def settings(self) -> dict[str, Any]:
        """What a commit point records of the corpus besides its segments."""
        from .. import __version__

        return {
            "created_by": f"clanker_rag {__version__}",
            "analyzer": self.analyzer.settings(),
            "bm25": self.bm25.settings(),
            "chunking": self.chunker.settings(),
        }


class IndexWriter:
    """Changes a :class:`Corpus` and writes it to its folder (see the module docstring).

    ``own_adds``, a method of the knowledge base, says whether its ``add_text``
    is its own (see :meth:`takes_prepared`).
    """

    def __init__(self, corpus: Corpus, own_adds: Callable[[], bool]) -> None:
        self.corpus = corpus
        # (Weak: the knowledge base holds its writer, and a cycle would keep its mapped files open.)
        self._own_adds = weakref.WeakMethod(own_adds)
        self.path: Path | None = None
        self.revision: str | None = None
        self.lock: IndexLock | None = None
        # Sources added, replaced or removed so far, and that count at the last
        # save or load: edit() skips a save that would rewrite the same index.
        self.changes = 0
        self.saved_changes: int | None = None
        # Set when an add, a removal or a save's packing was stopped midway
        # (Ctrl-C, an error): a source may be indexed in part under its whole
        # text's fingerprint, so save() refuses rather than persist it.
        self.torn = False
        # The data files a load mapped (one a segment), held open.
        self.data_files: list[_store.DataFile] = []
        # The commit point loaded from or last saved as, and what changed since (no segments: none yet).
        self.commits = Commits([], 0)

    @property
    def analyzer(self) -> Analyzer:
        return self.corpus.analyzer

    @property
    def chunker(self) -> Chunker:
        return self.corpus.chunker

    def takes_prepared(self) -> bool:
        own = self._own_adds()
        return own is not None and own() is True

    def is_intact(self) -> bool:
        return not self.torn

    def data_rewritten(self) -> bool:
        """Whether a data file this index was loaded from was changed in place since."""
        return any(f.rewritten() for f in self.data_files)

    # -- adding and removing ---------------------------------------------------------
    def add_prepared(
        self,
        text: str,
        source: str,
        metadata: Mapping[str, Any] | None,
        sections: Sections | None,
        *,
        content: str | None = None,
        counted: Counted | None = None,
    ) -> int:
        """Index ``text`` under ``source``, replacing what the source held (``add_text``; see
        :class:`._prepared.PreparedWriter` for ``content`` and ``counted``)."""
        doc, checked = self._new_doc(text, source, metadata, sections, content)
        index, chunks = self.corpus.index, self.corpus.chunks
        cids = doc.own_cids
        assert isinstance(cids, list)
        try:
            if not self._replace(doc):
                return 0
            for i, (start, end, start_line, end_line, label, tids, tfs) in enumerate(
                self._count(text, checked) if counted is None else counted(index.vocab)
            ):
                cid = chunks.append(doc, i, start, end, start_line, end_line, label)
                index.add_runs(cid, tids, tfs)
                cids.append(cid)
        except BaseException:
            self.torn = True
            raise
        return len(cids)

    def add_counted(self, items: Sequence[TextItem], counted: CountedTexts) -> int | None:
        docs: list[Doc] = []
        for text, source, metadata in items:
            try:
                doc, _ = self._new_doc(text, source, metadata, None, None)
            except ConfigError:
                return None
            docs.append(doc)
        names = {doc.source for doc in docs}
        # (set.isdisjoint(dict) would walk the whole dict: ask the map, which asks the loaded commit.)
        if len(names) < len(docs) or any(map(self.corpus.sources.__contains__, names)):
            return None
        try:
            return self._add_all(docs, counted)
        except BaseException:
            self.torn = True
            raise

    def _add_all(self, docs: list[Doc], counted: CountedTexts) -> int:
        corpus = self.corpus
        tids = counted.term_ids(corpus.index.ids_of)
        per_text = counted.per_text
        first = corpus.chunks.extend(
            chain.from_iterable(map(repeat, docs, per_text)),
            chain.from_iterable(map(range, per_text)),
            counted.bounds,
            counted.labels,
        )
        edges = list(accumulate(per_text, initial=first))  # each text's first chunk id, and the end
        by_name = corpus.sources.all()
        for doc, start, end in zip(docs, edges, edges[1:]):
            by_name[doc.source] = doc
            self.commits.added(doc)
            cids = doc.own_cids
            assert isinstance(cids, list)
            cids.extend(range(start, end))
        self.changes += len(docs)
        corpus.index.add_chunks(first, counted.sizes, tids, counted.tfs)
        return edges[-1] - first

    def _count(self, text: str, sections: Sections | None) -> Iterator[CountedChunk]:
        corpus = self.corpus
        term_ids, analyzer, vocab = corpus.term_ids, corpus.analyzer, corpus.index.vocab
        for span in corpus.chunker.split(text, sections):
            counts = span_counts(span, term_ids, analyzer, vocab)
            yield CountedChunk(
                span.start, span.end, span.start_line, span.end_line, span.label, counts.keys(), counts.values()
            )

    def _replace(self, doc: Doc) -> bool:
        """Drop what ``doc``'s source held and take ``doc`` in its place (with no chunks yet);
        False, changing nothing, when the same text and metadata are indexed."""
        old = self.corpus.sources.get(doc.source)
        if old is not None:
            if old.fingerprint == doc.fingerprint:
                return False
            self.remove(doc.source)
        self.corpus.sources.put(doc)
        self.commits.added(doc)
        self.changes += 1
        return True

    @staticmethod
    def _new_doc(
        text: str, source: str, metadata: Mapping[str, Any] | None, sections: Sections | None, content: str | None
    ) -> tuple[Doc, list[tuple[int, int, str | None]] | None]:
        """The checks of an add (raising :class:`ConfigError`) and the document it makes; changes nothing."""
        if not isinstance(text, str):
            raise ConfigError(f"text must be str, not {type(text).__name__}")
        if not isinstance(source, str) or not source:
            raise ConfigError(f"source must be a non-empty str, not {source!r}")
        check_metadata(source, metadata)
        meta = dict(metadata) if metadata else {}
        if meta:
            try:
                json.dumps(meta, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"metadata of {source!r} must be JSON-serialisable: {exc}") from None
        checked = check_sections(sections, len(text), source) if sections is not None else None
        fingerprint = source_fingerprint(text, meta, checked, content)
        return Doc(source, text, meta, fingerprint, own_cids=[]), checked

    def remove(self, source: str) -> int:
        """Remove every chunk of ``source``; returns how many (0 if unknown)."""
        doc = self.corpus.sources.get(source, pop=True)
        if doc is None:
            return 0
        self.changes += 1
        self.commits.dropped(doc)
        return self.drop(doc)

    def drop(self, doc: Doc, *, loading: bool = False) -> int:
        """Take ``doc``'s chunks out of the statistics and the chunk table, and out of the postings
        now or, for committed chunks (all of them while ``loading``), when the index is next read."""
        corpus = self.corpus
        index, ct = corpus.index, corpus.chunks
        cids = doc.cids
        wait = loading or (bool(cids) and cids[-1] < self.commits.committed)  # (ascending)
        try:
            for cid in cids:
                if wait:
                    index.hold(cid, doc)
                else:
                    drop_postings(index, corpus.analyzer, ct, doc, cid, index.dl[cid])
                index.forget(cid)
                ct.doc[cid] = None
        except BaseException:
            self.torn = True
            raise
        if len(index.held) > _WAITING_MAX:  # a writer that never searches holds a bounded backlog
            self.settle()
        return len(cids)

    def settle(self) -> None:
        """Drop every waiting removal's postings now, found by the terms of its text (before
        a whole save, which reads every list, and for a writer's backlog)."""
        ct, an, index = self.corpus.chunks, self.corpus.analyzer, self.corpus.index
        if not index.held.cids:
            return
        docs = index.held.docs  # (kept here: the sweep empties the record)

        def terms_of(cid: int) -> list[str]:
            section = ct.section[cid]
            return [*an(docs[cid].text[ct.start[cid] : ct.end[cid]]), *(an(section) if section else ())]

        try:
            short = index.drop_held(terms_of)
        except BaseException:
            self.torn = True
            raise
        for cid in short:  # postings a changed analyser no longer finds: purged by a full scan
            log.warning(_PURGED, docs[cid].source, ct.index[cid])

    # -- opening -----------------------------------------------------------------------
    def open(self, opened: _codec.Opened, folder: Path, where: str) -> None:
        """Take the index ``opened`` from ``folder`` (this writer's corpus is new, configured by its settings)."""
        corpus = self.corpus
        first = opened.segments[0]
        self._adopt(first.snap, where)
        if first.record is not None and first.record.deleted:
            loaded = corpus.sources.loaded
            assert loaded is not None
            for number in first.record.deleted:
                self.drop(loaded.doc(number), loading=True)
                corpus.sources.hide(number)
        tails = TailLists(corpus.index)
        for seg in opened.segments[1:]:
            replay(seg, corpus.chunks, corpus.index, corpus.sources.put, tails)
        if len(tails):  # their lists stay in the data files until read
            corpus.index.pending = LazyPending(corpus.index.pending, tails)
        corpus.index.settled = corpus.index.gen
        self.path = folder if folder.is_dir() else folder.parent
        self.data_files = [f for f in (seg.snap.data_file for seg in opened.segments) if f is not None]
        self.revision = opened.revision
        self.saved_changes = self.changes
        if opened.version >= _segments.COMMIT_VERSION:
            self.commits.reset(opened.segments, len(corpus.chunks))
            corpus.index.touched.clear()

    def _adopt(self, snap: _codec.Snapshot, where: str) -> None:
        """The first segment's sources, chunks and postings, read in place (nothing made yet)."""
        corpus = self.corpus
        cols = snap.chunks
        src = snap.sources
        n_sources = len(src.chars)
        # Each source's chunks: a run of chunk ids, as saves lay them out (a list per source otherwise).
        bounds = snap.bounds
        assert bounds is not None  # (a loaded snapshot's)
        # Without saved runs, the chunks' source column is read whole here: its blocks checked first.
        c_src = cols.source if src.first_chunks is not None else bounds.columns("source")[0]
        firsts = src.first_chunks if src.first_chunks is not None else _codec.first_chunks(c_src, n_sources)
        lists: list[list[int]] | None = None
        if firsts is None:
            lists = [[] for _ in range(n_sources)]
            for cid, owner in enumerate(c_src):
                lists[owner].append(cid)
        # No source is made (nor its name decoded) until something needs it.
        loaded = LoadedSources(src, c_src, firsts, lists)
        commits = self.commits
        corpus.sources.adopt(loaded, lambda: commits.segments[0].names if commits.segments else None, where)
        ct = corpus.chunks
        ct.doc = ChunkDocs(loaded)
        # The chunk table is small beside the postings (about 30 bytes a
        # chunk) and grows with adds: it is copied when first read, the postings are not.
        names = ("ordinal", "start", "end", "start_line", "end_line")
        ct.adopt(lambda: bounds.columns(*names), len(c_src), bounds, bounds.row)
        ct.section = cols.section
        # (A lazily checked load leaves the lengths' sum against the saved statistics to
        # the index: checked when the total is first read, which a small commit never does.)
        corpus.index = InvertedIndex.from_packed(
            corpus.bm25, snap.postings, cols.length, where=where, total=snap.total_length
        )
        corpus.term_ids = TermIds(corpus.analyzer, corpus.index.vocab)

    # -- saving ------------------------------------------------------------------------
    def would_replace(self, path: StrPath) -> bool:
        folder = Path(path)
        if self.path is not None and _store.same_folder(self.path, folder):
            return False
        return folder.is_dir() and _store.read_revision(folder) is not None

    def commit(self, path: StrPath, *, overwrite: bool, merge: bool = True) -> Path:
        return self.save(path, overwrite, "auto" if merge else "append")

    def snapshot(self, refreshed: Callable[[], object] = lambda: None) -> _codec.Snapshot:
        """What a save writes: live chunks numbered densely, sources in chunk order (``refreshed()`` once refreshed).

        The removed chunks still in the lists go as the refresh repacks them all (not by :meth:`settle`)."""
        corpus = self.corpus
        index = corpus.index
        try:
            index.refresh()
        except BaseException:
            self.torn = True
            raise
        refreshed()
        return whole_snapshot(self.corpus.settings(), corpus.chunks, corpus.sources.all(), index, index.saved_postings)

    def save(self, path: StrPath | None, overwrite: bool, mode: str) -> Path:
        """Write to folder ``path`` (default: where it came from): a commit of the changes into
        its own folder (``mode`` "auto" merges as the policy asks, "append" never), else (or
        "full") the whole index as one segment.  See ``KnowledgeBase.save`` for the refusals."""
        if path is None:
            if self.path is None:
                raise ConfigError("save() needs a path: this knowledge base was never loaded or saved")
            folder = self.path
        else:
            if isinstance(path, str) and not path.strip():
                raise ConfigError(f"save() path={path!r} is empty: give the index folder to write")
            folder = Path(path)
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"{folder}: an index path must be a folder")
        # The same folder under another spelling (absolute, "x/../i", a
        # symlink) must count as the same, or the checks below are bypassed.
        ours = self.path is not None and _store.same_folder(self.path, folder)
        own_lock = ours and self.lock is not None and self.lock.held
        if self.torn:
            raise IndexFormatError(
                f"not saving to {folder}: a change to this knowledge base was stopped midway (an interrupt or an "
                "error), so a source may be indexed only in part; load the saved index again and redo the change"
            )
        lock = self.lock if own_lock else IndexLock(folder)
        assert lock is not None
        with _store.writing(folder):
            self._save_locked(folder, lock, ours, own_lock, overwrite, mode)
        return folder

    def _save_locked(
        self, folder: Path, lock: IndexLock, ours: bool, own_lock: bool, overwrite: bool, mode: str
    ) -> None:
        lock.acquire()
        try:
            on_disk = _store.read_revision(folder)
            if on_disk is not None and ours and on_disk != self.revision:
                raise IndexLockedError(
                    f"{folder}: another process saved this index after it was loaded here; "
                    "saving now would drop its changes (reload and redo, or use KnowledgeBase.edit())"
                )
            if on_disk is not None and not ours and not overwrite:
                raise ConfigError(
                    f"{folder}: already holds an index that this knowledge base was not loaded from; "
                    "saving would replace its documents (load it and add to it, or pass overwrite=True)"
                )
            corpus = self.corpus
            if ours and on_disk is not None and self.commits.segments and mode != "full":
                self.revision = self.commits.commit(
                    folder, self.corpus.settings(), corpus.chunks, corpus.index, merge=mode == "auto",
                    whole=lambda: self._write_whole(folder),
                )  # fmt: skip
            else:
                self.revision = self._write_whole(folder)
            self.path = folder
            self.saved_changes = self.changes
        finally:
            if not own_lock:
                lock.release()

    def _write_whole(self, folder: Path) -> str:
        """Write everything as one scored segment (a full save, or a merge of every segment)."""
        early: list[_writer.Texts] = []  # a new index's texts, compressed by a child while the snapshot is made
        sources = self.corpus.sources

        def compress_texts() -> None:  # in the order a whole save writes them (checked): sources without chunks last
            if sources.loaded is None and len(docs := sources.all()) >= _writer.FORK_TEXTS and spare_core():
                texts = [doc.stored for doc in sorted(docs.values(), key=lambda doc: not doc.cids)]  # (stable)
                early.append(_writer.start_texts(texts, fork=True))

        try:  # (a core was idle for the early child: the writer may fork again if it drops it)
            snap = self.snapshot(compress_texts)
            fork = bool(early) or (len(snap.sources.names) >= _writer.FORK_TEXTS and spare_core())
            revision, record = _writer.write(folder, snap, fork=fork, texts=early[0] if early else None)
        finally:
            list(map(_writer.Texts.abandon, early))
        self.commits.reset([_codec.open_segment(folder, record, str(folder))], len(self.corpus.chunks))
        self.corpus.index.touched.clear()
        return revision

    def unsaved(self, folder: Path) -> bool:
        """Whether ``edit()`` of ``folder`` must save: something changed since the load or last save there."""
        return self.saved_changes != self.changes or self.path != folder

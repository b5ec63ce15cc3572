"""``KnowledgeBase``: chunked documents, a BM25 index over them, persistence."""

from __future__ import annotations

import heapq
import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import accumulate, chain, repeat
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._engine import _collection
from ._engine._bulk_impacts import spare_core
from ._engine._collection import CollectionStats
from ._engine._commits import Commits, Removal, drop_postings, replay, whole_snapshot
from ._engine._counting import CountedChunk, CountedTexts, TermIds, span_counts
from ._engine._index import InvertedIndex
from ._engine._scoring import BM25, Explanation
from ._engine._sources import ChunkDocs, ChunkTable, Doc, LoadedSources, source_fingerprint
from ._exceptions import ConfigError, IndexFormatError, IndexLockedError
from ._gc_pause import collector_paused
from ._storage import _codec, _segments, _store, _writer
from ._storage._lock import IndexLock
from ._text._analysis import Analyzer
from ._text._chunking import Chunker
from ._types import Hit, metadata_matches, source_matches
from ._validate import check_metadata, check_sections, int_k, text_items

if TYPE_CHECKING:
    from ._ingest._run import IngestReport

__all__ = ["Explanation", "KnowledgeBase", "default_index_path"]

log = logging.getLogger(__name__)

# Removed chunks whose postings may wait for the next read (see _drop); beyond, they are dropped at once.
_WAITING_MAX = 50_000
_PURGED = "analyser output changed for %s chunk %d; purging by full scan"


_FEEDBACK_DOCS = 10
_FEEDBACK_TERMS = 10
_FEEDBACK_ORIGINAL_WEIGHT = 0.5


def default_index_path() -> Path:
    """Where the shipped index lives: inside the installed package, else the source tree."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "data" / "kb", here.parent / "data" / "kb"):
        if (candidate / _store.INDEX_FILE).is_file():
            return candidate
    return here.parent / "data" / "kb"


class KnowledgeBase:
    """Chunked texts indexed for BM25 search, with exact incremental updates.

    ``chunk_size`` and ``stride`` are in word tokens (``chunk_size=None``
    indexes each text whole).  ``analyzer`` is an :class:`Analyzer` or any
    callable ``str -> iterable of terms``; ``bm25`` a :class:`BM25`, or give
    ``variant``/``k1``/``b``/``delta`` directly.
    """

    def __init__(
        self,
        chunk_size: int | None = 180,
        stride: int | None = 90,
        *,
        analyzer: Analyzer | Callable[[str], Iterable[str]] | None = None,
        bm25: BM25 | None = None,
        variant: str | None = None,
        k1: float | None = None,
        b: float | None = None,
        delta: float | None = None,
        slack: int | None = None,
    ) -> None:
        if bm25 is None:
            bm25 = BM25(
                variant=variant or "lucene",
                k1=1.2 if k1 is None else k1,
                b=0.75 if b is None else b,
                delta=delta,
            )
        elif any(v is not None for v in (variant, k1, b, delta)):
            raise ConfigError("give either bm25=BM25(...) or variant/k1/b/delta, not both")
        if chunk_size is not None and stride is not None and isinstance(chunk_size, int) and stride > chunk_size:
            stride = chunk_size
        self.chunker = Chunker(chunk_size, stride, slack)
        if analyzer is None:
            analyzer = Analyzer()
        elif not isinstance(analyzer, Analyzer):
            if not callable(analyzer):
                raise ConfigError(f"analyzer={analyzer!r} is neither an Analyzer nor a callable")
            analyzer = Analyzer(custom=analyzer)
        self.analyzer: Analyzer = analyzer
        self.bm25 = bm25
        self._idx = InvertedIndex(bm25)  # read through _index, which drops the postings waiting first
        self._term_ids = TermIds(analyzer, self._idx.vocab)
        # Source name -> document; a load fills it on first use from
        # _loaded (a search without filters never needs it).
        self._doc_map: dict[str, Doc] | None = {}
        self._loaded: LoadedSources | None = None
        self._chunks = ChunkTable()
        self._path: Path | None = None
        self._revision: str | None = None
        self._lock: IndexLock | None = None
        # Sources added, replaced or removed so far, and that count at the last
        # save or load: edit() skips a save that would rewrite the same index.
        self._changes = 0
        self._saved_changes: int | None = None
        # Set when an add, a removal or a save's packing was stopped midway
        # (Ctrl-C, an error): a source may be indexed in part under its whole
        # text's fingerprint, so save() refuses rather than persist it.
        self._torn = False
        # The data files a load mapped (one a segment), held open.
        self._data_files: list[_store.DataFile] = []
        # The commit (format 4) this knowledge base was loaded from or last
        # saved as, and what changed since (no segments: none yet).
        self._commits = Commits([], 0)
        # A load's sources deleted from its first segment (by number) and those
        # of the later segments, until something needs every source by name.
        self._hidden: set[int] = set()
        self._extra_docs: dict[str, Doc] = {}
        # Committed chunks removed whose postings are still in the lists (see _engine/_commits.py).
        self._waiting: list[Removal] = []

    @property
    def _index(self) -> InvertedIndex:
        """The index as a read sees it: each list drops the removed chunks it still
        holds when read (see ``_engine/_held.py``), so a search pays for the lists it reads."""
        return self._idx

    def _settle(self) -> None:
        """Drop every waiting removal's postings now, found by the terms of its text (before
        a whole save, which reads every list, and for a writer's backlog)."""
        ct, an, docs = self._chunks, self.analyzer, {gone.cid: gone.doc for gone in self._waiting}

        def terms_of(cid: int) -> list[str]:
            section = ct.section[cid]
            return [*an(docs[cid].text[ct.start[cid] : ct.end[cid]]), *(an(section) if section else ())]

        try:
            short = self._idx.drop_held(terms_of) if docs else []
        except BaseException:
            self._torn = True
            raise
        for cid in short:  # postings a changed analyser no longer finds: purged by a full scan
            log.warning(_PURGED, docs[cid].source, ct.index[cid])
        self._waiting.clear()

    @property
    def _docs(self) -> dict[str, Doc]:
        docs = self._doc_map
        if docs is None:
            assert self._loaded is not None
            loaded = self._loaded.everything()
            if self._hidden:
                hidden = self._hidden
                loaded = [doc for i, doc in enumerate(loaded) if i not in hidden]
            docs = dict(zip(map(attrgetter("source"), loaded), loaded))
            n = len(docs) + len(self._extra_docs)
            docs.update(self._extra_docs)
            if len(docs) != len(loaded) + len(self._extra_docs) or len(docs) != n:
                raise IndexFormatError(f"{self._path}: the index names a source twice")
            self._extra_docs = {}
            self._doc_map = docs
        return docs

    def _doc_named(self, source: str, *, pop: bool = False) -> Doc | None:
        """The source's :class:`Doc` (taken out with ``pop``), found in a loaded commit's
        sorted names when it can be: an add or a remove then makes no other ``Doc``."""
        names = self._commits.segments[0].names if self._commits.segments else None
        if self._doc_map is not None or names is None or self._loaded is None:
            return self._docs.pop(source, None) if pop else self._docs.get(source)
        doc = self._extra_docs.pop(source, None) if pop else self._extra_docs.get(source)
        if doc is None:
            number = names.find(source)
            if number is None or number in self._hidden:
                return None
            doc = self._loaded.doc(number)
            if pop:
                self._hidden.add(number)
        return doc

    def _put_doc(self, doc: Doc) -> None:
        if self._doc_map is None:
            self._extra_docs[doc.source] = doc
        else:
            self._doc_map[doc.source] = doc

    # -- construction ----------------------------------------------------------
    @classmethod
    def default(cls) -> KnowledgeBase:
        """The pre-built knowledge base of clanker_rag's own user guide."""
        return cls.load(default_index_path())

    def __len__(self) -> int:
        return self._idx.n_docs

    def __repr__(self) -> str:
        return f"<KnowledgeBase {len(self._docs)} sources, {len(self)} chunks, {len(self._idx.terms)} terms>"

    @property
    def n_terms(self) -> int:
        self._index.fold_all()
        return sum(1 for d in self._index.docs if d)

    @property
    def generation(self) -> int:
        """A counter that changes whenever chunks are added or removed."""
        return self._idx.gen

    @property
    def segments(self) -> int:
        """How many segments the commit this was loaded from or last saved as holds (0: none)."""
        return len(self._commits.segments)

    @property
    def path(self) -> Path | None:
        """The folder this knowledge base was loaded from or last saved to."""
        return self._path

    # -- adding and removing -----------------------------------------------------
    def add_text(
        self,
        text: str,
        source: str,
        metadata: Mapping[str, Any] | None = None,
        *,
        sections: Sequence[tuple[int, int, str | None]] | None = None,
    ) -> int:
        """Index ``text`` under ``source``, replacing what that source held.

        Returns the number of chunks added, or 0 when the same text and
        metadata were already indexed under ``source`` (nothing changes then).
        ``sections`` are ``(start, end, label)`` spans chunked separately; a
        label (heading path, code symbol) is searchable and comes back as
        ``Hit.section`` while the chunk text stays the exact original slice.
        """
        return self._add(text, source, metadata, sections)

    def add_prepared(
        self,
        text: str,
        source: str,
        metadata: Mapping[str, Any] | None,
        sections: Sequence[tuple[int, int, str | None]] | None,
        *,
        content: str | None,
        counted: Callable[[Mapping[str, int]], Iterable[CountedChunk]] | None = None,
    ) -> int:
        """The ingest's way in (internal): :meth:`add_text` for a file already read.

        ``content`` is a hash of the bytes the text was read from, which
        ``metadata`` also records; the change check then uses it instead of
        hashing the text again.  ``counted(vocab)`` yields the chunks when
        the chunking and counting were done elsewhere (the parallel ingest's
        workers, see :mod:`._parallel`): exactly what :meth:`add_text`
        computes for the same text and sections, with term ids of ``vocab``
        (term -> id; looking up a new term creates its id).  Only used while
        :meth:`takes_prepared` says so.
        """
        return self._add(text, source, metadata, sections, content=content, counted=counted)

    def add_counted(
        self, items: Sequence[tuple[str, str, Mapping[str, Any] | None]], counted: CountedTexts
    ) -> int | None:
        """The bulk add's way in (internal): ``items`` as ``counted`` chunks and
        counts them, all at once; returns the chunks added.

        Only when every item is a new source (not indexed, not repeated) that
        :meth:`add_text` would take: otherwise None, with nothing changed, and
        the caller adds the items one by one (which replaces, skips or raises
        where :meth:`add_text` does).  The index is the one adding them one
        by one builds.  Only used while :meth:`takes_prepared` says so.
        """
        docs: list[Doc] = []
        for text, source, metadata in items:
            try:
                doc, _ = self._new_doc(text, source, metadata, None, None)
            except ConfigError:
                return None
            docs.append(doc)
        sources = {doc.source for doc in docs}
        # (set.isdisjoint(dict) would walk the whole dict: ask the dict, or the loaded commit, instead.)
        known = self.__contains__ if self._doc_map is None else self._doc_map.__contains__
        if len(sources) < len(docs) or any(map(known, sources)):
            return None
        try:
            return self._add_all(docs, counted)
        except BaseException:
            self._torn = True
            raise

    def _add_all(self, docs: list[Doc], counted: CountedTexts) -> int:
        tids = counted.term_ids(self._idx.ids_of)
        per_text = counted.per_text
        first = self._chunks.extend(
            chain.from_iterable(map(repeat, docs, per_text)),
            chain.from_iterable(map(range, per_text)),
            counted.bounds,
            counted.labels,
        )
        edges = list(accumulate(per_text, initial=first))  # each text's first chunk id, and the end
        for doc, start, end in zip(docs, edges, edges[1:]):
            self._docs[doc.source] = doc
            self._commits.added(doc)
            cids = doc.own_cids
            assert isinstance(cids, list)
            cids.extend(range(start, end))
        self._changes += len(docs)
        self._idx.add_chunks(first, counted.sizes, tids, counted.tfs)
        return edges[-1] - first

    def data_rewritten(self) -> bool:
        """Whether the data file this index was loaded from was changed in place
        since (internal): reading its mapped pages could then crash the
        process, so a server loads the folder again first (see ``_serve/_follow.py``)."""
        return any(f.rewritten() for f in self._data_files)

    def is_intact(self) -> bool:
        """Whether every change so far ran to its end (internal): False once an
        add, a removal or a save's packing was stopped midway, after which
        :meth:`save` refuses.  The ingest asks it before its last save."""
        return not self._torn

    def takes_prepared(self) -> bool:
        """Whether :meth:`add_prepared` indexes what :meth:`add_text` would (internal).

        Not when ``add_text`` is overridden or wrapped: the ingest then calls
        it for every file, as the override expects.
        """
        return getattr(self.add_text, "__func__", None) is KnowledgeBase.add_text

    def _add(
        self,
        text: str,
        source: str,
        metadata: Mapping[str, Any] | None,
        sections: Sequence[tuple[int, int, str | None]] | None,
        *,
        content: str | None = None,
        counted: Callable[[Mapping[str, int]], Iterable[CountedChunk]] | None = None,
    ) -> int:
        doc, checked = self._new_doc(text, source, metadata, sections, content)
        index = self._idx
        chunks = self._chunks
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
            self._torn = True
            raise
        return len(cids)

    def _count(self, text: str, sections: Sequence[tuple[int, int, str | None]] | None) -> Iterator[CountedChunk]:
        term_ids, analyzer, vocab = self._term_ids, self.analyzer, self._idx.vocab
        for span in self.chunker.split(text, sections):
            counts = span_counts(span, term_ids, analyzer, vocab)
            yield CountedChunk(
                span.start, span.end, span.start_line, span.end_line, span.label, counts.keys(), counts.values()
            )

    def _replace(self, doc: Doc) -> bool:
        """Drop what ``doc``'s source held and take ``doc`` in its place (with no
        chunks yet); False, changing nothing, when the same text and metadata
        are indexed."""
        source = doc.source
        old = self._doc_named(source)
        if old is not None:
            if old.fingerprint == doc.fingerprint:
                return False
            self.remove(source)
        self._put_doc(doc)
        self._commits.added(doc)
        self._changes += 1
        return True

    def _new_doc(
        self,
        text: str,
        source: str,
        metadata: Mapping[str, Any] | None,
        sections: Sequence[tuple[int, int, str | None]] | None,
        content: str | None,
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

    def add_texts(
        self, items: Iterable[tuple[str, str] | tuple[str, str, Mapping[str, Any] | None]], *, jobs: int | None = None
    ) -> int:
        """Bulk :meth:`add_text` of ``(text, source[, metadata])``; returns chunks.

        ``jobs``: worker processes, see ``_ingest._parallel_add``.
        """
        checked = text_items(items)
        from ._ingest._parallel_add import add_texts_parallel

        return add_texts_parallel(self, checked, jobs)

    def _chunk_terms(self, cid: int) -> list[str]:
        analyzer = self.analyzer
        terms = list(analyzer(self._chunks.text(cid)))
        section = self._chunks.section[cid]
        if section:
            terms.extend(analyzer(section))
        return terms

    def _source_of(self, cid: int) -> str:
        doc = self._chunks.doc[cid]
        assert doc is not None
        return doc.source

    def remove(self, source: str) -> int:
        """Remove every chunk of ``source``; returns how many (0 if unknown)."""
        doc = self._doc_named(source, pop=True)
        if doc is None:
            return 0
        self._changes += 1
        self._commits.dropped(doc)
        return self._drop(doc)

    def _drop(self, doc: Doc, *, loading: bool = False) -> int:
        """Take ``doc``'s chunks out of the statistics and the chunk table, and out of the postings
        now or, for committed chunks (all of them while ``loading``), when the index is next read."""
        index, ct = self._idx, self._chunks
        cids = doc.cids
        wait = loading or (bool(cids) and cids[-1] < self._commits.committed)  # (ascending)
        try:
            for cid in cids:
                if wait:
                    self._waiting.append(Removal(doc, cid, index.dl[cid]))
                    index.hold(cid)
                else:
                    drop_postings(index, self.analyzer, ct, doc, cid, index.dl[cid])
                index.forget(cid)
                ct.doc[cid] = None
        except BaseException:
            self._torn = True
            raise
        if len(self._waiting) > _WAITING_MAX:  # a writer that never searches holds a bounded backlog
            self._settle()
        return len(cids)

    def sources(self) -> list[str]:
        """Every indexed source, sorted."""
        return sorted(self._docs)

    # One source is found by name in the loaded commit (no other is made, nor its name decoded).
    def __contains__(self, source: object) -> bool:
        return isinstance(source, str) and self._doc_named(source) is not None

    def source_metadata(self, source: str) -> dict[str, Any] | None:
        doc = self._doc_named(source)
        return None if doc is None else dict(doc.metadata)

    def source_text(self, source: str) -> str | None:
        doc = self._doc_named(source)
        return None if doc is None else doc.text

    def chunks(self, source: str | None = None) -> Iterator[Hit]:
        """Every chunk (of one source, or all), in index order, as score-0 hits."""
        one = None if source is None else self._doc_named(source)
        docs = list(self._docs.values()) if source is None else ([] if one is None else [one])
        for doc in docs:
            for cid in doc.cids:
                yield self._hit(cid, 0.0)

    def ingest(self, path: str | os.PathLike[str], **options: Any) -> IngestReport:
        """Ingest a file or folder tree; see :func:`clanker_rag.ingest` for the options."""
        from ._ingest._run import ingest

        return ingest(self, path, **options)

    # -- searching -----------------------------------------------------------
    def _query_weights(self, query: str) -> dict[int, float]:
        if not isinstance(query, str):
            raise ConfigError(f"query must be str, not {type(query).__name__}")
        vocab_get = self._index.term_id
        weights: dict[int, float] = {}
        for term, count in Counter(self.analyzer(query)).items():
            tid = vocab_get(term)
            if tid is not None:
                weights[tid] = float(count)
        return weights

    def _allowed(self, source: str | None, where: Mapping[str, Any] | None) -> set[int] | None:
        if source is None and not where:
            return None
        allowed: set[int] = set()
        for name, doc in self._docs.items():
            if source_matches(name, source) and metadata_matches(doc.metadata, where):
                allowed.update(doc.cids)
        return allowed

    def _hit(self, cid: int, score: float) -> Hit:
        ct = self._chunks
        doc = ct.doc[cid]
        assert doc is not None
        start, end = ct.start[cid], ct.end[cid]
        return Hit(
            text=doc.span(start, end),
            source=doc.source,
            score=score,
            metadata=doc.metadata,
            chunk_index=ct.index[cid],
            start=start,
            end=end,
            start_line=ct.start_line[cid],
            end_line=ct.end_line[cid],
            section=ct.section[cid],
            chunk_id=cid,
        )

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        source: str | None = None,
        where: Mapping[str, Any] | None = None,
        feedback: bool = False,
    ) -> list[Hit]:
        """The ``k`` best chunks for ``query``, best first.

        ``source`` keeps sources matching a glob (``docs/*.md``) or, without
        wildcards, a prefix; ``where`` keeps sources whose metadata equals the
        given values (a list value means any of them).  ``feedback=True`` adds
        RM3-style pseudo-relevance feedback.  Never raises on an empty query,
        an empty index, unknown words or ``k`` beyond the corpus size.
        """
        int_k(k)
        weights = self._query_weights(query)
        if k <= 0 or not weights:
            return []
        allowed = self._allowed(source, where)
        if feedback:
            weights = self._expand(weights, allowed)
        return [self._hit(cid, score) for cid, score in self._index.top_k(weights, k, allowed)]

    def __call__(self, query: str, k: int = 10) -> list[Hit]:
        return self.search(query, k)

    def explain(self, query: str, hit: Hit, *, feedback: bool = False) -> Explanation:
        """Per-term breakdown of ``hit``'s score for ``query``; it adds up exactly."""
        weights = self._query_weights(query)
        if feedback and weights:
            weights = self._expand(weights, None)
        cid = hit.chunk_id
        if not self._chunks.live(cid):
            raise ConfigError(f"{hit.source} chunk {hit.chunk_index} is not in this knowledge base any more")
        score, parts = self._index.explain(weights, cid)
        return Explanation(score, parts, self._index.n_docs, self._index.avgdl, self._index.dl[cid])

    def collection_stats(self, terms: Iterable[str] | None = None) -> CollectionStats:
        """Chunk count, summed length and the document frequency of ``terms`` (None: every term) here."""
        return _collection.local_stats(self._index, terms)

    def search_with_stats(
        self, weights: Mapping[str, float], k: int, stats: CollectionStats, *, source: str | None = None,
        where: Mapping[str, Any] | None = None,
    ) -> list[Hit]:  # fmt: skip
        """:meth:`search` for ``weights`` (term -> weight) scored with a whole collection's ``stats``."""
        int_k(k)
        allowed = self._allowed(source, where)
        return [self._hit(cid, s) for cid, s in _collection.top_with_stats(self._index, weights, k, stats, allowed)]

    def explain_with_stats(self, weights: Mapping[str, float], hit: Hit, stats: CollectionStats) -> Explanation:
        """:meth:`explain` for :meth:`search_with_stats`."""
        cid = hit.chunk_id
        if not self._chunks.live(cid) or self._source_of(cid) != hit.source:
            raise ConfigError(f"{hit.source} chunk {hit.chunk_index} is not in this knowledge base any more")
        score, parts = _collection.explain_with_stats(self._index, weights, cid, stats)
        return Explanation(score, parts, stats.n_docs, stats.avgdl, self._index.dl[cid])

    def _expand(self, weights: dict[int, float], allowed: set[int] | None) -> dict[int, float]:
        """RM3 (Abdul-Jaleel et al., UMass at TREC 2004; Anserini's defaults).

        Feedback model over the top chunks: P(t|R) = sum_d P(d|q) tf(t,d)/|d|
        with P(d|q) the chunk's share of the summed scores; keep the best
        terms, normalise, and interpolate with the normalised query.
        """
        top = self._index.top_k(weights, _FEEDBACK_DOCS, allowed)
        if not top:
            return weights
        total = sum(score for _, score in top)
        model: dict[str, float] = {}
        for cid, score in top:
            terms = self._chunk_terms(cid)
            if not terms:
                continue
            share = score / total / len(terms)
            for term, tf in Counter(terms).items():
                if len(term) > 1 and not term.isdigit():
                    model[term] = model.get(term, 0.0) + tf * share
        best = heapq.nlargest(_FEEDBACK_TERMS, model.items(), key=lambda item: (item[1], item[0]))
        norm = sum(v for _, v in best) or 1.0
        qnorm = sum(weights.values())
        vocab = self._index.vocab
        out = {tid: _FEEDBACK_ORIGINAL_WEIGHT * w / qnorm for tid, w in weights.items()}
        for term, value in best:
            tid = vocab[term]
            out[tid] = out.get(tid, 0.0) + (1 - _FEEDBACK_ORIGINAL_WEIGHT) * value / norm
        return out

    # -- persistence ---------------------------------------------------------
    def _snapshot(self, refreshed: Callable[[], object] = lambda: None) -> _codec.Snapshot:
        """What a save writes: live chunks numbered densely, sources in chunk order (``refreshed()`` once refreshed)."""
        self._settle()
        index = self._index
        try:
            index.refresh()
        except BaseException:
            self._torn = True
            raise
        refreshed()
        settings = self._settings()
        return whole_snapshot(settings, self._chunks, self._docs, index, index.saved_postings)

    def _settings(self) -> dict[str, Any]:
        """What a commit point records of this knowledge base besides its segments."""
        return {
            "created_by": f"clanker_rag {_version()}",
            "analyzer": self.analyzer.settings(),
            "bm25": self.bm25.settings(),
            "chunking": self.chunker.settings(),
        }

    def save(self, path: str | os.PathLike[str] | None = None, *, overwrite: bool = False, merge: bool = True) -> Path:
        """Atomically write the index to folder ``path`` (default: where it came from).

        Into the folder it was loaded from or last saved to, a save is a
        commit: it writes the sources added since as one new segment and the
        removed ones as deletion marks, then a new commit point
        (docs/index-format.md); with ``merge`` (the default) it also runs the
        merges the policy asks for (see ``_storage/_segments.py``).  Elsewhere
        it writes the whole index as one segment.

        Refuses (``IndexLockedError``) to overwrite an index that another
        process saved since this one was loaded, rather than drop its
        documents; use :meth:`edit` to serialise writers.  Refuses
        (``ConfigError``) to replace an index this knowledge base was not
        loaded from or saved to, unless ``overwrite=True``.
        """
        return self._save(path, overwrite, "auto" if merge else "append")

    def optimize(self, path: str | os.PathLike[str] | None = None) -> Path:
        """:meth:`save` with every segment merged into one (deleted chunks reclaimed)."""
        return self._save(path, False, "full")

    def _save(self, path: str | os.PathLike[str] | None, overwrite: bool, mode: str) -> Path:
        if path is None:
            if self._path is None:
                raise ConfigError("save() needs a path: this knowledge base was never loaded or saved")
            folder = self._path
        else:
            if isinstance(path, str) and not path.strip():
                raise ConfigError(f"save() path={path!r} is empty: give the index folder to write")
            folder = Path(path)
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"{folder}: an index path must be a folder")
        # The same folder under another spelling (absolute, "x/../i", a
        # symlink) must count as the same, or the checks below are bypassed.
        ours = self._path is not None and _store.same_folder(self._path, folder)
        own_lock = ours and self._lock is not None and self._lock.held
        if self._torn:
            raise IndexFormatError(
                f"not saving to {folder}: a change to this knowledge base was stopped midway (an interrupt or an "
                "error), so a source may be indexed only in part; load the saved index again and redo the change"
            )
        lock = self._lock if own_lock else IndexLock(folder)
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
            if on_disk is not None and ours and on_disk != self._revision:
                raise IndexLockedError(
                    f"{folder}: another process saved this index after it was loaded here; "
                    "saving now would drop its changes (reload and redo, or use KnowledgeBase.edit())"
                )
            if on_disk is not None and not ours and not overwrite:
                raise ConfigError(
                    f"{folder}: already holds an index that this knowledge base was not loaded from; "
                    "saving would replace its documents (load it and add to it, or pass overwrite=True)"
                )
            if ours and on_disk is not None and self._commits.segments and mode != "full":
                self._revision = self._commits.commit(
                    folder, self._settings(), self._chunks, self._idx, merge=mode == "auto",
                    whole=lambda: self._write_whole(folder),
                )  # fmt: skip
            else:
                self._revision = self._write_whole(folder)
            self._path = folder
            self._saved_changes = self._changes
        finally:
            if not own_lock:
                lock.release()

    def _write_whole(self, folder: Path) -> str:
        """Write everything as one scored segment (a full save, or a merge of every segment)."""
        early: list[_writer.Texts] = []  # a new index's texts, compressed by a child while the snapshot is made

        def compress_texts() -> None:  # in the order a whole save writes them (checked): sources without chunks last
            if self._loaded is None and len(docs := self._docs) >= _writer.FORK_TEXTS and spare_core():  # (own texts)
                texts = [doc.stored for doc in sorted(docs.values(), key=lambda doc: not doc.cids)]  # (stable)
                early.append(_writer.start_texts(texts, fork=True))

        try:  # (a core was idle for the early child: the writer may fork again if it drops it)
            snap = self._snapshot(compress_texts)
            fork = bool(early) or (len(snap.sources.names) >= _writer.FORK_TEXTS and spare_core())
            revision, record = _writer.write(folder, snap, fork=fork, texts=early[0] if early else None)
        finally:
            list(map(_writer.Texts.abandon, early))
        self._commits.reset([_codec.open_segment(folder, record, str(folder))], len(self._chunks))
        self._idx.touched.clear()
        return revision

    def would_replace(self, path: str | os.PathLike[str]) -> bool:
        """Whether folder ``path`` holds an index this knowledge base was not loaded from or saved to.

        :meth:`save` refuses such a folder unless ``overwrite=True``; the
        ingest asks this up front, before it reads a file.
        """
        folder = Path(path)
        if self._path is not None and _store.same_folder(self._path, folder):
            return False
        return folder.is_dir() and _store.read_revision(folder) is not None

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], *, analyzer: Callable[[str], Iterable[str]] | None = None
    ) -> KnowledgeBase:
        """Load an index folder written by :meth:`save`.

        An index built with a custom analyser needs the same callable passed
        as ``analyzer``.  Raises ``IndexFormatError`` naming the file and the
        problem for a missing, truncated, tampered or newer-format index.
        """
        folder = Path(path)
        where = str(folder / _store.INDEX_FILE if folder.is_dir() else folder)
        # Loading creates a few hundred thousand objects and no cycles.
        with collector_paused():
            opened = _codec.read(folder)
            first = opened.segments[0]
            kb = cls._from_snapshot(first.snap, where, analyzer)
            if first.record is not None and first.record.deleted:
                loaded = kb._loaded
                assert loaded is not None
                for number in first.record.deleted:
                    kb._drop(loaded.doc(number), loading=True)
                    kb._hidden.add(number)
            for seg in opened.segments[1:]:
                replay(seg, kb._chunks, kb._idx, kb._put_doc)
            kb._idx.settled = kb._idx.gen
        kb._path = folder if folder.is_dir() else folder.parent
        kb._data_files = [f for f in (seg.snap.data_file for seg in opened.segments) if f is not None]
        kb._revision = opened.revision
        kb._saved_changes = kb._changes
        if opened.version >= _segments.COMMIT_VERSION:
            kb._commits.reset(opened.segments, len(kb._chunks))
            kb._idx.touched.clear()
        return kb

    def verify(self) -> None:
        """Hash the whole saved data file against its manifest (a big index is
        not hashed at load; see docs/index-format.md).  Raises IndexFormatError."""
        if self._path is None:
            raise ConfigError("verify() needs a saved index: this knowledge base was never loaded or saved")
        _store.verify_data(self._path)

    @classmethod
    def _from_snapshot(
        cls, snap: _codec.Snapshot, where: str, analyzer: Callable[[str], Iterable[str]] | None
    ) -> KnowledgeBase:
        settings = snap.analyzer
        # The manifest's digest vouches for its bytes, not for what a tool
        # that re-signed it put there: any settings that cannot be used are
        # one IndexFormatError (a ConfigError is a ValueError too).
        try:
            if not isinstance(settings, dict) or not isinstance(snap.chunking, dict):
                raise TypeError("the analyser and chunking settings must be objects")
            if settings.get("type") == "custom":
                if analyzer is None:
                    raise IndexFormatError(
                        f"{where}: built with the custom analyser {settings.get('name')!r}; "
                        "pass it as load(..., analyzer=...)"
                    )
                an: Analyzer = analyzer if isinstance(analyzer, Analyzer) else Analyzer(custom=analyzer)
            else:
                an = (
                    Analyzer.from_settings(settings)
                    if analyzer is None
                    else (analyzer if isinstance(analyzer, Analyzer) else Analyzer(custom=analyzer))
                )
            ch = snap.chunking
            kb = cls(
                ch["chunk_size"], ch["stride"], slack=ch.get("slack"), analyzer=an, bm25=BM25.from_settings(snap.bm25)
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise IndexFormatError(f"{where}: malformed index ({type(exc).__name__}: {exc})") from None
        cols = snap.chunks
        src = snap.sources
        n_sources = len(src.chars)
        # Each source's chunks: a run of chunk ids, as saves lay them out
        # (a list per source otherwise).
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
        kb._doc_map = None
        kb._loaded = LoadedSources(src, c_src, firsts, lists)
        ct = kb._chunks
        ct.doc = ChunkDocs(kb._loaded)
        # The chunk table is small beside the postings (about 30 bytes a
        # chunk) and grows with adds: it is copied when first read, the postings are not.
        ct.adopt(lambda: bounds.columns("ordinal", "start", "end", "start_line", "end_line"), len(c_src), bounds)
        ct.section = cols.section
        kb._idx = InvertedIndex.from_packed(kb.bm25, snap.postings, cols.length, where=where)
        if kb._idx.total_len != snap.total_length:  # (a lazily checked load leaves this to its reader)
            raise IndexFormatError(f"{where}: statistics do not match the chunk table")
        kb._term_ids = TermIds(an, kb._idx.vocab)
        return kb

    @classmethod
    @contextmanager
    def edit(cls, path: str | os.PathLike[str], *, timeout: float = 30.0, **create: Any) -> Iterator[KnowledgeBase]:
        """Load-modify-save under the index's writer lock.

        Creates the index (with ``create`` options) if the folder has none;
        saves when the block exits without an exception, unless the block
        changed nothing since the index was loaded or last saved there (an
        ingest with ``index_path=`` saves as it goes).  Writers in other
        processes wait for the lock, so none loses another's documents.
        """
        folder = Path(path)
        lock = IndexLock(folder, timeout=timeout)
        with _store.writing(folder):
            lock.acquire()
        try:
            if (folder / _store.INDEX_FILE).exists():
                kb = cls.load(folder)
            else:
                kb = cls(**create)
                kb._path = folder
            kb._lock = lock
            yield kb
            if kb._saved_changes != kb._changes or kb._path != folder:
                kb.save(folder)
        finally:
            lock.release()


def _version() -> str:
    from . import __version__

    return __version__

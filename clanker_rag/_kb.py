"""``KnowledgeBase``: chunked documents, a BM25 index over them, persistence.

The knowledge base reads (search, explain, sources, chunks, statistics) over
its :class:`~._engine._writing.Corpus`; its :class:`~._engine._writing.IndexWriter`
owns every change (add, remove, load, save).  The ingest and ``add_texts``
get the writer as a :class:`~._engine._prepared.PreparedWriter`; a sharded
index's shards score with the whole collection's statistics through
:func:`search_with_stats` and :func:`explain_with_stats`.
"""

from __future__ import annotations

import heapq
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ._engine import _collection
from ._engine._collection import CollectionStats
from ._engine._counting import TermIds
from ._engine._index import InvertedIndex
from ._engine._scoring import BM25, Explanation
from ._engine._sources import ChunkTable
from ._engine._writing import Corpus, IndexWriter
from ._exceptions import ConfigError, IndexFormatError
from ._gc_pause import collector_paused
from ._storage import _codec, _store
from ._storage._lock import IndexLock
from ._text._analysis import Analyzer
from ._text._chunking import Chunker
from ._types import Hit, Sections, StrPath, metadata_matches, source_matches
from ._validate import int_k, text_items

if TYPE_CHECKING:
    from ._ingest._report import IngestReport

__all__ = [
    "Explanation",
    "KnowledgeBase",
    "default_index_path",
    "edit_folder",
    "explain_with_stats",
    "search_with_stats",
]

log = logging.getLogger(__name__)

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
        index = InvertedIndex(bm25)
        self._corpus = Corpus(analyzer, self.chunker, bm25, index, TermIds(analyzer, index.vocab))
        self._writer = IndexWriter(self._corpus, self._takes_prepared)

    @property
    def _index(self) -> InvertedIndex:
        """The index as a read sees it: each list drops the removed chunks it still
        holds when read (see ``_engine/_held.py``), so a search pays for the lists it reads."""
        return self._corpus.index

    @property
    def _chunks(self) -> ChunkTable:
        return self._corpus.chunks

    # -- construction ----------------------------------------------------------
    @classmethod
    def default(cls) -> KnowledgeBase:
        """The pre-built knowledge base of clanker_rag's own user guide."""
        return cls.load(default_index_path())

    def __len__(self) -> int:
        return self._index.n_docs

    def __repr__(self) -> str:
        # (Terms read so far: a load's later segments' join as they are read.)
        n_sources, n_terms = len(self._corpus.sources.all()), len(self._index.terms)
        return f"<KnowledgeBase {n_sources} sources, {len(self)} chunks, {n_terms} terms>"

    @property
    def n_terms(self) -> int:
        return self._index.live_terms()

    @property
    def generation(self) -> int:
        """A counter that changes whenever chunks are added or removed."""
        return self._index.gen

    @property
    def segments(self) -> int:
        """How many segments the commit this was loaded from or last saved as holds (0: none)."""
        return len(self._writer.commits.segments)

    @property
    def path(self) -> Path | None:
        """The folder this knowledge base was loaded from or last saved to."""
        return self._writer.path

    # -- adding and removing -----------------------------------------------------
    def add_text(
        self, text: str, source: str, metadata: Mapping[str, Any] | None = None, *, sections: Sections | None = None
    ) -> int:
        """Index ``text`` under ``source``, replacing what that source held.

        Returns the number of chunks added, or 0 when the same text and
        metadata were already indexed under ``source`` (nothing changes then).
        ``sections`` are ``(start, end, label)`` spans chunked separately; a
        label (heading path, code symbol) is searchable and comes back as
        ``Hit.section`` while the chunk text stays the exact original slice.
        """
        return self._writer.add_prepared(text, source, metadata, sections)

    def _takes_prepared(self) -> bool:
        """Whether the writer's adds index what :meth:`add_text` would: not when ``add_text``
        is overridden or wrapped (the ingest then calls it for every file, as the override expects)."""
        return getattr(self.add_text, "__func__", None) is KnowledgeBase.add_text

    def add_texts(
        self, items: Iterable[tuple[str, str] | tuple[str, str, Mapping[str, Any] | None]], *, jobs: int | None = None
    ) -> int:
        """Bulk :meth:`add_text` of ``(text, source[, metadata])``; returns chunks.

        ``jobs``: worker processes, see ``_ingest._parallel_add``.
        """
        checked = text_items(items)
        from ._ingest._parallel_add import add_texts_parallel

        return add_texts_parallel(self, self._writer, checked, jobs)

    def remove(self, source: str) -> int:
        """Remove every chunk of ``source``; returns how many (0 if unknown)."""
        return self._writer.remove(source)

    def ingest(self, path: StrPath | Sequence[StrPath], **options: Any) -> IngestReport:
        """Ingest a file or folder tree; the options are :class:`IngestOptions`' fields
        (see docs/ingestion.md)."""
        from ._ingest._options import IngestOptions
        from ._ingest._run import ingest

        return ingest(self, path, IngestOptions(**options), writer=self._writer)

    # -- sources -------------------------------------------------------------------
    def sources(self) -> list[str]:
        """Every indexed source, sorted."""
        return sorted(self._corpus.sources.all())

    def source_count(self) -> int:
        """How many sources the index holds."""
        return len(self._corpus.sources.all())

    def iter_sources(self) -> Iterator[str]:
        """Every indexed source, sorted (the same names as :meth:`sources`)."""
        return iter(self.sources())

    # One source is found by name in the loaded commit (no other is made, nor its name decoded).
    def __contains__(self, source: object) -> bool:
        return isinstance(source, str) and self._corpus.sources.get(source) is not None

    def source_metadata(self, source: str) -> dict[str, Any] | None:
        doc = self._corpus.sources.get(source)
        return None if doc is None else dict(doc.metadata)

    def source_text(self, source: str) -> str | None:
        doc = self._corpus.sources.get(source)
        return None if doc is None else doc.text

    def chunks(self, source: str | None = None) -> Iterator[Hit]:
        """Every chunk (of one source, or all), in index order, as score-0 hits."""
        sources = self._corpus.sources
        one = None if source is None else sources.get(source)
        docs = list(sources.all().values()) if source is None else ([] if one is None else [one])
        for doc in docs:
            for cid in doc.cids:
                yield self._hit(cid, 0.0)

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
        for name, doc in self._corpus.sources.all().items():
            if source_matches(name, source) and metadata_matches(doc.metadata, where):
                allowed.update(doc.cids)
        return allowed

    def _hit(self, cid: int, score: float) -> Hit:
        ct = self._chunks
        doc = ct.doc[cid]
        assert doc is not None
        index, start, end, start_line, end_line = ct.row(cid)
        return Hit(
            text=doc.span(start, end),
            source=doc.source,
            score=score,
            metadata=doc.metadata,
            chunk_index=index,
            start=start,
            end=end,
            start_line=start_line,
            end_line=end_line,
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
        return self._hits(self._index.top_k(weights, k, allowed))

    def _hits(self, top: list[tuple[int, float]]) -> list[Hit]:
        """``top``'s hits, in its order."""
        # Made from the last chunk back: hits that share a compressed text block
        # then inflate it once, as far as the last of them needs (in score order
        # a later, further hit inflated the block again: 15 % more bytes).
        made = {cid: self._hit(cid, score) for cid, score in sorted(top, reverse=True)}
        return [made[cid] for cid, _ in top]

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

    def _search_with_stats(
        self, weights: Mapping[str, float], k: int, stats: CollectionStats, *, source: str | None = None,
        where: Mapping[str, Any] | None = None,
    ) -> list[Hit]:  # fmt: skip
        """:meth:`search` for ``weights`` (term -> weight) scored with a whole collection's ``stats``."""
        int_k(k)
        allowed = self._allowed(source, where)
        return self._hits(_collection.top_with_stats(self._index, weights, k, stats, allowed))

    def _explain_with_stats(self, weights: Mapping[str, float], hit: Hit, stats: CollectionStats) -> Explanation:
        """:meth:`explain` for :meth:`_search_with_stats`."""
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
    def save(self, path: StrPath | None = None, *, overwrite: bool = False, merge: bool = True) -> Path:
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
        return self._writer.save(path, overwrite, "auto" if merge else "append")

    def optimize(self, path: StrPath | None = None) -> Path:
        """:meth:`save` with every segment merged into one (deleted chunks reclaimed)."""
        return self._writer.save(path, False, "full")

    def data_rewritten(self) -> bool:
        """Whether the data file this index was loaded from was changed in place since:
        reading its mapped pages could then crash the process, so a server loads the
        folder again first (see ``_serve/_follow.py``)."""
        return self._writer.data_rewritten()

    @classmethod
    def load(
        cls, path: StrPath, *, analyzer: Callable[[str], Iterable[str]] | None = None, private: bool = False
    ) -> KnowledgeBase:
        """Load an index folder written by :meth:`save`.

        An index built with a custom analyser needs the same callable passed
        as ``analyzer``.  Raises ``IndexFormatError`` naming the file and the
        problem for a missing, truncated, tampered or newer-format index.
        ``private`` reads the data files into this process's memory instead of
        mapping them, so that a file rewritten in place under a long-running
        server cannot crash it (see docs/index-format.md).
        """
        folder = Path(path)
        where = str(folder / _store.INDEX_FILE if folder.is_dir() else folder)
        # Loading creates a few hundred thousand objects and no cycles.
        with collector_paused():
            opened = _codec.read(folder, private=private)
            kb = cls._configured(opened.segments[0].snap, where, analyzer)
            kb._writer.open(opened, folder, where)
        return kb

    def verify(self) -> None:
        """Hash the whole saved data file against its manifest (a big index is
        not hashed at load; see docs/index-format.md).  Raises IndexFormatError."""
        if self.path is None:
            raise ConfigError("verify() needs a saved index: this knowledge base was never loaded or saved")
        _store.verify_data(self.path)

    @classmethod
    def _configured(
        cls, snap: _codec.Snapshot, where: str, analyzer: Callable[[str], Iterable[str]] | None
    ) -> KnowledgeBase:
        """A new knowledge base with the settings ``snap`` records."""
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
            return cls(
                ch["chunk_size"], ch["stride"], slack=ch.get("slack"), analyzer=an, bm25=BM25.from_settings(snap.bm25)
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise IndexFormatError(f"{where}: malformed index ({type(exc).__name__}: {exc})") from None

    @classmethod
    @contextmanager
    def edit(cls, path: StrPath, *, timeout: float = 30.0, **create: Any) -> Iterator[KnowledgeBase]:
        """Load-modify-save under the index's writer lock.

        Creates the index (with ``create`` options) if the folder has none;
        saves when the block exits without an exception, unless the block
        changed nothing since the index was loaded or last saved there (an
        ingest with ``index_path=`` saves as it goes).  Writers in other
        processes wait for the lock, so none loses another's documents.
        """
        folder = Path(path)

        def opened(lock: IndexLock) -> KnowledgeBase:
            kb = cls.load(folder) if (folder / _store.INDEX_FILE).exists() else cls(**create)
            kb._writer.path, kb._writer.lock = folder, lock
            return kb

        def unsaved(kb: KnowledgeBase) -> bool:
            return kb._writer.unsaved(folder)

        def writing() -> AbstractContextManager[None]:  # (the lock file is written there)
            return _store.writing(folder)

        lock = IndexLock(folder, timeout=timeout)
        with edit_folder(lock, opened, unsaved, lambda kb: kb.save(folder), writing=writing) as kb:
            yield kb


E = TypeVar("E")


@contextmanager
def edit_folder(
    lock: IndexLock, opened: Callable[[IndexLock], E], unsaved: Callable[[E], bool], save: Callable[[E], object],
    close: Callable[[E], None] = lambda _: None, writing: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> Iterator[E]:  # fmt: skip
    """``edit()`` of one knowledge base or a sharded one: under ``lock`` (taken inside ``writing()``,
    which may say why the lock file cannot be made), the index ``opened(lock)`` gives (loaded, or
    new), saved when the block exits without an exception and ``unsaved`` says it changed;
    ``close`` is called on it at the end either way."""
    with writing():
        lock.acquire()
    try:
        kb = opened(lock)
        try:
            yield kb
            if unsaved(kb):
                save(kb)
        finally:
            close(kb)
    finally:
        lock.release()


def search_with_stats(
    kb: KnowledgeBase, weights: Mapping[str, float], k: int, stats: CollectionStats, *, source: str | None = None,
    where: Mapping[str, Any] | None = None,
) -> list[Hit]:  # fmt: skip
    """``kb.search`` for ``weights`` (term -> weight) scored with a whole collection's ``stats`` (a shard's search)."""
    return kb._search_with_stats(weights, k, stats, source=source, where=where)


def explain_with_stats(
    kb: KnowledgeBase, weights: Mapping[str, float], hit: Hit, stats: CollectionStats
) -> Explanation:
    """``kb.explain`` for :func:`search_with_stats`."""
    return kb._explain_with_stats(weights, hit, stats)

"""What the agent-framework adapters share: argument checks and filtered search.

The MCP server and the LangChain and LlamaIndex retrievers take a query, a
``k`` and optional filters from code (or a model) we do not control.  They
check them here, so a bad value gets the same :class:`ConfigError` naming the
value and the valid range everywhere, and they search any
:class:`~clanker_rag.Retriever` the same way.  Standard library only: the
frameworks themselves are imported by the adapters, never here.
"""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .._exceptions import ConfigError
from .._types import HitLike, Retriever, metadata_matches, source_matches
from .._validate import check_int

if TYPE_CHECKING:
    from .._kb import KnowledgeBase

__all__ = [
    "MAX_K",
    "MAX_QUERY_CHARS",
    "MAX_SOURCE_CHARS",
    "MAX_WHERE_CHARS",
    "MAX_WHERE_KEYS",
    "MAX_WHERE_VALUES",
    "TextEntry",
    "build_kb",
    "load_kb",
    "check_flag",
    "check_k",
    "check_query",
    "check_retriever",
    "check_source",
    "check_where",
    "hit_fields",
    "search_hits",
]

MAX_K = 100
"""The largest ``k`` an adapter passes on (a model asking for 10 000 passages is a mistake)."""

MAX_QUERY_CHARS = 10_000
# A source filter is a path or a glob of one; translating a glob to a regular
# expression costs up to the square of its length ("[[[[..." takes a minute
# at 30 000 characters), so it is capped well below where that shows.
MAX_SOURCE_CHARS = 1_000

# A ``where`` filter is matched against every source's metadata, each list
# value by a linear scan: a model (or a caller) sending 200 000 values would
# hold the index for seconds while every other call waits.  Real filters name
# a few keys and a few values.
MAX_WHERE_KEYS = 32
MAX_WHERE_VALUES = 256
MAX_WHERE_CHARS = 1_000  # a key, or a string value

# A retriever without filter support is asked for this many times k, then
# filtered here; bounded so a rare filter cannot turn into a full scan.
_OVERFETCH = 5

_SCALARS = (str, int, float, bool, type(None))

# Async frameworks run searches on worker threads; the index computes some
# statistics lazily on first use, so searches through the adapters take turns
# (BM25 search holds the GIL anyway, so nothing is lost).
_SEARCH_LOCK = threading.Lock()


def check_query(query: object) -> str:
    """``query`` if it is a non-blank string of at most ``MAX_QUERY_CHARS`` characters."""
    if not isinstance(query, str):
        raise ConfigError(f"query must be a string, got {type(query).__name__} {query!r:.80}")
    if not query.strip():
        raise ConfigError(f"query={query!r} is empty: give at least one word")
    if len(query) > MAX_QUERY_CHARS:
        raise ConfigError(f"query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}")
    return query


def check_k(k: object, limit: int = MAX_K) -> int:
    """``k`` if it is a whole number from 1 to ``limit`` (bools excluded)."""
    return check_int("k", k, 1, limit)


def check_retriever(kb: object) -> Retriever:
    """``kb`` if it has a ``search`` method (a KnowledgeBase or any :class:`~clanker_rag.Retriever`)."""
    if not callable(getattr(kb, "search", None)):
        raise ConfigError(f"kb={kb!r:.80} must have a search(query, k) method (a KnowledgeBase or any Retriever)")
    return kb  # type: ignore[return-value]


def check_flag(name: str, value: object) -> bool:
    """``value`` if it is True or False (not merely truthy)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} must be True or False")
    return value


def check_source(source: object) -> str | None:
    """The ``source`` filter: None, or a non-empty prefix or glob."""
    if source is None:
        return None
    if not isinstance(source, str) or not source:
        raise ConfigError(f"source={source!r:.200} must be a non-empty prefix or glob such as 'docs/*.md', or null")
    if len(source) > MAX_SOURCE_CHARS:
        raise ConfigError(f"source is {len(source)} characters long; the limit is {MAX_SOURCE_CHARS}")
    return source


def check_where(where: object) -> dict[str, Any] | None:
    """The ``where`` filter: None, or string keys mapped to a scalar or a list of scalars."""
    if where is None:
        return None
    if not isinstance(where, Mapping):
        raise ConfigError(f"where={where!r:.200} must be an object of metadata key: value (or a list of values)")
    if len(where) > MAX_WHERE_KEYS:
        raise ConfigError(f"where has {len(where)} keys; the limit is {MAX_WHERE_KEYS}")
    out: dict[str, Any] = {}
    for key, value in where.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"where key {key!r:.200} must be a non-empty string")
        if len(key) > MAX_WHERE_CHARS:
            raise ConfigError(
                f"where key {key[:80]!r}... is {len(key)} characters long; the limit is {MAX_WHERE_CHARS}"
            )
        if isinstance(value, (list, tuple)) and len(value) > MAX_WHERE_VALUES:
            raise ConfigError(f"where[{key!r}] lists {len(value)} values; the limit is {MAX_WHERE_VALUES}")
        ok = isinstance(value, _SCALARS) or (
            isinstance(value, (list, tuple)) and all(isinstance(v, _SCALARS) for v in value)
        )
        if not ok:
            raise ConfigError(
                f"where[{key!r}]={value!r:.200} must be a string, number, boolean, null or a list of those"
            )
        for v in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(v, str) and len(v) > MAX_WHERE_CHARS:
                raise ConfigError(
                    f"where[{key!r}] has a value {len(v)} characters long; the limit is {MAX_WHERE_CHARS}"
                )
        out[key] = list(value) if isinstance(value, (list, tuple)) else value
    return out or None


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def search_hits(
    retriever: Retriever,
    query: str,
    k: int,
    *,
    source: str | None = None,
    where: Mapping[str, Any] | None = None,
    feedback: bool = False,
) -> list[HitLike]:
    """The ``k`` best hits of ``retriever`` for ``query`` that pass the filters.

    A retriever whose ``search`` takes ``source``/``where`` (``KnowledgeBase``,
    ``HybridRetriever``, anything with ``**options``) filters before ranking.
    Any other :class:`~clanker_rag.Retriever` is asked for ``5 * k`` hits that
    are then filtered here, so a filter can return fewer than ``k`` hits.
    ``feedback=True`` needs a retriever that takes it.
    """
    search = retriever.search
    options: dict[str, Any] = {}
    if feedback:
        if not _accepts(search, "feedback"):
            raise ConfigError(
                f"feedback=True needs a retriever whose search() takes feedback; {retriever!r:.80} does not"
            )
        options["feedback"] = True
    post_source = post_where = None
    if source is not None:
        if _accepts(search, "source"):
            options["source"] = source
        else:
            post_source = source
    if where:
        if _accepts(search, "where"):
            options["where"] = where
        else:
            post_where = where
    if post_source is None and post_where is None:
        with _SEARCH_LOCK:
            return list(search(query, k, **options))[:k]
    with _SEARCH_LOCK:
        found = list(search(query, k * _OVERFETCH, **options))
    hits = []
    for hit in found:
        if not source_matches(hit.source, post_source):
            continue
        if post_where is not None and not metadata_matches(getattr(hit, "metadata", None) or {}, post_where):
            continue
        hits.append(hit)
        if len(hits) == k:
            break
    return hits


def _line(hit: HitLike, name: str) -> int | None:
    value = getattr(hit, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def hit_fields(hit: HitLike) -> dict[str, Any]:
    """A hit as framework metadata: where it is, how it scored, and its source's metadata.

    The source's own metadata goes under ``"metadata"`` rather than beside the
    fixed fields, so a key such as ``source`` in a document's front matter can
    neither shadow ours nor be lost.
    """
    section = getattr(hit, "section", None)
    chunk_index = getattr(hit, "chunk_index", None)
    metadata = getattr(hit, "metadata", None)
    return {
        "source": hit.source,
        "score": float(hit.score),
        "start_line": _line(hit, "start_line"),
        "end_line": _line(hit, "end_line"),
        "section": section if isinstance(section, str) else None,
        "chunk_index": chunk_index if isinstance(chunk_index, int) else None,
        "metadata": dict(metadata) if isinstance(metadata, Mapping) else {},
    }


TextEntry = tuple[str, "str | None", "Mapping[str, Any] | None"]
"""One text a framework hands over: its text, its id (None: none given) and its metadata."""


def build_kb(entries: Iterable[TextEntry], options: Mapping[str, Any] | None = None) -> KnowledgeBase:
    """A new knowledge base (``options``: ``KnowledgeBase`` keywords) holding each text as a source.

    A source is named by the text's id; without one, by its metadata's
    ``source`` (the file name LangChain and LlamaIndex loaders put there)
    and its place, ``"<source>#<i>"``, else ``"text-<i>"``: several texts of
    one file stay apart.  Two texts under one name raise :class:`ConfigError`
    (the second would replace the first).
    """
    from .._kb import KnowledgeBase

    kb = KnowledgeBase(**dict(options or {}))
    items: list[tuple[str, str, Mapping[str, Any] | None]] = []
    seen: set[str] = set()
    for i, (text, given, metadata) in enumerate(entries):
        if not isinstance(text, str):
            raise ConfigError(f"text {i} must be a string, got {type(text).__name__}")
        named = (metadata or {}).get("source")
        name = given if given else f"{named}#{i}" if isinstance(named, str) and named else f"text-{i}"
        if name in seen:
            raise ConfigError(f"two texts have the id {name!r}: give each its own id")
        seen.add(name)
        items.append((text, name, dict(metadata) if metadata else None))
    kb.add_texts(items, jobs=1)
    return kb


def load_kb(path: str | os.PathLike[str]) -> KnowledgeBase:
    """The knowledge base saved in folder ``path``."""
    from .._kb import KnowledgeBase

    return KnowledgeBase.load(path)

"""clanker_rag: a knowledge base a local LLM agent reads while it generates.

Public names are re-exported here and imported lazily on first use, so that
``import clanker_rag`` (and the ``clanker-rag`` command) start instantly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from ._answer._focusing import FocusedRetriever
    from ._engine._index import TermExplanation
    from ._engine._scoring import BM25
    from ._exceptions import (
        BackendError,
        ClankerRagError,
        ConfigError,
        IndexFormatError,
        IndexLockedError,
        IndexWriteError,
        IngestError,
        MissingExtraError,
        RetrievalTimeoutError,
    )
    from ._ingest._run import IngestReport
    from ._kb import Explanation, KnowledgeBase
    from ._retrieval._dense import DenseStore, HybridRetriever, update_embeddings
    from ._retrieval._fusion import MultiQueryRetriever, expand_neighbors, fuse_hits, reciprocal_rank_fusion
    from ._retrieval._rerank import Reranker, RerankingRetriever
    from ._stream._controller import RagController, neutralize
    from ._stream._events import InjectEvent, RetrieveEvent, StreamEvent, TextEvent
    from ._stream._generate import RETRIEVE_TOOL, AsyncGenerateFn, GenerateFn, RequestStats, Token, retrieve_tool
    from ._stream._scanner import TagScanner, ToolCall
    from ._stream._settings import BlockLayout, Hooks, Limits, Triggers
    from ._text._analysis import Analyzer
    from ._types import Hit, HitLike, Retriever

__all__ = [
    "Analyzer",
    "AsyncGenerateFn",
    "BM25",
    "BackendError",
    "BlockLayout",
    "ClankerRagError",
    "ConfigError",
    "DenseStore",
    "Explanation",
    "FocusedRetriever",
    "GenerateFn",
    "Hit",
    "HitLike",
    "Hooks",
    "HybridRetriever",
    "IndexFormatError",
    "IndexLockedError",
    "IndexWriteError",
    "IngestError",
    "IngestReport",
    "InjectEvent",
    "KnowledgeBase",
    "Limits",
    "MissingExtraError",
    "MultiQueryRetriever",
    "RETRIEVE_TOOL",
    "RagController",
    "RequestStats",
    "Reranker",
    "RerankingRetriever",
    "RetrievalTimeoutError",
    "RetrieveEvent",
    "Retriever",
    "StreamEvent",
    "TagScanner",
    "TermExplanation",
    "TextEvent",
    "Token",
    "ToolCall",
    "Triggers",
    "__version__",
    "expand_neighbors",
    "fuse_hits",
    "neutralize",
    "reciprocal_rank_fusion",
    "retrieve",
    "retrieve_tool",
    "update_embeddings",
]

_LAZY = {
    "Analyzer": "_text._analysis",
    "InjectEvent": "_stream._events",
    "RagController": "_stream._controller",
    "RetrieveEvent": "_stream._events",
    "StreamEvent": "_stream._events",
    "TextEvent": "_stream._events",
    "neutralize": "_stream._controller",
    "BackendError": "_exceptions",
    "ClankerRagError": "_exceptions",
    "ConfigError": "_exceptions",
    "IndexFormatError": "_exceptions",
    "IndexLockedError": "_exceptions",
    "IndexWriteError": "_exceptions",
    "IngestError": "_exceptions",
    "MissingExtraError": "_exceptions",
    "RetrievalTimeoutError": "_exceptions",
    "AsyncGenerateFn": "_stream._generate",
    "GenerateFn": "_stream._generate",
    "RequestStats": "_stream._generate",
    "Token": "_stream._generate",
    "TermExplanation": "_engine._index",
    "IngestReport": "_ingest._run",
    "Explanation": "_kb",
    "KnowledgeBase": "_kb",
    "TagScanner": "_stream._scanner",
    "ToolCall": "_stream._scanner",
    "BlockLayout": "_stream._settings",
    "Hooks": "_stream._settings",
    "Limits": "_stream._settings",
    "Triggers": "_stream._settings",
    "BM25": "_engine._scoring",
    "RETRIEVE_TOOL": "_stream._generate",
    "retrieve_tool": "_stream._generate",
    "Hit": "_types",
    "HitLike": "_types",
    "Retriever": "_types",
    "Reranker": "_retrieval._rerank",
    "RerankingRetriever": "_retrieval._rerank",
    "DenseStore": "_retrieval._dense",
    "HybridRetriever": "_retrieval._dense",
    "update_embeddings": "_retrieval._dense",
    "FocusedRetriever": "_answer._focusing",
    "MultiQueryRetriever": "_retrieval._fusion",
    "expand_neighbors": "_retrieval._fusion",
    "fuse_hits": "_retrieval._fusion",
    "reciprocal_rank_fusion": "_retrieval._fusion",
}

_default_kb: KnowledgeBase | None = None


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'clanker_rag' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def retrieve(query: str, k: int = 4) -> list[str]:
    """Passages (chunk texts) from the shipped knowledge base, best first."""
    global _default_kb
    if _default_kb is None:
        from ._kb import KnowledgeBase

        _default_kb = KnowledgeBase.default()
    return [hit.text for hit in _default_kb.search(query, k)]

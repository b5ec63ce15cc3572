"""clanker_rag: a knowledge base a local LLM agent reads while it generates.

Public names are re-exported here and imported lazily on first use, so that
``import clanker_rag`` (and the ``clanker-rag`` command) start instantly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from ._analysis import Analyzer
    from ._controller import InjectEvent, RagController, RetrieveEvent, StreamEvent, TextEvent, neutralize
    from ._dense import DenseStore, HybridRetriever, update_embeddings
    from ._exceptions import (
        BackendError,
        ClankerRagError,
        ConfigError,
        IndexFormatError,
        IndexLockedError,
        IngestError,
        MissingExtraError,
        RetrievalTimeoutError,
    )
    from ._fusion import MultiQueryRetriever, expand_neighbors, fuse_hits, reciprocal_rank_fusion
    from ._generate import RETRIEVE_TOOL, AsyncGenerateFn, GenerateFn, RequestStats, Token, retrieve_tool
    from ._index import TermExplanation
    from ._ingest import IngestReport
    from ._kb import Explanation, KnowledgeBase
    from ._rerank import Reranker, RerankingRetriever
    from ._scanner import TagScanner, ToolCall
    from ._scoring import BM25
    from ._shaping import FocusedRetriever
    from ._types import Hit, HitLike, Retriever

__all__ = [
    "Analyzer",
    "AsyncGenerateFn",
    "BM25",
    "BackendError",
    "ClankerRagError",
    "ConfigError",
    "DenseStore",
    "Explanation",
    "FocusedRetriever",
    "GenerateFn",
    "Hit",
    "HitLike",
    "HybridRetriever",
    "IndexFormatError",
    "IndexLockedError",
    "IngestError",
    "IngestReport",
    "InjectEvent",
    "KnowledgeBase",
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
    "Analyzer": "_analysis",
    "InjectEvent": "_controller",
    "RagController": "_controller",
    "RetrieveEvent": "_controller",
    "StreamEvent": "_controller",
    "TextEvent": "_controller",
    "neutralize": "_controller",
    "BackendError": "_exceptions",
    "ClankerRagError": "_exceptions",
    "ConfigError": "_exceptions",
    "IndexFormatError": "_exceptions",
    "IndexLockedError": "_exceptions",
    "IngestError": "_exceptions",
    "MissingExtraError": "_exceptions",
    "RetrievalTimeoutError": "_exceptions",
    "AsyncGenerateFn": "_generate",
    "GenerateFn": "_generate",
    "RequestStats": "_generate",
    "Token": "_generate",
    "TermExplanation": "_index",
    "IngestReport": "_ingest",
    "Explanation": "_kb",
    "KnowledgeBase": "_kb",
    "TagScanner": "_scanner",
    "ToolCall": "_scanner",
    "BM25": "_scoring",
    "RETRIEVE_TOOL": "_generate",
    "retrieve_tool": "_generate",
    "Hit": "_types",
    "HitLike": "_types",
    "Retriever": "_types",
    "Reranker": "_rerank",
    "RerankingRetriever": "_rerank",
    "DenseStore": "_dense",
    "HybridRetriever": "_dense",
    "update_embeddings": "_dense",
    "FocusedRetriever": "_shaping",
    "MultiQueryRetriever": "_fusion",
    "expand_neighbors": "_fusion",
    "fuse_hits": "_fusion",
    "reciprocal_rank_fusion": "_fusion",
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

"""clanker_rag: a knowledge base a local LLM agent reads while it generates."""

from __future__ import annotations

__version__ = "0.1.0"

from ._analysis import Analyzer
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
from ._kb import Explanation, KnowledgeBase
from ._scoring import BM25
from ._types import Hit, HitLike, Retriever

__all__ = [
    "Analyzer",
    "BM25",
    "BackendError",
    "ClankerRagError",
    "ConfigError",
    "Explanation",
    "Hit",
    "HitLike",
    "IndexFormatError",
    "IndexLockedError",
    "IngestError",
    "KnowledgeBase",
    "MissingExtraError",
    "RetrievalTimeoutError",
    "Retriever",
    "__version__",
    "retrieve",
]

_default_kb: KnowledgeBase | None = None


def retrieve(query: str, k: int = 4) -> list[str]:
    """Passages (chunk texts) from the shipped knowledge base, best first."""
    global _default_kb
    if _default_kb is None:
        _default_kb = KnowledgeBase.default()
    return [hit.text for hit in _default_kb.search(query, k)]

"""A LangChain retriever over a clanker_rag knowledge base (extra ``[langchain]``).

::

    from clanker_rag import KnowledgeBase
    from clanker_rag.integrations.langchain import KnowledgeBaseRetriever

    retriever = KnowledgeBaseRetriever(kb=KnowledgeBase.load("my-index"), k=4)
    docs = retriever.invoke("how do I rotate the keys?")

    # Or, as LangChain's own retrievers are made, from texts or documents:
    retriever = KnowledgeBaseRetriever.from_documents(docs, k=4)
    retriever.save("my-index")  # KnowledgeBaseRetriever(kb=KnowledgeBase.load("my-index")) later

Unlike LangChain's own BM25 retriever, every ``Document`` carries its BM25
score, and the index is our own file format (no pickle).  ``kb`` may be any
:class:`~clanker_rag.Retriever` (a sharded or hybrid one too).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .._exceptions import ConfigError, MissingExtraError, install_hint
from .._stream._blocks import neutralize
from ._adapters import (
    build_kb,
    check_flag,
    check_k,
    check_query,
    check_retriever,
    check_source,
    check_where,
    hit_fields,
    search_hits,
)

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError:
    raise MissingExtraError(
        f"clanker_rag.integrations.langchain needs langchain-core: {install_hint('langchain')}"
    ) from None

__all__ = ["KnowledgeBaseRetriever"]


def _check(kb: object, k: object, source: object, where: object, feedback: object) -> None:
    check_retriever(kb)
    check_k(k)
    check_source(source)
    check_where(where)
    check_flag("feedback", feedback)


class KnowledgeBaseRetriever(BaseRetriever):
    """LangChain ``BaseRetriever`` returning the ``k`` best chunks of ``kb`` as ``Document``\\ s.

    ``source`` (a glob or prefix) and ``where`` (metadata equals) filter the
    sources; ``feedback=True`` adds pseudo-relevance feedback (RM3).  Each
    ``Document.metadata`` has ``source``, ``score``, ``start_line``,
    ``end_line``, ``section`` (the heading path or code symbol),
    ``chunk_index`` and ``metadata`` (the source's own metadata).  Bad
    arguments raise :class:`~clanker_rag.ConfigError` (a ``ValueError``)
    naming the value and the valid range.  ``ainvoke`` runs the same search
    on a worker thread.  The text is neutralised as the controller does it (a
    ``<`` that could open a tool tag or a chat-template token becomes
    ``&lt;``); ``neutralize=False`` gives the exact chunk text.
    """

    kb: Any
    """A ``KnowledgeBase`` or any object with ``search(query, k)``."""
    k: int = 4
    source: str | None = None
    where: dict[str, Any] | None = None
    feedback: bool = False
    neutralize: bool = True
    """Neutralise the text as the controller does (it goes into a prompt); False: the exact chunk text."""

    def __init__(self, **data: Any) -> None:
        # Checked before pydantic sees the values, so a bad one raises our
        # ConfigError naming the range rather than a generic ValidationError.
        _check(data.get("kb"), data.get("k", 4), data.get("source"), data.get("where"), data.get("feedback", False))
        super().__init__(**data)

    @classmethod
    def from_texts(
        cls,
        texts: Iterable[str],
        metadatas: Iterable[Mapping[str, Any] | None] | None = None,
        ids: Iterable[str | None] | None = None,
        *,
        kb_options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> KnowledgeBaseRetriever:
        """A retriever over a new in-memory knowledge base holding ``texts`` (as LangChain's
        ``BM25Retriever.from_texts``): each text is a source, named by its id, else by its
        metadata's ``source`` and its place (``"guide.md#3"``), else ``"text-<i>"``.
        ``kb_options`` go to ``KnowledgeBase`` (``chunk_size=None``: one chunk a text);
        ``kwargs`` to the retriever (``k``, ``source``, ``where``...).  Metadata must be
        JSON-serialisable (it is saved with the index)."""
        texts = list(texts)
        metas = list(metadatas) if metadatas is not None else [None] * len(texts)
        names = list(ids) if ids is not None else [None] * len(texts)
        if len(metas) != len(texts) or len(names) != len(texts):
            raise ConfigError(
                f"{len(texts)} texts but {len(metas)} metadatas and {len(names)} ids: give one of each a text"
            )
        kb = build_kb(zip(texts, names, metas), kb_options)
        return cls(kb=kb, **kwargs)

    @classmethod
    def from_documents(
        cls, documents: Iterable[Document], *, kb_options: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> KnowledgeBaseRetriever:
        """:meth:`from_texts` of the documents' ``page_content``, ``metadata`` and ``id``."""
        docs = list(documents)
        return cls.from_texts(
            [d.page_content for d in docs],
            [d.metadata for d in docs],
            [d.id for d in docs],
            kb_options=kb_options,
            **kwargs,
        )

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Save the knowledge base to folder ``path`` (``KnowledgeBase.load(path)`` opens it again)."""
        save = getattr(self.kb, "save", None)
        if not callable(save):
            raise ConfigError(f"{type(self.kb).__name__} cannot be saved: it has no save()")
        return Path(save(path))

    def _search(self, query: str) -> list[Document]:
        _check(self.kb, self.k, self.source, self.where, self.feedback)
        hits = search_hits(
            self.kb,
            check_query(query),
            self.k,
            source=self.source,
            where=check_where(self.where),
            feedback=self.feedback,
        )
        docs = []
        for hit in hits:
            fields = hit_fields(hit)
            chunk = fields["chunk_index"]
            doc_id = f"{hit.source}#{chunk}" if chunk is not None else None
            text = neutralize(hit.text) if self.neutralize else hit.text
            docs.append(Document(page_content=text, metadata=fields, id=doc_id))
        return docs

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return self._search(query)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return await asyncio.to_thread(self._search, query)

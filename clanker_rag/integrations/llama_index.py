"""A LlamaIndex retriever over a clanker_rag knowledge base (extra ``[llama-index]``).

::

    from llama_index.core.query_engine import RetrieverQueryEngine

    from clanker_rag import KnowledgeBase
    from clanker_rag.integrations.llama_index import KnowledgeBaseRetriever

    retriever = KnowledgeBaseRetriever(KnowledgeBase.load("my-index"), k=4)
    engine = RetrieverQueryEngine.from_args(retriever, llm=my_llm)

    # Or, as LlamaIndex's BM25Retriever is made, from nodes, and kept on disk:
    retriever = KnowledgeBaseRetriever.from_defaults(nodes=nodes, similarity_top_k=4)
    retriever.persist("my-index")
    retriever = KnowledgeBaseRetriever.from_persist_dir("my-index")

Every node comes back with its real BM25 score, in any script: our analyser
splits CJK text into character bigrams, so Chinese and Japanese queries score
above zero.  ``kb`` may be any :class:`~clanker_rag.Retriever`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import Any

from .._exceptions import ConfigError, MissingExtraError, install_hint
from .._stream._blocks import neutralize
from .._types import Retriever
from ._adapters import (
    build_kb,
    check_flag,
    check_k,
    check_query,
    check_retriever,
    check_source,
    check_where,
    hit_fields,
    load_kb,
    search_hits,
)

try:
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import BaseNode, Document, MetadataMode, NodeWithScore, QueryBundle, TextNode
except ImportError:
    raise MissingExtraError(
        f"clanker_rag.integrations.llama_index needs llama-index-core: {install_hint('llama-index')}"
    ) from None

__all__ = ["KnowledgeBaseRetriever"]

# What a response synthesiser shows the LLM beside each passage: where it is
# from.  Scores and the source's raw metadata stay on the node, out of the prompt.
_HIDDEN_FROM_LLM = ["score", "chunk_index", "metadata"]


class KnowledgeBaseRetriever(BaseRetriever):
    """LlamaIndex ``BaseRetriever`` returning ``NodeWithScore(TextNode)`` for the ``k`` best chunks.

    ``source`` (a glob or prefix) and ``where`` (metadata equals) filter the
    sources; ``feedback=True`` adds pseudo-relevance feedback (RM3).  Each
    node's ``metadata`` has ``source``, ``score``, ``start_line``,
    ``end_line``, ``section`` (heading path or code symbol), ``chunk_index``
    and ``metadata`` (the source's own metadata); its id is
    ``"<source>#<chunk_index>"``.  Bad arguments raise
    :class:`~clanker_rag.ConfigError` (a ``ValueError``) naming the value and
    the valid range.  ``aretrieve`` runs the same search on a worker thread.

    The text is neutralised as the controller does it (a ``<`` that could
    open a tool tag or a chat-template token becomes ``&lt;``), since it goes
    into a prompt; ``neutralize=False`` gives the exact chunk text.
    """

    def __init__(
        self,
        kb: Retriever,
        k: int = 4,
        *,
        source: str | None = None,
        where: Mapping[str, Any] | None = None,
        feedback: bool = False,
        neutralize: bool = True,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        self.kb = check_retriever(kb)
        self.feedback = check_flag("feedback", feedback)
        self.k = check_k(k)
        self.source = check_source(source)
        self.where = check_where(where)
        self.neutralize = bool(neutralize)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_defaults(
        cls,
        *,
        nodes: Sequence[BaseNode] | None = None,
        documents: Sequence[Document] | None = None,
        kb: Retriever | None = None,
        similarity_top_k: int | None = None,
        k: int = 4,
        kb_options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> KnowledgeBaseRetriever:
        """A retriever over ``kb``, or over a new in-memory knowledge base holding ``nodes``
        (or ``documents``), as ``BM25Retriever.from_defaults`` makes one.

        Each node is a source named by its id, holding its text and metadata
        (JSON-serialisable: it is saved with the index).  ``similarity_top_k``
        is LlamaIndex's name for ``k``; ``kb_options`` go to ``KnowledgeBase``
        (``chunk_size=None``: one chunk a node); ``kwargs`` to the retriever.
        """
        given = [name for name, value in (("nodes", nodes), ("documents", documents), ("kb", kb)) if value is not None]
        if len(given) != 1:
            raise ConfigError(f"from_defaults() takes one of nodes=, documents= or kb=, got {given or 'none'}")
        if kb is None:
            items = list(nodes if nodes is not None else documents or [])
            kb = build_kb(((n.get_content(MetadataMode.NONE), n.node_id, n.metadata) for n in items), kb_options)
        return cls(kb, similarity_top_k if similarity_top_k is not None else k, **kwargs)

    @classmethod
    def from_persist_dir(cls, persist_dir: str | os.PathLike[str], **kwargs: Any) -> KnowledgeBaseRetriever:
        """A retriever over the knowledge base :meth:`persist` saved in ``persist_dir``
        (any index folder); ``kwargs`` go to the retriever (``k``, ``source``, ``where``...)."""
        return cls(load_kb(persist_dir), **kwargs)

    def persist(self, persist_dir: str | os.PathLike[str]) -> None:
        """Save the knowledge base to folder ``persist_dir`` (see :meth:`from_persist_dir`)."""
        save = getattr(self.kb, "save", None)
        if not callable(save):
            raise ConfigError(f"{type(self.kb).__name__} cannot be persisted: it has no save()")
        save(persist_dir)

    def _search(self, query: str) -> list[NodeWithScore]:
        hits = search_hits(
            self.kb,
            check_query(query),
            check_k(self.k),
            source=check_source(self.source),
            where=check_where(self.where),
            feedback=self.feedback,
        )
        nodes = []
        for hit in hits:
            fields = hit_fields(hit)
            chunk = fields["chunk_index"]
            hidden = _HIDDEN_FROM_LLM + [key for key in ("section",) if fields[key] is None]
            node = TextNode(
                text=neutralize(hit.text) if self.neutralize else hit.text,
                metadata=fields,
                excluded_llm_metadata_keys=hidden,
                excluded_embed_metadata_keys=list(fields),
            )
            if chunk is not None:
                node.id_ = f"{hit.source}#{chunk}"
            nodes.append(NodeWithScore(node=node, score=fields["score"]))
        return nodes

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._search(query_bundle.query_str)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await asyncio.to_thread(self._search, query_bundle.query_str)

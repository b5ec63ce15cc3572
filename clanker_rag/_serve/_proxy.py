"""``clanker-rag serve``: an OpenAI-compatible proxy that injects knowledge.

Any unmodified OpenAI client points its base URL at the proxy; the proxy sits
in front of an upstream server (llama.cpp, vLLM, Ollama, LM Studio...) and
runs each ``/v1/chat/completions`` and ``/v1/completions`` request through a
:class:`~clanker_rag.RagController`:

* the user's question is retrieved for before generation starts and the
  passages go into the request (a ``<context>`` block at the end of a raw
  prompt, or in front of the last user message of a chat);
* while the upstream streams, question sentences the model writes and
  ``<tool name="retrieve">`` calls trigger more retrieval; the proxy then
  closes that upstream request and resumes with the extended text (a raw
  prompt grows by the block; a chat gets the partial answer as a trailing
  assistant message, which llama.cpp and Ollama continue).

Requests the controller cannot represent (``n`` > 1, client-defined tools,
log-probabilities, ``echo``) get the up-front injection only and are then
forwarded verbatim, as is every other endpoint (``/v1/models``...) except
the web pages' (``GET /``, ``/sources``, ``/trace`` and ``/clanker-rag/...``,
see :mod:`._web`), which show the knowledge base and a live trace of every
injection.  Without an upstream, :func:`make_browse_server` serves the pages alone.

Security: binds 127.0.0.1 unless told otherwise; refuses requests a web page
could send (a foreign ``Host`` or ``Origin``, a CORS preflight, a
``text/plain`` body) and, with ``CLANKER_RAG_TOKEN`` set, any request without
that bearer token (see :mod:`._access`); caps request bodies,
forwards the client's ``Authorization`` header upstream but never logs it
(nor anything that looks like a key), and answers upstream failures with
OpenAI-style error JSON.  Standard library only.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .._types import HitLike, Retriever
from ._access import token_from_env
from ._follow import IndexFollower
from ._handler import DEFAULT_MAX_REQUEST_BYTES, ProxyConfig, ProxyServer
from ._upstream import redact
from ._web._browse import BrowseServer
from ._web._trace import DEFAULT_TRACE_SIZE, TraceLog

__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "BrowseServer",
    "ProxyConfig",
    "ProxyServer",
    "SharedRetriever",
    "make_browse_server",
    "make_server",
    "redact",
    "serve",
]

logger = logging.getLogger(__name__)
T = TypeVar("T")


class SharedRetriever:
    """A knowledge base shared by the proxy's threads.

    Searches are serialised (the index computes some statistics lazily) and
    the index folder is re-read when another process saves it, so an
    ``ingest`` into a served knowledge base takes effect without a restart.
    """

    def __init__(
        self,
        retriever: Retriever,
        path: str | os.PathLike[str] | None = None,
        *,
        check_every: float = 2.0,
        source: str | None = None,
        where: Mapping[str, Any] | None = None,
    ) -> None:
        self._retriever = retriever
        self._lock = threading.Lock()
        self._follower = IndexFollower(path, check_every=check_every) if path is not None else None
        # Searches only this part of the index (``serve --filter/--where``), reloaded or not.
        self._filters: dict[str, Any] = {key: value for key, value in (("source", source), ("where", where)) if value}

    def search(self, query: str, k: int = 10) -> Sequence[HitLike]:
        return self.read(lambda retriever: list(retriever.search(query, k, **self._filters)))

    def read(self, fn: Callable[[Any], T]) -> T:
        """``fn(knowledge base)`` under the lock, on the freshest index (the web pages' searches and reads)."""
        with self._lock:
            fresh = self._follower.fresh(self._retriever) if self._follower is not None else None
            if fresh is not None:
                self._retriever = fresh
            return fn(self._retriever)

    def collection_stats(self, terms: Iterable[str]) -> object:
        """The served retriever's ``collection_stats(terms)`` (what the answering path's reranking weighs
        words by), or None when it has none."""
        with self._lock:
            stats_of = getattr(self._retriever, "collection_stats", None)
            return stats_of(terms) if callable(stats_of) else None


class _ProxyServer6(ProxyServer):
    address_family = socket.AF_INET6


def make_server(
    retriever: Retriever,
    upstream: str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    index_path: str | os.PathLike[str] | None = None,
    trace_size: int = DEFAULT_TRACE_SIZE,
    trace_file: str | os.PathLike[str] | None = None,
    **options: Any,
) -> ProxyServer:
    """A ready (not yet serving) proxy; call ``serve_forever()`` on it, ``shutdown()`` to stop.

    Without ``token=``, the token clients must send is ``CLANKER_RAG_TOKEN``
    from the environment, if set (see :mod:`._access`).  The ``/trace`` page
    keeps the last ``trace_size`` requests; ``trace_file`` gets each as a JSON line.
    """
    if "token" not in options:
        options["token"] = token_from_env()
    config = ProxyConfig(upstream, **options)
    shared = retriever if isinstance(retriever, SharedRetriever) else SharedRetriever(retriever, index_path)
    cls = _ProxyServer6 if ":" in host else ProxyServer
    trace = TraceLog(trace_size, Path(trace_file) if trace_file is not None else None)
    return cls((host, port), shared, config, trace)


def make_browse_server(
    retriever: Retriever,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    index_path: str | os.PathLike[str] | None = None,
    token: str | None = None,
    **limits: Any,
) -> BrowseServer:
    """The web pages alone over ``retriever`` (``serve`` without an upstream); the token as in :func:`make_server`.

    ``limits``: ``max_connections`` and ``header_timeout``, as for the proxy.
    """
    shared = retriever if isinstance(retriever, SharedRetriever) else SharedRetriever(retriever, index_path)
    return BrowseServer((host, port), shared, token if token is not None else token_from_env(), **limits)


S = TypeVar("S", ProxyServer, BrowseServer)


def serve(server: S, on_ready: Callable[[S], None] | None = None) -> None:
    """Serve until interrupted (Ctrl-C), then close the listening socket."""
    if on_ready is not None:
        on_ready(server)
    try:
        server.serve_forever(poll_interval=0.25)
    finally:
        server.server_close()

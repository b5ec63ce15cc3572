"""``clanker-rag mcp``: the knowledge base as a Model Context Protocol server.

Agents (desktop assistants, IDE agents, agent frameworks) reach retrieval as
MCP tools.  This module serves one index folder through the official ``mcp``
SDK (extra ``[mcp]``), over stdio or streamable HTTP:

* tools ``search``, ``retrieve``, ``show`` and ``stats``, and ``ingest`` only
  when folders were named with ``--allow-ingest`` (reads are limited to them,
  with the secret guard always on);
* every indexed source as a resource (``clanker-rag://source/<name>``).

All the logic is in :class:`KnowledgeService`, which knows nothing of MCP:
it checks arguments (one :class:`ConfigError` naming the value and the range),
re-reads the index when another process saved it (as the proxy does), and
neutralises retrieved text exactly as the controller does.  :func:`build_server`
only wraps it in SDK tools, turning our errors into MCP tool errors, so a bad
call never brings the server down.  The SDK is imported when a server is
built, never when this module is.
"""

from __future__ import annotations

import difflib
import errno
import logging
import os
import socket
import stat
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .._exceptions import ClankerRagError, ConfigError, MissingExtraError, install_hint
from .._ingest._readers import FoundPath, open_beneath
from .._kb import KnowledgeBase
from .._serve._access import TOKEN_ENV, bearer_ok, token_from_env
from .._serve._follow import IndexFollower
from .._stream._blocks import BlockBuilder, neutralize
from .._validate import check_int, one_of
from ._adapters import MAX_WHERE_KEYS, MAX_WHERE_VALUES, check_k, check_query, check_source, check_where

if TYPE_CHECKING:
    from .._ingest._run import IngestReport

__all__ = ["DEFAULT_PORT", "RESOURCE_PREFIX", "KnowledgeService", "build_server", "require_sdk", "run_server"]

logger = logging.getLogger(__name__)

DEFAULT_PORT = 8766
RESOURCE_PREFIX = "clanker-rag://source/"
MAX_SHOW_CHARS = 100_000
MAX_PATH_CHARS = 4096  # PATH_MAX on Linux: no longer path names a file
_LOOPBACK = ("127.0.0.1", "::1", "localhost")

_T = TypeVar("_T")


def require_sdk() -> None:
    """Raise :class:`MissingExtraError` (one line: what to install) when ``mcp`` is missing."""
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError:
        raise MissingExtraError(f"the MCP server needs the mcp package: {install_hint('mcp')}") from None


def resource_uri(source: str) -> str:
    """The resource URI of a source: its name, percent-encoded, after ``RESOURCE_PREFIX``."""
    return RESOURCE_PREFIX + urllib.parse.quote(source, safe="/")


def _int_or_none(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name}={value!r} must be a whole number (a 1-based line) or null")
    return value


class KnowledgeService:
    """The MCP tools, without MCP: one knowledge base, shared by the server's worker threads.

    ``path`` is the index folder: when another process saves it, the next
    call reads it again.  ``ingest_roots`` are the folders ``ingest`` may
    read; empty means ingest is off.  Calls are serialised (the index
    computes some statistics lazily); an ingest runs outside that lock under
    the index's own writer lock.
    """

    def __init__(
        self,
        kb: KnowledgeBase | None,
        path: str | os.PathLike[str] | None = None,
        *,
        ingest_roots: Iterable[str | os.PathLike[str]] = (),
    ) -> None:
        self._path = Path(path) if path is not None else None
        roots = [Path(os.path.realpath(os.path.expanduser(root))) for root in ingest_roots]
        for root in roots:
            if not root.is_dir():
                raise ConfigError(f"--allow-ingest {root}: not a folder")
        if roots and self._path is None:
            raise ConfigError("ingest needs an index folder to write to")
        self._roots = tuple(roots)
        self._kb = kb if kb is not None else KnowledgeBase()
        self._lock = threading.Lock()
        self._follower = IndexFollower(self._path) if self._path is not None else None

    @property
    def ingest_roots(self) -> tuple[Path, ...]:
        return self._roots

    def _current(self) -> KnowledgeBase:
        """The knowledge base, re-read first if its index file changed (caller holds the lock)."""
        fresh = self._follower.fresh(self._kb) if self._follower is not None else None
        if fresh is not None:
            self._kb = fresh
        return self._kb

    def _with_kb(self, fn: Callable[[KnowledgeBase], _T]) -> _T:
        with self._lock:
            return fn(self._current())

    # -- tools -------------------------------------------------------------------
    def search(
        self, query: str, k: int = 5, source: str | None = None, where: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Ranked passages with source, line range, score and (neutralised) text."""
        query, k = check_query(query), check_k(k)
        source, where_ = check_source(source), check_where(where)
        hits = self._with_kb(lambda kb: kb.search(query, k, source=source, where=where_))
        results = [
            {
                "rank": rank,
                "source": neutralize(hit.source),
                "start_line": hit.start_line,
                "end_line": hit.end_line,
                "score": round(hit.score, 4),
                "section": neutralize(hit.section) if hit.section else None,
                "text": neutralize(hit.text),
            }
            for rank, hit in enumerate(hits, 1)
        ]
        return {"query": query, "results": results}

    def retrieve(self, query: str, k: int = 4) -> str:
        """One ``<result>`` block in the controller's format."""
        query, k = check_query(query), check_k(k, 20)
        hits = self._with_kb(lambda kb: kb.search(query, k))
        # The controller's block builder, with room for k full passages (its 2000 characters hold about three).
        blocks = BlockBuilder(max(2000, 700 * k))
        return blocks.block("result", hits, None if hits else "No relevant passages found.")

    def show(self, source: str, start_line: int | None = None, end_line: int | None = None) -> str:
        """The (neutralised) text of ``source``, or of lines ``start_line``-``end_line`` (1-based, inclusive)."""
        if not isinstance(source, str) or not source:
            raise ConfigError(f"source={source!r:.200} must be the name of an indexed source")
        if len(source) > MAX_PATH_CHARS:
            raise ConfigError(f"source is {len(source)} characters long; the limit is {MAX_PATH_CHARS}")
        first, last = _int_or_none("start_line", start_line), _int_or_none("end_line", end_line)

        def read(kb: KnowledgeBase) -> tuple[str | None, list[str]]:
            text = kb.source_text(source)
            return text, ([] if text is not None else kb.sources())

        text, names = self._with_kb(read)
        if text is None:
            close = difflib.get_close_matches(source, names, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else " (the stats tool and the resources list them)"
            raise ConfigError(f"no source {source!r} in this knowledge base{hint}")
        lines = text.splitlines(keepends=True)
        n = len(lines)
        first = 1 if first is None else first
        last = n if last is None else last
        if n and not 1 <= first <= last <= n:
            raise ConfigError(
                f"lines {first}-{last} are out of range for {source!r}: it has lines 1-{n} "
                "(start_line <= end_line, both from 1)"
            )
        out: list[str] = []
        shown, size = first - 1, 0
        for line in lines[first - 1 : last]:
            if out and size + len(line) > MAX_SHOW_CHARS:
                break
            out.append(line)
            size += len(line)
            shown += 1
        body = neutralize("".join(out))
        if shown < last:
            body += f"\n[shown lines {first}-{shown} of {n}; call show with start_line={shown + 1} for more]\n"
        return body

    def stats(self) -> dict[str, Any]:
        """Counts and settings of the knowledge base."""

        def collect(kb: KnowledgeBase) -> dict[str, Any]:
            formats: dict[str, int] = {}
            for name in kb.sources():
                meta = kb.source_metadata(name) or {}
                fmt = str(meta.get("format") or os.path.splitext(name)[1].lstrip(".") or "text")
                formats[fmt] = formats.get(fmt, 0) + 1
            return {
                "path": str(self._path) if self._path is not None else None,
                "sources": len(kb.sources()),
                "chunks": len(kb),
                "terms": kb.n_terms,
                "formats": dict(sorted(formats.items(), key=lambda kv: -kv[1])),
                "bm25": kb.bm25.settings(),
                "chunking": kb.chunker.settings(),
                "ingest_roots": [str(root) for root in self._roots],
            }

        return self._with_kb(collect)

    def ingest(self, path: str) -> dict[str, Any]:
        """Ingest a file or folder inside one of the allowed roots; returns the report."""
        if not self._roots:
            raise ConfigError("ingest is off: start the server with --allow-ingest PATH to allow it")
        if not isinstance(path, str) or not path.strip():
            raise ConfigError(f"path={path!r:.200} must be a file or folder inside {self._roots_text()}")
        if "\0" in path:
            raise ConfigError("path must not contain a NUL byte")
        if len(path) > MAX_PATH_CHARS:
            raise ConfigError(f"path is {len(path)} characters long; the limit is {MAX_PATH_CHARS}")
        try:
            raw = Path(os.path.expanduser(path))
            # A relative path is taken inside the first root, not the server's working directory.
            target = Path(os.path.realpath(raw if raw.is_absolute() else self._roots[0] / raw))
            root = next((r for r in self._roots if target == r or r in target.parents), None)
            if root is None:
                raise ConfigError(f"path {path!r:.300} is outside the folders ingest may read: {self._roots_text()}")
            pinned = _pin(target)
        except (OSError, ValueError) as exc:  # a name too long for the file system, say
            raise ConfigError(f"path {path!r:.300} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
        if pinned is None:
            raise ConfigError(f"path {path!r:.300} does not exist")
        found, is_dir = pinned
        # Source names as `clanker-rag ingest ROOT` gives them, whatever part of ROOT is read.
        rel = (target if is_dir else target.parent).relative_to(root).as_posix()
        prefix = "" if rel == "." else rel + "/"
        if len(self._roots) > 1:
            prefix = f"{root.name}/{prefix}"
        assert self._path is not None
        with KnowledgeBase.edit(self._path) as kb:
            report: IngestReport = kb.ingest(
                found, index_path=self._path, prefix=prefix, secret_guard=True, progress=False, jobs=1
            )
        with self._lock:
            self._current()
        return {"summary": report.summary(), **report.to_dict()}

    def _roots_text(self) -> str:
        return ", ".join(str(root) for root in self._roots)

    # -- resources -----------------------------------------------------------------
    def sources(self) -> list[str]:
        return self._with_kb(lambda kb: kb.sources())

    def resource_text(self, uri: str) -> str | None:
        """The neutralised text of the source behind ``uri``, or None."""
        # (a source name percent-encoded takes at most three characters a character)
        if not uri.startswith(RESOURCE_PREFIX) or len(uri) > len(RESOURCE_PREFIX) + 3 * MAX_PATH_CHARS:
            return None
        source = urllib.parse.unquote(uri[len(RESOURCE_PREFIX) :])
        text = self._with_kb(lambda kb: kb.source_text(source))
        return None if text is None else neutralize(text)


def _pin(target: Path) -> tuple[FoundPath, bool] | None:
    """``target`` (resolved, inside a root) pinned to the file or folder there now, and whether it is a folder.

    It is opened following no symlink in any component, so what the ingest
    reads is what was checked to be inside the root: a component swapped for
    a symlink since (before or after this check) makes the ingest skip it
    rather than read outside the root.  None when nothing is there.
    """
    real = str(target)
    try:
        fd = open_beneath(real, getattr(os, "O_PATH", os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ConfigError(f"path {real!r:.300} changed while it was checked (a symlink now); try again") from None
        raise
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if stat.S_ISLNK(st.st_mode):  # (O_PATH | O_NOFOLLOW opens a symlink itself)
        raise ConfigError(f"path {real!r:.300} changed while it was checked (a symlink now); try again")
    return FoundPath(real, real, (st.st_dev, st.st_ino)), stat.S_ISDIR(st.st_mode)


_DESCRIPTIONS = {
    "search": (
        "Search the knowledge base (BM25). Returns up to k passages, best first, each with its source, "
        "line range, score and text. k: 1-100 (default 5). source: only sources matching a glob "
        "('docs/*.md') or starting with a prefix. where: metadata filter, {key: value or [values]} "
        f"(at most {MAX_WHERE_KEYS} keys and {MAX_WHERE_VALUES} values a key)."
    ),
    "retrieve": (
        "Retrieve passages for a question as one numbered block of [n] source:lines entries to read and "
        "cite. k: 1-20 (default 4)."
    ),
    "show": (
        "The text of one indexed source, whole or lines start_line-end_line (1-based, inclusive); "
        "search results give the source names and line ranges."
    ),
    "stats": "Counts (sources, chunks, terms), formats and settings of the knowledge base.",
    "ingest": (
        "Index a file or folder (relative paths are inside the first allowed folder); only paths inside the "
        "folders the server was started with are read, and credential files are never indexed."
    ),
}


def build_server(service: KnowledgeService, *, name: str = "clanker-rag") -> Any:
    """An ``MCPServer`` (the SDK's FastMCP successor) exposing ``service``."""
    require_sdk()
    import anyio.to_thread
    from mcp.server.lowlevel.helper_types import ReadResourceContents
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
    from mcp.types import Resource

    def call(fn: Callable[..., _T], *args: Any) -> _T:
        try:
            return fn(*args)
        except ClankerRagError as exc:
            # An anticipated failure: the model reads the message; the server logs one line.
            raise ToolError(str(exc)) from None

    class _Server(MCPServer[Any]):
        async def list_resources(self) -> list[Resource]:
            names = await anyio.to_thread.run_sync(service.sources)
            return [Resource(uri=resource_uri(s), name=s, mime_type="text/plain") for s in names]

        async def read_resource(self, uri: Any, context: Any = None) -> Any:
            text = await anyio.to_thread.run_sync(service.resource_text, str(uri))
            if text is None:
                raise ResourceNotFoundError(f"no source behind {uri}")
            return [ReadResourceContents(content=text, mime_type="text/plain")]

    from .. import __version__

    server = _Server(
        name,
        instructions="A local knowledge base: search or retrieve passages, then show a source for more context.",
        version=__version__,  # the initialize answer's serverInfo.version (the SDK's default is empty)
        log_level="WARNING",
    )

    def search(
        query: str, k: int = 5, source: str | None = None, where: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return call(service.search, query, k, source, where)

    def retrieve(query: str, k: int = 4) -> str:
        return call(service.retrieve, query, k)

    def show(source: str, start_line: int | None = None, end_line: int | None = None) -> str:
        return call(service.show, source, start_line, end_line)

    def stats() -> dict[str, Any]:
        return call(service.stats)

    def ingest(path: str) -> dict[str, Any]:
        return call(service.ingest, path)

    # The SDK validates arguments with pydantic, which would turn k=true into
    # 1 and 2.5 into an error only sometimes: numbers are taken strictly, so
    # a boolean or a fraction is refused (by the schema, with its reason).
    from typing import Annotated

    from pydantic import Strict

    strict_int = Annotated[int, Strict()]
    for fn, names in ((search, ("k",)), (retrieve, ("k",)), (show, ("start_line", "end_line"))):
        for param in names:
            fn.__annotations__[param] = strict_int if param == "k" else strict_int | None
    tools: list[Callable[..., Any]] = [search, retrieve, show, stats]
    if service.ingest_roots:
        tools.append(ingest)
    for fn in tools:
        server.add_tool(fn, name=fn.__name__, description=_DESCRIPTIONS[fn.__name__])
    return server


_ASGIApp = Callable[[dict[str, Any], Any, Any], Any]


def bearer_guard(app: _ASGIApp, token: str) -> _ASGIApp:
    """``app`` (ASGI) answering 401 to any HTTP request without ``Authorization: Bearer <token>``."""

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            header = None
            for name, value in scope.get("headers", ()):
                if name.lower() == b"authorization":
                    header = value.decode("latin-1")
                    break
            if not bearer_ok(header, token):
                body = b'{"error": "a bearer token is required (Authorization: Bearer <token>)"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode("ascii")),
                            (b"www-authenticate", b'Bearer realm="clanker-rag"'),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket; a taken port is one ``OSError`` naming it, before anything starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, exc.strerror or str(exc), f"{host}:{port}") from None
    return sock


def run_server(
    kb: KnowledgeBase | None,
    path: str | os.PathLike[str] | None,
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    ingest_roots: Sequence[str | os.PathLike[str]] = (),
) -> None:
    """Serve until the client goes away (stdio) or the process is stopped (HTTP).

    Over HTTP, binds first (port 0 picks a free one) and then says on stderr
    where it listens; stdout is left alone either way.
    """
    one_of("transport", transport, ("stdio", "http"))
    check_int("port", port, 0, 65535)  # 0 picks a free port
    server = build_server(KnowledgeService(kb, path, ingest_roots=ingest_roots))
    if transport == "stdio":
        server.run("stdio")
        return
    import anyio
    import uvicorn

    token = token_from_env()
    if host not in _LOOPBACK and token is None:
        logger.warning(
            "listening on %s: anyone who can reach this port can read your knowledge base "
            "(set %s to require a bearer token)",
            host,
            TOKEN_ENV,
        )
    sock = _listen(host, port)
    try:
        bound = sock.getsockname()[1]
        where = f"[{host}]" if ":" in host else host
        print(f"clanker-rag: MCP over streamable HTTP at http://{where}:{bound}/mcp; Ctrl-C stops", file=sys.stderr)
        sys.stderr.flush()
        # The SDK's app (session manager, DNS-rebinding guard for loopback hosts) on our socket.
        app = server.streamable_http_app(host=host)
        config = uvicorn.Config(app if token is None else bearer_guard(app, token), log_level="warning")
        anyio.run(uvicorn.Server(config).serve, [sock])
    finally:
        sock.close()

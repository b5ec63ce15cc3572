"""One knowledge base sharded over a Dask cluster (the ``clanker-rag[dask]`` extra).

``ShardedKnowledgeBase`` keeps the surface of :class:`~clanker_rag.KnowledgeBase`
that the CLI, the proxy and the controller use, and the ``Retriever``
protocol.  Each shard is an ordinary ``KnowledgeBase`` on a Dask worker; a
source's chunks all live on the shard a stable hash of its name picks
(``blake2b`` of the name, modulo the shard count), so re-ingesting or
removing a source touches one shard.

Scores are exact: a search gathers from every shard its chunk count, summed
length and the query terms' document frequencies (one round trip; the
client may keep a bounded cache of recent query terms' figures, never a
shard's vocabulary), adds them up, and has every shard score its chunks with
those totals (a second round trip); so each hit scores what one
``KnowledgeBase`` over the same chunks gives it (up to the last bit of the
sum; ties between equal scores are broken by source and chunk number).
Counts, statistics and source listings are computed on the shards; names
come to the client page by page.  What the client holds does not grow with
the index.

Without a ``client`` every shard lives in this process: a sharded index opens
on one machine without Dask.  See ``docs/scale.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import heapq
import itertools
import json
import logging
import os
import sys
import threading
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

from ._cluster._dask_shards import DaskShards
from ._cluster._health import ClusterHealth
from ._cluster._identity import Expected, ShardIdentity, write_json
from ._cluster._shards import (
    PLACEMENT,
    LocalShards,
    ProgressEvents,
    ShardInfo,
    list_for_shards,
    merge_reports,
    shard_add,
    shard_explain,
    shard_feedback,
    shard_info,
    shard_ingest,
    shard_len,
    shard_of,
    shard_remove,
    shard_search,
    shard_settings,
    shard_source,
    shard_source_count,
    shard_sources_page,
    shard_term_stats,
)
from ._cluster._waits import close_fully, close_replacement, open_client, probe_folder
from ._engine._collection import CollectionStats
from ._exceptions import (
    ConfigError,
    IndexFormatError,
    IndexLockedError,
    IngestError,
    MissingExtraError,
    RetrievalTimeoutError,
    install_hint,
)
from ._ingest._options import IngestOptions, ProgressHook
from ._ingest._run import IngestReport, Progress
from ._kb import Explanation, KnowledgeBase, edit_folder
from ._storage._lock import IndexLock
from ._text._analysis import Analyzer
from ._types import Hit, Sections, StrPath
from ._validate import check_int, check_metadata, check_number, int_k, one_of, text_items

__all__ = ["MANIFEST", "ShardedHits", "ShardedKnowledgeBase", "connect", "shard_of"]

log = logging.getLogger(__name__)
T = TypeVar("T")

MANIFEST = "cluster.json"
FORMAT_VERSION = 1
MAX_SHARDS = 4096
DEFAULT_TIMEOUT = 60.0
# Seconds a writer waits for another to finish with the index (KnowledgeBase.edit's default).
LOCK_TIMEOUT = 30.0
# RM3 settings of KnowledgeBase.search(feedback=True), repeated over shards.
_FEEDBACK_DOCS = 10
_FEEDBACK_TERMS = 10
_FEEDBACK_ORIGINAL_WEIGHT = 0.5
# The scheduler settings a sharded index wants (docs/scale.md: set them on a real cluster too).
DASK_CONFIG = {"distributed.scheduler.work-stealing": False, "distributed.scheduler.worker-saturation": "inf"}
# Clusters connect("local") started, by id of their client.
_STARTED: dict[int, Any] = {}
# The lost-worker timeout before the first of them started (see connect).
_LOST_WORKER_KEY = "distributed.deploy.lost-worker-timeout"
_LOST_WORKER: list[Any] = []


def require_dask() -> None:
    """Raise ``MissingExtraError`` with the install line when ``distributed`` is missing."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise MissingExtraError(f"the Dask cluster needs the dask extra: {install_hint('dask')}") from None


def connect(
    address: str, *, n_workers: int | None = None, timeout: float = 30.0, worker_log_level: int = logging.WARNING
) -> Any:
    """A ``distributed.Client`` for ``address``; ``"local"`` starts a loopback ``LocalCluster``.

    ``timeout`` bounds the wait for the scheduler (seconds): an unreachable
    address is a ``RetrievalTimeoutError``, a worker's address a ``ConfigError``.
    An index opened on the client heals when it loses the scheduler and it comes back, however long it was
    away (see ``DaskShards``).  ``worker_log_level``: what the
    local cluster's processes (which share this process's stderr) print; a
    shard's error reaches the caller as an exception either way.  Closing
    the client also closes a cluster started here.
    """
    require_dask()
    from distributed import Client, LocalCluster

    if address == "local":
        import dask

        # Work stealing would copy a shard to an idle worker to run one
        # search there: slow (a shard travels as its index files) for nothing.
        # Queuing holds a shard's load back while a worker is "saturated";
        # off, a lost shard's rebuild starts at once on a live worker.
        with dask.config.set(DASK_CONFIG):
            # (distributed's constructors are not annotated: hence the ignores.)
            cluster = LocalCluster(  # type: ignore[no-untyped-call]
                host="127.0.0.1",
                processes=True,
                n_workers=n_workers if n_workers is not None else min(3, os.cpu_count() or 1),
                threads_per_worker=1,
                dashboard_address=None,  # no dashboard
                silence_logs=worker_log_level,
                # The scheduler still serves a few HTTP routes (health, metrics):
                # on loopback, on a free port. Left alone it tries 8787 and
                # warns when another cluster on this machine holds it.
                scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
            )
        client = Client(cluster)  # type: ignore[no-untyped-call]
        if not _STARTED:
            _LOST_WORKER[:] = [dask.config.get(_LOST_WORKER_KEY)]
            # LocalCluster closes a worker's nanny for good when, this long
            # after the worker was lost, no worker of its name is registered;
            # a nanny restarts its lost worker in well under a second, but
            # under repeated kills the check can land inside a restart, and
            # after enough kills (about 40 here) no worker is left to rebuild
            # the shards.  Read when a worker is lost (not when the cluster
            # starts), so it is set for as long as a local cluster runs.
            dask.config.set({_LOST_WORKER_KEY: "3650 days"})
        _STARTED[id(client)] = cluster  # closed with the client (see close_client)
        return client
    try:
        # Checked first: a dead address fails within ``timeout``, a worker's address is named as one.
        return open_client(address, timeout)
    except RetrievalTimeoutError:
        raise
    except OSError as exc:  # distributed's connect timeout and refusals are OSErrors
        _close_unstarted(exc)
        raise RetrievalTimeoutError(
            f"cannot reach the Dask scheduler at {address} within {timeout:g} s ({exc})"
        ) from None


def _close_unstarted(exc: BaseException) -> None:
    """Stop the event loop of the client whose constructor raised ``exc``.

    The loop's thread starts before the connection is tried, and neither the
    failed constructor nor ``close()`` of a client that never connected
    stops it (distributed 2026.8): it would run until the half-made client
    is garbage collected, and a process with threads no longer forks its
    ingest workers (``clanker_rag._ingest._parallel``).
    """
    from distributed import Client

    tb = exc.__traceback__
    while tb is not None:
        made = tb.tb_frame.f_locals.get("self")
        if isinstance(made, Client):
            runner = getattr(made, "_loop_runner", None)
            with contextlib.suppress(Exception):
                if runner is not None:
                    runner.stop()
            return
        tb = tb.tb_next


def close_client(client: Any) -> None:
    """Close a client from :func:`connect`, and the cluster it started."""
    cluster = _STARTED.pop(id(client), None)
    close_replacement(client)  # the client that replaced it, if it gave up reconnecting
    close_fully(client)
    if cluster is not None:
        cluster.close()
        if not _STARTED and _LOST_WORKER:
            import dask

            dask.config.set({_LOST_WORKER_KEY: _LOST_WORKER.pop()})


class ShardedHits(list[Hit]):
    """Search results; ``missing`` names the shards that did not answer (``allow_partial=True``)."""

    missing: tuple[int, ...] = ()

    def __init__(self, hits: Iterable[Hit] = (), missing: Iterable[int] = ()) -> None:
        super().__init__(hits)
        self.missing = tuple(sorted(missing))


def _order(hit: Hit) -> tuple[float, str, int]:
    return (-hit.score, hit.source, hit.chunk_index)


# Query terms whose whole-collection figures a client keeps (term_tables=True):
# at most this many, about 100 bytes each, whatever the index's size.
TERM_CACHE = 65536
# Source names asked of each shard at a time when listing them.
SOURCES_PAGE = 1000


class _TermCache:
    """The whole collection's chunk count, summed length and the document frequencies of the
    query terms searched lately, kept on the client: at most ``size`` terms, the least recently
    searched dropped first.

    Any change to a shard empties it; figures gathered while a change ran are
    not kept (its epoch moved on), so a search never scores with stale ones.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.base: tuple[int, int] | None = None  # chunks, summed length
        self.df: OrderedDict[str, int | None] = OrderedDict()  # None: no shard's vocabulary holds it
        self.epoch = 0
        self.lock = threading.Lock()

    def forget(self) -> None:
        with self.lock:
            self.base = None
            self.df.clear()
            self.epoch += 1

    def lookup(self, terms: Sequence[str]) -> tuple[CollectionStats | None, int]:
        """The statistics of ``terms`` when every one is kept (else ``None``), and the epoch."""
        with self.lock:
            if self.base is None or any(t not in self.df for t in terms):
                return None, self.epoch
            df: dict[str, int] = {}
            for term in terms:
                self.df.move_to_end(term)
                count = self.df[term]
                if count is not None:
                    df[term] = count
            return CollectionStats(self.base[0], self.base[1], df), self.epoch

    def keep(self, epoch: int, asked: Sequence[str], stats: CollectionStats) -> None:
        with self.lock:
            if epoch != self.epoch:
                return
            self.base = (stats.n_docs, stats.total_length)
            for term in asked:
                self.df[term] = stats.df.get(term)
                self.df.move_to_end(term)
            while len(self.df) > self.size:
                self.df.popitem(last=False)


class _IngestBar:
    """One progress bar (the one-machine ingest's) for every shard's ingest of a root.

    On a cluster each shard's hook logs a Dask event that this client
    follows; in this process the hooks are called directly.
    """

    def __init__(self, n_shards: int, stream: IO[str] | None) -> None:
        self.stream = stream
        self.done = [0] * n_shards
        self.totals = [0] * n_shards  # each shard's files (its part of the walk), as it reports them
        self.total = 0
        self.bar: Progress | None = None
        self.lock = threading.Lock()

    def shard_did(self, shard: int, done: int, total: int) -> None:
        with self.lock:
            self.done[shard] = done
            self.totals[shard] = total
            self.total = sum(self.totals)
            if self.bar is None:
                self.bar = Progress(self.total, self.stream)
            self.bar.total = self.total
            self.bar.update(sum(self.done))

    def _event(self, event: tuple[float, list[int]]) -> None:
        shard, done, total = event[1]
        self.shard_did(shard, done, total)

    @contextlib.contextmanager
    def following(self, client: Any) -> Iterator[list[ProgressHook | None]]:
        """The shards' hooks, while this bar follows them; the bar ends full."""
        n = len(self.done)
        if self.stream is None:
            yield [None] * n
            return
        topic = ""
        if client is None:
            hooks: list[ProgressHook | None] = [functools.partial(self.shard_did, i) for i in range(n)]
        else:
            topic = f"clanker-rag-ingest-{uuid.uuid4().hex}"
            client.subscribe_topic(topic, self._event)
            hooks = [ProgressEvents(topic, i) for i in range(n)]
        try:
            yield hooks
        finally:
            if topic:
                client.unsubscribe_topic(topic)
            with self.lock:
                if self.bar is not None:
                    self.bar.close(self.total)


class ShardedKnowledgeBase:
    """A knowledge base split into ``shards`` knowledge bases, on a Dask cluster or in this process.

    ``client`` is a ``distributed.Client`` (see :func:`connect`); ``None``
    keeps every shard here.  ``timeout`` bounds each search's wait for the
    shards (seconds).  A search first gathers its terms' whole-collection
    figures from the shards; ``term_tables`` (default) keeps those of the
    last ``TERM_CACHE`` query terms here until the next change, so a search
    whose terms are all kept is one round trip to the shards; ``False``
    keeps no per-term state here (two round trips a search: see
    docs/scale.md).  Other
    keyword arguments configure the shards as ``KnowledgeBase(...)`` would
    (chunking, analyser settings, BM25).
    """

    def __init__(
        self,
        shards: int = 3,
        *,
        client: Any = None,
        timeout: float = DEFAULT_TIMEOUT,
        term_tables: bool = True,
        **options: Any,
    ) -> None:
        _check_shards(shards)
        template = KnowledgeBase(**options)  # validates the options here, before any worker sees them
        _check_timeout(timeout)
        if client is None:
            home: LocalShards | DaskShards = LocalShards.create(shards, options)
        else:
            require_dask()
            home = DaskShards.create(client, shards, options, float(timeout))
        self._init(home, client, timeout, None, shard_settings(template), template.analyzer, term_tables)

    def _init(
        self,
        home: LocalShards | DaskShards,
        client: Any,
        timeout: float,
        path: Path | None,
        settings: dict[str, Any],
        analyzer: Analyzer,
        term_tables: bool,
    ) -> None:
        if not isinstance(term_tables, bool):
            raise ConfigError(f"term_tables={term_tables!r} must be True or False")
        _check_timeout(timeout)
        self._home = home
        self.timeout = float(timeout)
        self._path = path
        self._settings = settings
        self._cache = _TermCache(TERM_CACHE) if term_tables else None
        # The client analyses queries itself (as every shard would): it holds the statistics.
        self._analyzer = analyzer
        # The saved index this one came from: its id and save count (see save()).
        self._index_id: str | None = None
        self._generation = 0
        self._lock: IndexLock | None = None  # held by edit()
        self._changes = self._saved_changes = 0

    # -- opening and saving ----------------------------------------------------------
    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        client: Any = None,
        shards: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        term_tables: bool = True,
        replicas: int = 1,
        private: bool = False,
    ) -> ShardedKnowledgeBase:
        """Open a sharded index folder written by :meth:`save`.

        With a ``client`` each shard loads on a worker (the folder must be on
        storage the workers can read); without one, in this process.
        ``shards`` (optional) must equal the saved shard count: sources are
        placed by it, so another count is refused rather than misplacing them.
        ``replicas=2`` loads a second copy of each shard on another worker
        (twice the workers' memory): each read goes to the copy whose worker
        has been faster and, when it is slow to answer, to the other too
        (hedged), so one hung worker does not stall searches.  A change drops
        the second copies until the next save.  ``private`` (shards in this
        process only): their data files read into memory, not mapped, as
        ``KnowledgeBase.load(private=True)`` does for a server.
        """
        folder = Path(path).absolute()
        manifest = read_manifest(folder)
        n = manifest["shards"]
        if shards is not None and shards != n:
            raise ConfigError(
                f"{folder} holds {n} shards, not shards={shards}: sources are placed by the shard count; "
                f"open it with {n}, or ingest into a new folder with {shards}"
            )
        _check_timeout(timeout)
        one_of("replicas", replicas, (1, 2))
        if private and client is not None:
            raise ConfigError("private=True reads shards into this process's memory: it needs client=None")
        folders = [str(folder / name) for name in manifest["shard_dirs"]]
        index_id, generation = manifest.get("index_id"), manifest.get("generation")
        expected = [Expected(i, index_id, generation) for i in range(n)]
        if client is None:
            home: LocalShards | DaskShards = LocalShards.open(folders, expected, private=private)
        else:
            require_dask()
            home = DaskShards.open(client, folders, expected, float(timeout), replicas)
        settings = home.map(shard_settings, {0: ()}, timeout=timeout)[0]
        self = cls.__new__(cls)
        analyzer = Analyzer.from_settings(settings["analyzer"])
        self._init(home, client, timeout, folder, settings, analyzer, term_tables)
        self._index_id, self._generation = index_id, generation or 0
        return self

    @property
    def client(self) -> Any:
        """The ``distributed.Client`` holding the shards (``None``: in this process); a new one to the same
        scheduler once the first gave up reconnecting (see ``DaskShards``)."""
        return self._home.client

    @property
    def path(self) -> Path | None:
        """The folder this index was loaded from or last saved to."""
        return self._path

    @property
    def analyzer(self) -> Analyzer:
        """The shards' analyser (the client analyses queries with it, as every shard would)."""
        return self._analyzer

    @property
    def n_shards(self) -> int:
        return len(self._home)

    def settings(self) -> dict[str, Any]:
        """The shards' analyser, BM25 and chunking settings (as ``clanker-rag stats`` shows them)."""
        return dict(self._settings)

    def save(self, path: StrPath | None = None) -> Path:
        """Write one ordinary index folder per shard (``shard-000``...) and the manifest ``cluster.json``.

        Each shard folder is written atomically and opens with
        ``KnowledgeBase.load``; the manifest is written last, atomically.
        Refuses a folder holding a sharded index with another shard count.
        """
        if path is None:
            if self._path is None:
                raise ConfigError("save() needs a path: this sharded knowledge base was never loaded or saved")
            folder = self._path
        else:
            if isinstance(path, str) and not path.strip():
                raise ConfigError(f"save() path={path!r} is empty: give the index folder to write")
            folder = Path(path).absolute()
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"{folder}: an index path must be a folder")
        ours = _same_folder(self._path, folder)
        own_lock = ours and self._lock is not None and self._lock.held
        lock = self._lock if own_lock and self._lock is not None else IndexLock(folder, timeout=LOCK_TIMEOUT)
        lock.acquire()  # (creates the folder)
        try:
            self._save_locked(folder, ours)
        finally:
            if not own_lock:
                lock.release()
        return folder

    def _save_locked(self, folder: Path, ours: bool) -> None:
        old = read_manifest(folder) if (folder / MANIFEST).exists() else None
        if old is not None:
            if old["shards"] != self.n_shards:
                raise ConfigError(
                    f"{folder} holds {old['shards']} shards, this index {self.n_shards}: save to another folder"
                )
            if not ours or (self._index_id is not None and old.get("index_id") not in (None, self._index_id)):
                raise ConfigError(
                    f"{folder}: already holds a sharded index that this one was not loaded from; "
                    "saving would replace its documents (load it and add to it, or save elsewhere)"
                )
            if old.get("generation", 0) != self._generation:
                # As KnowledgeBase.save refuses a stale save: merging is not ours to guess.
                raise IndexLockedError(
                    f"{folder}: another process saved this sharded index after it was loaded here; "
                    "saving now would drop its changes (reload and redo, or use ShardedKnowledgeBase.edit())"
                )
        elif (folder / "index.json").exists():
            raise ConfigError(f"{folder} holds a one-machine index; save the sharded index to another folder")
        if self.client is not None:
            probe_folder(self.client, folder, patience=self.timeout)
        index_id = self._index_id or (old.get("index_id") if old else None) or uuid.uuid4().hex
        generation = self._generation + 1
        writer = uuid.uuid4().hex  # this save: a replayed save task recognises its own shard folders
        names = [f"shard-{i:03d}" for i in range(self.n_shards)]
        self._home.save(
            [str(folder / name) for name in names],
            [ShardIdentity(index_id, i, generation, writer) for i in range(self.n_shards)],
        )
        write_manifest(
            folder,
            {
                "format_version": FORMAT_VERSION,
                "shards": self.n_shards,
                "placement": PLACEMENT,
                "shard_dirs": names,
                "index_id": index_id,
                "generation": generation,
            },
        )
        self._path, self._index_id, self._generation = folder, index_id, generation
        self._saved_changes = self._changes

    @classmethod
    @contextlib.contextmanager
    def edit(
        cls,
        path: str | os.PathLike[str],
        *,
        client: Any = None,
        shards: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        lock_timeout: float = LOCK_TIMEOUT,
        term_tables: bool = True,
        **create: Any,
    ) -> Iterator[ShardedKnowledgeBase]:
        """Load-modify-save under the sharded index's writer lock (``DIR/.lock``), as ``KnowledgeBase.edit``.

        Creates the index (``shards``, default 3, and ``create`` options) when
        the folder has none; saves when the block exits without an exception
        and changed something since the load or its last save.  A writer in
        another process (on any machine mounting the folder) waits up to
        ``lock_timeout`` seconds, then gets ``IndexLockedError``.  The shards
        are released when the block ends.
        """
        folder = Path(path).absolute()

        def opened(lock: IndexLock) -> ShardedKnowledgeBase:
            if (folder / MANIFEST).exists():
                kb = cls.load(folder, client=client, shards=shards, timeout=timeout, term_tables=term_tables)
            else:
                n = 3 if shards is None else shards
                kb = cls(n, client=client, timeout=timeout, term_tables=term_tables, **create)
                kb._path = folder
            kb._lock = lock
            return kb

        def unsaved(kb: ShardedKnowledgeBase) -> bool:
            return kb._changes != kb._saved_changes or not (folder / MANIFEST).exists()

        def close(kb: ShardedKnowledgeBase) -> None:
            kb._lock = None
            kb.close()

        lock = IndexLock(folder, timeout=lock_timeout)
        with edit_folder(lock, opened, unsaved, lambda kb: kb.save(folder), close) as kb:
            yield kb

    def close(self) -> None:
        """Release the shards held on the cluster (the client stays open: it is the caller's)."""
        self._home.close()

    def __enter__(self) -> ShardedKnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- adding and removing ---------------------------------------------------------
    def _change(self, changes: Mapping[int, tuple[Callable[..., T], tuple[Any, ...]]]) -> dict[int, T]:
        self._changes += 1
        cache = self._cache
        if cache is None:
            return self._home.change(changes)
        # Before: a search meanwhile must not keep the old figures; after: nor
        # ones gathered while the change ran.
        cache.forget()
        try:
            return self._home.change(changes)
        finally:
            cache.forget()

    def shard_of(self, source: str) -> int:
        """The shard that holds (or would hold) ``source``."""
        if not isinstance(source, str) or not source:
            raise ConfigError(f"source must be a non-empty str, not {source!r}")
        return shard_of(source, self.n_shards)

    def add_text(
        self, text: str, source: str, metadata: Mapping[str, Any] | None = None, *, sections: Sections | None = None
    ) -> int:
        """``KnowledgeBase.add_text`` on the source's shard; returns chunks added."""
        i = self.shard_of(source)
        check_metadata(source, metadata)  # here, not as a worker's error
        item = (text, source, dict(metadata) if metadata else None, list(sections) if sections is not None else None)
        return self._change({i: (shard_add, ([item],))})[i]

    def add_texts(self, items: Iterable[tuple[str, str] | tuple[str, str, Mapping[str, Any] | None]]) -> int:
        """Bulk :meth:`add_text` of ``(text, source[, metadata])``: one change per shard."""
        batches: dict[int, list[Any]] = {}
        for text, source, meta in text_items(items):
            i = self.shard_of(source)
            check_metadata(source, meta)
            batches.setdefault(i, []).append((text, source, dict(meta) if meta else None, None))
        if not batches:
            return 0
        return sum(self._change({i: (shard_add, (b,)) for i, b in batches.items()}).values())

    def remove(self, source: str) -> int:
        """Remove every chunk of ``source``; returns how many (0 if unknown)."""
        i = self.shard_of(source)
        return self._change({i: (shard_remove, ([source],))})[i]

    def ingest(self, path: StrPath | Sequence[StrPath], **options: Any) -> IngestReport:
        """Ingest files and folders, each shard reading the files placed on it (on its worker).

        Options are those of :func:`clanker_rag.ingest` with one-machine
        semantics (fingerprint skips, replace, sync, secret guard, skips),
        except: ``jobs`` and ``checkpoint_*`` are ignored (each shard reads
        on its own worker), ``index_path`` saves once at the end, and
        ``progress`` draws one bar on this machine for every shard.  Each
        root is walked once, by one worker (here without Dask), and each
        shard is given the files placed on it: no shard walks the tree.
        Paths must be readable by every worker.
        """
        settings = IngestOptions(**options)
        show = sys.stderr.isatty() if settings.progress is None else bool(settings.progress)
        # What every shard runs with: no saves, checkpoints or workers of its own.
        shared = dataclasses.replace(settings, index_path=None, progress=False, jobs=None, overwrite=False)
        paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
        if not paths:
            raise IngestError("nothing to ingest: no path given")
        roots = [os.path.abspath(os.fspath(p)) for p in paths]
        for root in roots:
            if not os.path.exists(root):
                raise IngestError(f"cannot ingest {root!r}: no such file or folder")
        index_path = settings.index_path
        if self.client is not None:
            # Every worker reads the tree and, at the save, writes the shard folders: a worker that
            # cannot see them fails here, named, rather than scattering shards over local disks.
            where = None if index_path is None else Path(index_path).absolute()
            probe_folder(self.client, where, roots, patience=self.timeout)
        started = time.monotonic()
        before = len(self)
        reports: list[IngestReport] = []
        for root in roots:
            # As ingest() names sources of several roots: each after its folder.
            name = os.path.basename(os.path.realpath(root)) or "root"
            pre = settings.prefix + name + "/" if len(roots) > 1 and os.path.isdir(root) else settings.prefix
            n = self.n_shards
            # The tree is walked once (on a worker, or here without Dask), each
            # file placed on its shard; each shard gets its part of the listing
            # from the walking worker and stats and reads only its own files.
            walk = dataclasses.replace(settings.discovery(), source_prefix=pre)
            parts = self._home.split(list_for_shards, (root, walk, n), n)
            bar = _IngestBar(n, sys.stderr if show else None)
            with bar.following(self.client) as hooks:
                runs = {i: dataclasses.replace(shared, prefix=pre, progress=hooks[i] or False) for i in range(n)}
                results = self._change({i: (shard_ingest, (i, root, runs[i], parts[i])) for i in range(n)})
            del parts  # the listing's futures: the workers may drop it now
            reports.append(merge_reports([results[i] for i in range(n)]))
        report = merge_reports(reports)
        report.roots = [r for rep in reports for r in rep.roots]
        report.workers = self.n_shards
        report.chunks_before = before
        report.chunks_total = len(self)
        if index_path is not None:
            self.save(index_path)
            report.saves = 1
        # The run's wall time as the caller saw it, not the slowest shard's own
        # share (a shard skips the files placed elsewhere in no time).
        report.seconds = time.monotonic() - started
        return report

    # -- reading -----------------------------------------------------------------------
    def _info(self) -> dict[int, ShardInfo]:
        return self._home.map(shard_info, self._all(), timeout=self.timeout)

    def shard_workers(self) -> list[list[str]]:
        """The Dask worker holding each copy of each shard (empty lists in this process): one address a copy,
        so two copies on one worker show as that worker twice; a copy being rebuilt is left out."""
        return self._home.holders()

    def health(self) -> ClusterHealth:
        """Green, yellow or red, as Elasticsearch reports it, with each shard's workers, copies and last error.

        Green: every shard has its copies (``replicas``) on distinct workers;
        yellow: every shard is served, some copies are missing; red: some
        shard is held by no worker.  ``.to_dict()`` is what ``clanker-rag
        cluster health --json`` prints.  In this process: green, no workers.
        """
        return self._home.health()

    def rebalance(self) -> None:
        """Look at the shards' placement now rather than at the next periodic look (see ``docs/scale.md``)."""
        self._home.heal()

    def shard_stats(self) -> list[ShardInfo]:
        """Each shard's chunks, terms, source count and formats (counted on the shards)."""
        info = self._info()
        return [info[i] for i in range(self.n_shards)]

    def source_count(self) -> int:
        """How many sources the index holds (counted on the shards)."""
        return sum(self._home.map(shard_source_count, self._all(), timeout=self.timeout).values())

    def sources_page(self, after: str | None = None, limit: int = SOURCES_PAGE) -> list[str]:
        """Up to ``limit`` source names, sorted, those after ``after`` (from the first: ``None``).

        Each shard sends at most ``limit`` names: pass the last name of a
        page as ``after`` to get the next one (an empty page ends).
        """
        if after is not None and not isinstance(after, str):
            raise ConfigError(f"after must be a source name or None, not {after!r}")
        check_int("limit", limit, 1, 1_000_000)
        pages = self._home.map(shard_sources_page, self._all(after, limit), timeout=self.timeout)
        return list(itertools.islice(heapq.merge(*pages.values()), limit))

    def iter_sources(self, page: int = SOURCES_PAGE) -> Iterator[str]:
        """Every source name, sorted, fetched ``page`` names a shard at a time (each name sent once)."""
        check_int("page", page, 1, 1_000_000)
        n = self.n_shards

        def fetch(shards: Iterable[int], after: Mapping[int, str | None]) -> dict[int, list[str]]:
            args = {i: (after[i], page) for i in shards}
            return self._home.map(shard_sources_page, args, timeout=self.timeout)

        first = fetch(range(n), dict.fromkeys(range(n)))

        def one(i: int) -> Iterator[str]:
            names = first.pop(i)
            while names:
                yield from names
                if len(names) < page:
                    return
                names = fetch((i,), {i: names[-1]})[i]

        return heapq.merge(*(one(i) for i in range(n)))

    def sources(self) -> list[str]:
        """Every indexed source, sorted (fetched page by page: see :meth:`iter_sources`)."""
        return list(self.iter_sources())

    def __len__(self) -> int:
        return sum(self._home.map(shard_len, self._all(), timeout=self.timeout).values())

    def __contains__(self, source: object) -> bool:
        return isinstance(source, str) and bool(source) and self.source_metadata(source) is not None

    def _source(self, source: str) -> tuple[str | None, dict[str, Any] | None, list[Hit]]:
        i = self.shard_of(source)
        return self._home.map(shard_source, {i: (source,)}, timeout=self.timeout)[i]

    def source_metadata(self, source: str) -> dict[str, Any] | None:
        return self._source(source)[1]

    def source_text(self, source: str) -> str | None:
        return self._source(source)[0]

    def chunks(self, source: str) -> list[Hit]:
        """The chunks of one source, in order, as score-0 hits."""
        return self._source(source)[2]

    def __repr__(self) -> str:
        where = "in this process" if self.client is None else "on a Dask cluster"
        return f"<ShardedKnowledgeBase {self.n_shards} shards {where}>"

    # -- searching -----------------------------------------------------------------------
    def _all(self, *args: Any) -> dict[int, tuple[Any, ...]]:
        return {i: args for i in range(self.n_shards)}

    def _statistics(self, terms: Iterable[str], allow_partial: bool) -> tuple[CollectionStats, set[int]]:
        """The whole collection's statistics for ``terms``, and the shards left out of them.

        One round trip: every shard gives its chunk count, summed length and
        the document frequencies of ``terms`` alone (never its vocabulary);
        with ``term_tables`` the answer is kept for the next searches (see
        ``_TermCache``).  A shard that cannot give them is left out
        (``allow_partial``), and then nothing is kept.
        """
        asked = sorted(set(terms))
        cache, epoch = self._cache, 0
        if cache is not None:
            kept, epoch = cache.lookup(asked)
            if kept is not None:
                return kept, set()
        parts = self._home.map(shard_term_stats, self._all(asked), timeout=self.timeout, allow_partial=allow_partial)
        stats = CollectionStats.combine(parts[i] for i in sorted(parts))
        missing = set(range(self.n_shards)) - set(parts)
        if cache is not None and not missing:
            cache.keep(epoch, asked, stats)
        return stats, missing

    def _prepare(
        self, query: str, source: str | None, where: Mapping[str, Any] | None, feedback: bool, allow_partial: bool
    ) -> tuple[dict[str, float], CollectionStats, set[int]]:
        """The query's term weights (expanded with ``feedback``) and the whole collection's statistics."""
        if not isinstance(query, str):
            raise ConfigError(f"query must be str, not {type(query).__name__}")
        # The term weights as KnowledgeBase.search counts them.
        counts = {term: float(n) for term, n in Counter(self._analyzer(query)).items()}
        if not counts:
            return {}, CollectionStats(0, 0), set()
        stats, missing = self._statistics(counts, allow_partial)
        # Terms no shard ever indexed count for nothing, as in KnowledgeBase.search.
        weights = {t: w for t, w in counts.items() if t in stats.df}
        if feedback and weights:
            weights, stats, lost = self._expand(weights, stats, source, where, allow_partial)
            missing |= lost
        return weights, stats, missing

    def _expand(
        self,
        weights: dict[str, float],
        stats: CollectionStats,
        source: str | None,
        where: Mapping[str, Any] | None,
        allow_partial: bool,
    ) -> tuple[dict[str, float], CollectionStats, set[int]]:
        """RM3 as ``KnowledgeBase`` does it, over the best chunks of every shard."""
        args = self._all(weights, _FEEDBACK_DOCS, stats, source, where)
        parts = self._home.map(shard_feedback, args, timeout=self.timeout, allow_partial=allow_partial)
        missing = set(range(self.n_shards)) - set(parts)
        top = heapq.nsmallest(_FEEDBACK_DOCS, (p for ps in parts.values() for p in ps), key=lambda p: _order(p[0]))
        if not top:
            return weights, stats, missing
        total = sum(hit.score for hit, _ in top)
        model: dict[str, float] = {}
        for hit, terms in top:
            if not terms:
                continue
            share = hit.score / total / len(terms)
            for term, tf in Counter(terms).items():
                if len(term) > 1 and not term.isdigit():
                    model[term] = model.get(term, 0.0) + tf * share
        best = heapq.nlargest(_FEEDBACK_TERMS, model.items(), key=lambda item: (item[1], item[0]))
        norm = sum(v for _, v in best) or 1.0
        qnorm = sum(weights.values())
        out = {term: _FEEDBACK_ORIGINAL_WEIGHT * w / qnorm for term, w in weights.items()}
        for term, value in best:
            out[term] = out.get(term, 0.0) + (1 - _FEEDBACK_ORIGINAL_WEIGHT) * value / norm
        # The expansion terms' frequencies: gathered as the query's were.
        more, lost = self._statistics(out, allow_partial)
        return out, more, missing | lost

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        source: str | None = None,
        where: Mapping[str, Any] | None = None,
        feedback: bool = False,
        allow_partial: bool = False,
    ) -> ShardedHits:
        """``KnowledgeBase.search`` over every shard, with the same scores.

        Raises ``RetrievalTimeoutError`` naming the shards that did not
        answer within ``timeout`` seconds, unless ``allow_partial=True``:
        then the hits of the shards that answered come back, and
        ``result.missing`` names the others.
        """
        int_k(k)
        if k <= 0:
            return ShardedHits()
        weights, stats, missing = self._prepare(query, source, where, feedback, allow_partial)
        if not weights:
            return ShardedHits((), missing)
        args = self._all(weights, k, stats, source, where)
        parts = self._home.map(shard_search, args, timeout=self.timeout, allow_partial=allow_partial)
        missing |= set(range(self.n_shards)) - set(parts)
        return ShardedHits(heapq.nsmallest(k, (h for hs in parts.values() for h in hs), key=_order), missing)

    def __call__(self, query: str, k: int = 10) -> list[Hit]:
        return self.search(query, k)

    def collection_stats(self, terms: Iterable[str]) -> CollectionStats:
        """Chunk count, summed length and the document frequency of ``terms`` over every shard."""
        return self._statistics(terms, False)[0]

    def explain(self, query: str, hit: Hit, *, feedback: bool = False) -> Explanation:
        """Per-term breakdown of ``hit``'s score with the whole collection's statistics."""
        weights, stats, _ = self._prepare(query, None, None, feedback, False)
        i = self.shard_of(hit.source)
        return self._home.map(shard_explain, {i: (weights, hit, stats)}, timeout=self.timeout)[i]


def _same_folder(a: Path | None, b: Path) -> bool:
    try:
        return a is not None and os.path.samefile(a, b)
    except OSError:
        return False


def _check_timeout(timeout: object) -> None:
    check_number("timeout", timeout, 0, 1e6, low_open=True, high_open=True)  # seconds


def _check_shards(shards: object) -> None:
    check_int("shards", shards, 1, MAX_SHARDS)


def read_manifest(folder: Path) -> dict[str, Any]:
    """The checked manifest of a sharded index folder."""
    where = folder / MANIFEST
    try:
        manifest = json.loads(where.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise IndexFormatError(f"{where}: no sharded index here (no {MANIFEST})") from None
    except (OSError, ValueError) as exc:
        raise IndexFormatError(f"{where}: unreadable manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format_version") != FORMAT_VERSION:
        version = manifest.get("format_version") if isinstance(manifest, dict) else None
        raise IndexFormatError(f"{where}: format_version={version!r}, this version reads {FORMAT_VERSION}")
    n = manifest.get("shards")
    dirs = manifest.get("shard_dirs")
    if not isinstance(n, int) or not 1 <= n <= MAX_SHARDS or not isinstance(dirs, list) or len(dirs) != n:
        raise IndexFormatError(f"{where}: shards={n!r} does not match shard_dirs")
    if any(not isinstance(d, str) or "/" in d or "\\" in d or d in ("", ".", "..") for d in dirs):
        raise IndexFormatError(f"{where}: shard_dirs must be plain folder names inside the index folder")
    index_id, generation = manifest.get("index_id"), manifest.get("generation")
    if (index_id is None) != (generation is None) or (
        index_id is not None
        and (
            not isinstance(index_id, str)
            or not index_id
            or not isinstance(generation, int)
            or isinstance(generation, bool)
            or generation < 1
        )
    ):
        raise IndexFormatError(f"{where}: index_id={index_id!r}, generation={generation!r} are malformed")
    if manifest.get("placement") != PLACEMENT:
        raise IndexFormatError(f"{where}: placement={manifest.get('placement')!r}, this version places by {PLACEMENT}")
    return manifest


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    """Write ``cluster.json`` atomically (a temporary file renamed over it), readable as the shards are."""
    write_json(folder / MANIFEST, manifest)

"""Where the shards of a sharded knowledge base live, and what runs on each.

A shard is an ordinary :class:`KnowledgeBase`.  The functions named
``shard_*`` run next to one (on a Dask worker, or in this process) and take
it as their first argument; they return small typed values.  Two homes:

``LocalShards``
    every shard in this process (a sharded index opened without Dask, and
    the property tests);
``DaskShards``
    each shard is the result of a Dask task held in a worker's memory.  A
    shard opened from disk is the result of a load task; each change is a
    task that takes the previous shard and returns the changed one.  So when
    a worker dies, the scheduler rebuilds its shards elsewhere by running
    that lineage again: the load from the last save, then the changes made
    since (they live in the task graph until the next save, which starts a
    fresh lineage from the saved folder).

This module imports ``distributed`` only inside ``DaskShards``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import pickle
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .._engine._collection import CollectionStats
from .._exceptions import ClankerRagError, IndexFormatError, RetrievalTimeoutError
from .._ingest._readers import READER_VERSION
from .._ingest._run import IngestReport, ProgressHook, ingest
from .._kb import Explanation, KnowledgeBase
from .._types import Hit
from ._identity import Expected, ShardIdentity, check_loaded, check_saving, read_identity, write_identity
from ._waits import scheduler_lost, settle, workers_within

__all__ = ["DaskShards", "LocalShards", "ShardBox", "shard_of"]

log = logging.getLogger(__name__)

T = TypeVar("T")
PLACEMENT = "blake2b-64-mod"
# A rough size of a shard for the Dask scheduler (bytes a chunk, see
# docs/scale.md): large enough that it runs tasks where a shard already is
# rather than copying the shard to an idle worker.
_BYTES_PER_CHUNK = 5000
# Seconds to wait for a worker's ShardServer to start (tens of milliseconds
# when the worker is there): a worker that just died may still be listed.
_ACTOR_START = 2.0
# Seconds between checks that the workers a search waits for still hold their shards.
_RECHECK = 0.5


def shard_of(source: str, n_shards: int) -> int:
    """The shard a source lives on: a stable hash of its name (the same in every process and run)."""
    digest = hashlib.blake2b(source.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % n_shards


class ShardBox:
    """A shard as Dask holds it: the knowledge base, sized for the scheduler.

    Dask copies a result between workers (or spills it to disk) by pickling
    it; a knowledge base travels as its saved index files.  That is slow for
    a big shard, so tasks go where their shard is (and ``connect("local")``
    turns work stealing off), but never wrong.
    """

    __slots__ = ("__weakref__", "identity", "kb", "lock")

    def __init__(self, kb: KnowledgeBase, identity: ShardIdentity | None = None) -> None:
        self.kb = kb
        # The identity of the folder this shard was loaded from or last saved
        # to (None: never saved).  It travels with the shard: a shard that
        # moved between workers was reloaded from a temporary folder, and
        # its next save checks the real folder against this.
        self.identity = identity
        # A worker may run a change and searches of one shard at once (on its
        # task threads and its actor thread): one at a time per shard.
        self.lock = threading.Lock()

    def __sizeof__(self) -> int:
        return 1_000_000 + _BYTES_PER_CHUNK * len(self.kb)

    def __reduce__(
        self,
    ) -> tuple[
        Callable[[dict[str, bytes], ShardIdentity | None], ShardBox], tuple[dict[str, bytes], ShardIdentity | None]
    ]:
        # (Saving records the temporary folder as the shard's path; the
        # cluster always saves shards to explicit folders, checked against
        # ``identity``, so nothing reads it.)
        with tempfile.TemporaryDirectory(prefix="clanker-shard-") as tmp:
            folder = self.kb.save(Path(tmp) / "kb")
            files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")}
        return _unbox, (files, self.identity)


def _unbox(files: dict[str, bytes], identity: ShardIdentity | None = None) -> ShardBox:
    with tempfile.TemporaryDirectory(prefix="clanker-shard-") as tmp:
        folder = Path(tmp) / "kb"
        folder.mkdir()
        for name, data in files.items():
            (folder / name).write_bytes(data)
        kb = KnowledgeBase.load(folder)  # reads the files whole: the folder may go
    return ShardBox(kb, identity)


def _here() -> str:
    """`` (on worker ADDRESS)`` inside a Dask task, else nothing: errors say which machine saw them."""
    try:
        from distributed import get_worker

        return f" (on worker {get_worker().address})"
    except (ImportError, ValueError):
        return ""


def load_shard(folder: str, expected: Expected) -> ShardBox:
    """A shard loaded from ``folder``, checked to be the one the manifest expects there."""
    try:
        found = read_identity(folder)
        check_loaded(folder, found, expected)
        kb = KnowledgeBase.load(folder)
    except ClankerRagError as exc:
        where = _here()
        if not where:
            raise
        raise type(exc)(f"{exc}{where}") from None
    except OSError as exc:
        raise IndexFormatError(
            f"{folder}: cannot read shard {expected.shard} ({exc.strerror or exc}){_here()}"
        ) from None
    return ShardBox(kb, found)


def save_shard(box: ShardBox, folder: str, new: ShardIdentity) -> str:
    """Write ``box`` to ``folder`` unless another save got there since it was loaded; then its identity."""
    try:
        check_saving(folder, box.identity, new, read_identity(folder))
        box.kb.save(folder, overwrite=True)  # the identity check above stands for the one save() would make
        write_identity(folder, new)
    except ClankerRagError as exc:
        where = _here()
        if not where:
            raise
        raise type(exc)(f"{exc}{where}") from None
    box.identity = new
    return folder


# -- what runs next to a shard ---------------------------------------------------------------------


def shard_term_stats(kb: KnowledgeBase, terms: list[str]) -> CollectionStats:
    """This shard's chunk count, summed length and the document frequencies of ``terms``."""
    return kb.collection_stats(terms)


def shard_table(kb: KnowledgeBase) -> CollectionStats:
    """This shard's chunk count, summed length and every term's document frequency (the client keeps it)."""
    return kb.collection_stats()


def shard_search(
    kb: KnowledgeBase,
    weights: Mapping[str, float],
    k: int,
    stats: CollectionStats,
    source: str | None,
    where: Mapping[str, Any] | None,
) -> list[Hit]:
    return kb.search_with_stats(weights, k, stats, source=source, where=where)


def shard_feedback(
    kb: KnowledgeBase,
    weights: Mapping[str, float],
    k: int,
    stats: CollectionStats,
    source: str | None,
    where: Mapping[str, Any] | None,
) -> list[tuple[Hit, list[str]]]:
    """The best hits here for the feedback round, each with its terms (text, then section label)."""
    out = []
    for hit in kb.search_with_stats(weights, k, stats, source=source, where=where):
        terms = list(kb.analyzer(hit.text))
        if hit.section:
            terms.extend(kb.analyzer(hit.section))
        out.append((hit, terms))
    return out


def shard_explain(kb: KnowledgeBase, weights: Mapping[str, float], hit: Hit, stats: CollectionStats) -> Explanation:
    return kb.explain_with_stats(weights, hit, stats)


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """What ``stats`` and ``sources`` need of a shard."""

    chunks: int
    terms: int
    sources: list[str]
    formats: dict[str, int] = field(default_factory=dict)


def shard_info(kb: KnowledgeBase) -> ShardInfo:
    formats: dict[str, int] = {}
    sources = kb.sources()
    for source in sources:
        meta = kb.source_metadata(source) or {}
        fmt = str(meta.get("format") or os.path.splitext(source)[1].lstrip(".") or "text")
        formats[fmt] = formats.get(fmt, 0) + 1
    return ShardInfo(len(kb), kb.n_terms, sources, formats)


def shard_settings(kb: KnowledgeBase) -> dict[str, Any]:
    return {
        "analyzer": kb.analyzer.settings(),
        "bm25": kb.bm25.settings(),
        "chunking": kb.chunker.settings(),
    }


def shard_source(kb: KnowledgeBase, source: str) -> tuple[str | None, dict[str, Any] | None, list[Hit]]:
    return kb.source_text(source), kb.source_metadata(source), list(kb.chunks(source))


Item = tuple[str, str, Mapping[str, Any] | None, Sequence[tuple[int, int, str | None]] | None]


def shard_add(kb: KnowledgeBase, items: list[Item]) -> int:
    return sum(kb.add_text(text, source, meta, sections=sections) for text, source, meta, sections in items)


def shard_remove(kb: KnowledgeBase, sources: list[str]) -> int:
    return sum(kb.remove(source) for source in sources)


def shard_save(kb: KnowledgeBase, folder: str) -> str:
    kb.save(folder)
    return folder


class _Placed:
    """A shard as the ingest sees it: files placed on another shard look unchanged.

    ``ingest`` then stats them (to report them unchanged) but never reads
    them; files placed here are read, chunked and indexed as on one machine.
    """

    def __init__(self, kb: KnowledgeBase, index: int, n_shards: int, root: str, prefix: str) -> None:
        self.kb = kb
        self.chunker = kb.chunker  # the ingest sizes sections by it
        self.index = index
        self.n_shards = n_shards
        self.is_dir = os.path.isdir(root)
        self.root = root
        self.root_id = os.path.realpath(root if self.is_dir else os.path.dirname(os.path.abspath(root)))
        self.prefix = prefix

    def mine(self, source: str) -> bool:
        return shard_of(source, self.n_shards) == self.index

    def add_text(
        self,
        text: str,
        source: str,
        metadata: dict[str, Any] | None = None,
        *,
        sections: Sequence[tuple[int, int, str | None]] | None = None,
    ) -> int:
        return self.kb.add_text(text, source, metadata, sections=sections)

    def remove(self, source: str) -> int:
        return self.kb.remove(source)

    def sources(self) -> list[str]:
        return self.kb.sources()

    def source_metadata(self, source: str) -> Mapping[str, Any] | None:
        if self.mine(source):
            return self.kb.source_metadata(source)
        rel = source[len(self.prefix) :] if source.startswith(self.prefix) else source
        path = os.path.join(self.root, rel) if self.is_dir else self.root
        try:
            st = os.stat(path)
        except OSError:
            return None  # the ingest stats it again and reports it; only its owner's report keeps that
        return {"root": self.root_id, "reader": READER_VERSION, "size": st.st_size, "mtime_ns": st.st_mtime_ns}

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        return self.kb.save(path, overwrite=overwrite)

    def __len__(self) -> int:
        return len(self.kb)


class ProgressEvents:
    """An ingest's progress hook on a worker: ``(shard, files done, files)`` as a Dask event
    under ``topic``, which the client follows to draw one progress bar."""

    def __init__(self, topic: str, shard: int) -> None:
        self.topic = topic
        self.shard = shard

    def __call__(self, done: int, total: int) -> None:
        from distributed import get_worker

        get_worker().log_event(self.topic, [self.shard, done, total])


def shard_ingest(
    kb: KnowledgeBase,
    index: int,
    n_shards: int,
    root: str,
    prefix: str,
    options: dict[str, Any],
    progress: ProgressHook | None = None,
) -> IngestReport:
    """Ingest the files of ``root`` placed on shard ``index``; the report names only those."""
    placed = _Placed(kb, index, n_shards, root, prefix)
    report = ingest(placed, root, prefix=prefix, progress=progress or False, **options)
    # Folder skips are the same on every shard: shard 0 reports them.
    report.unchanged = [s for s in report.unchanged if placed.mine(s)]
    report.skipped = [(s, why) for s, why in report.skipped if (index == 0 if s.endswith("/") else placed.mine(s))]
    return report


def merge_reports(reports: Sequence[IngestReport]) -> IngestReport:
    """One report with the one-machine fields from the shards' reports."""
    out = IngestReport(roots=list(reports[0].roots) if reports else [])
    for r in reports:
        out.added += r.added
        out.updated += r.updated
        out.unchanged += r.unchanged
        out.removed += r.removed
        out.skipped += r.skipped
        out.chunks_added += r.chunks_added
        out.chunks_removed += r.chunks_removed
        out.chunks_total += r.chunks_total
        out.bytes_read += r.bytes_read
        out.seconds = max(out.seconds, r.seconds)
    for names in (out.added, out.updated, out.unchanged, out.removed):
        names.sort()
    out.skipped.sort()
    out.workers = len(reports)
    return out


# -- homes -----------------------------------------------------------------------------------------


class LocalShards:
    """Every shard in this process."""

    def __init__(self, boxes: list[ShardBox]) -> None:
        self.boxes = boxes
        self.kbs = [box.kb for box in boxes]

    @classmethod
    def create(cls, n_shards: int, options: dict[str, Any]) -> LocalShards:
        return cls([_new_box(options) for _ in range(n_shards)])

    @classmethod
    def open(cls, folders: Sequence[str], expected: Sequence[Expected]) -> LocalShards:
        return cls([load_shard(folder, e) for folder, e in zip(folders, expected)])

    def __len__(self) -> int:
        return len(self.kbs)

    def map(
        self,
        fn: Callable[..., T],
        args: Mapping[int, tuple[Any, ...]],
        *,
        timeout: float | None,
        allow_partial: bool = False,
    ) -> dict[int, T]:
        """``fn(shard, *args[i])`` for every shard ``i`` in ``args``."""
        return {i: fn(self.kbs[i], *a) for i, a in args.items()}

    def change(self, changes: Mapping[int, tuple[Callable[..., T], tuple[Any, ...]]]) -> dict[int, T]:
        """Apply ``fn(shard, *args)`` to the given shards; their results."""
        return {i: fn(self.kbs[i], *a) for i, (fn, a) in changes.items()}

    def holders(self) -> list[list[str]]:
        return [[] for _ in self.kbs]

    def save(self, folders: Sequence[str], identities: Sequence[ShardIdentity]) -> None:
        for box, folder, new in zip(self.boxes, folders, identities):
            save_shard(box, folder, new)

    def close(self) -> None:
        pass


def _run(fn: Callable[..., T], box: ShardBox, *args: Any) -> T:
    with box.lock:
        return fn(box.kb, *args)


def _change(fn: Callable[..., T], box: ShardBox, *args: Any) -> tuple[ShardBox, T]:
    # Changes the shard in place (copying it would double a worker's memory)
    # and returns it as the new result: the scheduler then knows the new
    # shard's lineage.  Replaying a change on a rebuilt shard is harmless:
    # adds, removes and ingests are idempotent.
    with box.lock:
        return box, fn(box.kb, *args)


class ShardServer:
    """A Dask actor, one per worker: runs a read on a shard that worker holds.

    A call goes from the client straight to the worker (a task makes two
    trips through the scheduler), so a search costs a few milliseconds.
    The shard is found by its task key in the worker's memory; when it is
    not there (moved, or being rebuilt after a worker died) the call says
    so and the client runs the read as a task instead.
    """

    def __init__(self) -> None:
        from distributed import get_worker

        self.worker = get_worker()

    async def call(self, key: str, payload: bytes) -> bytes:
        """``fn(shard, *args)`` for the pickled ``(fn, args)``: the pickled ``(found, result)``.

        The call and its answer travel as one pickle each: Dask serialises
        every argument of an actor call on its own, which cost more than the
        search itself.
        """
        fn, args = pickle.loads(payload)
        try:
            box = self.worker.data[key]
        except KeyError:
            return _NOT_HERE
        if not isinstance(box, ShardBox):
            return _NOT_HERE
        # A coroutine runs on the worker's event loop, without a hop to a
        # thread and back (a search takes well under a millisecond a shard);
        # while a change holds the shard, it waits on a thread instead, so
        # the loop never blocks (the worker keeps answering the scheduler).
        if box.lock.acquire(blocking=False):
            try:
                value = fn(box.kb, *args)
            finally:
                box.lock.release()
        else:
            value = await asyncio.get_running_loop().run_in_executor(None, _run, fn, box, *args)
        return pickle.dumps((True, value), protocol=pickle.HIGHEST_PROTOCOL)


_NOT_HERE = pickle.dumps((False, None))


async def _answers(
    client: Any, calls: Mapping[int, tuple[Any, str, str]], timeout: float | None
) -> dict[int, tuple[bool, Any]]:
    """The actor calls ``(call, shard key, worker)`` that answered within ``timeout``:
    ``(True, value)`` or ``(False, exception)``.

    A call whose worker no longer holds its shard (it died: the scheduler
    knows within moments) is given up with an ``OSError``, to be run as a
    task: the call itself would go on trying to connect to the dead worker
    for Dask's connect timeout (30 s by default).
    """
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    tasks = {i: asyncio.ensure_future(_outcome(call)) for i, (call, _, _) in calls.items()}
    out: dict[int, tuple[bool, Any]] = {}
    while True:
        pending = [t for i, t in tasks.items() if i not in out and not t.done()]
        left = None if deadline is None else deadline - loop.time()
        if not pending or (left is not None and left <= 0):
            break
        await asyncio.wait(pending, timeout=_RECHECK if left is None else min(_RECHECK, left))
        waiting = [i for i, t in tasks.items() if i not in out and not t.done()]
        if waiting:
            who = await client.scheduler.who_has(keys=[calls[i][1] for i in waiting])
            for i in waiting:
                if calls[i][2] not in who.get(calls[i][1], ()):
                    out[i] = (False, OSError(f"worker {calls[i][2]} no longer holds shard {i}"))
    for i, task in tasks.items():
        if i in out:
            task.cancel()
        elif task.done():
            out[i] = task.result()
        else:
            task.cancel()
    return out


async def _outcome(call: Any) -> tuple[bool, Any]:
    try:
        return True, await call
    except Exception as exc:  # handed to the caller, which sorts them
        return False, exc


def _first(pair: tuple[ShardBox, Any]) -> ShardBox:
    return pair[0]


def _second(pair: tuple[ShardBox, T]) -> T:
    return pair[1]


def _new_box(options: dict[str, Any]) -> ShardBox:
    return ShardBox(KnowledgeBase(**options))


# Shards this worker just saved, by folder: the fresh lineage's first task
# (a load from that folder) takes the shard from here instead of reading the
# folder back, when it runs on the same worker.  Weak: when it runs elsewhere,
# the shard goes once the client lets go of its old lineage.
_JUST_SAVED: weakref.WeakValueDictionary[str, ShardBox] = weakref.WeakValueDictionary()


def _save_box(box: ShardBox, folder: str, new: ShardIdentity) -> str:
    # A shard that travelled between workers was reloaded from a temporary
    # folder, so it no longer knows it came from ``folder``: its identity
    # (which travels with it) is checked against the folder's instead.
    save_shard(box, folder, new)
    _JUST_SAVED[folder] = box
    return folder


def _adopt_box(folder: str, expected: Expected) -> ShardBox:
    box = _JUST_SAVED.pop(folder, None)
    if box is not None and box.identity is not None and box.identity.generation == expected.generation:
        return box
    return load_shard(folder, expected)


def _spread(client: Any, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], patience: float) -> list[Any]:
    """Build one shard per ``args`` item, shard i loosely preferring the i-th worker; wait for them.

    The shards stay on the workers: only their status comes back (a shard
    gathered here would cost this process its whole size).  Raises the
    shards' own errors (a bad folder), or ``RetrievalTimeoutError`` when the
    scheduler has had no worker, or gone, for ``patience`` seconds.  Once
    built, the preference is dropped (see ``_unpin``): a rebuild goes to any
    worker.
    """
    # Asks the scheduler: the client's cached view may list a lost worker.
    workers = workers_within(client, patience)
    futures = [
        client.submit(fn, *a, workers=[workers[i % len(workers)]], allow_other_workers=True, pure=False)
        for i, a in enumerate(args)
    ]
    try:
        settle(client, futures, patience=patience)
        failures = _failures(futures, range(len(futures)))
    except BaseException:
        for fut in futures:
            fut.release()
        raise
    if failures:
        for fut in futures:
            fut.release()
        raise RetrievalTimeoutError(f"could not open {len(failures)} of {len(futures)} shards: {'; '.join(failures)}")
    _unpin(client, futures)
    return futures


def _failures(futures: Sequence[Any], shards: Iterable[int]) -> list[str]:
    """Why each future that did not finish did not: raises a shard's own ``ClankerRagError``."""
    out = []
    for i, fut in zip(shards, futures):
        if fut.status == "finished":
            continue
        if fut.status == "error":
            exc = fut.exception()
            if isinstance(exc, ClankerRagError):
                raise exc  # bad input or a bad index: the shard answered
            out.append(f"shard {i}: {type(exc).__name__}: {exc}")
        elif fut.status == "cancelled":
            out.append(f"shard {i}: cancelled (the scheduler lost it, or this client lost the scheduler)")
        else:
            out.append(f"shard {i}: still running")
    return out


def _unpin(client: Any, futures: Sequence[Any]) -> None:
    """Drop the worker preference of finished shard-building tasks.

    A task that prefers a worker (``allow_other_workers``) and lost its
    result when every worker died at once waits for a worker in the
    scheduler's no-worker state; Dask (2026.8) starts such a task when a new
    worker joins only if that worker is one it prefers, and the preferred
    one is gone for good, so the shard would never be rebuilt (seen after
    about 15 quick kills on a loopback cluster).  Without the preference, the
    first worker to join rebuilds it.
    """
    keys = {f.key: None for f in futures if f.status == "finished"}
    if not keys:
        return
    try:
        client.sync(client.scheduler.set_restrictions, worker=keys)
    except Exception as exc:  # the tasks are gone (released) or the scheduler is: nothing to keep alive
        log.warning("could not drop the worker preference of %d shards: %s", len(keys), exc)


class DaskShards:
    """Each shard a Dask future held on a worker; see the module docstring.

    ``patience`` bounds every wait: opening, saving and changes run as long
    as their work needs while the scheduler has workers, and fail once it has
    had none, or the client has had no scheduler, for that long.
    """

    def __init__(self, client: Any, futures: list[Any], patience: float) -> None:
        self.client = client
        self.futures = futures
        self.patience = patience
        # Where each shard was last seen (None: ask the scheduler), and a
        # ShardServer actor per worker, for reads that skip the scheduler.
        self._where: list[str | None] = [None] * len(futures)
        self._servers: dict[str, Any] = {}
        self._failures: list[str] = []  # why the last tasks run for shards failed
        # The folders the shards were last opened from or saved to, while no
        # change has been made since: what a lost scheduler's shards reload from.
        self.origin: list[tuple[str, Expected]] | None = None

    # Tasks that build shards carry only loose worker restrictions
    # (allow_other_workers): the scheduler reruns them to rebuild a lost
    # shard, and a task strictly restricted to a worker that died waits for it
    # forever.  The loose hint spreads the shards one a worker, round robin:
    # left to itself the scheduler may put several on one worker (after
    # earlier losses, all of them), and one hung machine then takes them all.
    @classmethod
    def create(cls, client: Any, n_shards: int, options: dict[str, Any], patience: float) -> DaskShards:
        with _guard(client):
            return cls(client, _spread(client, _new_box, [(options,)] * n_shards, patience), patience)

    @classmethod
    def open(cls, client: Any, folders: Sequence[str], expected: Sequence[Expected], patience: float) -> DaskShards:
        # Each shard loads on a worker and stays there; a bad folder fails
        # its task, which _spread raises here.
        origin = list(zip(folders, expected))
        with _guard(client):
            futures = _spread(client, load_shard, origin, patience)
        shards = cls(client, futures, patience)
        shards.origin = origin
        return shards

    def __len__(self) -> int:
        return len(self.futures)

    def _revive(self) -> None:
        """Reload the shards from their last save when the scheduler lost them (it went away and came back).

        Dask cancels every future of a client that lost its scheduler; the
        client reconnects when the scheduler is back within the client's
        timeout.  Shards changed since their last save cannot come back:
        that is an error saying so.
        """
        if not any(f.status == "cancelled" for f in self.futures):
            return
        if self.origin is None:
            raise RetrievalTimeoutError(
                "the Dask scheduler lost this index's shards (it went away), with the changes made since the "
                "last save: open the index again"
            )
        log.warning(
            "the Dask scheduler lost the shards; loading them again from %s", os.path.dirname(self.origin[0][0])
        )
        self.futures = _spread(self.client, load_shard, self.origin, self.patience)
        self._where = [None] * len(self.futures)
        self._servers = {}

    def _gather(
        self, futures: Sequence[Any], shards: Iterable[int], *, deadline: float | None, allow_partial: bool
    ) -> dict[int, Any]:
        """The results of ``futures`` (small values: never a shard) that finished by ``deadline``."""
        shards = list(shards)
        if futures:
            settle(self.client, futures, patience=self.patience, deadline=deadline)
        failures = _failures(futures, shards)
        if any(f.status == "cancelled" for f in futures) and self.client.status != "running":
            raise scheduler_lost(self.client)
        finished = {i: fut for i, fut in zip(shards, futures) if fut.status == "finished"}
        for fut in futures:
            if fut.status == "pending":
                fut.cancel()
        # One round trip for every answer.
        out = dict(zip(finished, self.client.gather(list(finished.values())))) if finished else {}
        self._failures = [f for f in failures if not f.endswith("still running")]
        missing = [i for i in shards if i not in out]
        if missing and not allow_partial:
            raise RetrievalTimeoutError(
                f"shards {missing} of {len(self)} could not be reached ({_why(self._failures, deadline)}); "
                "pass allow_partial=True to accept a result without them"
            )
        return out

    def map(
        self,
        fn: Callable[..., T],
        args: Mapping[int, tuple[Any, ...]],
        *,
        timeout: float,
        allow_partial: bool = False,
    ) -> dict[int, T]:
        """``fn(shard, *args[i])``: through the holder's actor, else as a task; within ``timeout``."""
        deadline = time.monotonic() + timeout
        with _guard(self.client):
            self._revive()
            out, retry = self._direct(fn, args, deadline)
            if retry:
                futures = [self.client.submit(_run, fn, self.futures[i], *args[i], pure=False) for i in retry]
                out.update(self._gather(futures, retry, deadline=deadline, allow_partial=True))
                for i in retry:
                    self._where[i] = None  # moved or rebuilt: ask the scheduler next time
        missing = sorted(set(args) - set(out))
        if missing and not allow_partial:
            why = "; ".join(self._failures) if retry and self._failures else f"no answer within {timeout:g} s"
            raise RetrievalTimeoutError(
                f"shards {missing} of {len(self)} could not be reached ({why}); "
                "pass allow_partial=True to accept a result without them"
            )
        return out

    def _server(self, address: str, deadline: float | None) -> Any:
        server = self._servers.get(address)
        if server is None:
            future = self.client.submit(
                ShardServer, workers=[address], allow_other_workers=False, actor=True, pure=False
            )
            left = _ACTOR_START if deadline is None else min(_ACTOR_START, max(0.0, deadline - time.monotonic()))
            try:
                server = self._servers[address] = future.result(timeout=left)
            except BaseException:
                future.cancel()
                raise
        return server

    def _direct(
        self, fn: Callable[..., T], args: Mapping[int, tuple[Any, ...]], deadline: float | None
    ) -> tuple[dict[int, T], list[int]]:
        """Reads through the actors: the answers, and the shards to run as tasks instead.

        A shard whose actor gave no answer in time is in neither.
        """
        if any(self._where[i] is None for i in args):
            who = self.client.who_has([self.futures[i] for i in args])
            for i in args:
                holders = sorted(who.get(self.futures[i].key, ()))
                self._where[i] = holders[0] if holders else None
        calls: dict[int, tuple[Any, str, str]] = {}
        retry: list[int] = []
        gone: set[str] = set()
        packed: dict[int, bytes] = {}  # by id of the argument tuple: shards often share one
        for i, a in args.items():
            address = self._where[i]
            if address is None or address in gone:
                retry.append(i)
                continue
            payload = packed.get(id(a))
            if payload is None:
                payload = packed[id(a)] = pickle.dumps((fn, a), protocol=pickle.HIGHEST_PROTOCOL)
            try:
                calls[i] = (
                    self._server(address, deadline).call(self.futures[i].key, payload),
                    self.futures[i].key,
                    address,
                )
            except Exception:  # the worker is gone, and its actor with it
                self._servers.pop(address, None)
                gone.add(address)
                retry.append(i)
        # One wait on the client's event loop for every call (a wait each
        # would hand over to that loop and back once a shard).
        from distributed.utils import sync

        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        answers = sync(self.client.loop, _answers, self.client, calls, left) if calls else {}
        out: dict[int, T] = {}
        for i, (ok, value) in answers.items():
            if not ok:
                if isinstance(value, ClankerRagError):
                    raise value  # bad input or a bad index: the shard answered
                address = self._where[i]
                if address is not None:
                    self._servers.pop(address, None)
                retry.append(i)
                continue
            found, result = pickle.loads(value)
            if found:
                out[i] = result
            else:
                retry.append(i)
        return out, retry

    def change(self, changes: Mapping[int, tuple[Callable[..., T], tuple[Any, ...]]]) -> dict[int, T]:
        with _guard(self.client):
            self._revive()
            self.origin = None  # the shards now differ from their folders
            submit = self.client.submit
            results = {}
            for i, (fn, a) in changes.items():
                pair = submit(_change, fn, self.futures[i], *a, pure=False)
                self.futures[i] = submit(_first, pair, pure=False)
                results[i] = submit(_second, pair, pure=False)
                self._where[i] = None
            # No deadline: a change (an ingest) may take long, and a lost
            # worker's shard is rebuilt and the change replayed by the
            # scheduler; but no waiting without workers or a scheduler.
            return self._gather(list(results.values()), list(results), deadline=None, allow_partial=False)

    def holders(self) -> list[list[str]]:
        """The workers holding each shard (none while a lost shard is being rebuilt)."""
        with _guard(self.client):
            who = self.client.sync(
                self.client.scheduler.who_has, keys=[f.key for f in self.futures], callback_timeout=self.patience
            )
        return [sorted(who.get(fut.key, ())) for fut in self.futures]

    def save(self, folders: Sequence[str], identities: Sequence[ShardIdentity]) -> None:
        client = self.client
        with _guard(client):
            self._revive()
            saved = [
                client.submit(_save_box, box, folder, new, pure=False)
                for box, folder, new in zip(self.futures, folders, identities)
            ]
            self._gather(saved, range(len(saved)), deadline=None, allow_partial=False)
            # A fresh lineage from the saved folders (see _adopt_box).
            expected = [Expected(new.shard, new.index_id, new.generation) for new in identities]
            origin = list(zip(folders, expected))
            fresh = _spread(client, _adopt_box, origin, self.patience)
        self.futures = fresh
        self.origin = origin
        self._where = [None] * len(fresh)

    def close(self) -> None:
        for fut in self.futures:
            with contextlib.suppress(Exception):  # a client without its scheduler: nothing to release
                fut.release()
        self.futures = []


def _why(failures: Sequence[str], deadline: float | None) -> str:
    if failures:
        return "; ".join(failures)
    return "no answer in time" if deadline is not None else "no answer"


@contextlib.contextmanager
def _guard(client: Any) -> Iterator[None]:
    """Dask's errors for a lost scheduler (cancelled futures, a closed client) as one ``RetrievalTimeoutError``."""
    from concurrent.futures import CancelledError

    try:
        yield
    except ClankerRagError:
        raise
    except Exception as exc:
        if isinstance(exc, CancelledError) or client.status != "running":
            raise scheduler_lost(client, exc) from None
        raise

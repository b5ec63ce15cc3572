"""Shards held on Dask workers (``DaskShards``): each shard the result of a Dask task in a worker's memory.

A shard opened from disk is the result of a load task; each change is a
task that takes the previous shard and returns the changed one.  So when a
worker dies, the scheduler rebuilds its shards elsewhere by running that
lineage again: the load from the last save, then the changes made since
(they live in the task graph until the next save, which starts a fresh
lineage from the saved folder).  Reads go through a small actor on each
worker (``ShardServer``), straight to the shard in its memory.

``distributed`` is imported inside the functions only.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import gc
import logging
import operator
import os
import pickle
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from .._exceptions import ClankerRagError, RetrievalTimeoutError
from ._drain import DRAINING, draining
from ._health import ClusterHealth, error_path, health_of, shard_key
from ._hedged import Attempt, Latency, hedged_answers
from ._identity import Expected, ShardIdentity
from ._placement import Move, plan_moves
from ._shards import ShardBox, load_shard, new_box, save_shard
from ._waits import ASK as _ASK
from ._waits import POLL, live_client, scheduler_lost, settle, workers_within
from ._waits import address_of as _address

__all__ = ["DaskShards", "ShardServer"]

log = logging.getLogger(__name__)

T = TypeVar("T")
# What a shard's Dask keys say of it: its index id, the save it came from, changed since.
_Label = tuple[str | None, int, bool]
# Seconds to wait for a worker's ShardServer to start (tens of milliseconds
# when the worker is there): a worker that just died may still be listed.
_ACTOR_START = 2.0
# Seconds a worker whose actor did not start in time is not asked again (a hung worker costs that once).
_SHUN = 30.0
# A change that failed for a reason other than its own error (its worker killed once too often
# while it ran, a connection lost) is submitted again this many times in all.
_CHANGE_TRIES = 3


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


def _first(pair: tuple[ShardBox, Any]) -> ShardBox:
    return pair[0]


def _second(pair: tuple[ShardBox, T]) -> T:
    return pair[1]


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
        # (still pending: the caller's deadline passed; it reports the timeout)
    return out


@dataclasses.dataclass(eq=False)
class _Job:
    """One copy of one shard to build: ``fn(*args)`` under a fresh key from ``key()``.

    ``future`` is the attempt that counts; ``extra`` a second attempt on
    another worker when the first is slow (an open bounded by the timeout);
    ``avoid`` the workers that could not build it (they do not see its folder).
    """

    shard: int
    copy: int
    args: tuple[Any, ...]
    key: Callable[[], str]
    future: Any = None
    extra: Any = None
    avoid: set[str] = dataclasses.field(default_factory=set)

    def attempts(self) -> list[Any]:
        return [f for f in (self.future, self.extra) if f is not None]


def _build(
    client: Any,
    fn: Callable[..., Any],
    jobs: Sequence[_Job],
    patience: float,
    *,
    bounded: bool = False,
    record: Callable[[int, str], None] | None = None,
) -> None:
    """Build every job's copy, copy ``c`` of shard ``i`` loosely preferring worker ``i + c``; wait for them.

    The shards stay on the workers: only their status comes back (a shard
    gathered here would cost this process its whole size).  A copy whose
    worker cannot see its folder is built again on another worker (``record``
    hears why).  Raises the shards' own errors (a bad folder), or
    ``RetrievalTimeoutError`` when the scheduler has had no worker, or gone,
    for ``patience`` seconds.  ``bounded`` (an open): the wait ends within
    ``patience`` seconds; a copy still building at half of it, or when
    three times as long as the first copy took, is tried on another worker
    too (the first to finish counts), and once every shard
    has a copy the others get as long again as that took, then build on
    without this call waiting for them.  Once built, the preference is
    dropped (see ``_unpin``): a rebuild goes to any worker.
    """
    workers = workers_within(client, patience)  # asks the scheduler: the client's cached view may list a lost worker
    for job in jobs:
        prefer = workers[(job.shard + job.copy) % len(workers)]
        job.future = client.submit(fn, *job.args, key=job.key(), workers=[prefer], allow_other_workers=True, pure=False)
    started = time.monotonic()
    deadline = started + patience if bounded else None
    hedge_at = started + patience / 2 if bounded else None
    served_at: float | None = None
    first_done: float | None = None
    try:
        while True:
            failures = _sort_out(client, fn, jobs, workers, record)
            if all(j.future.status == "finished" for j in jobs):
                break
            now = time.monotonic()
            served = {j.shard for j in jobs if j.future.status == "finished"} == {j.shard for j in jobs}
            events: list[float] = []
            if hedge_at is not None and first_done is None and any(j.future.status == "finished" for j in jobs):
                # The first copy built says how long one takes: a copy taking three times as long (at
                # least a second more) is likely on a hung worker; try it elsewhere then, not at half time.
                first_done = now
                hedge_at = min(hedge_at, now + max(1.0, 2 * (now - started)))
            if deadline is not None:
                if served:
                    served_at = now if served_at is None else served_at
                    grace = served_at + max(1.0, served_at - started)
                    if now >= min(grace, deadline):
                        break  # every shard has a copy: the others build on, the heal adopts them
                    events.append(grace)
                if now >= deadline:
                    raise RetrievalTimeoutError(_not_built(client, jobs, patience))
                events.append(deadline)
                if hedge_at is not None and now >= hedge_at:
                    hedge_at = None
                    _hedge(client, fn, jobs, workers)
                elif hedge_at is not None:
                    events.append(hedge_at)
            pending = [f for j in jobs for f in j.attempts() if f.status == "pending"]
            if not pending and failures:
                if client.status != "running":
                    raise scheduler_lost(client)
                raise RetrievalTimeoutError(
                    f"could not open {len(failures)} of {len(jobs)} shard copies: {'; '.join(failures)}"
                )
            if events:  # look again as soon as one attempt ends (settle waits for them all)
                events.append(time.monotonic() + POLL)
            settle(client, pending, patience=patience, deadline=min(events) if events else None)
    except BaseException:
        for job in jobs:
            for fut in job.attempts():
                fut.release()
        raise
    for job in jobs:
        if job.extra is not None:
            job.extra.release()
            job.extra = None
    _unpin(client, [j.future for j in jobs])


def _sort_out(
    client: Any,
    fn: Callable[..., Any],
    jobs: Sequence[_Job],
    workers: Sequence[str],
    record: Callable[[int, str], None] | None,
) -> list[str]:
    """Read the attempts that ended: keep a finished one, rebuild one its worker could not see, raise a
    shard's own error; why the others failed (each failed job once)."""
    failures = []
    for job in jobs:
        if job.extra is not None and job.extra.status == "finished" and job.future.status != "finished":
            job.future, job.extra = job.extra, job.future  # the second attempt won
        if job.future.status == "finished":
            if job.extra is not None:
                job.extra.cancel()
                job.extra = None
            continue
        for attempt in job.attempts():
            if attempt.status != "error":
                continue
            exc = attempt.exception()
            unseen = getattr(exc, "unseen_by", None)
            others = [w for w in workers if w not in job.avoid and w != unseen]
            if isinstance(unseen, str) and others:
                # The worker does not mount the shared folder: the copy goes elsewhere, and says why.
                job.avoid.add(unseen)
                if record is not None:
                    record(job.shard, f"{exc}; loading it on another worker")
                log.warning("%s; loading it on another worker", exc)
                fresh = client.submit(
                    fn, *job.args, key=job.key(), workers=others, allow_other_workers=False, pure=False
                )
                attempt.release()
                if attempt is job.future:
                    job.future = fresh
                else:
                    job.extra = fresh
            elif job.extra is not None and any(f.status != "error" for f in job.attempts()):
                attempt.release()  # the other attempt may still build it
                if attempt is job.future:
                    job.future, job.extra = job.extra, None
                else:
                    job.extra = None
            elif isinstance(exc, ClankerRagError):
                if record is not None:
                    record(job.shard, str(exc))
                raise exc  # bad input or a bad index: the shard answered
            else:
                failures.append(f"shard {job.shard}: {type(exc).__name__}: {exc}")
                break
        if job.future.status == "cancelled":
            failures.append(f"shard {job.shard}: cancelled (the scheduler lost it, or this client lost the scheduler)")
    return failures


def _hedge(client: Any, fn: Callable[..., Any], jobs: Sequence[_Job], workers: Sequence[str]) -> None:
    """A second attempt, on another worker, at each shard with no copy built yet (its worker may hang)."""
    served = {j.shard for j in jobs if j.future.status == "finished"}
    busy = _processing(client)
    for job in jobs:
        if job.shard in served or job.extra is not None or job.future.status != "pending":
            continue
        on = busy.get(job.future.key)
        others = [w for w in workers if w != on and w not in job.avoid]
        if others:
            job.extra = client.submit(
                fn, *job.args, key=job.key(), workers=others, allow_other_workers=True, pure=False
            )
            served.add(job.shard)  # one second attempt a shard


def _processing(client: Any) -> dict[str, str]:
    """The worker running each task the scheduler has handed out (nothing when it does not answer in time)."""
    try:
        by_worker = client.sync(client.scheduler.processing, callback_timeout=_ASK)
    except Exception:  # no answer: attempts go to any other worker
        return {}
    return {key: worker for worker, keys in by_worker.items() for key in keys}


def _not_built(client: Any, jobs: Sequence[_Job], patience: float) -> str:
    """Why an open bounded by ``patience`` ends without some shard: which worker each still waits for."""
    served = {j.shard for j in jobs if j.future.status == "finished"}
    busy = _processing(client)
    parts: list[str] = []
    for job in jobs:
        if job.shard in served or any(p.startswith(f"shard {job.shard}:") for p in parts):
            continue
        on = sorted({busy[f.key] for f in job.attempts() if f.key in busy})
        what = f"still loading on {', '.join(on)}" if on else "waiting for a worker"
        parts.append(f"shard {job.shard}: {what}")
    return (
        f"could not open shards within {patience:g} s ({'; '.join(parts)}); a hung or overloaded worker? "
        "(raise --cluster-timeout / timeout= for very large shards)"
    )


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
        client.sync(client.scheduler.set_restrictions, worker=keys, callback_timeout=_ASK)
    except Exception as exc:  # the tasks are gone (released) or the scheduler is: nothing to keep alive
        log.warning("could not drop the worker preference of %d shards: %s", len(keys), exc)


def _moved(box: ShardBox) -> ShardBox:
    # Runs on the target worker: Dask brings the shard there (as its index files) to run it.
    return box


@dataclasses.dataclass(eq=False)
class _Moving:
    """A copy being built on its new worker (see ``_placement``); the old one is released once it is there."""

    old: Any
    new: Any
    target: str
    started: float


class DaskShards:
    """Each shard a Dask future held on a worker (with ``replicas=2``, two); see the module docstring.

    ``patience`` bounds every wait: opening takes at most that long;
    saving and changes run as long as their work needs while the scheduler
    has workers, and fail once it has had none, or the client has had no
    scheduler, for that long.  A thread looks at the shards' placement every
    ``HEAL_EVERY`` seconds (``heal``): it forgets lost workers, keeps copies
    on distinct workers and spreads them over all workers.
    """

    HEAL_EVERY = 2.0

    def __init__(self, client: Any, futures: list[Any], patience: float, labels: Sequence[_Label] = ()) -> None:
        # A client that gave up on its scheduler: the one that replaces it (see _waits.live_client).
        self.client = client = live_client(client, patience)
        self.futures = futures
        self.patience = patience
        # What each shard's keys say of it (see _health.shard_key): index id, save, changed since.
        self._labels: list[_Label] = list(labels) or [(None, 0, True)] * len(futures)
        # Where each shard was last seen (None: ask the scheduler), and a
        # ShardServer actor per worker, for reads that skip the scheduler.
        self._where: list[str | None] = [None] * len(futures)
        self._servers: dict[str, Any] = {}
        self._starting: dict[str, tuple[Any, float]] = {}  # actors asked for, not ready yet
        self._shunned: dict[str, float] = {}  # workers whose actor did not start: not asked again until then
        self._failures: list[str] = []  # why the last tasks run for shards failed
        # The folders the shards were last opened from or saved to, while no
        # change has been made since: what a lost scheduler's shards reload from.
        self.origin: list[tuple[str, Expected]] | None = None
        # replicas=2: a second copy of each shard, loaded from the same folder
        # on another worker, for reads only (see _hedged); dropped by a
        # change, loaded again by the next save.
        self.replicas = 1
        self.mirrors: list[Any] | None = None
        self._mirror_where: list[str | None] = [None] * len(futures)
        self._latency = Latency()
        self._lock = threading.RLock()  # changes, saves and the heal's swaps, one at a time
        self._moving: dict[tuple[int, int], _Moving] = {}
        self._reported: set[str] = set()  # failed copies whose error the cluster was told of
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._healer: threading.Thread | None = None

    def _key(self, shard: int, copy: int) -> str:
        index_id, generation, changed = self._labels[shard]
        return shard_key(index_id, generation, changed, shard, copy, self.replicas)

    def _jobs(self, args: Sequence[tuple[Any, ...]], copies: int = 1) -> list[_Job]:
        return [_Job(i, c, a, functools.partial(self._key, i, c)) for c in range(copies) for i, a in enumerate(args)]

    # Tasks that build shards carry only loose worker restrictions
    # (allow_other_workers): the scheduler reruns them to rebuild a lost
    # shard, and a task strictly restricted to a worker that died waits for it
    # forever.  The loose hint spreads the shards one a worker, round robin:
    # left to itself the scheduler may put several on one worker (after
    # earlier losses, all of them), and one hung machine then takes them all.
    @classmethod
    def create(cls, client: Any, n_shards: int, options: dict[str, Any], patience: float) -> DaskShards:
        shards = cls(client, [None] * n_shards, patience)
        with _guard(shards.client):
            jobs = shards._jobs([(options,)] * n_shards)
            _build(shards.client, new_box, jobs, patience)
        shards.futures = [j.future for j in jobs]
        shards._start_healer()
        return shards

    @classmethod
    def open(
        cls, client: Any, folders: Sequence[str], expected: Sequence[Expected], patience: float, replicas: int = 1
    ) -> DaskShards:
        # Each shard loads on a worker and stays there; a bad folder fails
        # its task, which _build raises here.
        origin = list(zip(folders, expected))
        labels = [(e.index_id, e.generation or 0, False) for e in expected]
        shards = cls(client, [None] * len(origin), patience, labels)
        shards.origin = origin
        shards.replicas = replicas
        with _guard(shards.client):
            shards._load(origin)
        shards._start_healer()
        return shards

    def _load(self, origin: Sequence[tuple[str, Expected]]) -> None:
        """Load every copy of every shard from ``origin``, within ``patience`` (see ``_build``)."""
        jobs = self._jobs(origin, self.replicas)
        _build(self.client, load_shard, jobs, self.patience, bounded=True, record=self._record)
        n = len(origin)
        copies = [[j.future for j in jobs if j.copy == c] for c in range(self.replicas)]
        for i in range(n):
            # A change builds on the first copy: the one that finished, if only one did.
            if copies[0][i].status != "finished":
                for c in range(1, self.replicas):
                    if copies[c][i].status == "finished":
                        copies[0][i], copies[c][i] = copies[c][i], copies[0][i]
                        break
        self.futures = copies[0]
        self._where = [None] * n
        self.mirrors = copies[1] if self.replicas > 1 else None
        self._mirror_where = [None] * n

    def _load_mirrors(self) -> None:
        """With ``replicas=2``: the second copies, each shard on another worker than its first copy's."""
        self._drop_mirrors()
        if self.replicas > 1 and self.origin is not None:
            jobs = [_Job(i, 1, a, functools.partial(self._key, i, 1)) for i, a in enumerate(self.origin)]
            _build(self.client, load_shard, jobs, self.patience, bounded=True, record=self._record)
            self.mirrors = [j.future for j in jobs]
            self._mirror_where = [None] * len(self.mirrors)

    def _drop_mirrors(self) -> None:
        for fut in self.mirrors or ():
            with contextlib.suppress(Exception):  # a client without its scheduler: nothing to release
                fut.release()
        self.mirrors = None
        for key in [k for k in self._moving if k[1] > 0]:
            with contextlib.suppress(Exception):
                self._moving.pop(key).new.release()

    def __len__(self) -> int:
        return len(self.futures)

    def _copies(self) -> list[tuple[list[Any], list[str | None]]]:
        """Each copy's futures (by shard) and where they were last seen."""
        out = [(self.futures, self._where)]
        if self.mirrors is not None:
            out.append((self.mirrors, self._mirror_where))
        return out

    def _reconnect(self) -> None:
        """A client that lost its scheduler is replaced by a new one to the same address once the scheduler
        answers again (``live_client``; meanwhile this raises at once), so an open index heals however long
        the scheduler was gone."""
        if self.client.status == "running":
            return
        self.client = live_client(self.client, self.patience)
        log.warning("connected again to the Dask scheduler at %s", _address(self.client))

    def _revive(self) -> None:
        """Reload the shards from their last save when the scheduler lost them (it went away and came back).

        Dask cancels every future of a client that lost its scheduler; the
        client reconnects when the scheduler is back (within the client's
        timeout, or as a new client after it).  Shards changed since their
        last save cannot come back: that is an error saying so.
        """
        self._reconnect()
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
        with self._lock:
            self._moving.clear()
            self._servers, self._starting, self._shunned = {}, {}, {}
            self._load(self.origin)

    def _record(self, shard: int, why: str) -> None:
        """Keep ``why`` as shard ``shard``'s last error, where ``cluster health`` reads it (see ``_health``)."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        path = [*error_path(self._labels[shard][0]), str(shard)]
        with contextlib.suppress(Exception):  # no scheduler: nothing to tell it
            self.client.sync(
                self.client.scheduler.set_metadata, keys=path, value=f"{stamp} {why}", callback_timeout=_ASK
            )

    def _gather(
        self,
        futures: Sequence[Any],
        shards: Iterable[int],
        *,
        deadline: float | None,
        allow_partial: bool,
        also: Sequence[Any] = (),
    ) -> dict[int, Any]:
        """The results of ``futures`` (small values: never a shard) that finished by ``deadline``
        (``also``: the tasks they wait for, whose workers the wait watches too)."""
        shards = list(shards)
        if futures:
            settle(self.client, futures, patience=self.patience, deadline=deadline, also=also)
        failures = _failures(futures, shards)
        if any(f.status == "cancelled" for f in futures) and self.client.status != "running":
            raise scheduler_lost(self.client)
        finished = {i: fut for i, fut in zip(shards, futures) if fut.status == "finished"}
        for fut in futures:
            if fut.status == "pending":
                fut.cancel()
        # One round trip for every answer.
        out = dict(zip(finished, self.client.gather(list(finished.values())))) if finished else {}
        self._failures = failures
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
                self._wake.set()  # a copy moved or was lost: let the heal look now
                futures = [self.client.submit(_run, fn, self.futures[i], *args[i], pure=False) for i in retry]
                out.update(self._gather(futures, retry, deadline=deadline, allow_partial=True))
                for i in retry:
                    self._where[i] = self._mirror_where[i] = None  # moved or rebuilt: ask the scheduler next time
        missing = sorted(set(args) - set(out))
        if missing and not allow_partial:
            why = "; ".join(self._failures) if retry and self._failures else f"no answer within {timeout:g} s"
            raise RetrievalTimeoutError(
                f"shards {missing} of {len(self)} could not be reached ({why}); "
                "pass allow_partial=True to accept a result without them"
            )
        return out

    def _forget(self, address: str) -> None:
        """Drop what this client knows of a worker that is gone or does not answer: its actor, and where
        copies were seen on it (the next read asks the scheduler where they are now)."""
        self._servers.pop(address, None)
        for _, where in self._copies():
            for i, w in enumerate(where):
                if w == address:
                    where[i] = None

    def _actors(self, needed: Mapping[int, Sequence[str]], deadline: float) -> dict[str, Any]:
        """The ready ``ShardServer`` of each worker in ``needed`` (by shard: its copies' workers).

        A worker's actor starts once (tens of milliseconds when it is there);
        the read waits for starts only when a shard has no ready copy, at most
        ``_ACTOR_START`` seconds from the start.  A worker whose actor did
        not start in that time (dead, hung) is forgotten and not asked again
        for ``_SHUN`` seconds: one hung or lost worker costs that wait once,
        not at every read.
        """
        now = time.monotonic()
        wanted = {w for ws in needed.values() for w in ws}
        for w in wanted - set(self._servers) - set(self._starting):
            if self._shunned.get(w, 0.0) > now:
                continue
            future = self.client.submit(ShardServer, workers=[w], allow_other_workers=False, actor=True, pure=False)
            self._starting[w] = (future, now)
        if any(not any(w in self._servers for w in ws) for ws in needed.values()):
            waiting = [self._starting[w][0] for w in wanted if w in self._starting]
            if waiting:
                left = (
                    min(
                        max(self._starting[w][1] + _ACTOR_START for w in wanted if w in self._starting),
                        deadline,
                    )
                    - time.monotonic()
                )
                settle(self.client, waiting, patience=self.patience, deadline=time.monotonic() + max(0.0, left))
        now = time.monotonic()
        for w in [w for w in wanted if w in self._starting]:
            future, since = self._starting[w]
            if future.status == "finished":
                del self._starting[w]
                with contextlib.suppress(Exception):  # gone between the check and the result: not ready
                    self._servers[w] = future.result(timeout=_ASK)
            elif future.status != "pending" or now - since >= _ACTOR_START:
                del self._starting[w]
                future.cancel()
                self._shunned[w] = now + _SHUN
                self._forget(w)
        return {w: self._servers[w] for w in wanted if w in self._servers}

    def _direct(
        self, fn: Callable[..., T], args: Mapping[int, tuple[Any, ...]], deadline: float
    ) -> tuple[dict[int, T], list[int]]:
        """Reads through the actors (each shard's copies, hedged): the answers, and the shards to run as
        tasks instead.  A shard whose actors gave no answer in time is in neither."""
        copies = self._copies()
        if any(where[i] is None for _, where in copies for i in args):
            # Asks the scheduler, within the read's time: the client's own view may list a lost worker.
            keys = [futures[i].key for futures, _ in copies for i in args]
            left = max(0.1, min(_ASK, deadline - time.monotonic()))
            try:
                who = self.client.sync(self.client.scheduler.who_has, keys=keys, callback_timeout=left)
            except Exception:  # no answer in time: the reads below go as tasks
                who = {}
            for futures, where in copies:
                for i in args:
                    holders = sorted(who.get(futures[i].key, ()))
                    where[i] = holders[0] if holders else None
        needed = {i: [w for _, where in copies if (w := where[i]) is not None] for i in args}
        servers = self._actors(needed, deadline)
        reads: dict[int, list[Attempt]] = {}
        retry: list[int] = []
        packed: dict[int, bytes] = {}  # by id of the argument tuple: shards often share one
        for i, a in args.items():
            payload = packed.get(id(a))
            if payload is None:
                payload = packed[id(a)] = pickle.dumps((fn, a), protocol=pickle.HIGHEST_PROTOCOL)
            attempts: list[Attempt] = []
            for futures, where in copies:
                address = where[i]
                if address is None or address not in servers or any(t.worker == address for t in attempts):
                    continue
                try:
                    method = servers[address].call
                except Exception:  # the actor's worker is gone (Dask knows): forget it
                    servers.pop(address, None)
                    self._forget(address)
                    continue
                call = functools.partial(method, futures[i].key, payload)
                attempts.append(Attempt(call, futures[i].key, address))
            if attempts:
                reads[i] = attempts
            else:
                retry.append(i)
        # One wait on the client's event loop for every call (a wait each
        # would hand over to that loop and back once a shard).
        from distributed.utils import sync

        left = max(0.0, deadline - time.monotonic())
        failed: set[str] = set()
        answers = (
            sync(self.client.loop, hedged_answers, self.client, reads, left, self._latency, failed) if reads else {}
        )
        out: dict[int, T] = {}
        for i, (ok, value) in answers.items():
            if ok:
                out[i] = value
                continue
            if isinstance(value, ClankerRagError):
                raise value  # bad input or a bad index: the shard answered
            retry.append(i)
        if failed:
            # A copy's worker failed a read, or no longer holds its shard: ask the scheduler where it
            # is at the next read; a worker it no longer lists loses its actor.  One that only said it
            # does not hold the shard now (moved, being rebuilt) keeps it: its worker is alive, and
            # dropping it releases the actor while other reads may still be on their way to it, which
            # the worker then logs as a KeyError traceback.
            alive = self._alive(deadline)
            for w in failed:
                if w in alive:
                    for _, where in copies:
                        for i in args:
                            if where[i] == w:
                                where[i] = None
                else:
                    self._forget(w)
            self._wake.set()
        return out, retry

    def _alive(self, deadline: float) -> set[str]:
        """The workers the scheduler lists now (none known if it does not answer in time)."""
        left = max(0.1, min(_ACTOR_START, deadline - time.monotonic()))
        try:
            info = self.client.sync(self.client.scheduler.identity, callback_timeout=left)
        except Exception:  # no answer: keep every actor, a later read retries
            return set(self._servers)
        return set(info.get("workers", {}))

    # -- keeping copies placed ---------------------------------------------------------------------
    def _start_healer(self) -> None:
        ref = weakref.ref(self)
        stop, wake, every = self._stop, self._wake, self.HEAL_EVERY

        def run() -> None:
            while True:
                wake.wait(every)
                if stop.is_set():
                    return
                wake.clear()
                shards = ref()
                if shards is None:
                    return
                try:
                    shards.heal()
                except Exception as exc:  # a look that failed (the scheduler went away): the next one retries
                    log.debug("placement check failed: %s", exc)
                del shards

        self._healer = threading.Thread(target=run, name="clanker-rag-heal", daemon=True)
        self._healer.start()

    def heal(self) -> list[Move]:
        """Look at where the copies are, once: forget lost workers, finish and start moves; the moves started.

        Each shard's copies go to distinct workers when there are enough, and
        the copies spread over every worker that takes work (``_placement``);
        a copy whose worker could not see its folder is loaded elsewhere.
        Every scheduler call is bounded; nothing here waits for a move.
        """
        if not self._lock.acquire(blocking=False):
            return []  # a change or a save runs: look next time
        try:
            client = self.client
            if client.status != "running" or not self.futures or any(f is None for f in self.futures):
                return []
            info = client.sync(client.scheduler.identity, callback_timeout=_ASK)
            workers = info.get("workers", {})
            alive = set(workers)
            marks = client.sync(client.scheduler.get_metadata, keys=DRAINING, default={}, callback_timeout=_ASK)
            drained = draining(marks)
            taking = sorted(
                w for w, d in workers.items() if d.get("status", "running") == "running" and w not in drained
            )
            for w in set(self._servers) - alive:
                self._forget(w)
            let_go = False
            for w in drained & alive:
                # Let go of the actor there (an actor keeps Dask from retiring its worker); no new one
                # while the mark lasts.  The copies there move off below, as misplaced ones.
                self._shunned[w] = time.monotonic() + self.HEAL_EVERY * 2
                let_go = let_go or w in self._servers or w in self._starting
                self._forget(w)
                start = self._starting.pop(w, None)
                if start is not None:
                    start[0].cancel()
            if let_go:
                # An actor handle is released when it is freed, and a finished read can leave it in a
                # reference cycle that an idle process may not collect for a long time.
                gc.collect()
            for w in [w for w in self._shunned if w not in alive]:
                del self._shunned[w]
            copies = self._copies()
            keys = [f.key for futures, _ in copies for f in futures]
            keys += [m.new.key for m in self._moving.values()]
            who = client.sync(client.scheduler.who_has, keys=keys, callback_timeout=_ASK)
            self._finish_moves(who)
            held: list[list[str | None]] = [[] for _ in self.futures]
            for futures, where in copies:
                for i, fut in enumerate(futures):
                    holders = sorted(w for w in who.get(fut.key, ()) if w in alive)
                    where[i] = holders[0] if holders else None
                    held[i].append(where[i])
            self._rebuild_unseen(copies, taking)
            if self._moving:
                return []  # one round of moves at a time
            moves = plan_moves(held, taking)
            for move in moves:
                self._start_move(move)
            return moves
        finally:
            self._lock.release()

    def _start_move(self, move: Move) -> None:
        futures = self._copies()[move.copy][0]
        old = futures[move.shard]
        key = self._key(move.shard, move.copy)
        if self.origin is not None:  # the shard as saved: load it there
            new = self.client.submit(
                load_shard,
                *self.origin[move.shard],
                key=key,
                workers=[move.target],
                allow_other_workers=False,
                pure=False,
            )
        else:  # changed since: Dask carries it there
            new = self.client.submit(_moved, old, key=key, workers=[move.target], allow_other_workers=False, pure=False)
        log.info("moving copy %d of shard %d from %s to %s", move.copy, move.shard, move.source, move.target)
        self._moving[(move.shard, move.copy)] = _Moving(old, new, move.target, time.monotonic())

    def _finish_moves(self, who: Mapping[str, Sequence[str]]) -> None:
        """Swap in the copies that reached their new worker; give up those that failed or take too long."""
        copies = self._copies()
        for (i, c), m in list(self._moving.items()):
            futures, where = copies[c] if c < len(copies) else ([], [])
            current = futures[i] if i < len(futures) else None
            if current is None or current is not m.old or m.new.status in ("error", "cancelled"):
                if m.new.status == "error":
                    self._record(i, f"moving copy {c} to {m.target} failed: {m.new.exception(timeout=_ASK)}")
                m.new.release()  # the shard changed meanwhile, or the move failed
            elif m.new.status == "finished" and who.get(m.new.key):
                futures[i] = m.new
                where[i] = None
                _unpin(self.client, [m.new])
                m.old.release()
            elif time.monotonic() - m.started > self.patience:
                m.new.release()
                self._record(i, f"moving copy {c} to {m.target} took longer than {self.patience:g} s: given up")
            else:
                continue
            del self._moving[(i, c)]

    def _rebuild_unseen(self, copies: Sequence[tuple[list[Any], list[str | None]]], taking: Sequence[str]) -> None:
        """A copy the scheduler rebuilt on a worker that cannot see its folder failed: load it on another."""
        for c, (futures, _) in enumerate(copies):
            for i, fut in enumerate(futures):
                if fut.status != "error" or (i, c) in self._moving or fut.key in self._reported:
                    continue
                exc = fut.exception(timeout=_ASK)
                blind = getattr(exc, "unseen_by", None)
                others = [w for w in taking if w != blind]
                if blind is None or self.origin is None or not others:
                    self._reported.add(fut.key)  # once: reads raise it meanwhile
                    self._record(i, f"copy {c}: {exc}")
                    continue
                self._record(i, f"copy {c}: {exc}; loading it on another worker")
                new = self.client.submit(
                    load_shard,
                    *self.origin[i],
                    key=self._key(i, c),
                    workers=others,
                    allow_other_workers=False,
                    pure=False,
                )
                self._moving[(i, c)] = _Moving(fut, new, others[0], time.monotonic())
                # (the failed copy is swapped out when the new one is there: see _finish_moves)

    def health(self) -> ClusterHealth:
        """This session's copies: where each shard is, and the last error the cluster recorded for it."""
        copies = self._copies()
        keys = [f.key for futures, _ in copies for f in futures if f is not None]
        client = self.client
        with _guard(client):
            who = client.sync(client.scheduler.who_has, keys=keys, callback_timeout=self.patience)
            info = client.sync(client.scheduler.identity, callback_timeout=self.patience)
            errors = client.sync(
                client.scheduler.get_metadata,
                keys=error_path(self._labels[0][0] if self._labels else None),
                default={},
                callback_timeout=self.patience,
            )
        return health_of(who, self._labels[0][0], len(self), errors, info.get("workers", {}), keys=keys)

    def change(self, changes: Mapping[int, tuple[Callable[..., T], tuple[Any, ...]]]) -> dict[int, T]:
        """Run each shard's change; a change lost with a worker is submitted again on the shard as it was
        before (changes are idempotent, see ``_change``), up to ``_CHANGE_TRIES`` times."""
        with _guard(self.client), self._lock:
            self._revive()
            self.origin = None  # the shards now differ from their folders
            self._drop_mirrors()  # and from their second copies
            for i in changes:
                index_id, generation, _ = self._labels[i]
                self._labels[i] = (index_id, generation, True)
            # The shards before the change, held until it is done: a change lost with its worker
            # runs again on them (the scheduler rebuilds a lost one from its lineage).
            before = {i: self.futures[i] for i in changes}
            out: dict[int, T] = {}
            todo = list(changes)
            for attempt in range(_CHANGE_TRIES):
                submitted = {i: self._submit_change(i, before[i], *changes[i]) for i in todo}
                results = {i: result for i, (result, _) in submitted.items()}
                # No deadline: a change (an ingest) may take long, and a lost
                # worker's shard is rebuilt and the change replayed by the
                # scheduler; but no waiting without workers or a scheduler,
                # or for a worker that stopped sending heartbeats.
                pairs = [pair for _, pair in submitted.values()]
                out.update(self._gather(list(results.values()), todo, deadline=None, allow_partial=True, also=pairs))
                todo = [i for i in todo if i not in out]
                if not todo:
                    return out
                if attempt + 1 < _CHANGE_TRIES:
                    log.warning("shards %s lost their change (%s): running it again", todo, _why(self._failures, None))
            raise RetrievalTimeoutError(
                f"shards {todo} of {len(self)} could not be changed in {_CHANGE_TRIES} tries "
                f"({_why(self._failures, None)})"
            )

    def _submit_change(self, i: int, shard: Any, fn: Callable[..., T], a: tuple[Any, ...]) -> tuple[Any, Any]:
        """Submit ``fn(shard, *a)`` as shard ``i``'s next state: the futures of its result and of the task."""
        submit = self.client.submit
        pair = submit(_change, fn, shard, *a, pure=False)
        self.futures[i] = submit(_first, pair, key=self._key(i, 0), pure=False)
        self._where[i] = None
        return submit(_second, pair, pure=False), pair

    def holders(self) -> list[list[str]]:
        """The worker holding each copy of each shard, copy by copy: a worker holding two copies of a shard
        is listed twice, and a copy being built or rebuilt not at all."""
        copies = self._copies()
        keys = [f.key for futures, _ in copies for f in futures]
        with _guard(self.client):
            who = self.client.sync(self.client.scheduler.who_has, keys=keys, callback_timeout=self.patience)
        return [
            [sorted(held)[0] for futures, _ in copies if (held := who.get(futures[i].key))] for i in range(len(self))
        ]

    def split(self, fn: Callable[..., Sequence[T]], args: tuple[Any, ...], parts: int) -> list[Any]:
        """``fn(*args)`` run once on a worker, a sequence of ``parts`` items: a future of each item.

        A change given one of them takes that item from the worker that
        holds it; the whole result never comes to this process.
        """
        with _guard(self.client):
            whole = self.client.submit(fn, *args, pure=False)
            return [self.client.submit(operator.getitem, whole, i, pure=False) for i in range(parts)]

    def save(self, folders: Sequence[str], identities: Sequence[ShardIdentity]) -> None:
        client = self.client
        with _guard(client), self._lock:
            self._revive()
            client = self.client
            saved = [
                client.submit(_save_box, box, folder, new, pure=False)
                for box, folder, new in zip(self.futures, folders, identities)
            ]
            self._gather(saved, range(len(saved)), deadline=None, allow_partial=False)
            # A fresh lineage from the saved folders (see _adopt_box).
            expected = [Expected(new.shard, new.index_id, new.generation) for new in identities]
            origin = list(zip(folders, expected))
            self._labels = [(e.index_id, e.generation or 0, False) for e in expected]
            self._moving.clear()
            jobs = self._jobs(origin)
            _build(client, _adopt_box, jobs, self.patience)
            self.futures = [j.future for j in jobs]
            self.origin = origin
            self._where = [None] * len(self.futures)
            self._load_mirrors()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._healer is not None and self._healer is not threading.current_thread():
            self._healer.join(timeout=2 * _ASK)
        with self._lock:
            self._drop_mirrors()
            for m in self._moving.values():
                with contextlib.suppress(Exception):
                    m.new.release()
            self._moving.clear()
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

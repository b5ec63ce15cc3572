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
import functools
import logging
import operator
import os
import pickle
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from .._exceptions import ClankerRagError, RetrievalTimeoutError
from ._hedged import Attempt, Latency, hedged_answers
from ._identity import Expected, ShardIdentity
from ._shards import ShardBox, load_shard, new_box, save_shard
from ._waits import scheduler_lost, settle, workers_within

__all__ = ["DaskShards", "ShardServer"]

log = logging.getLogger(__name__)

T = TypeVar("T")
# Seconds to wait for a worker's ShardServer to start (tens of milliseconds
# when the worker is there): a worker that just died may still be listed.
_ACTOR_START = 2.0
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


def _spread(
    client: Any, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], patience: float, offset: int = 0
) -> list[Any]:
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
        client.submit(fn, *a, workers=[workers[(i + offset) % len(workers)]], allow_other_workers=True, pure=False)
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
        if client.status != "running":
            raise scheduler_lost(client)
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
        # (still pending: the caller's deadline passed; it reports the timeout)
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
        # replicas=2: a second copy of each shard, loaded from the same folder
        # on the next worker, for reads only (see _hedged); dropped by a
        # change, loaded again by the next save.
        self.replicas = 1
        self.mirrors: list[Any] | None = None
        self._mirror_where: list[str | None] = [None] * len(futures)
        self._latency = Latency()

    # Tasks that build shards carry only loose worker restrictions
    # (allow_other_workers): the scheduler reruns them to rebuild a lost
    # shard, and a task strictly restricted to a worker that died waits for it
    # forever.  The loose hint spreads the shards one a worker, round robin:
    # left to itself the scheduler may put several on one worker (after
    # earlier losses, all of them), and one hung machine then takes them all.
    @classmethod
    def create(cls, client: Any, n_shards: int, options: dict[str, Any], patience: float) -> DaskShards:
        with _guard(client):
            return cls(client, _spread(client, new_box, [(options,)] * n_shards, patience), patience)

    @classmethod
    def open(
        cls, client: Any, folders: Sequence[str], expected: Sequence[Expected], patience: float, replicas: int = 1
    ) -> DaskShards:
        # Each shard loads on a worker and stays there; a bad folder fails
        # its task, which _spread raises here.
        origin = list(zip(folders, expected))
        with _guard(client):
            futures = _spread(client, load_shard, origin, patience)
            shards = cls(client, futures, patience)
            shards.origin = origin
            shards.replicas = replicas
            shards._load_mirrors()
        return shards

    def _load_mirrors(self) -> None:
        """With ``replicas=2``: the second copies, each shard on the worker after its first copy's."""
        self._drop_mirrors()
        if self.replicas > 1 and self.origin is not None:
            self.mirrors = _spread(self.client, load_shard, self.origin, self.patience, offset=1)
            self._mirror_where = [None] * len(self.mirrors)

    def _drop_mirrors(self) -> None:
        for fut in self.mirrors or ():
            with contextlib.suppress(Exception):  # a client without its scheduler: nothing to release
                fut.release()
        self.mirrors = None

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
        self._load_mirrors()

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
        self, fn: Callable[..., T], args: Mapping[int, tuple[Any, ...]], deadline: float
    ) -> tuple[dict[int, T], list[int]]:
        """Reads through the actors (each shard's copies, hedged): the answers, and the shards to run as
        tasks instead.  A shard whose actors gave no answer in time is in neither."""
        copies = [(self.futures, self._where)]
        if self.mirrors is not None:
            copies.append((self.mirrors, self._mirror_where))
        if any(where[i] is None for _, where in copies for i in args):
            who = self.client.who_has([futures[i] for futures, _ in copies for i in args])
            for futures, where in copies:
                for i in args:
                    holders = sorted(who.get(futures[i].key, ()))
                    where[i] = holders[0] if holders else None
        reads: dict[int, list[Attempt]] = {}
        retry: list[int] = []
        gone: set[str] = set()
        packed: dict[int, bytes] = {}  # by id of the argument tuple: shards often share one
        for i, a in args.items():
            payload = packed.get(id(a))
            if payload is None:
                payload = packed[id(a)] = pickle.dumps((fn, a), protocol=pickle.HIGHEST_PROTOCOL)
            attempts: list[Attempt] = []
            for futures, where in copies:
                address = where[i]
                if address is None or address in gone or any(t.worker == address for t in attempts):
                    continue
                try:
                    call = functools.partial(self._server(address, deadline).call, futures[i].key, payload)
                except Exception:  # the worker is gone, and its actor with it
                    self._servers.pop(address, None)
                    gone.add(address)
                    continue
                attempts.append(Attempt(call, futures[i].key, address))
            if attempts:
                reads[i] = attempts
            else:
                retry.append(i)
        # One wait on the client's event loop for every call (a wait each
        # would hand over to that loop and back once a shard).
        from distributed.utils import sync

        left = max(0.0, deadline - time.monotonic())
        answers = sync(self.client.loop, hedged_answers, self.client, reads, left, self._latency) if reads else {}
        out: dict[int, T] = {}
        alive: set[str] | None = None  # asked of the scheduler once, if a read failed
        for i, (ok, value) in answers.items():
            if ok:
                out[i] = value
                continue
            if isinstance(value, ClankerRagError):
                raise value  # bad input or a bad index: the shard answered
            if not isinstance(value, LookupError):
                # The call failed (its worker is gone): drop that worker's actor.  One that said
                # it does not hold the shard now (moved, being rebuilt) stays: its worker is alive,
                # and dropping it releases the actor while other reads may still be on their way
                # to it, which the worker then logs as a KeyError traceback.
                if alive is None:
                    alive = self._alive(deadline)
                for holder in {where[i] for _, where in copies}:
                    if holder is not None and holder not in alive:
                        self._servers.pop(holder, None)
            retry.append(i)
        return out, retry

    def _alive(self, deadline: float) -> set[str]:
        """The workers the scheduler lists now (none known if it does not answer in time)."""
        left = max(0.1, min(_ACTOR_START, deadline - time.monotonic()))
        try:
            info = self.client.sync(self.client.scheduler.identity, callback_timeout=left)
        except Exception:  # no answer: keep every actor, a later read retries
            return set(self._servers)
        return set(info.get("workers", {}))

    def change(self, changes: Mapping[int, tuple[Callable[..., T], tuple[Any, ...]]]) -> dict[int, T]:
        """Run each shard's change; a change lost with a worker is submitted again on the shard as it was
        before (changes are idempotent, see ``_change``), up to ``_CHANGE_TRIES`` times."""
        with _guard(self.client):
            self._revive()
            self.origin = None  # the shards now differ from their folders
            self._drop_mirrors()  # and from their second copies
            # The shards before the change, held until it is done: a change lost with its worker
            # runs again on them (the scheduler rebuilds a lost one from its lineage).
            before = {i: self.futures[i] for i in changes}
            out: dict[int, T] = {}
            todo = list(changes)
            for attempt in range(_CHANGE_TRIES):
                results = {i: self._submit_change(i, before[i], *changes[i]) for i in todo}
                # No deadline: a change (an ingest) may take long, and a lost
                # worker's shard is rebuilt and the change replayed by the
                # scheduler; but no waiting without workers or a scheduler.
                out.update(self._gather(list(results.values()), todo, deadline=None, allow_partial=True))
                todo = [i for i in todo if i not in out]
                if not todo:
                    return out
                if attempt + 1 < _CHANGE_TRIES:
                    log.warning("shards %s lost their change (%s): running it again", todo, _why(self._failures, None))
            raise RetrievalTimeoutError(
                f"shards {todo} of {len(self)} could not be changed in {_CHANGE_TRIES} tries "
                f"({_why(self._failures, None)})"
            )

    def _submit_change(self, i: int, shard: Any, fn: Callable[..., T], a: tuple[Any, ...]) -> Any:
        """Submit ``fn(shard, *a)`` as shard ``i``'s next state: the future of its result."""
        submit = self.client.submit
        pair = submit(_change, fn, shard, *a, pure=False)
        self.futures[i] = submit(_first, pair, pure=False)
        self._where[i] = None
        return submit(_second, pair, pure=False)

    def holders(self) -> list[list[str]]:
        """The workers holding each shard (none while a lost shard is being rebuilt)."""
        mirrors = self.mirrors or []
        keys = [f.key for f in [*self.futures, *mirrors]]
        with _guard(self.client):
            who = self.client.sync(self.client.scheduler.who_has, keys=keys, callback_timeout=self.patience)
        out = [sorted(who.get(fut.key, ())) for fut in self.futures]
        for held, mirror in zip(out, mirrors):
            held.extend(w for w in sorted(who.get(mirror.key, ())) if w not in held)
        return out

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
        with _guard(client):
            self._load_mirrors()

    def close(self) -> None:
        self._drop_mirrors()
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

"""Draining a worker before maintenance: its shards move to the other workers, and it takes no new ones.

Two steps.  First the drain marks the worker in the scheduler's metadata
(``DRAINING``, with an expiry): every session's placement look
(``_dask_shards``) sees the mark within a few seconds, lets go of its read
actor there (Dask cannot move an actor, and an actor on a worker keeps Dask
from retiring it) and moves its copies to other workers as it moves any
misplaced copy.  Then Dask's ``retire_workers`` moves whatever is left (the
shards of no open session, other data): the scheduler's active memory
manager copies every result held only there to another worker and drops it;
the worker stays connected but takes no new task (``closing_gracefully``),
so a restart of it loses nothing.  Any client of the scheduler can drain.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._exceptions import ConfigError, RetrievalTimeoutError
from ._health import parse_key
from ._waits import POLL

__all__ = ["DRAINING", "Drained", "drain_worker", "draining", "resolve_worker"]

# Where the scheduler's metadata marks the workers being drained: address -> when the mark expires
# (seconds since the epoch: a drain that died leaves no lasting mark).
DRAINING = ["clanker-rag", "draining"]
_ACTOR_PREFIX = "ShardServer-"  # the keys of the sessions' read actors (see _dask_shards.ShardServer)


@dataclass(frozen=True, slots=True)
class Drained:
    """A worker drained: how many shard copies it held, and the workers holding shards now."""

    worker: str
    moved: int
    now_on: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"worker": self.worker, "moved": self.moved, "now_on": list(self.now_on), "holds": 0}


def resolve_worker(workers: Mapping[str, Mapping[str, Any]], worker: str) -> str:
    """The address of ``worker`` (an address, with or without ``tcp://``, or a worker's name)."""
    if worker in workers:
        return worker
    if f"tcp://{worker}" in workers:
        return f"tcp://{worker}"
    named = [a for a, w in workers.items() if str(w.get("name")) == worker]
    if len(named) == 1:
        return named[0]
    listed = ", ".join(sorted(workers)) or "none"
    raise ConfigError(f"no worker {worker!r} on this scheduler (its workers: {listed})")


def _shards_on(who: Mapping[Any, Any], worker: str) -> list[Any]:
    return [k for k, holders in who.items() if parse_key(k) is not None and worker in holders]


def _actors_on(who: Mapping[Any, Any], worker: str) -> list[Any]:
    return [k for k, holders in who.items() if str(k).startswith(_ACTOR_PREFIX) and worker in holders]


def draining(marks: object, now: float | None = None) -> set[str]:
    """The workers a drain marked (the metadata at ``DRAINING``) whose mark has not expired."""
    if not isinstance(marks, dict):
        return set()
    now = time.time() if now is None else now
    return {w for w, until in marks.items() if isinstance(until, (int, float)) and until > now}


def drain_worker(client: Any, worker: str, timeout: float) -> Drained:
    """Move every shard copy off ``worker`` and stop it taking new ones, within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    info = client.sync(client.scheduler.identity, callback_timeout=timeout)
    workers = info.get("workers", {})
    address = resolve_worker(workers, worker)
    others = [a for a, w in workers.items() if a != address and w.get("status", "running") == "running"]
    if not others:
        raise ConfigError(f"cannot drain {address}: no other running worker would take its shards")
    keys = _shards_on(client.sync(client.scheduler.who_has, callback_timeout=timeout), address)
    mark = [*DRAINING, address]
    client.sync(client.scheduler.set_metadata, keys=mark, value=time.time() + timeout, callback_timeout=timeout)
    try:
        # The sessions move their copies and let go of their actors there (each looks every few seconds).
        while True:
            who = client.sync(client.scheduler.who_has, callback_timeout=max(0.1, deadline - time.monotonic()))
            held = _shards_on(who, address) + _actors_on(who, address)
            if not held or time.monotonic() >= deadline:
                break
            time.sleep(POLL)
        left = max(0.1, deadline - time.monotonic())
        retired = client.sync(
            client.scheduler.retire_workers,
            workers=[address],
            close_workers=False,
            remove=False,
            callback_timeout=left,
        )
    finally:
        client.sync(client.scheduler.set_metadata, keys=mark, value=0, callback_timeout=timeout)
    if address not in (retired or {}):
        who = client.sync(client.scheduler.who_has, callback_timeout=timeout)
        actors = _actors_on(who, address)
        why = (
            f"{len(actors)} read actor(s) of sessions that did not let go in {timeout:g} s"
            if actors
            else "the scheduler found no other worker to hold some of its data"
        )
        raise RetrievalTimeoutError(f"could not drain {address}: {why}")
    while True:  # the scheduler drops the worker's copies just after it answers
        who = client.sync(client.scheduler.who_has, callback_timeout=max(0.1, deadline - time.monotonic()))
        still = _shards_on(who, address)
        if not still:
            break
        if time.monotonic() >= deadline:
            raise RetrievalTimeoutError(f"{address} still holds {len(still)} shard copies after {timeout:g} s")
        time.sleep(POLL / 5)
    # (A session's moved copy is a new key: where shards are now, not where those keys went.)
    now_on = sorted({w for k, ws in who.items() if parse_key(k) is not None for w in ws} - {address})
    return Drained(address, len(keys), tuple(now_on))

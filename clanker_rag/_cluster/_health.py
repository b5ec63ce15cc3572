"""Shard health in Elasticsearch's sense: green, yellow or red, with each shard's copies, workers and last error.

Every copy of a shard held on a Dask worker is the result of a task whose
key names it (``shard_key``): the index, the save it came from, the shard,
which copy and how many copies its session wants.  So any client of the
scheduler, not only the session holding the shards, can tell where each
shard of an index lives, from the scheduler's list of keys and their
holders, without a plugin on the scheduler.  The sessions record why a copy
failed (a worker that cannot see the index folder, a load that did not
finish in time) in the scheduler's metadata (``error_path``).

Status, as Elasticsearch reports it:

``green``
    every shard has all the copies its sessions want, each on its own worker;
``yellow``
    every shard is served, but some copies are missing (a worker lost and
    not replaced, fewer workers than copies);
``red``
    some shard is held by no worker (it is being rebuilt, cannot be read,
    or no session holds the index open).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "KEY_PREFIX",
    "ClusterHealth",
    "KeyInfo",
    "ShardHealth",
    "error_path",
    "health_of",
    "index_health",
    "parse_key",
    "shard_key",
]

KEY_PREFIX = "clanker-rag-shard"
_NEW = "-"  # the index id of an index never saved


def shard_key(index_id: str | None, generation: int, changed: bool, shard: int, copy: int, copies: int) -> str:
    """A fresh Dask key for a copy of a shard (unique: each task that builds a copy gets its own)."""
    gen = f"{generation}+" if changed else str(generation)
    return f"{KEY_PREFIX}:{index_id or _NEW}:{gen}:{shard}:{copy}:{copies}:{uuid.uuid4().hex}"


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """What a shard key says: see ``shard_key`` (``changed``: changed since save ``generation``)."""

    index_id: str | None
    generation: int
    changed: bool
    shard: int
    copy: int
    copies: int


def parse_key(key: object) -> KeyInfo | None:
    """The ``KeyInfo`` of a shard key; ``None`` for any other key."""
    if not isinstance(key, str) or not key.startswith(KEY_PREFIX + ":"):
        return None
    parts = key.split(":")
    if len(parts) != 7:
        return None
    _, index_id, gen, shard, copy, copies, _token = parts
    changed = gen.endswith("+")
    try:
        return KeyInfo(
            None if index_id == _NEW else index_id, int(gen.rstrip("+")), changed, int(shard), int(copy), int(copies)
        )
    except ValueError:
        return None


def error_path(index_id: str | None) -> list[str]:
    """Where the scheduler's metadata keeps the last error of each shard of an index."""
    return ["clanker-rag", index_id or _NEW, "errors"]


@dataclass(frozen=True, slots=True)
class ShardHealth:
    """One shard: the workers holding a copy, how many copies are wanted, the save they came from."""

    shard: int
    workers: tuple[str, ...]
    wanted: int
    generation: int | None
    changed: bool = False
    last_error: str | None = None

    @property
    def copies(self) -> int:
        """Copies on distinct workers (two copies on one worker count once: they fail together)."""
        return len(self.workers)

    @property
    def status(self) -> str:
        if not self.workers:
            return "red"
        return "green" if self.copies >= self.wanted else "yellow"

    def to_dict(self) -> dict[str, Any]:
        return {
            "shard": self.shard,
            "status": self.status,
            "workers": list(self.workers),
            "copies": self.copies,
            "wanted": self.wanted,
            "generation": self.generation,
            "changed": self.changed,
            "last_error": self.last_error,
        }


@dataclass(frozen=True, slots=True)
class ClusterHealth:
    """The health of one sharded index on a cluster (``status``: the worst of its shards')."""

    shards: tuple[ShardHealth, ...]
    workers: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        states = {s.status for s in self.shards}
        for worst in ("red", "yellow"):
            if worst in states:
                return worst
        return "green"

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "shards": [s.to_dict() for s in self.shards],
            "workers": list(self.workers),
        }


def health_of(
    who_has: Mapping[Any, Sequence[str]],
    index_id: str | None,
    n_shards: int,
    errors: Mapping[str, Any] | None = None,
    workers: Iterable[str] = (),
    *,
    keys: Iterable[Any] | None = None,
) -> ClusterHealth:
    """The health of index ``index_id`` from the scheduler's ``who_has`` (key: workers holding it).

    ``keys`` (default: every key of ``who_has``) limits the copies counted
    to one session's.  ``errors``: the metadata at ``error_path``, by shard
    number as a string.
    """
    wanted = [1] * n_shards
    holders: list[set[str]] = [set() for _ in range(n_shards)]
    generation: list[int | None] = [None] * n_shards
    changed = [False] * n_shards
    seen = [False] * n_shards
    for key in who_has if keys is None else keys:
        info = parse_key(key)
        if info is None or info.index_id != index_id or not 0 <= info.shard < n_shards:
            continue
        i = info.shard
        wanted[i] = info.copies if not seen[i] else max(wanted[i], info.copies)
        seen[i] = True
        held = set(who_has.get(key, ()))
        holders[i] |= held
        if held and (generation[i] is None or info.generation > generation[i]):  # type: ignore[operator]
            generation[i], changed[i] = info.generation, info.changed
    errors = errors or {}
    shards = []
    for i in range(n_shards):
        error = errors.get(str(i))
        if not seen[i] and error is None:
            error = "not open on this cluster: no session holds this shard (open the index, e.g. serve --cluster)"
        shards.append(
            ShardHealth(
                i,
                tuple(sorted(holders[i])),
                wanted[i],
                generation[i],
                changed[i],
                None if error is None else str(error),
            )
        )
    return ClusterHealth(tuple(shards), tuple(sorted(workers)))


def index_health(client: Any, index_id: str | None, n_shards: int, timeout: float) -> ClusterHealth:
    """The health of an index from any client of the scheduler: every session's copies (see ``health_of``).

    Each scheduler call waits at most ``timeout`` seconds.
    """
    who = client.sync(client.scheduler.who_has, callback_timeout=timeout)
    info = client.sync(client.scheduler.identity, callback_timeout=timeout)
    errors = client.sync(client.scheduler.get_metadata, keys=error_path(index_id), default={}, callback_timeout=timeout)
    return health_of(who, index_id, n_shards, errors if isinstance(errors, dict) else {}, info.get("workers", {}))

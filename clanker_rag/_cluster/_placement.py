"""Where a shard's copies should live: the moves that keep them on distinct workers and spread over all of them.

Pure functions over worker addresses (no Dask).  The client's coordinator
(``_dask_shards``) asks the scheduler where each copy is, plans the moves
here and carries them out itself (a fresh load of the copy on its target,
or a transfer of a shard changed since its save), then releases the old copy.
Dask's ``replicate()`` is not used: Dask documents it as not resilient (a
replica it made is not rebuilt when its worker dies).

Two rules, in this order:

1. Copies of one shard sit on distinct workers whenever there are enough
   workers: a copy that shares its worker with an earlier copy of the same
   shard, or sits on a worker that takes no new work (draining, closing),
   moves to the least loaded worker that holds no copy of that shard.
2. No worker holds two copies more than another: a copy moves from the most
   loaded worker to the least loaded one (never next to a copy of its own
   shard), so a worker that restarted empty gets its share back.

A copy whose worker is not known (being rebuilt after a loss) is left alone:
the scheduler is building it, and the next look places it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Move", "plan_moves"]


@dataclass(frozen=True, slots=True)
class Move:
    """Copy ``copy`` of shard ``shard`` goes from worker ``source`` to worker ``target``."""

    shard: int
    copy: int
    source: str
    target: str


def plan_moves(held: Sequence[Sequence[str | None]], workers: Sequence[str]) -> list[Move]:
    """The moves that satisfy both rules; ``held[i][c]`` is the worker holding copy ``c`` of shard ``i``.

    ``workers`` are the workers that take new work.  Deterministic: ties go
    to the lower address, so two looks at the same state plan the same moves.
    """
    live = sorted(set(workers))
    if not live:
        return []
    where = [list(copies) for copies in held]
    load = {w: 0 for w in live}
    for copies in where:
        for w in copies:
            if w in load:
                load[w] += 1
    moves: list[Move] = []

    def move(i: int, c: int, target: str) -> None:
        source = where[i][c]
        assert source is not None
        if source in load:
            load[source] -= 1
        load[target] += 1
        where[i][c] = target
        moves.append(Move(i, c, source, target))

    # Rule 1: copies apart, and off workers that take no new work.
    for i, copies in enumerate(where):
        for c, w in enumerate(copies):
            if w is None:
                continue
            shared = w in (copies[:c])
            if not shared and w in load:
                continue
            free = [t for t in live if t not in copies]
            if free:
                move(i, c, min(free, key=lambda t: (load[t], t)))
    # Rule 2: even out, one copy at a time (each move lowers the spread, so this ends).
    for _ in range(sum(len(c) for c in where)):
        most = max(live, key=lambda t: (load[t], t))
        least = min(live, key=lambda t: (load[t], t))
        if load[most] - load[least] < 2:
            break
        candidates = [
            (i, c) for i, copies in enumerate(where) for c, w in enumerate(copies) if w == most and least not in copies
        ]
        if not candidates:
            break
        i, c = candidates[0]
        move(i, c, least)
    return moves

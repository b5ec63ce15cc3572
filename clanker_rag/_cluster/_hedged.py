"""Reads sent straight to the workers' actors, over one or two replicas of each shard, hedged.

Each shard's read is a list of attempts, one for each worker holding a copy
(the primary, and with ``replicas=2`` a mirror), tried fastest first by the
recent latency of their workers.  The next attempt starts when the one
before has not answered within the hedge delay (a few times that worker's
usual latency) or has failed; the first answer wins and the others are
cancelled.  A hung or partitioned worker therefore costs one hedge delay,
once: its latency is then counted as the time it kept the read waiting, so
later reads go to the other copy first (as adaptive replica selection does
in Elasticsearch).

An attempt whose worker no longer holds its shard (it died: the scheduler
knows within moments) is given up, to be run as a task: the call itself
would go on trying to connect to the dead worker for Dask's connect timeout.
"""

from __future__ import annotations

import asyncio
import pickle
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Attempt", "Latency", "hedged_answers"]

# Seconds between checks that the workers a read waits for still hold their shards.
RECHECK = 0.5
# The hedge delay: this many times the worker's usual latency, within these bounds (seconds).
_HEDGE_FACTOR = 4.0
_HEDGE_MIN = 0.01
_HEDGE_MAX = 1.0
# Weight of the newest latency in a worker's moving average.
_ALPHA = 0.3
_UNKNOWN = 0.005  # a worker not heard from yet: as fast as a loopback call


@dataclass(frozen=True, slots=True)
class Attempt:
    """One way to read a shard: start ``call()`` (an actor call) on ``worker``, where ``key`` holds the shard."""

    call: Callable[[], Awaitable[bytes]]
    key: str
    worker: str


class Latency:
    """Each worker's recent read latency (seconds, a moving average): which copy to try first, when to hedge."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    def of(self, worker: str) -> float:
        return self._seconds.get(worker, _UNKNOWN)

    def saw(self, worker: str, seconds: float) -> None:
        with self._lock:
            old = self._seconds.get(worker)
            self._seconds[worker] = seconds if old is None else (1 - _ALPHA) * old + _ALPHA * seconds

    def lost(self, worker: str, waited: float) -> None:
        """``worker`` kept a read waiting ``waited`` seconds without answering: count at least that."""
        with self._lock:
            self._seconds[worker] = max(self._seconds.get(worker, _UNKNOWN), waited)

    def order(self, attempts: Sequence[Attempt]) -> list[Attempt]:
        return sorted(attempts, key=lambda a: self.of(a.worker))

    def hedge(self, worker: str) -> float:
        return min(_HEDGE_MAX, max(_HEDGE_MIN, _HEDGE_FACTOR * self.of(worker)))


async def _outcome(call: Awaitable[bytes]) -> tuple[bool, Any]:
    try:
        return True, await call
    except Exception as exc:  # handed to the caller, which sorts them
        return False, exc


class _Shard:
    """The attempts at one shard's read, and how they went."""

    def __init__(self, index: int, attempts: list[Attempt]) -> None:
        self.index = index
        self.attempts = attempts
        self.tasks: list[asyncio.Future[tuple[bool, Any]]] = []
        self.started: list[float] = []
        self.given_up: set[int] = set()  # attempts read, or whose worker no longer holds the shard
        self.failed: set[int] = set()  # attempts that failed, or whose worker no longer holds the shard
        self.answer: tuple[bool, Any] | None = None
        self.error: tuple[bool, Any] | None = None

    def start(self, now: float) -> None:
        self.tasks.append(asyncio.ensure_future(_outcome(self.attempts[len(self.tasks)].call())))
        self.started.append(now)

    def live(self) -> list[int]:
        return [n for n, t in enumerate(self.tasks) if not t.done() and n not in self.given_up]


def _settle(shard: _Shard, latency: Latency, now: float) -> None:
    """Read the finished attempts of ``shard``: its answer, or its last error."""
    for n, task in enumerate(shard.tasks):
        if shard.answer is not None or not task.done() or n in shard.given_up:
            continue
        shard.given_up.add(n)  # read once
        ok, value = task.result()
        worker = shard.attempts[n].worker
        if ok:
            found, result = pickle.loads(value)
            if found:
                latency.saw(worker, now - shard.started[n])
                shard.answer = (True, result)
                return
            value = LookupError(f"worker {worker} does not hold shard {shard.index} now")
        shard.failed.add(n)
        shard.error = (False, value)


async def hedged_answers(
    client: Any,
    reads: Mapping[int, Sequence[Attempt]],
    timeout: float,
    latency: Latency,
    failed: set[str] | None = None,
) -> dict[int, tuple[bool, Any]]:
    """Each shard's read that answered within ``timeout``: ``(True, result)``, or ``(False, exception)``
    when every attempt failed (the last failure).  ``failed`` (optional) gains the worker of every attempt
    that failed, said it does not hold its shard, or was given up, whether or not another copy answered:
    the caller looks again where those copies are."""
    loop = asyncio.get_running_loop()
    begun = loop.time()
    deadline = begun + timeout
    shards = {i: _Shard(i, latency.order(attempts)) for i, attempts in reads.items() if attempts}
    for shard in shards.values():
        shard.start(begun)
    last_check = begun
    while True:
        now = loop.time()
        waiting: list[asyncio.Future[tuple[bool, Any]]] = []
        next_hedge = deadline
        for shard in shards.values():
            _settle(shard, latency, now)
            if shard.answer is not None:
                continue
            live = shard.live()
            more = len(shard.tasks) < len(shard.attempts)
            if more:
                last = len(shard.tasks) - 1
                due = shard.started[last] + latency.hedge(shard.attempts[last].worker)
                if not live or now >= due:
                    shard.start(now)  # the one before failed or is slow: the next copy
                    live = shard.live()
                    more = len(shard.tasks) < len(shard.attempts)
                    due = now + latency.hedge(shard.attempts[-1].worker)
                if more:
                    next_hedge = min(next_hedge, due)
            if live:
                waiting.extend(shard.tasks[n] for n in live)
        if not waiting or now >= deadline:
            break
        step = min(RECHECK, max(0.0, next_hedge - now), max(0.0, deadline - now))
        await asyncio.wait(waiting, timeout=max(step, 0.001), return_when=asyncio.FIRST_COMPLETED)
        if loop.time() - last_check >= RECHECK:
            last_check = loop.time()
            await _drop_lost(client, shards)
    out: dict[int, tuple[bool, Any]] = {}
    now = loop.time()
    if failed is not None:
        failed.update(shard.attempts[n].worker for shard in shards.values() for n in shard.failed)
    for i, shard in shards.items():
        if shard.answer is not None:
            out[i] = shard.answer
        elif shard.error is not None and not shard.live() and len(shard.tasks) == len(shard.attempts):
            out[i] = shard.error  # every copy failed: the last failure
        for n in shard.live():  # the losers of a hedge, or still silent at the deadline
            shard.tasks[n].cancel()
            latency.lost(shard.attempts[n].worker, now - shard.started[n])
    return out


async def _drop_lost(client: Any, shards: Mapping[int, _Shard]) -> None:
    """Give up the attempts whose worker the scheduler no longer lists as holding their shard."""
    live = [(shard, n) for shard in shards.values() if shard.answer is None for n in shard.live()]
    if not live:
        return
    who = await client.scheduler.who_has(keys=sorted({shard.attempts[n].key for shard, n in live}))
    for shard, n in live:
        attempt = shard.attempts[n]
        if attempt.worker not in who.get(attempt.key, ()):
            shard.given_up.add(n)
            shard.failed.add(n)
            shard.tasks[n].cancel()
            shard.error = (False, OSError(f"worker {attempt.worker} no longer holds shard {shard.index}"))

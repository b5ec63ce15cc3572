"""Bounded waits on a Dask cluster: for workers, for futures, and the probe that every worker sees a folder.

Nothing here waits without a bound.  A long operation (opening, saving,
ingesting) may take as long as its work needs while the scheduler is
connected and has workers; once it has had no worker, or no scheduler, for
``patience`` seconds it fails with one ``RetrievalTimeoutError`` saying so.
Futures the scheduler cancelled (it went away: Dask cancels every future of
a client that lost its scheduler) are reported, never waited for.

Dask is imported inside the functions only.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._exceptions import ConfigError, IngestError, RetrievalTimeoutError

__all__ = [
    "ASK",
    "POLL",
    "address_of",
    "check_scheduler",
    "open_client",
    "close_fully",
    "close_replacement",
    "live_client",
    "probe_folder",
    "remember",
    "scheduler_lost",
    "settle",
    "workers_within",
]

# Seconds between looks at the scheduler while a long operation runs.
POLL = 0.5
# Seconds one look at the scheduler may take (it answers in milliseconds when it is there).
ASK = 5.0
# Seconds a look for a scheduler that went away may take (``live_client``): a search while it is
# away fails after at most this long, and the first after its return finds it.
PROBE = 2.0


def address_of(client: Any) -> str:
    """The scheduler address ``client`` talks to (a description when it has none)."""
    return _address(client)


def _address(client: Any) -> str:
    with contextlib.suppress(Exception):
        return str(client.scheduler.address)
    return "the Dask scheduler"


def scheduler_lost(client: Any, exc: BaseException | None = None) -> RetrievalTimeoutError:
    """The error for a client whose scheduler went away (``exc``: what Dask raised)."""
    why = f" ({type(exc).__name__}: {exc})" if exc is not None and str(exc) else ""
    return RetrievalTimeoutError(
        f"lost the connection to the Dask scheduler at {_address(client)}{why}; "
        "an open index loads its shards again from its last save once the scheduler is back"
    )


def check_scheduler(address: str, timeout: float) -> None:
    """Raise unless a Dask scheduler answers at ``address`` within ``timeout`` seconds.

    ``RetrievalTimeoutError`` when nothing answers in time (a dead address
    fails within ``timeout``); ``ConfigError`` when a Dask worker or nanny
    answers instead (its own address given for the scheduler's, which Dask's
    client would report as an unexpected ``TypeError``) or something that does
    not speak Dask's protocol.
    """
    import asyncio

    from distributed.core import rpc

    async def ask() -> Any:
        remote = rpc(address, timeout=timeout)  # type: ignore[no-untyped-call]
        try:
            return await asyncio.wait_for(remote.identity(), timeout)
        finally:
            await remote.close_rpc()  # type: ignore[no-untyped-call]

    # In a thread of its own: the caller may run an event loop (a notebook), and asyncio.run needs none.
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["identity"] = asyncio.run(ask())
        except BaseException as exc:  # handed to the caller
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="clanker-rag-scheduler-check", daemon=True)
    thread.start()
    thread.join(timeout + ASK)
    exc = outcome.get("error")
    if "identity" not in outcome:
        why = f" ({type(exc).__name__}: {exc})" if exc is not None and str(exc) else ""
        raise RetrievalTimeoutError(f"cannot reach the Dask scheduler at {address} within {timeout:g} s{why}")
    identity = outcome["identity"]
    kind = identity.get("type") if isinstance(identity, dict) else None
    if kind != "Scheduler":
        what = f"a Dask {str(kind).lower()}" if isinstance(kind, str) else "not a Dask scheduler"
        scheduler = identity.get("scheduler") if isinstance(identity, dict) else None
        hint = f" (its scheduler is {scheduler})" if isinstance(scheduler, str) else ""
        raise ConfigError(
            f"{address} is {what}, not a Dask scheduler{hint}: give the scheduler's address "
            "(dask scheduler prints it: 'Scheduler at: tcp://HOST:8786')"
        )


def open_client(address: str, timeout: float) -> Any:
    """A ``distributed.Client`` for the scheduler at ``address``, checked first (see ``check_scheduler``):
    connecting fails within ``timeout``."""
    check_scheduler(address, timeout)
    from distributed import Client

    client = Client(address, timeout=timeout)  # type: ignore[no-untyped-call]
    remember(client)
    return client


# The scheduler address of each client seen connected, and the client that replaced one that gave up
# reconnecting: a closed client cannot connect again, and its own address is gone with its connection.
_ADDRESSES: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_REPLACED: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_REPLACING = threading.Lock()


def remember(client: Any) -> None:
    """Note the scheduler address of a connected ``client`` (see ``live_client``)."""
    if client.status == "running":
        with contextlib.suppress(Exception):
            _ADDRESSES[client] = str(client.scheduler.address)


def live_client(client: Any, timeout: float) -> Any:
    """``client``, or the client that replaces it because it lost its scheduler.

    Dask's client, once it loses its scheduler, retries with a backoff that
    grows to tens of seconds (so it may find a returned scheduler late), and
    closes itself for good after its ``timeout`` (30 s by default).  So while
    it is not connected, this looks for the scheduler itself (at most
    ``PROBE`` seconds: ``RetrievalTimeoutError`` while it is away) and, once
    it answers, opens a new client to the same address (within ``timeout``),
    shared by everything that used the old one: an index opened on it, a
    fresh ``load()`` with it.
    """
    if client.status == "running":
        remember(client)
        return client
    with _REPLACING:
        new = _REPLACED.get(client)
        if new is not None and new.status == "running":
            return new
        address = _ADDRESSES.get(client)
        if address is None:
            raise scheduler_lost(client)
        try:
            check_scheduler(address, min(timeout, PROBE))
        except RetrievalTimeoutError:
            raise scheduler_lost(client) from None
        if new is not None:
            with contextlib.suppress(Exception):
                close_fully(new)
        new = open_client(address, timeout)
        _REPLACED[client] = new
        _ADDRESSES[new] = address
        return new


def close_replacement(client: Any) -> None:
    """Close the client that replaced ``client`` (see ``live_client``), if one did."""
    new = _REPLACED.pop(client, None)
    if new is not None:
        with contextlib.suppress(Exception):
            close_fully(new)


def close_fully(client: Any) -> None:
    """``client.close()``, and its IO-loop thread stopped even when the client had closed itself.

    A Dask client that gave up on its scheduler is already "closed": its
    ``close()`` returns at once and leaves the thread running its event loop
    (distributed 2026.8).  That thread would outlive every client of the
    process, and a process running other threads forks no helper
    (``_engine/_bulk_impacts``), so it is stopped here.  The loop runner is a
    private attribute of Dask's client, read defensively: stopping it twice,
    or a client without one, does nothing.
    """
    gave_up = client.status == "closed"
    client.close()
    runner = getattr(client, "_loop_runner", None)
    if gave_up and runner is not None and callable(getattr(runner, "stop", None)):
        with contextlib.suppress(Exception):
            runner.stop()


def _workers(client: Any) -> list[str] | None:
    """The scheduler's workers now; ``None`` when the scheduler does not answer."""
    if client.status != "running":
        return None
    try:
        return sorted(client.sync(client.scheduler.ncores, callback_timeout=ASK))
    except Exception:  # closed, reconnecting, a timed-out comm: all "no scheduler"
        return None


def workers_within(client: Any, patience: float) -> list[str]:
    """The scheduler's workers, waiting up to ``patience`` seconds for the first to join."""
    deadline = time.monotonic() + patience
    while True:
        if client.status in ("closing", "closed"):
            raise scheduler_lost(client)  # gave up reconnecting: it never will
        workers = _workers(client)
        if workers:
            return workers
        if time.monotonic() >= deadline:
            if workers is None:
                raise scheduler_lost(client)
            raise RetrievalTimeoutError(
                f"no Dask worker joined the scheduler at {_address(client)} within {patience:g} s "
                f"(start some: dask worker {_address(client)})"
            )
        time.sleep(POLL)


def settle(
    client: Any, futures: Sequence[Any], *, patience: float, deadline: float | None = None, also: Sequence[Any] = ()
) -> None:
    """Wait until every future finished, failed or was cancelled, or until ``deadline`` (monotonic).

    Raises ``RetrievalTimeoutError`` once the scheduler has been gone, or had
    no worker, for ``patience`` seconds while futures were still pending;
    without a ``deadline`` (work that takes as long as it needs: a change, a
    save), also once a worker running one of them has sent the scheduler no
    heartbeat for ``patience`` seconds (a hung machine: Dask itself waits
    minutes before it gives such a worker up).
    """
    from distributed import wait

    alone_since: float | None = None
    last_look = time.monotonic()
    heard = _Heartbeats()
    while True:
        pending = [f for f in futures if f.status == "pending"]
        now = time.monotonic()
        if not pending or (deadline is not None and now >= deadline):
            return
        step = POLL if deadline is None else min(POLL, deadline - now)
        # wait() raises on a timeout instead of returning what finished.
        with contextlib.suppress(TimeoutError):
            wait(pending, timeout=step)  # type: ignore[no-untyped-call]
        if time.monotonic() - last_look < 2 * POLL:
            continue
        last_look = time.monotonic()
        if all(f.status != "pending" for f in pending):
            continue
        if deadline is None:
            heard.check(client, [*pending, *also], patience)
        if _workers(client):
            alone_since = None
            continue
        alone_since = alone_since if alone_since is not None else last_look
        if last_look - alone_since >= patience:
            if _workers(client) is None:
                raise scheduler_lost(client)
            raise RetrievalTimeoutError(
                f"the Dask scheduler at {_address(client)} has had no worker for {patience:g} s "
                f"while {len(pending)} shard task(s) waited for one (start workers: dask worker {_address(client)})"
            )


class _Heartbeats:
    """When each worker's last heartbeat (the scheduler's ``last_seen``) last moved, on this machine's clock
    (the scheduler's clock may differ from ours: only changes of its figure are compared)."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[object, float]] = {}

    def check(self, client: Any, pending: Sequence[Any], patience: float) -> None:
        """Raise when a worker running one of ``pending`` has been silent for ``patience`` seconds."""
        now = time.monotonic()
        try:
            workers = client.sync(client.scheduler.identity, callback_timeout=ASK).get("workers", {})
        except Exception:  # no scheduler: the caller's own check reports it
            return
        for w, info in workers.items():
            last = info.get("last_seen")
            before = self.seen.get(w)
            if before is None or before[0] != last:
                self.seen[w] = (last, now)
        silent = {w for w, (_, since) in self.seen.items() if w in workers and now - since >= patience}
        if not silent:
            return
        try:
            busy = client.sync(client.scheduler.processing, workers=sorted(silent), callback_timeout=ASK)
        except Exception:
            return
        keys = {f.key for f in pending}
        for w in sorted(silent):
            stuck = [k for k in busy.get(w, ()) if k in keys]
            if stuck:
                raise RetrievalTimeoutError(
                    f"worker {w} has sent the Dask scheduler no heartbeat for {patience:g} s while running "
                    f"{len(stuck)} shard task(s) (hung or overloaded?); stop or restart it, then try again"
                )


def _read_probe(path: str | None, token: str, roots: Sequence[str]) -> str:
    """On a worker: ``""`` when the probe file reads ``token`` and every root exists, else why not."""
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                seen = f.read()
        except OSError as exc:
            return f"cannot read {path} ({exc.strerror or exc})"
        if seen != token:
            return f"{path} holds another probe: this worker sees another folder under that path"
    missing = [r for r in roots if not os.path.exists(r)]
    return f"cannot see {', '.join(missing)}" if missing else ""


def probe_folder(client: Any, folder: Path | None, roots: Sequence[str] = (), *, patience: float) -> None:
    """Check that every worker reads the file this process writes in ``folder`` (and sees ``roots``).

    A sharded index lives on storage every worker mounts at the same path:
    shards saved on a worker's local disk would be lost with the worker, and
    found by no other.  Raises ``IngestError`` naming each worker that does
    not see them.
    """
    workers = workers_within(client, patience)
    token = uuid.uuid4().hex
    path = None if folder is None else folder / f".probe-{token}"
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(token, encoding="utf-8")
    try:
        futures = [
            client.submit(
                _read_probe,
                None if path is None else str(path),
                token,
                list(roots),
                workers=[w],
                allow_other_workers=False,
                pure=False,
            )
            for w in workers
        ]
        settle(client, futures, patience=patience, deadline=time.monotonic() + patience)
        seen: dict[str, object] = {}
        for w, fut in zip(workers, futures):
            if fut.status == "finished":
                seen[w] = fut.result()
            elif fut.status == "error":
                seen[w] = fut.exception()
            else:
                fut.cancel()
                seen[w] = f"no answer within {patience:g} s"
    finally:
        if path is not None:
            path.unlink(missing_ok=True)
    bad = {w: (why if isinstance(why, str) else f"{type(why).__name__}: {why}") for w, why in seen.items()}
    bad = {w: why for w, why in sorted(bad.items()) if why}
    if bad:
        lines = "; ".join(f"worker {w}: {why}" for w, why in bad.items())
        what = (
            f"{folder}: not every worker sees this folder" if folder is not None else "not every worker sees the paths"
        )
        raise IngestError(
            f"{what} ({lines}); a sharded index and what it ingests must be on storage every worker "
            "mounts at the same path (a shared file system)"
        )

"""An inter-process writer lock on an index folder.

``fcntl.flock`` on POSIX, ``msvcrt.locking`` on Windows.  The lock belongs to
an open file description, so the operating system drops it when the process
dies: a killed writer never leaves a stale lock behind.  A forked child (a
parallel ingest's worker) closes its copies of the locks' descriptors at
once, so it can never keep a lock alive after the writer is gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import weakref
from pathlib import Path
from types import TracebackType

from .._exceptions import IndexLockedError

__all__ = ["IndexLock"]

log = logging.getLogger(__name__)

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]
    import msvcrt


_held: weakref.WeakSet[IndexLock] = weakref.WeakSet()


def _forget_in_child() -> None:
    # Close, never unlock: unlocking would free the parent's lock too (the
    # descriptors share one open file description).
    for lock in list(_held):
        fd, lock._fd = lock._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


class IndexLock:
    """Exclusive lock on ``folder/.lock``; waits up to ``timeout`` seconds."""

    def __init__(self, folder: str | os.PathLike[str], timeout: float = 30.0) -> None:
        self.path = Path(folder) / ".lock"
        self.timeout = timeout
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                else:  # pragma: no cover - Windows
                    msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise IndexLockedError(
                        f"{self.path.parent}: another process is writing this index "
                        f"(waited {self.timeout:g} s for {self.path})"
                    ) from None
                time.sleep(0.05)
        self._fd = fd
        _held.add(self)
        log.debug("locked %s", self.path)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        _held.discard(self)
        if fd is None:
            return
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
            else:  # pragma: no cover - Windows
                msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        finally:
            os.close(fd)

    def __enter__(self) -> IndexLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

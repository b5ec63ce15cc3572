"""An inter-process writer lock on an index folder.

``fcntl.flock`` on POSIX, ``msvcrt.locking`` on Windows.  The lock belongs to
an open file description, so the operating system drops it when the process
dies: a killed writer never leaves a stale lock behind.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from types import TracebackType

from ._exceptions import IndexLockedError

__all__ = ["IndexLock"]

log = logging.getLogger(__name__)

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]
    import msvcrt


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
        log.debug("locked %s", self.path)

    def release(self) -> None:
        fd, self._fd = self._fd, None
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

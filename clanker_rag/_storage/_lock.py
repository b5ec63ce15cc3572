"""An inter-process writer lock on an index folder.

``fcntl.flock`` on POSIX, ``msvcrt.locking`` on Windows.  The lock belongs to
an open file description, so the operating system drops it when the process
dies: a killed writer never leaves a stale lock behind.  A forked child (a
parallel ingest's worker) closes its copies of the locks' descriptors at
once, so it can never keep a lock alive after the writer is gone.

A flock guards an inode, not a name, and operators delete "stale" ``.lock``
files.  So on POSIX a writer holds two locks, taken in this order:

* ``folder/.lock``, re-checked after the flock: the path must still name the
  inode it locked (``fstat`` against ``stat``), or the writer locked a file
  that someone deleted or replaced, and it opens the path again;
* the index folder itself (its directory descriptor), which nobody deletes
  while it holds an index: with it, a writer whose ``.lock`` was deleted
  while held still excludes the writer that creates a new one.

Where the file system refuses a flock on a directory (NFS emulates flock with
record locks, which need a descriptor open for writing), only ``.lock``
guards the folder; :func:`check_held`, which the index writer calls before it
moves the commit point or deletes a file, then refuses (``IndexLockedError``)
a commit whose ``.lock`` is no longer the one it locked, so a writer that
lost the lock abandons its commit instead of deleting another's files.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
import weakref
from pathlib import Path
from types import TracebackType

from .._exceptions import IndexLockedError

__all__ = ["IndexLock", "check_held"]

log = logging.getLogger(__name__)

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]
    import msvcrt

# A directory flock the file system does not support (rather than one another process holds).
_NO_DIR_LOCK = {errno.EBADF, errno.EINVAL, errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EISDIR}

_held: weakref.WeakSet[IndexLock] = weakref.WeakSet()


def _forget_in_child() -> None:
    # Close, never unlock: unlocking would free the parent's lock too (the
    # descriptors share one open file description).
    for lock in list(_held):
        fds = (lock._fd, lock._dir_fd)
        lock._fd = lock._dir_fd = None
        for fd in fds:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _flock_nb(fd: int) -> None:
    """Lock ``fd`` exclusively or raise ``OSError`` at once (another process holds it)."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    else:  # pragma: no cover - Windows
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)


def _unlock_close(fd: int) -> None:
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
        else:  # pragma: no cover - Windows
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    finally:
        os.close(fd)


def _same_inode(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _lock_folder(path: Path) -> int | None:
    """The folder's descriptor, flocked; ``None`` where directories cannot be flocked.

    Raises ``BlockingIOError`` when another process holds it.
    """
    if fcntl is None:  # pragma: no cover - Windows opens no directories
        return None
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in _NO_DIR_LOCK:
            log.debug("%s: this file system cannot lock a folder; .lock alone guards it", path)
            return None
        raise BlockingIOError(exc.errno, exc.strerror) from None
    return fd


class IndexLock:
    """Exclusive lock on ``folder/.lock`` (and on the folder); waits up to ``timeout`` seconds."""

    def __init__(self, folder: str | os.PathLike[str], timeout: float = 30.0) -> None:
        self.path = Path(folder) / ".lock"
        self.timeout = timeout
        self._fd: int | None = None
        self._dir_fd: int | None = None
        self._real = ""  # the folder's resolved path while held (how check_held finds this lock)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def identity(self) -> tuple[int, int]:
        """(device, inode) of the ``.lock`` file this lock holds."""
        if self._fd is None:
            raise IndexLockedError(f"{self.path}: not held")
        st = os.fstat(self._fd)
        return st.st_dev, st.st_ino

    def holds_path(self) -> bool:
        """Whether ``.lock`` at the path is still the file this lock holds (not deleted, not replaced)."""
        if self._fd is None:
            return False
        try:
            return _same_inode(os.fstat(self._fd), os.stat(self.path))
        except OSError:
            return False

    def _holds_folder(self) -> bool:
        """Whether the folder lock is held and the folder at the path is still the one locked."""
        if self._dir_fd is None:
            return False
        try:
            return _same_inode(os.fstat(self._dir_fd), os.stat(self.path.parent))
        except OSError:
            return False

    def check(self) -> None:
        """Raise ``IndexLockedError`` unless this process still excludes every other writer of the folder."""
        if self._fd is None:
            raise IndexLockedError(f"{self.path.parent}: the writer lock is not held")
        if self._holds_folder() or (self._dir_fd is None and self.holds_path()):
            return
        raise IndexLockedError(
            f"{self.path.parent}: the writer lock ({self.path}) was deleted or replaced while this process "
            "held it, so another writer may be committing; this commit is abandoned and leaves the index as it was"
        )

    def acquire(self) -> None:
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.timeout
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            busy = False
            try:
                _flock_nb(fd)
            except OSError:
                os.close(fd)
                busy = True
            if not busy:
                if fcntl is not None and not self._names(fd):
                    # Locked a file that was deleted or replaced before the
                    # flock: another writer may hold the one at the path now.
                    _unlock_close(fd)
                    log.debug("%s was replaced while being locked; locking it again", self.path)
                    if time.monotonic() < deadline:
                        continue
                    busy = True
                else:
                    try:
                        dir_fd = _lock_folder(self.path.parent)
                    except BlockingIOError:
                        _unlock_close(fd)
                        busy = True
                    except BaseException:
                        _unlock_close(fd)
                        raise
                    else:
                        break
            if time.monotonic() >= deadline:
                raise IndexLockedError(
                    f"{self.path.parent}: another process is writing this index "
                    f"(waited {self.timeout:g} s for {self.path})"
                )
            time.sleep(0.05)
        self._fd, self._dir_fd = fd, dir_fd
        self._real = os.path.realpath(self.path.parent)
        _held.add(self)
        log.debug("locked %s", self.path)

    def _names(self, fd: int) -> bool:
        try:
            return _same_inode(os.fstat(fd), os.stat(self.path))
        except FileNotFoundError:
            return False

    def release(self) -> None:
        fd, dir_fd = self._fd, self._dir_fd
        self._fd = self._dir_fd = None
        _held.discard(self)
        try:
            if dir_fd is not None:
                _unlock_close(dir_fd)
        finally:
            if fd is not None:
                _unlock_close(fd)

    def __enter__(self) -> IndexLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def check_held(folder: str | os.PathLike[str]) -> None:
    """Refuse (``IndexLockedError``) to change ``folder`` if this process's lock on it was lost.

    The index writer calls it before it replaces the commit point or deletes
    a file.  A folder this process holds no lock on passes (a save outside
    any lock is the caller's choice, and tests write folders directly).
    """
    real = os.path.realpath(folder)
    try:
        st: os.stat_result | None = os.stat(folder)
    except OSError:
        st = None
    for lock in list(_held):
        if lock._fd is None:
            continue
        same = lock._real == real
        if not same and st is not None and lock._dir_fd is not None:
            with contextlib.suppress(OSError):
                same = _same_inode(os.fstat(lock._dir_fd), st)
        if same:
            lock.check()

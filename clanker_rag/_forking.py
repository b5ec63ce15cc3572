"""A forked child that writes its result into an anonymous shared mapping.

Two bulk steps hand half their work (or all of it) to a child forked for
the job: the impacts and orders of a build (``_engine._bulk_impacts``) and
the compression of a big save's texts (``_storage._texts_child``).  Both
need the same care, kept here once:

- Ctrl-C reaches the whole process group, and the child must not unwind
  this process's stack (its handlers might save a half-built index): SIGINT
  is held back over the fork and ignored in the child, and this process
  takes it and abandons the child;
- the child disables the cyclic collector, which would write to (and so
  copy) every page of the inherited heap, and leaves by ``os._exit``;
- a child interrupted, failed or no longer wanted is killed and reaped.
"""

from __future__ import annotations

import gc
import mmap
import os
import signal
import threading
from collections.abc import Callable

__all__ = ["Child", "start_child"]

_MAX_FD = 1 << 20


class Child:
    """A running child and the mapping it writes into."""

    __slots__ = ("pid", "shared")

    def __init__(self, pid: int, shared: mmap.mmap) -> None:
        self.pid = pid
        self.shared = shared

    def abandon(self) -> None:
        """Stop the child (this process failed or was interrupted), reap it and close the mapping."""
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
            self.pid = 0
        self.shared.close()

    def succeeded(self) -> bool:
        """Wait for the child: whether it exited 0.  The mapping stays open for the caller
        to read (then :meth:`close`); interrupted while waiting, the child goes too."""
        try:
            _, status = os.waitpid(self.pid, 0)
        except BaseException:
            self.abandon()
            raise
        self.pid = 0
        return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0

    def close(self) -> None:
        self.shared.close()


def start_child(size: int, job: Callable[[mmap.mmap], int], *, close_files: bool = False) -> Child | None:
    """Fork a child that runs ``job`` on a fresh shared mapping of ``size`` bytes and exits
    with its return value (1 if it raises); None when the mapping or the fork fails.
    ``close_files``: the child closes every inherited descriptor first (so that an
    inherited lock goes with this process even while the child runs)."""
    try:
        shared = mmap.mmap(-1, max(1, size))  # anonymous, shared with the child
    except (OSError, ValueError, OverflowError):
        return None
    held = _hold_sigint()
    try:
        pid = os.fork()
    except OSError:
        _release_sigint(held)
        shared.close()
        return None
    if pid == 0:  # pragma: no cover - runs in the child, which never returns
        code = 1
        try:
            if held:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                _release_sigint(held)
            gc.disable()
            if close_files:
                os.closerange(3, _MAX_FD)
            code = job(shared)
        finally:
            os._exit(code)
    child = Child(pid, shared)
    try:
        _release_sigint(held)  # a Ctrl-C held back is raised here
    except BaseException:
        child.abandon()
        raise
    return child


def _hold_sigint() -> bool:
    """Block SIGINT in this thread (True) where the platform can."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        return False
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    return True


def _release_sigint(held: bool) -> None:
    if held:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

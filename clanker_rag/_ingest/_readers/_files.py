"""Reading files safely: size caps checked first, hashing as a stream, changes caught.

Every failure becomes a :class:`SkipFile`; the passing ones (vanished,
unreadable, changed while read) are marked transient so the file's indexed
chunks are kept.

A file is opened without blocking and only if it is a regular file: a FIFO
or a device, even one swapped in after the walk, is skipped, never waited
on.  A file the walk found comes as a :class:`FoundPath`, which remembers
the resolved path and the (device, inode) the walk saw; it is opened one
component at a time from ``/`` without following a symlink anywhere
(:func:`open_beneath`), and the opened file must be the one the walk saw.  A
file or folder swapped for a symlink between the walk and the read is
therefore skipped, never read through the link under the inside name.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable
from typing import IO

from ._base import SkipFile

__all__ = [
    "FoundPath",
    "content_known",
    "hash_file",
    "open_beneath",
    "open_file",
    "open_regular",
    "read_bytes",
    "stat_key",
]

_BLOCK = 1 << 20


def stat_key(st: os.stat_result) -> tuple[int, int]:
    """What tells a changed file apart: its size and modification time."""
    return st.st_size, st.st_mtime_ns


Sniff = Callable[[bytes], "str | None"]
SNIFF_BYTES = 8192


def _sniffed(fh: IO[bytes], sniff: Sniff | None) -> None:
    """Refuse the file from its first bytes (a binary file) before reading the rest.

    A raised size cap lets in gigabyte files: an all-zero one is known from
    its head, not after reading (or hashing) it whole."""
    if sniff is None:
        return
    try:
        head = fh.read(SNIFF_BYTES)
        fh.seek(0)
    except OSError as exc:
        raise SkipFile(f"unreadable: {exc.strerror or exc}", transient=True) from exc
    reason = sniff(head)
    if reason:
        raise SkipFile(reason)


def hash_file(path: str, *, max_bytes: int, sniff: Sniff | None = None) -> tuple[str, os.stat_result]:
    """SHA-256 of a file read as a stream, with the stat taken when it was opened
    (``sniff(head)`` may refuse it from its first bytes first)."""
    digest = hashlib.sha256()
    with open_file(path) as fh:
        st = os.fstat(fh.fileno())
        if st.st_size > max_bytes:
            raise SkipFile(f"too large ({st.st_size} bytes > cap of {max_bytes})")
        _sniffed(fh, sniff)
        while block := fh.read(_BLOCK):
            digest.update(block)
        if stat_key(os.fstat(fh.fileno())) != stat_key(st):
            raise SkipFile("file changed while being read", transient=True)
    return digest.hexdigest(), st


class FoundPath(str):
    """A path as the walk found it (the ``str``), with the file the walk saw there.

    ``real`` is the absolute path with every symlink resolved, as the walk
    resolved it; ``ident`` the ``(st_dev, st_ino)`` it saw.  The path itself
    stays what names the file (source names, reports), so any code that
    takes a ``str`` takes it; :func:`open_regular` opens ``real`` and checks
    ``ident``.
    """

    real: str
    ident: tuple[int, int]

    def __new__(cls, path: str, real: str, ident: tuple[int, int]) -> FoundPath:
        self = super().__new__(cls, path)
        self.real = real
        self.ident = ident
        return self

    def __reduce__(self) -> tuple[type[FoundPath], tuple[str, str, tuple[int, int]]]:
        # (a parallel ingest's worker gets it pickled)
        return FoundPath, (str(self), self.real, self.ident)


_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
# Folders on the way are only looked up in: O_PATH needs search permission alone, as
# a path lookup does (a folder with mode 711 is passed through, not listed).
_O_LOOKUP = getattr(os, "O_PATH", os.O_RDONLY)
# Opening relative to a directory descriptor (POSIX); elsewhere a path is opened whole.
BENEATH = os.open in os.supports_dir_fd and bool(_O_NOFOLLOW)
# A path component that is a symlink now (ELOOP: the last one; ENOTDIR: one before it).
_SWAPPED = {errno.ELOOP, errno.ENOTDIR, getattr(errno, "EMLINK", errno.ELOOP)}


def open_beneath(real: str, flags: int) -> int:
    """Open absolute ``real`` following no symlink in any component; returns the descriptor.

    Raises ``OSError`` (``ELOOP`` or ``ENOTDIR``) when a component is a
    symlink or not a folder.  ``flags`` apply to the last component, which is
    opened with ``O_NOFOLLOW`` too.
    """
    if not BENEATH:  # pragma: no cover - Windows: no descriptor-relative opens
        return os.open(real, flags | _O_CLOEXEC)
    parts = [p for p in real.split(os.sep) if p]
    if not parts:  # (the root folder itself)
        return os.open(os.sep, flags | _O_CLOEXEC)
    dir_fd = os.open(os.sep, _O_LOOKUP | _O_DIRECTORY | _O_CLOEXEC)
    try:
        for part in parts[:-1]:
            if part == "..":  # (a resolved path has none; never climb out)
                raise OSError(errno.EINVAL, "a resolved path has no '..'", real)
            nxt = os.open(part, _O_LOOKUP | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=dir_fd)
            os.close(dir_fd)
            dir_fd = nxt
        return os.open(parts[-1], flags | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def open_regular(path: str) -> int:
    """A descriptor of the regular file at ``path``, opened without blocking (a FIFO never hangs).

    A :class:`FoundPath` is opened at its resolved path without following
    a symlink, and must still be the file the walk saw.  Raises
    :class:`SkipFile` with the reason otherwise.
    """
    flags = os.O_RDONLY | _O_NONBLOCK | _O_NOCTTY | getattr(os, "O_BINARY", 0)
    try:
        fd = open_beneath(path.real, flags) if isinstance(path, FoundPath) else os.open(path, flags | _O_CLOEXEC)
    except FileNotFoundError as exc:
        raise SkipFile("vanished before it could be read", transient=True) from exc
    except IsADirectoryError as exc:
        raise SkipFile("is a directory") from exc
    except OSError as exc:
        if isinstance(path, FoundPath) and exc.errno in _SWAPPED:
            raise SkipFile("replaced by a symlink since the walk found it", transient=True) from exc
        raise SkipFile(f"unreadable: {exc.strerror or exc}", transient=True) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = " (a FIFO)" if stat.S_ISFIFO(st.st_mode) else ""
            # (the walk saw a regular file there: it was swapped since, for the moment)
            raise SkipFile(f"not a regular file{kind}", transient=isinstance(path, FoundPath))
        if isinstance(path, FoundPath) and (st.st_dev, st.st_ino) != path.ident:
            raise SkipFile("replaced since the walk found it", transient=True)
        if _O_NONBLOCK:
            import fcntl  # (POSIX, where O_NONBLOCK exists)

            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(path: str) -> IO[bytes]:
    """Open a regular file for reading (see :func:`open_regular`); anything else is skipped with the reason."""
    fd = open_regular(path)
    try:
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str, *, max_bytes: int, sniff: Sniff | None = None) -> tuple[bytes, os.stat_result]:
    """Read a whole file, checking the size cap first (and ``sniff(head)``, which
    may refuse it from its first bytes) and that it did not change meanwhile."""
    with open_file(path) as fh:
        st = os.fstat(fh.fileno())
        if st.st_size > max_bytes:
            raise SkipFile(f"too large ({st.st_size} bytes > cap of {max_bytes})")
        _sniffed(fh, sniff)
        try:
            data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise SkipFile(f"unreadable: {exc.strerror or exc}", transient=True) from exc
        if len(data) > max_bytes:
            raise SkipFile(f"too large (grew past the cap of {max_bytes} bytes while read)", transient=True)
        if stat_key(os.fstat(fh.fileno())) != stat_key(st) or len(data) != st.st_size:
            raise SkipFile("file changed while being read", transient=True)
    return data, st


def content_known(sha: str | None) -> Callable[[str, os.stat_result], bool] | None:
    """A ``known_hash`` for :func:`read_document`: is the content the one that hashed to ``sha``?

    None (no check) when nothing of the file is indexed yet.
    """
    if sha is None:
        return None
    return lambda digest, _st: digest == sha

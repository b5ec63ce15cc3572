"""Reading files safely: size caps checked first, hashing as a stream, changes caught.

Every failure becomes a :class:`SkipFile`; the passing ones (vanished,
unreadable, changed while read) are marked transient so the file's indexed
chunks are kept.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import IO

from ._base import SkipFile

__all__ = ["content_known", "hash_file", "open_file", "read_bytes", "stat_key"]

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


def open_file(path: str) -> IO[bytes]:
    """Open for reading; a file that cannot be opened is skipped with the reason."""
    try:
        return open(path, "rb")
    except FileNotFoundError as exc:
        raise SkipFile("vanished before it could be read", transient=True) from exc
    except IsADirectoryError as exc:
        raise SkipFile("is a directory") from exc
    except OSError as exc:
        raise SkipFile(f"unreadable: {exc.strerror or exc}", transient=True) from exc


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

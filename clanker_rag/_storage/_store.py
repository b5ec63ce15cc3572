"""The index folder's files: the commit point, data files, checksums and atomic writes.

``<folder>/index.json`` is one JSON object, the commit point::

    {"format": "clanker-rag-index", "format_version": 8,
     "revision": "<random hex, new on every save>",
     "sha256": "<hex digest of the text of the body value>",
     "body": {...}}

The body names the segment files (``data-<digest>.bin``, :mod:`._segments`)
that hold the bulk as little-endian packed arrays and UTF-8 runs, each part
referenced as an ``[offset, length]`` byte range (:mod:`._codec`): no JSON
string parsing and no base64 on the hot path, no pickle, no eval.  The
manifest's own digest covers the body, and the body each file's size and
digest.  A folder whose ``format_version`` is older than ``FORMAT_VERSION``
is refused with one line naming ``clanker-rag upgrade DIR``, which rewrites
it (:mod:`._upgrade`); a newer one is refused naming both versions.

Saves are atomic: each data file is written and fsynced under its new name,
then the manifest is written beside the old one, fsynced and renamed over
it, and the folder is fsynced; only then are data files no manifest names
removed.  A process killed at any moment leaves the old index or the new one,
never a mix (at worst an unreferenced data file, removed by the next save).

Data files are mapped (:func:`map_file`) and read in place, held open by a
:class:`DataFile` for as long as anything reads them.  :func:`verify_data`
(``KnowledgeBase.verify()``) hashes every one against the manifest on demand.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import re
import secrets
import stat
import sys
import weakref
from array import array
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from itertools import accumulate, islice, repeat
from pathlib import Path
from typing import Any, NamedTuple

from .._exceptions import ClankerRagError, IndexFormatError, IndexWriteError
from . import _lock

__all__ = [
    "DATA_NAME",
    "FORMAT_VERSION",
    "INDEX_FILE",
    "LITTLE",
    "VERIFY_AT_LOAD",
    "Blob",
    "DataFile",
    "Manifest",
    "data_range",
    "fsync_dir",
    "map_file",
    "read_index",
    "same_folder",
    "unpack",
    "verify_data",
    "write_bytes_atomic",
    "write_index",
    "writing",
]

FORMAT_NAME = "clanker-rag-index"
FORMAT_VERSION = 8
# Segment files up to this size are hashed whole at load; larger ones block by block (see _segments).
VERIFY_AT_LOAD = 64 * 1024 * 1024
_ALIGN = 8
# Small pieces of a run are joined into parts of about this many bytes (see Blob.run).
_GROUP = 1 << 20
INDEX_FILE = "index.json"
_BODY_KEY = '"body":'
DATA_NAME = re.compile(r"data-[0-9a-f]{32}\.bin")
LITTLE = sys.byteorder == "little"
# Temporary files write_atomic leaves when a save is killed mid-write.
_STALE_TMP = re.compile(r"\.(data-[0-9a-f]{32}\.bin|index\.json)\.\d+\.[0-9a-f]+\.tmp")
# No manifest comes near this (the bulk lives in the data files; even an older
# format that kept everything inside index.json stays a few hundred MB):
# anything bigger is refused from its size, before a byte is read.
MAX_MANIFEST_BYTES = 1 << 30


class Blob:
    """The data file of an index being written; parts are referenced from the
    body as ``[offset, length]``."""

    def __init__(self) -> None:
        self.parts: list[bytes | memoryview] = []
        self.size = 0

    def add(self, data: bytes | memoryview) -> list[int]:
        # Every part starts on an 8-byte boundary, so a mapped reader can
        # cast any of them to its item type in place.
        pad = -self.size % _ALIGN
        if pad:
            self.parts.append(bytes(pad))
            self.size += pad
        piece = data if isinstance(data, bytes) else memoryview(data).cast("B")
        ref = [self.size, len(piece)]
        self.parts.append(piece)
        self.size += len(piece)
        return ref

    def run(self, pieces: Iterable[str | bytes | memoryview]) -> tuple[list[int], array[int]]:
        """Add ``pieces`` (a ``str`` as UTF-8) back to back as one part: its range, and where each
        piece starts and ends within it (``n + 1`` offsets).

        ``str`` pieces, encoded here, are joined into parts of about ``_GROUP`` bytes: a save
        of 225k new texts otherwise hands the checksums, the digest and the file writes 675k
        parts, each a Python step.  Bytes and views given are parts of their own: the
        caller holds them anyway (a snapshot's texts, a mapped segment, a lookup table),
        and joining them would copy what can be written as it is."""
        self.add(b"")  # aligns the start
        start = self.size
        offsets = array("q", [0])
        parts = self.parts
        group: list[bytes | memoryview] = []
        held = 0
        it = iter(pieces)
        while given := list(islice(it, 1024)):
            fresh = all(map(isinstance, given, repeat(str)))
            batch: list[bytes | memoryview] = (
                # surrogatepass: a text decoded with surrogateescape round-trips too.
                list(map(str.encode, given, repeat("utf-8"), repeat("surrogatepass")))  # type: ignore[arg-type]
                if fresh
                else list(map(_one_bytes, given))
            )
            sizes = list(map(len, batch))
            ends = accumulate(sizes, initial=offsets[-1])
            next(ends)
            offsets.extend(ends)
            if not fresh:
                if group:
                    parts.append(b"".join(group))
                    group, held = [], 0
                parts.extend(batch)
                continue
            group.extend(batch)
            held += sum(sizes)
            if held >= _GROUP:
                parts.append(b"".join(group))
                group, held = [], 0
        if group:
            parts.append(b"".join(group))
        self.size = start + offsets[-1]
        return [start, offsets[-1]], offsets

    def array(self, values: array[Any] | memoryview[Any], typecode: str | None = None) -> list[int]:
        """Add packed ``values`` (an array, or a typed view of one or of a mapped file)."""
        code = values.typecode if isinstance(values, array) else values.format
        if typecode is not None and code != typecode:
            raise TypeError(f"expected items of type {typecode!r}, not {code!r}")
        if sys.byteorder != "little":  # pragma: no cover - big-endian hosts
            values = array(code, values)
            values.byteswap()
        # A view, not a copy: the values are written as they are (the arrays of a
        # snapshot being saved do not change meanwhile; see :meth:`release`).
        return self.add(memoryview(values))

    def release(self) -> None:
        """Let go of the views of the values added (an array viewed cannot grow until then)."""
        for part in self.parts:
            if isinstance(part, memoryview):
                part.release()
        self.parts = []
        self.size = 0

    def text(self, value: str) -> list[int]:
        # surrogatepass: a text decoded with surrogateescape round-trips too.
        return self.add(value.encode("utf-8", "surrogatepass"))


def _one_bytes(piece: str | bytes | memoryview) -> bytes | memoryview:
    if isinstance(piece, str):
        return piece.encode("utf-8", "surrogatepass")
    return piece if isinstance(piece, bytes) else memoryview(piece).cast("B")


def data_range(ref: Any, blob: memoryview | None, where: str) -> memoryview:
    """The bytes of the data file that ``ref`` (``[offset, length]``) names."""
    if blob is None:
        raise IndexFormatError(f"{where}: refers to a data file the index does not name")
    if (
        not isinstance(ref, list)
        or len(ref) != 2
        or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in ref)
        or ref[0] + ref[1] > len(blob)
    ):
        raise IndexFormatError(f"{where}: not a valid range of the data file")
    return blob[ref[0] : ref[0] + ref[1]]


def unpack(ref: Any, typecode: str, where: str, blob: memoryview | None) -> array[Any]:
    """A copy of the array at range ``ref`` of the data file."""
    raw = data_range(ref, blob, where)
    values: array[Any] = array(typecode)
    if len(raw) % values.itemsize:
        raise IndexFormatError(f"{where}: {len(raw)} bytes is not a whole number of {values.itemsize}-byte items")
    values.frombytes(raw)
    if sys.byteorder != "little":  # pragma: no cover
        values.byteswap()
    return values


def write_index(folder: str | os.PathLike[str], body: dict[str, Any], *, keep: Iterable[str] = ()) -> str:
    """Atomically write ``body`` as the folder's commit point; returns the new revision.

    The caller holds the folder's writer lock, so any temporary file of ours
    found here belongs to a save that was killed: it is removed first.  Data
    files other than ``keep`` are deleted once the manifest is in place.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _lock.check_held(folder)  # before a file is deleted or the commit point moves
    for stale in folder.glob(".*.tmp"):
        if _STALE_TMP.fullmatch(stale.name):
            stale.unlink(missing_ok=True)
    body_text = json.dumps(body, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    digest = hashlib.sha256(body_text.encode("ascii")).hexdigest()
    revision = secrets.token_hex(8)
    head = json.dumps(
        {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "revision": revision, "sha256": digest},
        separators=(",", ":"),
    )
    # Written piece by piece: the body can be hundreds of MB, no need to copy it.
    pieces = (head[:-1], "," + _BODY_KEY, body_text, "}\n")
    write_atomic(folder / INDEX_FILE, [p.encode("ascii") for p in pieces])
    fsync_dir(folder)
    kept = set(keep)
    for stale in folder.glob("data-*.bin"):
        if stale.name not in kept and DATA_NAME.fullmatch(stale.name):
            stale.unlink(missing_ok=True)
    return revision


def fsync_dir(folder: Path) -> None:
    if os.name != "posix":  # pragma: no cover - directories cannot be fsynced on Windows
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomic(target: Path, data: bytes) -> None:
    """Replace ``target`` with ``data`` atomically (temp file, fsync, rename)."""
    write_atomic(target, [data])


def write_atomic(target: Path, pieces: Iterable[bytes | memoryview]) -> None:
    """Replace ``target`` with the concatenated ``pieces``: temp file beside it,
    flush, fsync, rename; the temp file is removed if anything fails."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "wb") as fh:
            for piece in pieces:
                fh.write(piece)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None and exc.errno is not None:
            # A failed write or fsync (a full disk) names no file: name the one being written.
            raise OSError(exc.errno, exc.strerror or str(exc), str(target)) from exc
        raise


def read_regular(path: Path, limit: int = -1, *, cap: int | None = None) -> bytes:
    """The bytes of ``path`` (the first ``limit`` if >= 0), refusing anything
    but a regular file: opening a FIFO for reading would block until some
    writer came, with the caller perhaps holding the writer lock meanwhile.
    A file over ``cap`` bytes is refused before it is read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise IndexFormatError(f"{path}: not a regular file (a FIFO, device or socket cannot hold an index)")
        if cap is not None and info.st_size > cap:
            raise IndexFormatError(
                f"{path}: {info.st_size} bytes is more than any index manifest holds (at most {cap}): "
                "not a clanker_rag index, or damaged"
            )
        with open(fd, "rb", closefd=False) as fh:
            # Read no more than the cap even if the file grows meanwhile.
            data = fh.read(limit if cap is None else (cap + 1 if limit < 0 else min(limit, cap + 1)))
        if cap is not None and len(data) > cap:
            raise IndexFormatError(f"{path}: grew past {cap} bytes while read: not a clanker_rag index")
        return data
    finally:
        os.close(fd)


def read_revision(folder: str | os.PathLike[str]) -> str | None:
    """The revision of the index in ``folder`` (cheap: reads only the head)."""
    target = Path(folder) / INDEX_FILE
    try:
        head = read_regular(target, 400).decode("ascii", "replace")
    except FileNotFoundError:
        return None
    key = '"revision":"'
    i = head.find(key)
    if i < 0:
        return None
    j = head.find('"', i + len(key))
    return head[i + len(key) : j] if j > 0 else None


class DataFile:
    """An index's data file, held open from the moment it is mapped.

    Whatever reads the file later (hit texts with ``os.pread``) reads through
    this descriptor, never by opening the path again: a save in another
    process may replace and delete that path at any moment.  Closed when the
    last holder lets go.
    """

    __slots__ = ("__weakref__", "copy", "fd", "mtime_ns", "path", "size")

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path
        # The file's bytes read into this process's memory (see map_file's
        # ``private``): then every read goes there, never to the file.
        self.copy: memoryview | None = None
        weakref.finalize(self, os.close, fd)
        info = os.fstat(fd)
        self.size = info.st_size
        self.mtime_ns = info.st_mtime_ns

    def rewritten(self) -> bool:
        """Whether the file was changed in place since it was opened (``cp`` over
        it, ``rsync --inplace``, ``truncate``): its mapped pages may then be
        gone, and touching one kills the process with SIGBUS.  A save never
        does this (it writes a new file and deletes the old name, which
        leaves the open file whole).  A private copy is never at risk: False."""
        if self.copy is not None:
            return False
        try:
            info = os.fstat(self.fd)
        except OSError:
            return True
        return info.st_size != self.size or info.st_mtime_ns != self.mtime_ns


class Manifest(NamedTuple):
    """A verified manifest of the current format: its body and revision."""

    body: dict[str, Any]
    revision: str


def read_index(folder: str | os.PathLike[str]) -> Manifest:
    """Parse and verify ``folder``'s manifest; an older format is refused (see :func:`refuse_older`)."""
    folder = Path(folder)
    target = folder / INDEX_FILE if folder.is_dir() else folder
    body, revision, version = read_manifest(target)
    refuse_older(version, target)
    return Manifest(body, revision)


def refuse_older(version: int, target: Path) -> None:
    """An :class:`IndexFormatError` for an index saved in an older format: one line naming the command
    that converts it."""
    if version < FORMAT_VERSION:
        folder = target.parent if target.name == INDEX_FILE else target
        raise IndexFormatError(
            f"{target}: saved in index format {version}, older than this clanker_rag reads ({FORMAT_VERSION}); "
            f"convert it in place with: clanker-rag upgrade {folder}"
        )


def map_file(path: Path, *, private: bool = False) -> tuple[memoryview, DataFile]:
    """The file's bytes, mapped read-only (an empty file cannot be mapped: it is
    read), and the file held open; anything but a regular file is refused, as
    by :func:`read_regular`.

    ``private`` (a long-running server's load) reads the file into anonymous
    memory instead of mapping it.  A mapped file rewritten in place (``cp``
    over it truncates it first) takes its pages away, and the next touch of
    one kills the process with SIGBUS, which Python cannot catch, at any
    moment of a search: no check before a search closes that window.  The
    copy cannot change under the process; it costs one read of the file at
    load (a small segment is hashed whole at load anyway) and its size in
    memory, and nothing per query (texts are sliced from it, not read by
    ``pread``).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    opened = DataFile(fd, path)  # closes fd when dropped, raising or not
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise IndexFormatError(f"{path}: not a regular file (a FIFO, device or socket cannot hold an index)")
    if info.st_size == 0:
        return memoryview(b""), opened
    if private:
        # A segment file is immutable and named by its digest: a server's reload after a
        # commit reads only the segments it does not hold yet (the copies held are shared).
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, path.name)
        held = _COPIES.get(key)
        if held is not None and held.copy is not None:
            return held.copy, held
        opened.copy = _read_copy(fd, info.st_size, path)
        _COPIES[key] = opened
        return opened.copy, opened
    # The mapping outlives the descriptor; views of it keep it alive.
    return memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ)), opened


# The private copies some knowledge base still holds, by the file they were read from.
_COPIES: weakref.WeakValueDictionary[tuple[int, int, int, int, str], DataFile] = weakref.WeakValueDictionary()


def _read_copy(fd: int, size: int, path: Path) -> memoryview:
    """The ``size`` bytes of ``fd`` read into anonymous memory (read-only once filled)."""
    # An anonymous mapping, not a bytearray: page-aligned, and filled without a second copy.
    buf = mmap.mmap(-1, size)
    view = memoryview(buf)
    done = 0
    try:
        while done < size:
            got = os.preadv(fd, [view[done:]], done)
            if got <= 0:
                raise IndexFormatError(f"{path}: truncated while read ({done} of {size} bytes)")
            done += got
    finally:
        view.release()
    return memoryview(buf).toreadonly()


def verify_data(folder: str | os.PathLike[str]) -> None:
    """Hash the whole data file of ``folder``'s index against its manifest (raises IndexFormatError)."""
    folder = Path(folder)
    target = folder / INDEX_FILE if folder.is_dir() else folder
    body, _, version = read_manifest(target)
    refuse_older(version, target)
    for seg in body["segments"]:
        _verify_file(target.parent / str(seg.get("file")), seg.get("sha256"))


def _verify_file(path: Path, expected: Any) -> None:
    h = hashlib.sha256()
    try:
        h.update(map_file(path)[0])
    except OSError as exc:
        raise IndexFormatError(f"{path}: cannot read the index's data file ({exc.strerror or exc})") from None
    if h.hexdigest() != expected:
        raise IndexFormatError(f"{path}: checksum mismatch: the data file was modified or damaged after saving")


def read_manifest(target: Path) -> tuple[dict[str, Any], str, int]:
    try:
        data = read_regular(target, cap=MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        raise IndexFormatError(f"{target}: no index here (file not found)") from None
    except OSError as exc:
        raise IndexFormatError(f"{target}: cannot read the index ({exc.strerror or exc})") from None
    try:
        doc = json.loads(data)
    except UnicodeDecodeError as exc:
        raise IndexFormatError(f"{target}: not a clanker_rag index (not UTF-8 text: {exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise IndexFormatError(f"{target}: truncated or not valid JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
        raise IndexFormatError(f"{target}: not a clanker_rag index (no 'format': '{FORMAT_NAME}')")
    version = doc.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise IndexFormatError(f"{target}: format_version is missing or not an integer")
    if version > FORMAT_VERSION:
        raise IndexFormatError(
            f"{target}: written by a newer clanker_rag (format_version {version}; "
            f"this version reads up to {FORMAT_VERSION}); upgrade clanker_rag"
        )
    if version < 1:
        raise IndexFormatError(f"{target}: unknown format_version {version}")
    body = doc.get("body")
    if not isinstance(body, dict):
        raise IndexFormatError(f"{target}: the index has no body")
    expected = doc.get("sha256")
    key = _BODY_KEY.encode("ascii")
    i = data.find(key)
    end = data.rfind(b"}")  # trailing whitespace, if any, lies after it
    body_bytes = memoryview(data)[i + len(key) : end] if i >= 0 and end > i else b""
    if hashlib.sha256(body_bytes).hexdigest() != expected:
        # The file may be valid but re-formatted; compare canonical forms before calling it tampered.
        canon = json.dumps(body, ensure_ascii=True, separators=(",", ":"))
        if hashlib.sha256(canon.encode("ascii")).hexdigest() != expected:
            raise IndexFormatError(f"{target}: checksum mismatch: the index was modified or damaged after it was saved")
    return body, str(doc.get("revision", "")), version


@contextmanager
def writing(folder: Path) -> Iterator[None]:
    """An ``OSError`` while writing the index in ``folder`` (a read-only folder,
    a full disk) as one :class:`IndexWriteError`: saves are atomic, so the
    index already there is unchanged, and the message says so."""
    try:
        yield
    except ClankerRagError:
        raise
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise IndexWriteError(
            exc.errno, f"cannot write the index ({reason}); the index there is unchanged", exc.filename or str(folder)
        ) from exc


def same_folder(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name the same folder (same device and inode when both exist)."""
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)

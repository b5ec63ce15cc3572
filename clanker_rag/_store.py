"""The on-disk index: one JSON file inside an index folder.

Layout of ``<folder>/index.json``::

    {"format": "clanker-rag-index", "format_version": 1,
     "revision": "<random hex, new on every save>",
     "sha256": "<hex digest of the text of the body value>",
     "body": {...}}

Numeric arrays (postings, impacts, chunk tables) are little-endian packed
arrays, base64-encoded inside the JSON strings, which is what lets a large
index load in well under a second.  No pickle, no eval: loading parses JSON
and decodes base64, nothing else.

Saves are atomic: the new file is written beside the old one, flushed and
fsynced, then renamed over it, and the folder is fsynced.  A process killed at
any moment leaves the old index or the new one, never a mix.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import secrets
import sys
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ._exceptions import IndexFormatError

__all__ = [
    "FORMAT_VERSION",
    "INDEX_FILE",
    "fsync_dir",
    "pack",
    "read_index",
    "unpack",
    "write_bytes_atomic",
    "write_index",
]

FORMAT_NAME = "clanker-rag-index"
FORMAT_VERSION = 1
INDEX_FILE = "index.json"
_BODY_KEY = '"body":'


def pack(values: array[Any]) -> str:
    """Base64 of the array's little-endian bytes."""
    if sys.byteorder != "little":  # pragma: no cover - big-endian hosts
        values = array(values.typecode, values)
        values.byteswap()
    return base64.b64encode(values.tobytes()).decode("ascii")


def unpack(text: str, typecode: str, where: str) -> array[Any]:
    try:
        # Not validate=True: it is several times slower, and the body's sha256
        # has already vouched for every character.
        raw = binascii.a2b_base64(text)
    except (ValueError, TypeError, binascii.Error) as exc:
        raise IndexFormatError(f"{where}: not valid base64 ({exc})") from None
    values: array[Any] = array(typecode)
    if len(raw) % values.itemsize:
        raise IndexFormatError(f"{where}: {len(raw)} bytes is not a whole number of {values.itemsize}-byte items")
    values.frombytes(raw)
    if sys.byteorder != "little":  # pragma: no cover
        values.byteswap()
    return values


def write_index(folder: str | os.PathLike[str], body: dict[str, Any]) -> str:
    """Atomically write ``body`` as the folder's index; returns the new revision."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
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


def write_atomic(target: Path, pieces: Iterable[bytes]) -> None:
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
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_revision(folder: str | os.PathLike[str]) -> str | None:
    """The revision of the index in ``folder`` (cheap: reads only the head)."""
    target = Path(folder) / INDEX_FILE
    try:
        with open(target, encoding="ascii", errors="replace") as fh:
            head = fh.read(400)
    except FileNotFoundError:
        return None
    key = '"revision":"'
    i = head.find(key)
    if i < 0:
        return None
    j = head.find('"', i + len(key))
    return head[i + len(key) : j] if j > 0 else None


def read_index(folder: str | os.PathLike[str]) -> tuple[dict[str, Any], str]:
    """Parse and verify ``folder``'s index; returns ``(body, revision)``."""
    folder = Path(folder)
    target = folder / INDEX_FILE if folder.is_dir() else folder
    try:
        data = target.read_bytes()
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
    end = data.rstrip().rfind(b"}")
    body_bytes = memoryview(data)[i + len(key) : end] if i >= 0 and end > i else b""
    if hashlib.sha256(body_bytes).hexdigest() != expected:
        # The file may be valid but re-formatted; compare canonical forms before calling it tampered.
        canon = json.dumps(body, ensure_ascii=True, separators=(",", ":"))
        if hashlib.sha256(canon.encode("ascii")).hexdigest() != expected:
            raise IndexFormatError(f"{target}: checksum mismatch: the index was modified or damaged after it was saved")
    return body, str(doc.get("revision", ""))

"""Which index, which shard and which save a shard folder holds: ``shard.json`` beside its index files.

A sharded index folder is a manifest (``cluster.json``) and one ordinary
index folder per shard.  Folders can be swapped, copied from a backup or
written by two writers at once; nothing inside an ordinary index says which
shard it is.  So each save writes, after the shard's own index files,

``{"index_id": ..., "shard": N, "generation": G, "writer": ...}``

``index_id`` names the sharded index (fixed at its first save), ``shard`` the
shard's number, ``generation`` the save (the manifest's count, bumped by every
save) and ``writer`` the one save call that wrote it (a replayed save task
finds its own mark and goes ahead; another writer's is refused).

A load checks the folder against the manifest: another index or another
shard number is an ``IndexFormatError`` (swapped or foreign folders); a
generation other than the manifest's, or the one after it (a save
interrupted between the shard folders and the manifest), is one too (a
shard folder restored from an older or newer copy).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from .._exceptions import IndexFormatError, IndexLockedError

__all__ = [
    "IDENTITY_FILE",
    "Expected",
    "ShardIdentity",
    "check_loaded",
    "check_saving",
    "read_identity",
    "write_identity",
    "write_json",
]

IDENTITY_FILE = "shard.json"


@dataclass(frozen=True, slots=True)
class ShardIdentity:
    """What a shard folder says it holds."""

    index_id: str
    shard: int
    generation: int
    writer: str = ""


@dataclass(frozen=True, slots=True)
class Expected:
    """What the manifest says a shard folder holds (``None``: a manifest from before identities)."""

    shard: int
    index_id: str | None = None
    generation: int | None = None


def read_identity(folder: str | os.PathLike[str]) -> ShardIdentity | None:
    """The identity ``folder`` records; ``None`` for a folder saved before identities (or not yet saved)."""
    where = Path(folder) / IDENTITY_FILE
    try:
        raw = json.loads(where.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise IndexFormatError(f"{where}: unreadable shard identity ({exc})") from None
    if not isinstance(raw, dict):
        raise IndexFormatError(f"{where}: a shard identity must be a JSON object")
    index_id, shard, generation, writer = (raw.get(k) for k in ("index_id", "shard", "generation", "writer"))
    if (
        not isinstance(index_id, str)
        or not index_id
        or not isinstance(shard, int)
        or isinstance(shard, bool)
        or shard < 0
        or not isinstance(generation, int)
        or isinstance(generation, bool)
        or generation < 0
        or not isinstance(writer, str)
    ):
        raise IndexFormatError(f"{where}: malformed shard identity {raw!r}")
    return ShardIdentity(index_id, shard, generation, writer)


def write_json(path: Path, obj: object) -> None:
    """Write ``obj`` as JSON to ``path`` atomically (a temporary file beside it, renamed over it).

    Created as ordinary files are (0666 less the umask, so 0644 as a rule),
    like the index files beside it: a mode of its own would make the
    manifest unreadable to readers who can read the shards.
    """
    tmp = path.with_name(f".{path.stem}-{uuid.uuid4().hex}.json.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_identity(folder: str | os.PathLike[str], identity: ShardIdentity) -> None:
    """Write ``shard.json`` atomically."""
    write_json(
        Path(folder) / IDENTITY_FILE,
        {
            "index_id": identity.index_id,
            "shard": identity.shard,
            "generation": identity.generation,
            "writer": identity.writer,
        },
    )


def check_loaded(folder: str | os.PathLike[str], found: ShardIdentity | None, expected: Expected) -> None:
    """Raise ``IndexFormatError`` when ``folder`` (recording ``found``) is not the shard the manifest expects."""
    if found is None:
        if expected.index_id is not None:
            raise IndexFormatError(
                f"{folder}: no shard identity ({IDENTITY_FILE}); the manifest expects shard {expected.shard} "
                f"of index {expected.index_id} here (a folder copied in from elsewhere?)"
            )
        return  # an index saved before identities: nothing to compare
    if found.shard != expected.shard:
        raise IndexFormatError(
            f"{folder}: holds shard {found.shard}, but the manifest places shard {expected.shard} here "
            "(shard folders swapped or renamed?): sources would be looked for on the wrong shard"
        )
    if expected.index_id is not None and found.index_id != expected.index_id:
        raise IndexFormatError(
            f"{folder}: belongs to index {found.index_id}, not to {expected.index_id} "
            "(a folder copied from another index?)"
        )
    if expected.generation is not None and found.generation not in (expected.generation, expected.generation + 1):
        # generation + 1: a save wrote this shard, then stopped before the manifest.
        raise IndexFormatError(
            f"{folder}: shard {found.shard} is from save {found.generation}, the manifest from save "
            f"{expected.generation} (a shard folder restored from another copy?)"
        )


def check_saving(
    folder: str | os.PathLike[str], loaded: ShardIdentity | None, new: ShardIdentity, on_disk: ShardIdentity | None
) -> None:
    """Raise when saving ``new`` over ``folder`` (recording ``on_disk``) would drop another save.

    ``loaded`` is the identity the shard was loaded with (``None``: a new shard).
    """
    if on_disk is None or on_disk == new:
        return  # a fresh folder, or this very save run again (a worker died after writing it)
    if on_disk.index_id != new.index_id or on_disk.shard != new.shard:
        raise IndexFormatError(
            f"{folder}: holds shard {on_disk.shard} of index {on_disk.index_id}, not shard {new.shard} "
            f"of {new.index_id}: refusing to write over it"
        )
    if loaded is None or (loaded.generation, loaded.writer) != (on_disk.generation, on_disk.writer):
        raise IndexLockedError(
            f"{folder}: another process saved shard {new.shard} after it was loaded here; "
            "saving now would drop its changes (reload and redo, or ingest with the writer lock)"
        )

"""Where the shards of a sharded knowledge base live, and what runs on each.

A shard is an ordinary :class:`KnowledgeBase`.  The functions named
``shard_*`` run next to one (on a Dask worker, or in this process) and take
it as their first argument; they return small typed values.  Two homes:

``LocalShards``
    every shard in this process (a sharded index opened without Dask, and
    the property tests);
``DaskShards`` (``_dask_shards``)
    each shard is the result of a Dask task held in a worker's memory.

Both load and save shards through ``load_shard`` and ``save_shard``, which
check the shard folder's identity (``_identity``).  This module never
imports ``distributed`` at module level.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import os
import pickle
import tempfile
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .._engine._collection import CollectionStats
from .._exceptions import ClankerRagError, IndexFormatError
from .._ingest._discovery import Candidate, DiscoveryOptions, Skipped, discover, single_file
from .._ingest._options import IngestOptions
from .._ingest._readers import FoundPath
from .._ingest._run import IngestReport, ingest
from .._kb import Explanation, KnowledgeBase, explain_with_stats, search_with_stats
from .._types import Hit
from ._health import ClusterHealth, ShardHealth
from ._identity import Expected, ShardIdentity, check_loaded, check_saving, read_identity, write_identity

__all__ = ["LocalShards", "ShardBox", "entries", "list_for_shards", "load_shard", "new_box", "save_shard", "shard_of"]

log = logging.getLogger(__name__)

T = TypeVar("T")
PLACEMENT = "blake2b-64-mod"
# A rough size of a shard for the Dask scheduler (bytes a chunk, see
# docs/scale.md): large enough that it runs tasks where a shard already is
# rather than copying the shard to an idle worker.
_BYTES_PER_CHUNK = 5000


def shard_of(source: str, n_shards: int) -> int:
    """The shard a source lives on: a stable hash of its name (the same in every process and run)."""
    digest = hashlib.blake2b(source.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % n_shards


class ShardBox:
    """A shard as Dask holds it: the knowledge base, sized for the scheduler.

    Dask copies a result between workers (or spills it to disk) by pickling
    it; a knowledge base travels as its saved index files.  That is slow for
    a big shard, so tasks go where their shard is (and ``connect("local")``
    turns work stealing off), but never wrong.
    """

    __slots__ = ("__weakref__", "identity", "kb", "lock")

    def __init__(self, kb: KnowledgeBase, identity: ShardIdentity | None = None) -> None:
        self.kb = kb
        # The identity of the folder this shard was loaded from or last saved
        # to (None: never saved).  It travels with the shard: a shard that
        # moved between workers was reloaded from a temporary folder, and
        # its next save checks the real folder against this.
        self.identity = identity
        # A worker may run a change and searches of one shard at once (on its
        # task threads and its actor thread): one at a time per shard.
        self.lock = threading.Lock()

    def __sizeof__(self) -> int:
        return 1_000_000 + _BYTES_PER_CHUNK * len(self.kb)

    def __reduce__(
        self,
    ) -> tuple[
        Callable[[dict[str, bytes], ShardIdentity | None], ShardBox], tuple[dict[str, bytes], ShardIdentity | None]
    ]:
        # (Saving records the temporary folder as the shard's path; the
        # cluster always saves shards to explicit folders, checked against
        # ``identity``, so nothing reads it.)
        with tempfile.TemporaryDirectory(prefix="clanker-shard-") as tmp:
            folder = self.kb.save(Path(tmp) / "kb")
            files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")}
        return _unbox, (files, self.identity)


def _unbox(files: dict[str, bytes], identity: ShardIdentity | None = None) -> ShardBox:
    with tempfile.TemporaryDirectory(prefix="clanker-shard-") as tmp:
        folder = Path(tmp) / "kb"
        folder.mkdir()
        for name, data in files.items():
            (folder / name).write_bytes(data)
        kb = KnowledgeBase.load(folder)  # reads the files whole: the folder may go
    return ShardBox(kb, identity)


def _here() -> str:
    """`` (on worker ADDRESS)`` inside a Dask task, else nothing: errors say which machine saw them."""
    try:
        from distributed import get_worker

        return f" (on worker {get_worker().address})"
    except (ImportError, ValueError):
        return ""


def load_shard(folder: str, expected: Expected, *, private: bool = False) -> ShardBox:
    """A shard loaded from ``folder``, checked to be the one the manifest expects there
    (``private``: see ``KnowledgeBase.load``)."""
    if not os.path.isdir(folder):
        raise _unseen(folder, expected.shard)
    try:
        found = read_identity(folder)
        check_loaded(folder, found, expected)
        kb = KnowledgeBase.load(folder, private=private)
    except ClankerRagError as exc:
        where = _here()
        if not where:
            raise
        raise type(exc)(f"{exc}{where}") from None
    except OSError as exc:
        raise IndexFormatError(
            f"{folder}: cannot read shard {expected.shard} ({exc.strerror or exc}){_here()}"
        ) from None
    return ShardBox(kb, found)


def _unseen(folder: str, shard: int) -> IndexFormatError:
    """The error for a shard folder that is not there: on a worker, most likely one that does not mount the
    shared folder (``unseen_by`` names it, so the client can load the shard on another worker)."""
    where = _here()
    if not where:
        return IndexFormatError(f"{folder}: no such folder (shard {shard} of the manifest beside it)")
    parent = os.path.dirname(folder)
    seen = "is there but not the shard folder" if os.path.isdir(parent) else "is not there either"
    exc = IndexFormatError(
        f"{folder}: this worker cannot see shard {shard}'s folder ({parent} {seen}){where}; a sharded index "
        "must be on storage every worker mounts at the same path (a shared file system)"
    )
    exc.unseen_by = where.removeprefix(" (on worker ").removesuffix(")")  # type: ignore[attr-defined]
    return exc


def save_shard(box: ShardBox, folder: str, new: ShardIdentity) -> str:
    """Write ``box`` to ``folder`` unless another save got there since it was loaded; then its identity."""
    try:
        check_saving(folder, box.identity, new, read_identity(folder))
        box.kb.save(folder, overwrite=True)  # the identity check above stands for the one save() would make
        write_identity(folder, new)
    except ClankerRagError as exc:
        where = _here()
        if not where:
            raise
        raise type(exc)(f"{exc}{where}") from None
    box.identity = new
    return folder


# -- what runs next to a shard ---------------------------------------------------------------------


def shard_term_stats(kb: KnowledgeBase, terms: list[str]) -> CollectionStats:
    """This shard's chunk count, summed length and the document frequencies of ``terms``."""
    return kb.collection_stats(terms)


def shard_search(
    kb: KnowledgeBase,
    weights: Mapping[str, float],
    k: int,
    stats: CollectionStats,
    source: str | None,
    where: Mapping[str, Any] | None,
) -> list[Hit]:
    return search_with_stats(kb, weights, k, stats, source=source, where=where)


def shard_feedback(
    kb: KnowledgeBase,
    weights: Mapping[str, float],
    k: int,
    stats: CollectionStats,
    source: str | None,
    where: Mapping[str, Any] | None,
) -> list[tuple[Hit, list[str]]]:
    """The best hits here for the feedback round, each with its terms (text, then section label)."""
    out = []
    for hit in search_with_stats(kb, weights, k, stats, source=source, where=where):
        terms = list(kb.analyzer(hit.text))
        if hit.section:
            terms.extend(kb.analyzer(hit.section))
        out.append((hit, terms))
    return out


def shard_explain(kb: KnowledgeBase, weights: Mapping[str, float], hit: Hit, stats: CollectionStats) -> Explanation:
    return explain_with_stats(kb, weights, hit, stats)


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """What ``stats`` shows of a shard: counts, computed next to it (no source name leaves the shard)."""

    chunks: int
    terms: int
    n_sources: int
    formats: dict[str, int] = field(default_factory=dict)


def shard_info(kb: KnowledgeBase) -> ShardInfo:
    """Counted once per change of the shard (its generation): a few microseconds a source the first time."""
    generation = kb.generation
    with _SORTED_LOCK:
        kept = _INFO.get(kb)
    if kept is not None and kept[0] == generation:
        return kept[1]
    formats: dict[str, int] = {}
    names = _sorted_sources(kb)
    for source in names:
        meta = kb.source_metadata(source) or {}
        fmt = str(meta.get("format") or os.path.splitext(source)[1].lstrip(".") or "text")
        formats[fmt] = formats.get(fmt, 0) + 1
    info = ShardInfo(len(kb), kb.n_terms, len(names), formats)
    with _SORTED_LOCK:
        _INFO[kb] = (generation, info)
    return info


def shard_len(kb: KnowledgeBase) -> int:
    return len(kb)


def shard_source_count(kb: KnowledgeBase) -> int:
    return len(_sorted_sources(kb))


# Each shard's source names, sorted, for paging through them, and its counts
# (``shard_info``): made once per change of the shard (its generation), not at
# every page or ``stats``.
_SORTED: weakref.WeakKeyDictionary[KnowledgeBase, tuple[int, list[str]]] = weakref.WeakKeyDictionary()
_SORTED_LOCK = threading.Lock()
_INFO: weakref.WeakKeyDictionary[KnowledgeBase, tuple[int, ShardInfo]] = weakref.WeakKeyDictionary()


def _sorted_sources(kb: KnowledgeBase) -> list[str]:
    generation = kb.generation
    with _SORTED_LOCK:
        kept = _SORTED.get(kb)
    if kept is not None and kept[0] == generation:
        return kept[1]
    names = kb.sources()
    with _SORTED_LOCK:
        _SORTED[kb] = (generation, names)
    return names


def shard_sources_page(kb: KnowledgeBase, after: str | None, limit: int) -> list[str]:
    """Up to ``limit`` of this shard's source names, sorted, those after ``after`` (all: ``None``)."""
    names = _sorted_sources(kb)
    start = 0 if after is None else bisect.bisect_right(names, after)
    return names[start : start + limit]


def shard_settings(kb: KnowledgeBase) -> dict[str, Any]:
    return {
        "analyzer": kb.analyzer.settings(),
        "bm25": kb.bm25.settings(),
        "chunking": kb.chunker.settings(),
    }


def shard_source(kb: KnowledgeBase, source: str) -> tuple[str | None, dict[str, Any] | None, list[Hit]]:
    return kb.source_text(source), kb.source_metadata(source), list(kb.chunks(source))


Item = tuple[str, str, Mapping[str, Any] | None, Sequence[tuple[int, int, str | None]] | None]


def shard_add(kb: KnowledgeBase, items: list[Item]) -> int:
    return sum(kb.add_text(text, source, meta, sections=sections) for text, source, meta, sections in items)


def shard_remove(kb: KnowledgeBase, sources: list[str]) -> int:
    return sum(kb.remove(source) for source in sources)


# A walk's entry as it travels to the shard that reads it: a selected file as ("file", rel, fmt, path,
# resolved path, inode), path None when it is the root joined with rel and the resolved path None
# when it is the path; a skip as ("skip", rel, reason, transient).  A shard's part of the walk is a
# list of pickled batches of entries: compact on the walking worker (about 0.1 KB a file, not the
# 0.4 KB of the objects) for a tree of millions of files.
Entry = tuple[Any, ...]
_BATCH = 10_000


def _entry(item: Candidate | Skipped, root: str) -> Entry:
    if isinstance(item, Skipped):
        return ("skip", item.rel, item.reason, item.transient)
    path, rel = str(item.path), item.rel
    given = None if path == os.path.join(root, rel) else path
    if isinstance(item.path, FoundPath):
        real = item.path.real
        return ("file", rel, item.fmt, given, None if real == path else real, item.path.ident[1])
    return ("file", rel, item.fmt, given, None, None)


def _item(entry: Entry, root: str) -> Candidate | Skipped:
    """The walk's entry on the machine that reads the file.

    The walk pinned each file to the inode it saw; the device number is this
    machine's own (one network file system has another on each machine), so
    it is read here, and the read still opens only that inode.
    """
    if entry[0] == "skip":
        return Skipped(entry[1], entry[2], entry[3])
    _, rel, fmt, given, real, ino = entry
    path = os.path.join(root, rel) if given is None else given
    if ino is None:
        return Candidate(path, rel, fmt)
    real = path if real is None else real
    try:
        dev = os.lstat(real).st_dev
    except OSError:
        dev = -1  # gone or unreadable: the read says so (as it would of a file that vanished after the walk)
    return Candidate(FoundPath(path, real, (dev, ino)), rel, fmt)


def list_for_shards(root: str, walk: DiscoveryOptions, n_shards: int) -> list[list[bytes]]:
    """Walk ``root`` once; each shard's part of it (pickled batches of entries, see ``Entry``): the
    files placed on that shard and their skips, and every folder skip (a folder that could not be
    listed keeps its sources on every shard)."""
    parts: list[list[bytes]] = [[] for _ in range(n_shards)]
    pending: list[list[Entry]] = [[] for _ in range(n_shards)]

    def add(i: int, entry: Entry) -> None:
        pending[i].append(entry)
        if len(pending[i]) >= _BATCH:
            parts[i].append(pickle.dumps(pending[i], protocol=pickle.HIGHEST_PROTOCOL))
            pending[i] = []

    items = discover(root, walk) if os.path.isdir(root) else iter([single_file(root, walk)])
    for item in items:
        entry = _entry(item, root)
        if isinstance(item, Skipped) and item.rel.endswith("/"):
            for i in range(n_shards):
                add(i, entry)
        else:
            add(shard_of(walk.source_prefix + item.rel, n_shards), entry)
    for i, left in enumerate(pending):
        if left:
            parts[i].append(pickle.dumps(left, protocol=pickle.HIGHEST_PROTOCOL))
    return parts


def entries(part: Sequence[bytes]) -> list[Entry]:
    """The entries of one shard's part of the walk."""
    return [entry for batch in part for entry in pickle.loads(batch)]


class ProgressEvents:
    """An ingest's progress hook on a worker: ``(shard, files done, files)`` as a Dask event
    under ``topic``, which the client follows to draw one progress bar."""

    def __init__(self, topic: str, shard: int) -> None:
        self.topic = topic
        self.shard = shard

    def __call__(self, done: int, total: int) -> None:
        from distributed import get_worker

        get_worker().log_event(self.topic, [self.shard, done, total])


def shard_ingest(
    kb: KnowledgeBase,
    index: int,
    root: str,
    options: IngestOptions,
    listing: Sequence[bytes],
) -> IngestReport:
    """Ingest this shard's part of the walk of ``root`` (``list_for_shards``): the shard does not walk."""
    items = [_item(entry, root) for entry in entries(listing)]
    report = ingest(kb, root, options, chunk_size=kb.chunker.chunk_size, listing=items)
    # Folder skips are in every shard's part: shard 0 reports them.
    report.skipped = [(s, why) for s, why in report.skipped if index == 0 or not s.endswith("/")]
    return report


def merge_reports(reports: Sequence[IngestReport]) -> IngestReport:
    """One report with the one-machine fields from the shards' reports."""
    out = IngestReport(roots=list(reports[0].roots) if reports else [])
    for r in reports:
        out.added += r.added
        out.updated += r.updated
        out.unchanged += r.unchanged
        out.removed += r.removed
        out.skipped += r.skipped
        out.chunks_added += r.chunks_added
        out.chunks_removed += r.chunks_removed
        out.chunks_replaced += r.chunks_replaced
        out.chunks_total += r.chunks_total
        out.selected += r.selected
        out.bytes_read += r.bytes_read
        out.seconds = max(out.seconds, r.seconds)
    for names in (out.added, out.updated, out.unchanged, out.removed):
        names.sort()
    out.skipped.sort()
    out.workers = len(reports)
    return out


# -- homes -----------------------------------------------------------------------------------------


class LocalShards:
    """Every shard in this process."""

    client = None  # no Dask

    def __init__(self, boxes: list[ShardBox]) -> None:
        self.boxes = boxes
        self.kbs = [box.kb for box in boxes]

    @classmethod
    def create(cls, n_shards: int, options: dict[str, Any]) -> LocalShards:
        return cls([new_box(options) for _ in range(n_shards)])

    @classmethod
    def open(cls, folders: Sequence[str], expected: Sequence[Expected], *, private: bool = False) -> LocalShards:
        return cls([load_shard(folder, e, private=private) for folder, e in zip(folders, expected)])

    def __len__(self) -> int:
        return len(self.kbs)

    def map(
        self,
        fn: Callable[..., T],
        args: Mapping[int, tuple[Any, ...]],
        *,
        timeout: float | None,
        allow_partial: bool = False,
    ) -> dict[int, T]:
        """``fn(shard, *args[i])`` for every shard ``i`` in ``args``."""
        return {i: fn(self.kbs[i], *a) for i, a in args.items()}

    def change(self, changes: Mapping[int, tuple[Callable[..., T], tuple[Any, ...]]]) -> dict[int, T]:
        """Apply ``fn(shard, *args)`` to the given shards; their results."""
        return {i: fn(self.kbs[i], *a) for i, (fn, a) in changes.items()}

    def holders(self) -> list[list[str]]:
        return [[] for _ in self.kbs]

    def split(self, fn: Callable[..., Sequence[T]], args: tuple[Any, ...], parts: int) -> list[T]:
        """``fn(*args)``, a sequence of ``parts`` items: the items (a change then takes one)."""
        whole = fn(*args)
        if len(whole) != parts:
            raise ClankerRagError(f"{fn.__name__} gave {len(whole)} parts, not {parts}")
        return list(whole)

    def health(self) -> ClusterHealth:
        """Every shard here, each its one copy: green."""
        return ClusterHealth(tuple(ShardHealth(i, ("local",), 1, None) for i in range(len(self.kbs))))

    def heal(self) -> list[Any]:
        return []  # nothing to place

    def save(self, folders: Sequence[str], identities: Sequence[ShardIdentity]) -> None:
        for box, folder, new in zip(self.boxes, folders, identities):
            save_shard(box, folder, new)

    def close(self) -> None:
        pass


def new_box(options: dict[str, Any]) -> ShardBox:
    """A new, empty shard."""
    return ShardBox(KnowledgeBase(**options))

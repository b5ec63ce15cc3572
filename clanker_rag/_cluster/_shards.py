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

import hashlib
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .._engine._collection import CollectionStats
from .._exceptions import ClankerRagError, IndexFormatError
from .._ingest._options import IngestOptions
from .._ingest._readers import READER_VERSION
from .._ingest._run import IngestReport, ingest
from .._kb import Explanation, KnowledgeBase, explain_with_stats, search_with_stats
from .._types import Hit, Sections, StrPath
from ._health import ClusterHealth, ShardHealth
from ._identity import Expected, ShardIdentity, check_loaded, check_saving, read_identity, write_identity

__all__ = ["LocalShards", "ShardBox", "load_shard", "new_box", "save_shard", "shard_of"]

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


def shard_table(kb: KnowledgeBase) -> CollectionStats:
    """This shard's chunk count, summed length and every term's document frequency (the client keeps it)."""
    return kb.collection_stats()


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
    """What ``stats`` and ``sources`` need of a shard."""

    chunks: int
    terms: int
    sources: list[str]
    formats: dict[str, int] = field(default_factory=dict)


def shard_info(kb: KnowledgeBase) -> ShardInfo:
    formats: dict[str, int] = {}
    sources = kb.sources()
    for source in sources:
        meta = kb.source_metadata(source) or {}
        fmt = str(meta.get("format") or os.path.splitext(source)[1].lstrip(".") or "text")
        formats[fmt] = formats.get(fmt, 0) + 1
    return ShardInfo(len(kb), kb.n_terms, sources, formats)


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


class _Placed:
    """A shard as the ingest sees it (its ``Sources``): files placed on another shard look unchanged.

    ``ingest`` then stats them (to report them unchanged) but never reads
    them; files placed here are read, chunked and indexed as on one machine.
    """

    def __init__(self, kb: KnowledgeBase, index: int, n_shards: int, root: str, prefix: str) -> None:
        self.kb = kb
        self.index = index
        self.n_shards = n_shards
        self.is_dir = os.path.isdir(root)
        self.root = root
        self.root_id = os.path.realpath(root if self.is_dir else os.path.dirname(os.path.abspath(root)))
        self.prefix = prefix

    def mine(self, source: str) -> bool:
        return shard_of(source, self.n_shards) == self.index

    def add_text(
        self, text: str, source: str, metadata: Mapping[str, Any] | None = None, *, sections: Sections | None = None
    ) -> int:
        return self.kb.add_text(text, source, metadata, sections=sections)

    def remove(self, source: str) -> int:
        return self.kb.remove(source)

    def sources(self) -> list[str]:
        return self.kb.sources()

    def source_metadata(self, source: str) -> dict[str, Any] | None:
        if self.mine(source):
            return self.kb.source_metadata(source)
        rel = source[len(self.prefix) :] if source.startswith(self.prefix) else source
        path = os.path.join(self.root, rel) if self.is_dir else self.root
        try:
            st = os.stat(path)
        except OSError:
            return None  # the ingest stats it again and reports it; only its owner's report keeps that
        return {"root": self.root_id, "reader": READER_VERSION, "size": st.st_size, "mtime_ns": st.st_mtime_ns}

    def save(self, path: StrPath | None = None) -> Path:
        return self.kb.save(path)

    def __len__(self) -> int:
        return len(self.kb)


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
    n_shards: int,
    root: str,
    options: IngestOptions,
) -> IngestReport:
    """Ingest the files of ``root`` placed on shard ``index``; the report names only those."""
    placed = _Placed(kb, index, n_shards, root, options.prefix)
    report = ingest(placed, root, options, chunk_size=kb.chunker.chunk_size)
    # Folder skips are the same on every shard: shard 0 reports them.
    report.unchanged = [s for s in report.unchanged if placed.mine(s)]
    report.skipped = [(s, why) for s, why in report.skipped if (index == 0 if s.endswith("/") else placed.mine(s))]
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

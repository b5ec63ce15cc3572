"""``add_texts(jobs=)``: worker processes chunk and count, this process adds in order.

Counting a chunk is the larger part of a bulk build and needs nothing of the
index, so workers do it (numbering terms their own way, see
:class:`._parallel.WorkerTerms`) while this process adds the counted chunks
in the items' order: the index is the one a single process builds, byte for
byte.  Workers start only when the knowledge base counts the standard way,
forking is safe (or ``jobs`` asks for them) and enough text is coming.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from functools import partial
from itertools import chain
from typing import TYPE_CHECKING

from .._engine._counting import CountedTexts
from .._engine._prepared import PreparedWriter, TextItem
from .._exceptions import ConfigError
from .._gc_pause import collector_paused
from .._types import Sources

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = ["add_texts_parallel"]

logger = logging.getLogger(__name__)

Item = TextItem


# A batch is up to 1,024 texts or a megabyte: each batch costs this process a
# round trip (a result file read, the executor's threads woken, the checks and
# setup of adding it) and a worker a wait for its next batch, whatever its
# size.  Measured on the 30k-chunk stdlib corpus (2 workers): 64 texts a batch
# cost this process 1.8-1.96 s of CPU, 512 1.33 s, 1,024 1.22-1.3 s, the
# workers' waits between batches falling from ~1.2 s to ~0.3 s each.  A
# megabyte keeps the last batch short (both workers finish close together).
BATCH_TEXTS = 1024
BATCH_CHARS = 1 << 20
# In automatic mode workers start once this much text is waiting: below it,
# starting them costs more than they save.
START_CHARS = 8 << 20
# Batches per worker handed out and not back yet.
WORKER_QUEUE = 2


def _plan(writer: PreparedWriter, jobs: int | None) -> tuple[int, str] | None:
    """Workers and start method, or None to add in this process."""
    from ._parallel import can_parallel, start_method, usable_cpus

    reason = can_parallel(writer.analyzer, writer.chunker)
    if reason is None and not writer.takes_prepared():
        reason = "add_text is overridden"
    if reason is not None:
        logger.debug("add_texts in one process: %s", reason)
        return None
    method = start_method(explicit=jobs is not None)
    if method is None:
        logger.debug("add_texts in one process: other threads are running (pass jobs=N to use workers anyway)")
        return None
    n = usable_cpus() if jobs is None else jobs
    return (n, method) if n > 1 else None


def _serial(kb: Sources, items: Iterator[Item]) -> int:
    total = 0
    with collector_paused():
        for text, source, meta in items:
            total += kb.add_text(text, source, meta)
    return total


def add_texts_parallel(kb: Sources, writer: PreparedWriter, items: Iterator[Item], jobs: int | None) -> int:
    """Add ``items`` (already checked tuples) to ``kb`` as :meth:`KnowledgeBase.add_texts` does
    (``writer``: its index writer, which takes the chunks the workers count)."""
    if jobs is not None and (type(jobs) is not int or jobs < 1):
        raise ConfigError(f"add_texts(): jobs must be an int >= 1 or None, got {jobs!r}")
    head: list[Item] = []
    if jobs is None:
        # Too little text for workers is added here before anything of theirs is
        # even imported (a one-file commit pays nothing for them).
        size = 0
        try:
            for item in items:
                head.append(item)
                size += len(item[0]) if isinstance(item[0], str) else 0
                if size >= START_CHARS:
                    break
            else:
                return _serial(kb, iter(head))
        except BaseException:
            _serial(kb, iter(head))  # what came before a failing item is added, as in one process
            raise
    plan = _plan(writer, jobs)
    if plan is None:
        return _serial(kb, chain(head, items))
    workers, method = plan
    return _pooled(kb, writer, chain(head, items), workers, method)


def _pooled(kb: Sources, writer: PreparedWriter, items: Iterator[Item], workers: int, method: str) -> int:
    from ._parallel import Pool, WorkerTerms

    pool = Pool(writer.analyzer, writer.chunker, workers, method)
    terms: dict[str, WorkerTerms] = {}
    pending: deque[tuple[Future[str], list[Item]]] = deque()

    def drain() -> int:
        future, batch = pending.popleft()
        token, fresh, counted, per_text = pool.counted(future)
        worker_terms = terms.setdefault(token, WorkerTerms())
        made = len(worker_terms.strings)  # the worker's first number made for this batch
        worker_terms.strings.extend(fresh)
        known = counted.known[-1] if counted.known else 0
        whole = CountedTexts(
            per_text,
            counted.bounds,
            counted.labels,
            counted.sizes,
            counted.tfs,
            partial(worker_terms.term_ids, counted.keys, known, made=made),
        )
        # The usual case, new sources only, in one pass; else text by text.
        at_once = writer.add_counted(batch, whole)
        if at_once is not None:
            return at_once
        added = 0
        first = pos = 0
        sizes = counted.sizes
        for (text, source, meta), n in zip(batch, per_text):
            last = first + n
            chunks = partial(counted.chunks, worker_terms, first=first, last=last, pos=pos)
            added += writer.add_prepared(text, source, meta, None, content=None, counted=chunks)
            pos += sum(sizes[first:last])
            first = last
        return added

    total = 0
    batch: list[Item] = []
    size = 0
    try:
        with collector_paused():
            while True:
                try:
                    item = next(items)
                except StopIteration:
                    break
                except Exception:
                    # A bad item stops the add where a single process stops:
                    # everything before it is added first.
                    if batch:
                        pending.append((pool.submit_texts([t for t, _, _ in batch]), batch))
                    while pending:
                        total += drain()
                    raise
                if not isinstance(item[0], str):
                    if batch:
                        pending.append((pool.submit_texts([t for t, _, _ in batch]), batch))
                        batch, size = [], 0
                    while pending:
                        total += drain()
                    total += kb.add_text(*item)  # raises the one clear error
                    continue
                batch.append(item)
                size += len(item[0])
                if len(batch) >= BATCH_TEXTS or size >= BATCH_CHARS:
                    pending.append((pool.submit_texts([t for t, _, _ in batch]), batch))
                    batch, size = [], 0
                    while len(pending) > workers * WORKER_QUEUE:
                        total += drain()
            if batch:
                pending.append((pool.submit_texts([t for t, _, _ in batch]), batch))
            while pending:
                total += drain()
    finally:
        pool.close()
    return total

"""add_texts(jobs=): worker processes count, the saved index is the one a single process builds."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clanker_rag import ConfigError, KnowledgeBase
from clanker_rag._engine._writing import IndexWriter
from clanker_rag._ingest import _parallel, _parallel_add
from clanker_rag._ingest._parallel import Pool, Worker, WorkerTerms, _Numbers
from clanker_rag._ingest._readers import Document

fork_only = pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods() or threading.active_count() != 1,
    reason="workers start by fork here only when no other thread runs",
)

WORDS = ["alpha", "Beta", "gamma_delta", "running", "ran", "x1", "über", "数据", "the", "a", "parse()", "BM25"]


def saved(kb: KnowledgeBase, where: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    kb.save(where)
    body = json.loads((where / "index.json").read_text("utf-8"))["body"]
    files = {p.name: p.read_bytes() for p in where.iterdir() if p.name.startswith("data-")}
    return body, files


texts = st.lists(st.sampled_from(WORDS), max_size=60).map(" ".join)
items = st.lists(st.tuples(texts, st.sampled_from(["s1", "s2", "s3", "s4", "s5", "s6"])), min_size=1, max_size=12)


@pytest.mark.slow
@fork_only
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=items, batch=st.sampled_from([2, 5]))
def test_workers_build_the_same_index_byte_for_byte(
    items: list[tuple[str, str]], batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small batches: many round trips, terms first met in any worker, repeated
    # sources replaced, several texts' chunks in one batch's counts.
    monkeypatch.setattr(_parallel_add, "BATCH_TEXTS", batch)
    pools: list[object] = []
    real_pool = Pool

    def counting_pool(*args: Any) -> Any:
        pools.append(real_pool(*args))
        return pools[-1]

    monkeypatch.setattr(_parallel, "Pool", counting_pool)
    one = KnowledgeBase(chunk_size=8)
    two = KnowledgeBase(chunk_size=8)
    added_one = one.add_texts(items, jobs=1)
    added_two = two.add_texts(iter(items), jobs=2)
    assert len(pools) == 1  # the second build did use workers
    assert added_one == added_two
    with tempfile.TemporaryDirectory() as tmp:
        assert saved(one, Path(tmp) / "one") == saved(two, Path(tmp) / "two")
    assert [h.chunk_id for h in one.search("alpha beta", k=5)] == [h.chunk_id for h in two.search("alpha beta", k=5)]


@fork_only
def test_a_bad_item_stops_where_one_process_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_parallel_add, "BATCH_TEXTS", 2)
    good = [(f"text number {i} alpha", f"s{i}") for i in range(5)]
    for bad in [("text", ""), (b"bytes", "b"), "not a tuple"]:
        kb = KnowledgeBase()
        with pytest.raises(ConfigError):
            kb.add_texts([*good, bad, ("after", "late")], jobs=2)  # type: ignore[list-item]
        assert kb.sources() == sorted(s for _, s in good)


def test_jobs_must_be_positive() -> None:
    for jobs in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="jobs"):
            KnowledgeBase().add_texts([("a b", "s")], jobs=jobs)  # type: ignore[arg-type]


def test_automatic_mode_stays_in_process_for_little_text(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pool(*args: object) -> None:
        raise AssertionError("no workers for a few texts")

    monkeypatch.setattr(_parallel, "Pool", no_pool)
    kb = KnowledgeBase()
    assert kb.add_texts([("alpha beta", "a"), ("gamma", "b")]) == 2
    assert kb.sources() == ["a", "b"]


def test_a_few_texts_import_no_worker_code() -> None:
    # A one-file commit pays nothing for the workers' code (their readers' regexes and all).
    code = (
        "import sys\n"
        "from clanker_rag import KnowledgeBase\n"
        "kb = KnowledgeBase()\n"
        "assert kb.add_texts([('alpha beta', 'a'), ('gamma', 'b')]) == 2\n"
        "print('clanker_rag._ingest._parallel' in sys.modules, kb.sources())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "['a',", "'b']"]


def test_a_failing_iterable_keeps_what_came_before() -> None:
    def gen() -> Any:
        yield ("alpha beta", "a")
        yield ("gamma", "b")
        raise OSError("the reader failed")

    kb = KnowledgeBase()
    with pytest.raises(OSError, match="reader failed"):
        kb.add_texts(gen())
    assert kb.sources() == ["a", "b"]


@settings(max_examples=30, deadline=None)
@given(batch=st.lists(texts, max_size=6))
def test_a_batch_counted_at_once_holds_each_texts_chunks_in_turn(batch: list[str]) -> None:
    kb = KnowledgeBase(chunk_size=8)
    together, per_text = Worker(kb.analyzer, kb.chunker).count_many(batch)
    alone = Worker(kb.analyzer, kb.chunker)  # numbers terms in the same order
    assert len(per_text) == len(batch) and sum(per_text) == len(together.sizes)
    terms, vocab = WorkerTerms(), _Numbers()
    terms.strings.extend(together_strings(batch, kb))
    first = pos = 0
    for text, n in zip(batch, per_text):
        mine = list(together.chunks(terms, vocab, first=first, last=first + n, pos=pos))
        single = alone.count(Document(text, None, "", ""))
        assert [(c.start, c.end, c.label, list(c.tfs)) for c in mine] == [
            (b, e, label, list(t))
            for b, e, label, t in zip(single.bounds[0::4], single.bounds[1::4], single.labels, split(single))
        ]
        pos += sum(together.sizes[first : first + n])
        first += n
    assert first == len(together.sizes) and pos == len(together.keys)


def together_strings(batch: list[str], kb: KnowledgeBase) -> list[str]:
    worker = Worker(kb.analyzer, kb.chunker)
    worker.count_many(batch)
    return list(worker.numbers)


def split(counted: Any) -> list[list[int]]:
    out, pos = [], 0
    for n in counted.sizes:
        out.append(list(counted.tfs[pos : pos + n]))
        pos += n
    return out


def _spy_add_counted(monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    """Record what every IndexWriter.add_counted call returned (None: text by text)."""
    calls: list[int | None] = []
    real = IndexWriter.add_counted

    def spy(self: IndexWriter, items: Any, counted: Any) -> int | None:
        calls.append(real(self, items, counted))
        return calls[-1]

    monkeypatch.setattr(IndexWriter, "add_counted", spy)
    return calls


@pytest.mark.slow
@fork_only
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bodies=st.lists(texts, min_size=1, max_size=12), batch=st.sampled_from([1, 3, 5]), loaded=st.booleans())
def test_new_sources_are_added_a_batch_at_a_time_byte_for_byte(
    bodies: list[str], batch: int, loaded: bool, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: Any
) -> None:
    # Distinct new sources: every batch takes the one-pass path, into a fresh
    # index or one loaded from disk (whose terms are found in its dictionary).
    monkeypatch.setattr(_parallel_add, "BATCH_TEXTS", batch)
    calls = _spy_add_counted(monkeypatch)
    tmp = tmp_path_factory.mktemp("batch")
    items = [(body, f"new{i}") for i, body in enumerate(bodies)]
    if loaded:
        base = KnowledgeBase(chunk_size=8)
        base.add_text("alpha gamma_delta running and some old words", "old")
        base.save(tmp / "base")
        one, two = KnowledgeBase.load(tmp / "base"), KnowledgeBase.load(tmp / "base")
    else:
        one, two = KnowledgeBase(chunk_size=8), KnowledgeBase(chunk_size=8)
    assert one.add_texts(items, jobs=1) == two.add_texts(items, jobs=2)
    assert calls and None not in calls  # one pass per batch, never text by text
    assert sum(c for c in calls if c is not None) == sum(len(list(one.chunks(s))) for _, s in items)
    assert saved(one, tmp / "one") == saved(two, tmp / "two")


@fork_only
def test_a_batch_with_known_or_repeated_sources_goes_text_by_text(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_parallel_add, "BATCH_TEXTS", 4)
    calls = _spy_add_counted(monkeypatch)
    first = [("alpha beta", "a"), ("gamma running", "b")]
    # Batch 1: "a" unchanged, "b" changed; batch 2: "c" twice (the second replaces it).
    later = [("alpha beta", "a"), ("gamma ran", "b"), ("x1 the", "c"), ("über 数据", "d")]
    later += [("BM25 alpha", "c"), ("alpha", "e"), ("beta", "f"), ("gamma", "g")]
    one, two = KnowledgeBase(chunk_size=8), KnowledgeBase(chunk_size=8)
    one.add_texts(first, jobs=1)
    two.add_texts(first, jobs=1)
    assert one.add_texts(later, jobs=1) == two.add_texts(later, jobs=2) == 7  # "a" is unchanged
    assert calls == [None, None]
    assert two.source_text("c") == "BM25 alpha" and two.source_text("b") == "gamma ran"
    assert saved(one, tmp_path / "one") == saved(two, tmp_path / "two")


@fork_only
def test_bad_metadata_in_a_batch_stops_where_one_process_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_parallel_add, "BATCH_TEXTS", 4)
    good = [(f"text number {i} alpha", f"s{i}", {"i": i}) for i in range(5)]
    for bad in [("bad", "b", ["not", "a", "mapping"]), ("bad", "b", {"x": object()}), ("bad", 7, None)]:
        kb = KnowledgeBase()
        with pytest.raises(ConfigError):
            kb.add_texts([*good, bad, ("after", "late")], jobs=2)  # type: ignore[list-item]
        assert kb.sources() == sorted(s for _, s, _ in good)
        assert [kb.source_metadata(s) for _, s, _ in good] == [m for _, _, m in good]


@settings(max_examples=40, deadline=None)
@given(batch=st.lists(texts, max_size=8), seen=st.integers(0, 8))
def test_worker_terms_of_a_whole_batch_are_those_met_chunk_by_chunk(batch: list[str], seen: int) -> None:
    # The bulk add resolves a whole batch's numbers at once; Counted.chunks
    # does it chunk by chunk as the chunks are added.  Same ids, new terms
    # created in the same order, also when an earlier batch resolved some.
    kb = KnowledgeBase(chunk_size=8)
    worker = Worker(kb.analyzer, kb.chunker)
    earlier, _ = worker.count_many(batch[:seen])
    counted, _ = worker.count_many(batch[seen:])
    strings = list(worker.numbers)
    vocabs = [_Creating(), _Creating()]
    by_chunk, at_once = WorkerTerms(), WorkerTerms()
    for terms in (by_chunk, at_once):
        terms.strings.extend(strings)
    for terms, vocab in zip((by_chunk, at_once), vocabs):
        for chunk in earlier.chunks(terms, vocab):
            list(chunk.tids)
    expected = [tid for chunk in counted.chunks(by_chunk, vocabs[0]) for tid in chunk.tids]

    def ids_of(terms: list[str]) -> list[int]:
        assert len(set(terms)) == len(terms)
        return [vocabs[1][t] for t in terms]

    known = counted.known[-1] if counted.known else 0
    assert at_once.term_ids(counted.keys, known, ids_of) == expected
    assert vocabs[1] == vocabs[0] and list(vocabs[1]) == list(vocabs[0])  # same ids, same creation order


class _Creating(dict[str, int]):
    """A vocabulary that numbers a term when it is first looked up (as the index's does)."""

    def __missing__(self, term: str) -> int:
        self[term] = len(self)
        return self[term]

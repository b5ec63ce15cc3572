"""The small coordinator on a real multi-process Dask cluster bound to 127.0.0.1: bit-identical
scores from gathered term figures, counts and source pages from the workers, one walk a root.
The module starts the cluster and shuts it down."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.test_coordinator import OPTIONS, QUERIES, build, every_hit, tree_of
from tests.helpers._dask_threads import stop_offload_thread
from tests.helpers._leaks import alive, child_pids

distributed = pytest.importorskip("distributed", reason="the dask extra (distributed) is not installed")

from clanker_rag import KnowledgeBase  # noqa: E402
from clanker_rag.cluster import ShardedKnowledgeBase, close_client, connect  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.leaves_running("the module's LocalCluster runs until the module ends"),
]


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    before = child_pids()
    threads_before = set(threading.enumerate())
    c = connect("local", n_workers=2)
    yield c
    close_client(c)
    deadline = time.monotonic() + 30
    while [p for p in child_pids() - before if alive(p)] and time.monotonic() < deadline:
        time.sleep(0.1)
    stop_offload_thread()
    for thread in [t for t in threading.enumerate() if t not in threads_before]:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))


@pytest.mark.parametrize("term_tables", [False, True])
def test_scores_counts_and_pages_on_the_cluster_equal_one_machine(
    client: Any, tmp_path: Path, term_tables: bool
) -> None:
    items = build(150, 4)
    one = KnowledgeBase(**OPTIONS)
    one.add_texts(items)
    kb = ShardedKnowledgeBase.load(_saved(tmp_path, items), client=client, term_tables=term_tables)
    try:
        for query in QUERIES * 2:
            assert every_hit(kb, query) == every_hit(one, query), query
        names = one.sources()
        assert (len(kb), kb.source_count()) == (len(one), len(names))
        assert sum(s.n_sources for s in kb.shard_stats()) == len(names)
        assert list(kb.iter_sources(page=9)) == names == kb.sources()
        assert kb.sources_page(names[10], limit=4) == names[11:15]
        kb.add_text("only0 only12 late", "late.md")
        one.add_text("only0 only12 late", "late.md")
        assert every_hit(kb, "only0 only12") == every_hit(one, "only0 only12")
    finally:
        kb.close()


def _saved(tmp_path: Path, items: list[tuple[str, str]]) -> Path:
    sharded = ShardedKnowledgeBase(4, **OPTIONS)
    sharded.add_texts(items)
    return sharded.save(tmp_path / "idx")


def test_ingest_on_the_cluster_walks_each_root_once(client: Any, tmp_path: Path) -> None:
    tree = tree_of(tmp_path)
    kb = ShardedKnowledgeBase(3, client=client)
    try:
        with distributed.get_task_stream(client) as stream:
            report = kb.ingest(tree)
        walks = [t for t in stream.data if str(t["key"]).startswith("list_for_shards")]
        assert len(walks) == 1  # one task listed the tree; the shards' changes took its parts
        one = KnowledgeBase()
        want = one.ingest(tree, progress=False)
        assert sorted(report.added) == sorted(want.added) and report.selected == want.selected
        assert sorted(report.skipped) == sorted(want.skipped)
        assert kb.sources() == one.sources()
        (tree / "docs/page3.md").unlink()
        again, want = kb.ingest(tree), one.ingest(tree, progress=False)
        assert again.removed == want.removed == ["docs/page3.md"]
        assert every_hit(kb, "proxy streams tokens") == every_hit(one, "proxy streams tokens")
    finally:
        kb.close()

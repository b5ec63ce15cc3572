"""The coordinator of a sharded index stays small: a search gathers only its terms' figures from
the shards and scores bit for bit as one knowledge base; counts and source pages come from the
shards; an ingest walks each root once and hands each shard its own files.  Shards in this
process (the same shard functions run on Dask workers, see test_coordinator_dask.py)."""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from clanker_rag import Analyzer, ConfigError, KnowledgeBase
from clanker_rag._cluster import _shards
from clanker_rag._cluster._shards import LocalShards, entries, list_for_shards
from clanker_rag._ingest import _run
from clanker_rag._ingest._discovery import Candidate, DiscoveryOptions, Skipped, discover
from clanker_rag._ingest._options import IngestOptions
from clanker_rag._ingest._readers import FoundPath
from clanker_rag.cluster import ShardedKnowledgeBase, shard_of
from tests.helpers._trees import write

plain = Analyzer(stopwords=False, stemmer=None, split_identifiers=False)
OPTIONS: dict[str, Any] = {"chunk_size": 12, "stride": 6, "analyzer": plain}
COMMON = ["proxy", "stream", "token", "shard", "worker", "index"]


def build(n_docs: int, n_shards: int) -> list[tuple[str, str]]:
    """Documents where ``only0`` occurs on shard 0's sources alone and ``only12`` on shards 1 and 2's;
    ``v{i}`` words make the vocabulary grow with the corpus."""
    items = []
    for i in range(n_docs):
        source = f"docs/{i}.md"
        shard = shard_of(source, n_shards)
        words = [COMMON[(i * j) % len(COMMON)] for j in range(1, 8 + i % 11)] + [f"v{i}", f"v{i // 3}"]
        if shard == 0 and i % 2 == 0:
            words += ["only0"] * (1 + i % 3)
        if shard in (1, 2) and i % 3 == 0:
            words.append("only12")
        items.append((" ".join(words), source))
    return items


def every_hit(kb: Any, query: str) -> dict[tuple[str, int], float]:
    return {(h.source, h.chunk_index): h.score for h in kb.search(query, 100_000)}


QUERIES = ["only0 only12", "only0 proxy stream", "only12 worker v3 v3", "never only0", "index token shard v7"]


@pytest.mark.parametrize("term_tables", [True, False])
def test_scores_are_bit_identical_to_one_knowledge_base(term_tables: bool) -> None:
    items = build(120, 4)
    one = KnowledgeBase(**OPTIONS)
    one.add_texts(items)
    sharded = ShardedKnowledgeBase(4, term_tables=term_tables, **OPTIONS)
    sharded.add_texts(items)
    held = Counter(shard_of(s, 4) for text, s in items if "only0" in text.split())
    assert set(held) == {0}  # the term is on one shard of four
    for query in QUERIES * 2:  # the second time from the kept figures (term_tables=True)
        want = every_hit(one, query)
        assert want and every_hit(sharded, query) == want, query
        assert [h.score for h in sharded.search(query, 7)] == sorted(want.values(), reverse=True)[:7]
    # A change empties the kept figures: the next search scores with the new collection.
    for kb in (one, sharded):
        kb.add_text("only0 only0 only12 fresh", "late.md")
        kb.remove("docs/4.md")
    for query in QUERIES:
        assert every_hit(sharded, query) == every_hit(one, query), query


class Received:
    """Every answer the client gets from the shards (in this process: what a cluster would send it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, Any, Any]] = []
        real = LocalShards.map

        def spy(home: LocalShards, fn: Callable[..., Any], args: Mapping[int, Any], **kw: Any) -> dict[int, Any]:
            out = real(home, fn, args, **kw)
            self.calls.extend((fn.__name__, args[i], answer) for i, answer in out.items())
            return out

        monkeypatch.setattr(LocalShards, "map", spy)

    def take(self) -> list[tuple[str, Any, Any]]:
        calls, self.calls = self.calls, []
        return calls

    @staticmethod
    def size(calls: list[tuple[str, Any, Any]]) -> int:
        return sum(len(pickle.dumps(answer)) for _, _, answer in calls)


def saved_index(tmp_path: Path, n_docs: int) -> Path:
    kb = ShardedKnowledgeBase(4, **OPTIONS)
    kb.add_texts(build(n_docs, 4))
    return kb.save(tmp_path / f"idx{n_docs}")


@pytest.mark.parametrize("term_tables", [True, False])
def test_the_client_receives_no_term_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, term_tables: bool) -> None:
    small, large = saved_index(tmp_path, 40), saved_index(tmp_path, 1200)
    received = Received(monkeypatch)
    opened: dict[Path, list[tuple[str, Any, Any]]] = {}
    asked: dict[Path, list[tuple[str, Any, Any]]] = {}
    for folder in (small, large):
        kb = ShardedKnowledgeBase.load(folder, term_tables=term_tables)
        opened[folder] = received.take()
        kb.search("only0 proxy v3", 5)
        asked[folder] = received.take()
    # Opening asks one shard for its settings, whatever the index holds.
    assert [name for name, _, _ in opened[large]] == ["shard_settings"]
    assert Received.size(opened[small]) == Received.size(opened[large])
    # A search gathers the query terms' figures only, then the hits.
    for folder in (small, large):
        assert sorted({name for name, _, _ in asked[folder]}) == ["shard_search", "shard_term_stats"]
        for name, args, answer in asked[folder]:
            if name == "shard_term_stats":
                assert args == (["only0", "proxy", "v3"],)
                assert set(answer.df) <= {"only0", "proxy", "v3"}
    gathered = [Received.size([c for c in asked[f] if c[0] == "shard_term_stats"]) for f in (small, large)]
    assert abs(gathered[1] - gathered[0]) <= 32  # (larger counts pickle a few bytes longer)


def test_kept_term_figures_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("clanker_rag.cluster.TERM_CACHE", 4)
    sharded = ShardedKnowledgeBase(3, **OPTIONS)
    sharded.add_texts(build(60, 3))
    received = Received(monkeypatch)

    def gathers(query: str) -> int:
        sharded.search(query, 3)
        return sum(1 for name, _, _ in received.take() if name == "shard_term_stats")

    assert gathers("v1") == 3  # every shard is asked
    assert gathers("v1") == 0  # then kept
    for i in range(2, 10):
        gathers(f"v{i}")
    assert gathers("v9") == 0
    assert gathers("v1") == 3  # dropped: only the last 4 terms are kept
    unbounded = ShardedKnowledgeBase(3, term_tables=False, **OPTIONS)
    unbounded.add_texts(build(20, 3))
    received.take()
    unbounded.search("v1", 3)
    unbounded.search("v1", 3)
    assert sum(1 for name, _, _ in received.take() if name == "shard_term_stats") == 6  # nothing kept


def test_counts_and_source_pages_equal_one_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    items = build(90, 4)
    one = KnowledgeBase(**OPTIONS)
    one.add_texts(items)
    sharded = ShardedKnowledgeBase(4, **OPTIONS)
    sharded.add_texts(items)
    names = one.sources()
    received = Received(monkeypatch)
    assert len(sharded) == len(one)
    assert sharded.source_count() == len(names)
    stats = sharded.shard_stats()
    assert sum(s.chunks for s in stats) == len(one) and sum(s.n_sources for s in stats) == len(names)
    assert sum(s.formats.get("md", 0) for s in stats) == len(names)
    # No source name came with the counts.
    assert not any(isinstance(answer, list) for _, _, answer in received.take())
    pages, after = [], None
    while page := sharded.sources_page(after, limit=7):
        assert len(page) <= 7
        pages.append(page)
        after = page[-1]
    assert [s for page in pages for s in page] == names
    assert sharded.sources_page("docs/5.md", limit=3) == [s for s in names if s > "docs/5.md"][:3]
    received.take()
    assert list(sharded.iter_sources(page=5)) == names
    # Each shard sends each of its names once, at most 5 at a time.
    calls = received.take()
    assert all(len(answer) <= 5 for _, _, answer in calls)
    assert sum(len(answer) for _, _, answer in calls) == len(names)
    assert sharded.sources() == names
    with pytest.raises(ConfigError, match="limit"):
        sharded.sources_page(limit=0)
    # Counts and pages kept on a shard follow its changes.
    for kb in (one, sharded):
        kb.add_text("proxy late", "a-late.txt")
        kb.remove("docs/3.md")
    names = one.sources()
    assert (sharded.source_count(), len(sharded)) == (len(names), len(one))
    assert sum(s.formats.get("txt", 0) for s in sharded.shard_stats()) == 1
    assert sharded.sources_page(limit=2) == names[:2] and list(sharded.iter_sources(page=4)) == names


def tree_of(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    for i in range(30):
        write(tree, f"docs/page{i}.md", f"# Page {i}\n\nThe proxy number {i} streams tokens.\n")
    write(tree, "src/app.py", "def handler():\n    return 'proxy'\n")
    write(tree, ".env", "TOKEN=abc\n")
    write(tree, "node_modules/x.md", "skipped folder")
    return tree


def test_the_walk_places_each_file_on_exactly_one_shard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_shards, "_BATCH", 3)  # several pickled batches a shard
    tree = tree_of(tmp_path)
    walk = DiscoveryOptions(source_prefix="pre/")
    assert all(len(part) > 1 for part in list_for_shards(str(tree), walk, 4))
    whole = list(discover(str(tree), walk))
    parts = [entries(part) for part in list_for_shards(str(tree), walk, 4)]
    files = [(i, entry[1]) for i, part in enumerate(parts) for entry in part if entry[0] == "file"]
    wanted = sorted(c.rel for c in whole if isinstance(c, Candidate))
    assert sorted(rel for _, rel in files) == wanted  # each selected file once
    assert all(shard_of("pre/" + rel, 4) == i for i, rel in files)
    assert len({i for i, _ in files}) > 1
    folder_skips = [s.rel for s in whole if isinstance(s, Skipped) and s.rel.endswith("/")]
    assert folder_skips  # node_modules/
    for part in parts:  # every shard learns of folder skips (a folder not listed keeps its sources)
        assert [e[1] for e in part if e[0] == "skip" and e[1].endswith("/")] == folder_skips
    file_skips = [e for part in parts for e in part if e[0] == "skip" and not e[1].endswith("/")]
    assert sorted(e[1] for e in file_skips) == sorted(
        s.rel for s in whole if isinstance(s, Skipped) and not s.rel.endswith("/")
    )


def test_a_listed_file_stays_pinned_to_the_file_the_walk_saw(tmp_path: Path) -> None:
    tree = tree_of(tmp_path)
    root = str(tree)
    for found in [c for c in discover(root, DiscoveryOptions()) if isinstance(c, Candidate)][:5]:
        back = _shards._item(_shards._entry(found, root), root)
        assert isinstance(back, Candidate) and (back.path, back.rel, back.fmt) == (found.path, found.rel, found.fmt)
        assert isinstance(back.path, FoundPath) and isinstance(found.path, FoundPath)
        assert (back.path.real, back.path.ident) == (found.path.real, found.path.ident)
    # A file replaced after the walk is not read: its inode differs from the one listed.
    page = tree / "docs" / "page1.md"
    listed = [c for c in discover(root, DiscoveryOptions()) if isinstance(c, Candidate) and c.rel == "docs/page1.md"]
    entry = _shards._entry(listed[0], root)
    page.rename(tmp_path / "kept-aside.md")  # (kept: its inode cannot be reused for the new file)
    write(tree, "docs/page1.md", "# Another file now\n")
    kb = KnowledgeBase()
    report = _run.ingest(kb, root, IngestOptions(progress=False), listing=[_shards._item(entry, root)])
    assert report.added == [] and [s for s, _ in report.skipped] == ["docs/page1.md"]
    assert "replaced" in report.skipped[0][1]


def test_ingest_walks_each_root_once_and_no_shard_walks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tree_of(tmp_path)
    other = tmp_path / "other"
    write(other, "notes.md", "proxy notes")
    walks: list[str] = []
    real = discover

    def counted(root: str, options: DiscoveryOptions) -> Any:
        walks.append(root)
        return real(root, options)

    def refused(root: str, options: DiscoveryOptions) -> Any:
        raise AssertionError(f"a shard walked {root}")

    monkeypatch.setattr(_shards, "discover", counted)
    monkeypatch.setattr(_run, "discover", refused)
    sharded = ShardedKnowledgeBase(4)
    report = sharded.ingest([tree, other])
    assert walks == [str(tree), str(other)]
    monkeypatch.undo()
    one = KnowledgeBase()
    want = one.ingest([tree, other], progress=False)
    assert sorted(report.added) == sorted(want.added) and report.selected == want.selected
    assert sorted(report.skipped) == sorted(want.skipped)
    assert sharded.sources() == one.sources()
    assert every_hit(sharded, "proxy streams tokens") == every_hit(one, "proxy streams tokens")
    # Sync still removes what is gone, on its shard.
    (tree / "docs/page3.md").unlink()
    again, want = sharded.ingest([tree, other]), one.ingest([tree, other], progress=False)
    assert again.removed == want.removed == ["tree/docs/page3.md"]
    assert sorted(again.unchanged) == sorted(want.unchanged)


def test_term_count_of_a_loaded_shard_equals_the_folded_count(tmp_path: Path) -> None:
    kb = KnowledgeBase(**OPTIONS)
    items = build(80, 4)
    kb.add_texts(items)
    for i in range(0, 80, 7):
        kb.remove(f"docs/{i}.md")  # some v{i} words lose their last chunk
    live = {term for text, source in items if kb.source_text(source) is not None for term in plain(text)}
    assert kb.n_terms == len(live)  # counted by folding every list (changed since the last pack)
    loaded = KnowledgeBase.load(kb.save(tmp_path / "kb"))
    assert loaded.n_terms == len(live)  # read from the loaded lists' lengths
    per_shard: list[set[str]] = [set() for _ in range(3)]
    for text, source in items:
        per_shard[shard_of(source, 3)].update(plain(text))
    stats = ShardedKnowledgeBase.load(_sharded(tmp_path, items)).shard_stats()
    assert [info.terms for info in stats] == [len(terms) for terms in per_shard]


def _sharded(tmp_path: Path, items: list[tuple[str, str]]) -> Path:
    kb = ShardedKnowledgeBase(3, **OPTIONS)
    kb.add_texts(items)
    return kb.save(tmp_path / "sharded")


def test_a_single_file_root_is_placed_and_read_by_its_shard(tmp_path: Path) -> None:
    tree = tree_of(tmp_path)
    page = tree / "docs" / "page7.md"
    sharded, one = ShardedKnowledgeBase(4), KnowledgeBase()
    report, want = sharded.ingest(page), one.ingest(page, progress=False)
    assert report.added == want.added == ["page7.md"] and report.selected == 1
    assert sharded.sources() == ["page7.md"]
    again = sharded.ingest(page)
    assert again.unchanged == ["page7.md"] and not again.added


@pytest.mark.parametrize("command", ["serve", "search", "stats"])
def test_every_cluster_command_opens_without_per_term_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    import argparse

    pytest.importorskip("distributed", reason="the dask extra (distributed) is not installed")
    from clanker_rag._cli import _cluster_commands

    folder = saved_index(tmp_path, 10)
    opened: list[dict[str, Any]] = []
    real_load = ShardedKnowledgeBase.load

    def load(path: Any, **kw: Any) -> ShardedKnowledgeBase:
        opened.append(kw)
        return real_load(path, term_tables=kw["term_tables"])  # in this process: no cluster needed

    monkeypatch.setattr(ShardedKnowledgeBase, "load", load)
    monkeypatch.setattr(_cluster_commands, "connect", lambda *a, **kw: object())
    monkeypatch.setattr(_cluster_commands, "close_client", lambda client: None)
    hooks = _cluster_commands.CliHooks(lambda args: {}, lambda args, kb: 0, lambda args, kb, path, label: 0)
    args = argparse.Namespace(command=command, index=str(folder), cluster="local", json=True, cluster_timeout=5.0)
    assert _cluster_commands.run_cluster(args, hooks) == 0
    assert [kw["term_tables"] for kw in opened] == [False]

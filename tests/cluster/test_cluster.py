"""ShardedKnowledgeBase in this process: exact scores against one KnowledgeBase, placement,
persistence and ingest semantics.  The same code runs on a Dask cluster in test_cluster_dask.py."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from clanker_rag import (
    Analyzer,
    ConfigError,
    IndexFormatError,
    IngestError,
    KnowledgeBase,
    MissingExtraError,
)
from clanker_rag._engine import _collection
from clanker_rag.cluster import MANIFEST, ShardedKnowledgeBase, shard_of
from tests.helpers._trees import write

ROOT = Path(__file__).resolve().parents[2]
VOCAB = [f"w{i}" for i in range(30)] + ["alpha", "beta", "gamma", "delta"]
plain = Analyzer(stopwords=False, stemmer=None, split_identifiers=False)
REL = 1e-6


def same_score(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b), 1e-12)


def check_same(one: KnowledgeBase, sharded: ShardedKnowledgeBase, query: str, k: int, **kw) -> None:
    """Every sharded hit scores what one KnowledgeBase gives its chunk, and the top k scores agree."""
    want = one.search(query, k, **kw)
    got = sharded.search(query, k, **kw)
    assert not got.missing
    assert len(got) == len(want)
    for w, g in zip(want, got):
        assert same_score(w.score, g.score), (query, kw, w, g)
    # Identity, not just the score list: each hit is the chunk one KB scores so.
    everything = {(h.source, h.chunk_index): h.score for h in one.search(query, 10_000, **kw)}
    for g in got:
        assert same_score(everything[(g.source, g.chunk_index)], g.score)
        assert g.text == (one.source_text(g.source) or "")[g.start : g.end]


doc = st.lists(st.sampled_from(VOCAB), min_size=0, max_size=40).map(" ".join)
op = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 25), doc),
    st.tuples(st.just("remove"), st.integers(0, 25), st.just("")),
    st.tuples(st.just("search"), st.integers(1, 12), st.lists(st.sampled_from([*VOCAB, "zz"]), max_size=5)),
)


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(doc, max_size=30),
    st.lists(op, max_size=12),
    st.integers(1, 5),
    st.sampled_from(["lucene", "robertson", "atire", "bm25l", "bm25+"]),
    st.sampled_from([None, 8]),
    st.booleans(),
)
def test_sharded_scores_equal_one_knowledge_base(texts, ops, n_shards, variant, chunk_size, term_tables):
    options = {"chunk_size": chunk_size, "stride": 4 if chunk_size else None, "analyzer": plain, "variant": variant}
    one = KnowledgeBase(**options)
    sharded = ShardedKnowledgeBase(n_shards, term_tables=term_tables, **options)
    items = [(text, f"d{i}", {"odd": i % 2}) for i, text in enumerate(texts)]
    assert one.add_texts(items) == sharded.add_texts(items)
    searched = False
    for kind, n, arg in [*ops, ("search", 10, ["alpha", "w1", "w2"])]:
        if kind == "add":
            assert one.add_text(arg, f"d{n}", {"odd": n % 2}) == sharded.add_text(arg, f"d{n}", {"odd": n % 2})
        elif kind == "remove":
            assert one.remove(f"d{n}") == sharded.remove(f"d{n}")
        else:
            q = " ".join(arg)
            check_same(one, sharded, q, n)
            check_same(one, sharded, q, n, where={"odd": 1})
            check_same(one, sharded, q, n, source="d1")
            searched = True
    assert searched
    assert len(one) == len(sharded)
    assert one.sources() == sharded.sources()
    # What ask's proximity reranking weighs words by: the whole collection's, as one index counts them.
    terms = ["alpha", "w1", "w2", "never"]
    want, got = one.collection_stats(terms), sharded.collection_stats(terms)
    assert (got.n_docs, got.total_length) == (want.n_docs, want.total_length)
    assert {t: n for t, n in got.df.items() if n} == {t: n for t, n in want.df.items() if n}


def zipf_corpus(seed: int, n_docs: int) -> list[str]:
    """Documents over a Zipf-like vocabulary: long and short lists, as real text has."""
    rng = random.Random(seed)
    words = [f"t{i}" for i in range(300)]
    weights = [1 / (i + 1) for i in range(len(words))]
    return [" ".join(rng.choices(words, weights, k=rng.randint(3, 60))) for _ in range(n_docs)]


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 2**32 - 1),
    st.integers(50, 400),
    st.lists(st.integers(0, 299), min_size=1, max_size=5),
    st.integers(1, 30),
    st.integers(1, 4),
    st.sampled_from(["lucene", "robertson", "atire", "bm25l", "bm25+"]),
)
def test_pruned_shard_search_equals_one_knowledge_base(seed, n_docs, words, k, n_shards, variant):
    """Corpora large enough that each shard prunes (the small ones above are mostly scored whole)."""
    options = {"chunk_size": None, "analyzer": plain, "variant": variant}
    one = KnowledgeBase(**options)
    sharded = ShardedKnowledgeBase(n_shards, **options)
    items = [(text, f"d{i}", {"odd": i % 2}) for i, text in enumerate(zipf_corpus(seed, n_docs))]
    one.add_texts(items)
    sharded.add_texts(items)
    q = " ".join(f"t{w}" for w in words)
    check_same(one, sharded, q, k)
    check_same(one, sharded, q, k, where={"odd": 1})
    # A change between searches: the cached impacts of the old statistics must not be used.
    assert one.remove("d3") == sharded.remove("d3")
    one.add_text("t0 t1 t2", "new")
    sharded.add_text("t0 t1 t2", "new")
    check_same(one, sharded, q, k)


def test_shard_search_is_pruned(monkeypatch):
    """A selective query on a large shard scores a pool, not every posting of its terms."""
    options: dict[str, Any] = {"chunk_size": None, "analyzer": plain}
    one = KnowledgeBase(**options)
    sharded = ShardedKnowledgeBase(1, **options)
    items = [(text, f"d{i}") for i, text in enumerate(zipf_corpus(7, 3000))]
    one.add_texts(items)
    sharded.add_texts(items)

    def scored_whole(*args):
        raise AssertionError("scored every posting")

    monkeypatch.setattr(_collection, "_exhaustive", scored_whole)
    check_same(one, sharded, "t0 t1 t250", 5)


def feedback_is_well_posed(one: KnowledgeBase, query: str) -> bool:
    """RM3 takes the 10 best chunks: a tie at the 10th makes 'the' feedback set ambiguous."""
    top = one.search(query, 11)
    return len(top) < 11 or not same_score(top[9].score, top[10].score)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(doc, min_size=1, max_size=40),
    st.lists(st.sampled_from(VOCAB), min_size=1, max_size=4),
    st.integers(1, 5),
    st.booleans(),
)
def test_feedback_scores_equal_one_knowledge_base(texts, words, n_shards, term_tables):
    options: dict[str, Any] = {"chunk_size": None, "analyzer": plain}
    one = KnowledgeBase(**options)
    sharded = ShardedKnowledgeBase(n_shards, term_tables=term_tables, **options)
    items = [(text, f"d{i}") for i, text in enumerate(texts)]
    one.add_texts(items)
    sharded.add_texts(items)
    q = " ".join(words)
    assume(feedback_is_well_posed(one, q))
    check_same(one, sharded, q, 10, feedback=True)
    check_same(one, sharded, q, 5, feedback=True, source="d1")


def test_feedback_and_explain_on_text(tmp_path):
    words = [
        "the",
        "proxy",
        "streams",
        "tokens",
        "while",
        "the",
        "controller",
        "splices",
        "results",
        "into",
        "the",
        "model",
        "output",
    ]
    texts = [" ".join(words[i:] + words[:i] + [f"extra{i}"] * i) for i in range(len(words))]
    one = KnowledgeBase(chunk_size=None)
    sharded = ShardedKnowledgeBase(3, chunk_size=None)
    for i, text in enumerate(texts):
        one.add_text(text, f"doc{i}")
        sharded.add_text(text, f"doc{i}")
    assert feedback_is_well_posed(one, "proxy controller")
    check_same(one, sharded, "proxy controller", 5, feedback=True)
    hit = sharded.search("proxy splices", 1)[0]
    ex = sharded.explain("proxy splices", hit)
    assert ex.score == pytest.approx(hit.score, rel=REL)
    assert sum(t.contribution for t in ex.terms) == pytest.approx(hit.score, rel=REL)
    want = one.explain("proxy splices", one.search("proxy splices", 1)[0])
    assert (ex.n_docs, ex.avgdl) == (want.n_docs, want.avgdl)
    assert {t.term: t.df for t in ex.terms} == {t.term: t.df for t in want.terms}


def test_placement_is_a_stable_hash_of_the_source(tmp_path):
    # Fixed values (blake2b, 8 bytes, big-endian, modulo the count): saved indexes depend on them.
    assert [shard_of(f"docs/{i}.md", 3) for i in range(8)] == [1, 0, 0, 1, 2, 2, 0, 1]
    code = "from clanker_rag.cluster import shard_of; print([shard_of(f'docs/{i}.md', 5) for i in range(20)])"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "123"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == str([shard_of(f"docs/{i}.md", 5) for i in range(20)])
    sharded = ShardedKnowledgeBase(4, chunk_size=None)
    for i in range(40):
        sharded.add_text(f"text number {i}", f"s{i}")
    folder = sharded.save(tmp_path / "idx")
    held = [KnowledgeBase.load(folder / f"shard-{i:03d}").sources() for i in range(4)]
    for i, names in enumerate(held):
        assert all(shard_of(s, 4) == i for s in names)
    assert sorted(s for names in held for s in names) == sorted(f"s{i}" for i in range(40))
    assert sum(1 for names in held if names) > 1
    assert [info.n_sources for info in sharded.shard_stats()] == [len(names) for names in held]


def test_bad_arguments_get_one_clear_error():
    with pytest.raises(ConfigError, match="shards=0"):
        ShardedKnowledgeBase(0)
    with pytest.raises(ConfigError, match="variant"):
        ShardedKnowledgeBase(2, variant="nope")
    sharded = ShardedKnowledgeBase(2)
    with pytest.raises(ConfigError, match="source"):
        sharded.add_text("x", "")
    with pytest.raises(ConfigError, match="k="):
        sharded.search("x", "3")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="query"):
        sharded.search(None)  # type: ignore[arg-type]
    assert sharded.search("anything", 5) == []
    with pytest.raises(ConfigError, match="term_tables"):
        ShardedKnowledgeBase(2, term_tables="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="timeout"):
        ShardedKnowledgeBase(2, timeout=0)
    with pytest.raises(IngestError, match="no such file or folder"):
        sharded.ingest("/nonexistent/tree")


def build_pair(n_shards=3):
    one = KnowledgeBase(chunk_size=30, stride=15)
    sharded = ShardedKnowledgeBase(n_shards, chunk_size=30, stride=15)
    for i in range(30):
        text = " ".join(VOCAB[(i * j) % len(VOCAB)] for j in range(1, 40 + i))
        one.add_text(text, f"src/{i}.txt", {"n": i})
        sharded.add_text(text, f"src/{i}.txt", {"n": i})
    return one, sharded


def test_save_writes_plain_shard_folders_and_a_manifest(tmp_path):
    one, sharded = build_pair()
    folder = sharded.save(tmp_path / "idx")
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["format_version"] == 1
    assert manifest["shards"] == 3
    assert manifest["placement"] == "blake2b-64-mod"
    chunks = 0
    for name in manifest["shard_dirs"]:
        kb = KnowledgeBase.load(folder / name)  # an ordinary index folder
        assert (folder / name / "index.json").is_file()
        assert all(shard_of(s, 3) == manifest["shard_dirs"].index(name) for s in kb.sources())
        chunks += len(kb)
    assert chunks == len(one)
    back = ShardedKnowledgeBase.load(folder)
    for q in ["alpha beta", "w3 w7 w7", "gamma"]:
        check_same(one, back, q, 10)
    back.remove("src/3.txt")
    one.remove("src/3.txt")
    back.save()
    again = ShardedKnowledgeBase.load(folder)
    check_same(one, again, "alpha w3", 10)
    assert "src/3.txt" not in again.sources()


def test_another_shard_count_is_refused(tmp_path):
    _, sharded = build_pair(3)
    folder = sharded.save(tmp_path / "idx")
    with pytest.raises(ConfigError, match="holds 3 shards"):
        ShardedKnowledgeBase.load(folder, shards=4)
    with pytest.raises(ConfigError, match="holds 3 shards"):
        ShardedKnowledgeBase(2).save(folder)
    with pytest.raises(ConfigError, match="not loaded from"):
        ShardedKnowledgeBase(3).save(folder)
    one = KnowledgeBase()
    one.add_text("x y", "a")
    one.save(tmp_path / "plain")
    with pytest.raises(ConfigError, match="one-machine index"):
        sharded.save(tmp_path / "plain")
    with pytest.raises(IndexFormatError, match="no sharded index"):
        ShardedKnowledgeBase.load(tmp_path / "plain")


@pytest.mark.parametrize(
    "change, match",
    [
        ({"format_version": 99}, "format_version=99"),
        ({"shards": 2}, "does not match"),
        ({"shard_dirs": ["../x", "b", "c"]}, "plain folder names"),
        ({"placement": "python-hash"}, "placement"),
    ],
)
def test_bad_manifest_is_refused(tmp_path, change, match):
    _, sharded = build_pair(3)
    folder = sharded.save(tmp_path / "idx")
    manifest = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).write_text(json.dumps({**manifest, **change}))
    with pytest.raises(IndexFormatError, match=match):
        ShardedKnowledgeBase.load(folder)


def test_ingest_has_one_machine_semantics(tmp_path):
    tree = tmp_path / "tree"
    for i in range(12):
        write(tree, f"docs/page{i}.md", f"# Page {i}\n\nThe proxy number {i} streams tokens.\n\n" + "word " * i)
    write(tree, "src/app.py", "def handler():\n    return 'proxy'\n")
    write(tree, ".env", "TOKEN=abc\n")
    write(tree, "keys/deploy.txt", "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----\n")
    write(tree, "blob.bin", b"\x00\x01binary")
    one = KnowledgeBase()
    sharded = ShardedKnowledgeBase(3)
    r1, s1 = one.ingest(tree, progress=False), sharded.ingest(tree)
    assert sorted(s1.added) == sorted(r1.added)
    assert sorted(s1.skipped) == sorted(r1.skipped)
    assert (s1.chunks_added, s1.chunks_total, s1.bytes_read) == (r1.chunks_added, r1.chunks_total, r1.bytes_read)
    check_same(one, sharded, "proxy streams tokens", 10)
    # Again: unchanged files are not read (only the refused one is, as on one machine).
    r2, s2 = one.ingest(tree, progress=False), sharded.ingest(tree)
    assert sorted(s2.unchanged) == sorted(r2.unchanged) and s2.bytes_read == r2.bytes_read and not s2.added
    assert sorted(s2.skipped) == sorted(r2.skipped)
    # A change, a deletion: replaced and removed on their shards only.
    write(tree, "docs/page3.md", "# Page 3\n\nRewritten about the controller.\n")
    os.utime(tree / "docs/page3.md", ns=(1, 1))
    (tree / "docs/page5.md").unlink()
    r3, s3 = one.ingest(tree, progress=False), sharded.ingest(tree)
    assert (s3.updated, s3.removed) == (r3.updated, r3.removed) == (["docs/page3.md"], ["docs/page5.md"])
    assert sorted(s3.unchanged) == sorted(r3.unchanged)
    assert s3.chunks_removed == r3.chunks_removed
    assert (s3.chunks_replaced, s3.chunks_before, s3.selected) == (r3.chunks_replaced, r3.chunks_before, r3.selected)
    assert s3.chunks_total == s3.chunks_before + s3.chunks_added - s3.chunks_removed
    check_same(one, sharded, "controller proxy", 10)
    assert one.sources() == sharded.sources()


def test_ingest_draws_one_progress_bar_for_the_shards(tmp_path, capsys):
    tree = tmp_path / "tree"
    for i in range(7):
        write(tree, f"docs/page{i}.md", f"page {i} about the proxy")
    ShardedKnowledgeBase(3).ingest(tree, progress=True)
    err = capsys.readouterr().err
    assert "files/s" in err and err.rstrip().endswith("ETA 0:00")
    assert "7/7 files" in err  # the shards' parts of the walk add up to the 7 files: one bar, not three
    assert err.count("\n") == 1
    ShardedKnowledgeBase(3).ingest(tree, progress=False)
    assert capsys.readouterr().err == ""


def test_ingest_saves_with_index_path(tmp_path):
    tree = tmp_path / "tree"
    write(tree, "a.md", "alpha beta")
    write(tree, "b.md", "beta gamma")
    sharded = ShardedKnowledgeBase(2)
    report = sharded.ingest(tree, index_path=tmp_path / "idx")
    assert report.saves == 1
    assert ShardedKnowledgeBase.load(tmp_path / "idx").sources() == ["a.md", "b.md"]


def test_ingest_reports_the_wall_time_the_caller_saw(tmp_path, monkeypatch):
    import time

    tree = tmp_path / "tree"
    write(tree, "a.md", "alpha beta")
    sharded = ShardedKnowledgeBase(3)
    home = sharded._home  # the shard home: its round trip stands in for a cluster's scheduling time
    real_change = home.change

    def slow_change(*args, **kwargs):
        time.sleep(0.3)
        return real_change(*args, **kwargs)

    monkeypatch.setattr(home, "change", slow_change)
    report = sharded.ingest(tree)
    assert report.seconds >= 0.3  # the whole run, not the slowest shard's own share of it


def test_import_clanker_rag_does_not_import_dask():
    code = (
        "import sys, clanker_rag, clanker_rag.cluster; from clanker_rag import KnowledgeBase; "
        "from clanker_rag.cluster import ShardedKnowledgeBase; ShardedKnowledgeBase(2).search('x'); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "[]"


def test_missing_extra_gives_the_install_line():
    code = (
        "import sys; sys.modules['distributed'] = None\n"
        "from clanker_rag.cluster import ShardedKnowledgeBase\n"
        "try:\n    ShardedKnowledgeBase(2, client=object())\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    hint = f"the Dask cluster needs the dask extra: pip install -e '{ROOT}[dask]'"
    assert out.strip() == f"{MissingExtraError.__name__} {hint}"


def test_retriever_protocol():
    from clanker_rag import Retriever

    _, sharded = build_pair(2)
    assert sharded("alpha", 2) == sharded.search("alpha", 2)
    assert isinstance(sharded, Retriever)


@pytest.mark.parametrize(
    "call",
    [
        lambda kb: kb.add_texts("string"),
        lambda kb: kb.add_texts([("x",)]),
        lambda kb: kb.add_text("t", "s", metadata=[1, 2]),
        lambda kb: kb.add_texts([("t", "s", [1])]),
        lambda kb: kb.save(""),
    ],
)
def test_bad_arguments_are_config_errors_as_on_one_machine(call):
    sharded, one = ShardedKnowledgeBase(2), KnowledgeBase()
    with pytest.raises(ConfigError) as on_shards:
        call(sharded)
    with pytest.raises(ConfigError) as on_one:
        call(one)
    assert str(on_shards.value) == str(on_one.value)
    assert len(sharded) == 0


def test_impact_cache_counts_its_postings_and_evicts_least_recently_used(monkeypatch: pytest.MonkeyPatch) -> None:
    from array import array

    from clanker_rag._engine import _collection

    monkeypatch.setattr(_collection, "CACHE_POSTINGS", 10)

    def entry(n: int, key: int = 0) -> _collection._Impacts:
        return _collection._Impacts((key, 0, 0, 0), array("i", range(n)), array("f", [1.0] * n), 1.0, 1.0)

    cache = _collection._Cache()
    cache.put("a", entry(4))
    cache.put("b", entry(4))
    assert cache.take("a", (0, 0, 0, 0)) is not None  # "a" is now the most recently used
    cache.put("c", entry(4))  # 12 > 10: "b", the least recently used, goes
    assert list(cache.entries) == ["a", "c"] and cache.held == 8
    assert cache.take("a", (1, 0, 0, 0)) is None  # stale statistics: dropped, and its postings uncounted
    assert list(cache.entries) == ["c"] and cache.held == 4
    cache.put("big", entry(50))  # over the cap alone: kept (never the last entry), the rest goes
    assert list(cache.entries) == ["big"] and cache.held == 50

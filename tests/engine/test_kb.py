import gc
import math
import os
from pathlib import Path

import pytest

import clanker_rag
from clanker_rag import BM25, ConfigError, KnowledgeBase, retrieve

DOCS = {
    "cats.md": "Cats are small carnivorous mammals. A cat sleeps most of the day and hunts mice at night.",
    "dogs.md": "Dogs are loyal companions. A dog barks at strangers and loves long walks.",
    "code/user.py": "def getUserName(user):\n    return user.name\n",
    "space.txt": "The rocket reached orbit after a long burn of its second stage engine.",
}


def make_kb(**kw):
    kb = KnowledgeBase(**kw)
    for source, text in DOCS.items():
        kb.add_text(text, source=source, metadata={"kind": source.rsplit(".", 1)[-1]})
    return kb


def test_search_contract():
    kb = make_kb()
    hits = kb.search("cat hunting mice", k=10)
    assert hits[0].source == "cats.md"
    assert hits[0].text == DOCS["cats.md"]
    assert hits[0].metadata == {"kind": "md"}
    assert all(hits[i].score >= hits[i + 1].score for i in range(len(hits) - 1))
    assert kb.search("user name")[0].source == "code/user.py"
    assert kb.search("getUserName")[0].source == "code/user.py"


def test_never_raises_on_edge_cases():
    kb = make_kb()
    assert len(kb.search("dog", k=1000)) == 1
    assert kb.search("") == []
    assert kb.search("   !!! ") == []
    assert kb.search("the and of") == []
    assert kb.search("zzzunknownword") == []
    assert kb.search("dog", k=0) == []
    empty = KnowledgeBase()
    assert empty.search("anything") == []
    assert empty.search("") == []


@pytest.mark.parametrize("variant", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
def test_term_in_half_the_documents_scores_above_zero(variant):
    kb = KnowledgeBase(variant=variant)
    kb.add_text("apple banana", "1")
    kb.add_text("apple cherry", "2")
    kb.add_text("durian", "3")
    kb.add_text("elderberry", "4")
    hits = kb.search("apple")
    assert {h.source for h in hits} == {"1", "2"}
    assert all(h.score > 0 and math.isfinite(h.score) for h in hits)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"k1": -0.5}, "k1=-0.5"),
        ({"k1": float("nan")}, "k1=nan"),
        ({"b": 1.5}, "b=1.5"),
        ({"variant": "bm25+", "delta": -1}, "delta=-1"),
        ({"variant": "nope"}, "variant='nope'"),
    ],
)
def test_parameters_validated_with_value_and_range(kwargs, needle):
    with pytest.raises(ConfigError) as info:
        BM25(**kwargs)
    assert needle in str(info.value)
    if "variant" not in needle:
        assert "[" in str(info.value)  # the valid range is named


def test_explain_adds_up_exactly():
    kb = make_kb()
    for query in ("cat dog walks", "long long orbit", "user name getUserName"):
        for hit in kb.search(query, k=5):
            exp = kb.explain(query, hit)
            total = 0.0
            for part in exp.terms:
                total += part.contribution
            assert total == hit.score == exp.score
            for part in exp.terms:
                ref = kb.bm25.contribution(exp.n_docs, part.df, part.tf, exp.dl, exp.avgdl) * part.weight
                assert part.contribution == pytest.approx(ref, rel=1e-6)


def test_add_again_replaces_and_identical_is_skipped():
    kb = make_kb()
    n = len(kb)
    assert kb.add_text(DOCS["cats.md"], "cats.md", {"kind": "md"}) == 0
    assert len(kb) == n
    assert kb.add_text("Cats now purr loudly.", "cats.md") == 1
    assert kb.search("mice") == []
    assert kb.search("purr")[0].source == "cats.md"
    assert kb.remove("cats.md") == 1
    assert kb.remove("cats.md") == 0
    assert "cats.md" not in kb.sources()
    assert kb.search("purr") == []


def test_filters_on_source_and_metadata():
    kb = make_kb()
    q = "long"
    assert {h.source for h in kb.search(q)} == {"dogs.md", "space.txt"}
    assert [h.source for h in kb.search(q, source="*.md")] == ["dogs.md"]
    assert [h.source for h in kb.search(q, source="space")] == ["space.txt"]
    assert [h.source for h in kb.search(q, where={"kind": "txt"})] == ["space.txt"]
    assert {h.source for h in kb.search(q, where={"kind": ["txt", "md"]})} == {"dogs.md", "space.txt"}
    assert kb.search(q, where={"kind": "py"}) == []


def test_pseudo_relevance_feedback_brings_in_related_chunks():
    kb = KnowledgeBase()
    kb.add_text("turbulent boundary layer transition over a flat plate heat transfer", "a")
    kb.add_text("turbulent boundary layer transition measured on a swept wing", "b")
    kb.add_text("heat transfer in laminar flat plate flow with suction", "c")
    kb.add_text("poetry of the romantic era", "d")
    plain = {h.source for h in kb.search("turbulent transition")}
    fb = kb.search("turbulent transition", feedback=True)
    assert plain == {"a", "b"}
    assert {h.source for h in fb} >= {"a", "b", "c"}
    assert "d" not in {h.source for h in fb}
    assert all(math.isfinite(h.score) for h in fb)


def test_chunks_keep_original_text_and_lines():
    text = "\n".join(f"Paragraph line {i}: Some Mixed-Case Words." for i in range(200))
    kb = KnowledgeBase(chunk_size=50, stride=25)
    assert kb.add_text(text, "big.txt") > 5
    for hit in kb.chunks("big.txt"):
        assert text[hit.start : hit.end] == hit.text
        assert hit.start_line == text.count("\n", 0, hit.start) + 1
    hit = kb.search("line 150")[0]
    assert "150" in hit.text and hit.start_line <= 151 <= hit.end_line


def test_bad_inputs_raise_config_errors():
    kb = KnowledgeBase()
    with pytest.raises(ConfigError):
        kb.add_text(b"bytes", "x")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        kb.add_text("text", "")
    with pytest.raises(ConfigError, match="JSON"):
        kb.add_text("text", "x", {"bad": object()})
    with pytest.raises(ConfigError):
        kb.add_text("abc", "x", sections=[(0, 10, None)])
    with pytest.raises(ConfigError):
        kb.search(None)  # type: ignore[arg-type]
    assert len(kb) == 0 and kb.sources() == []


def test_default_kb_and_retrieve():
    kb = KnowledgeBase.default()
    assert len(kb) > 0
    passages = retrieve("how do I install clanker_rag", k=4)
    assert 1 <= len(passages) <= 4
    assert all(isinstance(p, str) and p for p in passages)
    assert clanker_rag.retrieve is retrieve


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open descriptors through Linux's /proc/self/fd")
def test_a_dropped_knowledge_base_closes_its_files_at_once(tmp_path: Path) -> None:
    """No reference cycle keeps a loaded index (its mapped files, its open descriptors) until the cyclic GC runs:
    a server that follows a folder committed every second would otherwise hold every old commit open."""
    folder = tmp_path / "index"
    kb = KnowledgeBase()
    kb.add_text("alpha beta gamma " * 40, source="a")
    kb.save(folder)

    gc.collect()
    gc.disable()
    try:
        before = len(os.listdir("/proc/self/fd"))
        for i in range(20):
            loaded = KnowledgeBase.load(folder)
            assert loaded.search("beta", 1)
            loaded.add_text(f"new words {i}", source=f"n{i}")
            del loaded
        assert len(os.listdir("/proc/self/fd")) == before
    finally:
        gc.enable()

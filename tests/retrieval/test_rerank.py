import math
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from clanker_rag import ConfigError, Hit, KnowledgeBase, MissingExtraError
from clanker_rag._retrieval._embed import load_model
from clanker_rag._retrieval._rerank import Reranker, RerankingRetriever
from tests.helpers._models import FakeBiEncoder, FakeCrossEncoder, minilm_path

# BM25 ranks these by the word "report"; only the last is about cats.
DOCS = {
    "a.md": "Quarterly report on sales figures, with a short report appendix.",
    "b.md": "Report of the bakery: bread and dough output doubled this report period.",
    "c.md": "Report: the feline population of the shelter, kittens and cats adopted.",
}
CHECKOUT = Path(__file__).resolve().parents[2]  # the clone the tests run from: install hints name it


def make_kb() -> KnowledgeBase:
    kb = KnowledgeBase()
    for source, text in DOCS.items():
        kb.add_text(text, source)
    return kb


def test_missing_extra_is_one_clear_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # makes the import fail
    reranker = Reranker("/nonexistent/model")  # lazy: constructing does not load
    with pytest.raises(MissingExtraError) as info:
        reranker.score("q", ["text"])
    message = str(info.value)
    assert f"pip install -e '{CHECKOUT}[rerank]'" in message
    assert "\n" not in message
    assert isinstance(info.value, ImportError)


def test_missing_extra_from_the_command_line_has_no_traceback():
    code = (
        "import sys; sys.modules['sentence_transformers'] = None\n"
        "from clanker_rag._retrieval._dense import HybridRetriever\n"
        "from clanker_rag import KnowledgeBase, ClankerRagError\n"
        "kb = KnowledgeBase(); kb.add_text('x y z', 's')\n"
        "try:\n"
        "    HybridRetriever(kb, '/no/such/model').search('x', 1)\n"
        "except ClankerRagError as exc:\n"
        "    print(exc); sys.exit(2)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout.strip().endswith(f"pip install -e '{CHECKOUT}[rerank]'")
    assert "Traceback" not in proc.stderr


def test_cross_encoder_order_replaces_bm25_order():
    kb = make_kb()
    bm25 = [h.source for h in kb.search("report on a kitty", 3)]
    assert bm25[0] != "c.md"
    model = FakeCrossEncoder()
    reranker = Reranker(model, batch_size=7)
    assert reranker.kind == "cross" and reranker.fuse is False
    hits = RerankingRetriever(kb, reranker).search("report on a kitty", 3)
    assert hits[0].source == "c.md"
    assert hits[0].score == pytest.approx(3 - len(DOCS["c.md"]) / 10000)  # the model's score
    assert model.batch_sizes == [7]
    assert {t for _, t in model.pairs} == set(DOCS.values())


def test_only_the_top_candidates_are_rescored():
    hits = [Hit(f"text {i}", f"s{i}", 10.0 - i) for i in range(6)]

    class Reverse:
        def predict(self, pairs, **_):
            return [float(i) for i in range(len(pairs))]  # later candidates score higher

    out = Reranker(Reverse(), candidates=3).rerank("q", hits)
    assert [h.source for h in out] == ["s2", "s1", "s0", "s3", "s4", "s5"]
    assert [h.score for h in out[3:]] == [7.0, 6.0, 5.0]  # untouched tail keeps BM25 scores
    assert [h.source for h in Reranker(Reverse(), candidates=3).rerank("q", hits, k=2)] == ["s2", "s1"]


def test_bi_encoder_fused_with_bm25_by_rrf():
    hits = [Hit("dogs bark", "dogs", 3.0), Hit("bread", "bread", 2.0), Hit("a kitten", "cats", 1.0)]
    model = FakeBiEncoder()
    reranker = Reranker(model, rrf_k=60)
    assert reranker.kind == "bi" and reranker.fuse is True
    out = reranker.rerank("feline cat", hits)
    # cosine order: cats, then dogs/bread (tie, BM25 order kept) -> dogs, bread
    # RRF: dogs 1/61 + 1/62, cats 1/63 + 1/61, bread 1/62 + 1/63
    assert [h.source for h in out] == ["dogs", "cats", "bread"]
    assert math.isclose(out[0].score, 1 / 61 + 1 / 62)
    assert math.isclose(out[1].score, 1 / 63 + 1 / 61)
    pure = Reranker(model, fuse=False).rerank("feline cat", hits)
    assert [h.source for h in pure] == ["cats", "dogs", "bread"]
    assert pure[0].score > 0.9 and pure[1].score < 0.2  # cosine similarities


def test_passage_embeddings_are_cached():
    hits = [Hit("dogs bark", "dogs", 3.0), Hit("a kitten", "cats", 1.0)]
    model = FakeBiEncoder()
    reranker = Reranker(model)
    reranker.rerank("cat", hits)
    reranker.rerank("dog", hits)
    assert model.texts == ["cat", "dogs bark", "a kitten", "dog"]
    uncached = FakeBiEncoder()
    no_cache = Reranker(uncached, cache_size=0)
    no_cache.rerank("cat", hits)
    no_cache.rerank("dog", hits)
    assert uncached.texts.count("dogs bark") == 2


def test_reranking_retriever_passes_filters_and_asks_for_enough_candidates():
    class Spy:
        def __init__(self):
            self.calls = []

        def search(self, query, k=10, **options):
            self.calls.append((query, k, options))
            return [Hit("a kitten", "cats", 1.0)]

    spy = Spy()
    retriever = RerankingRetriever(spy, Reranker(FakeBiEncoder(), candidates=25))
    assert [h.source for h in retriever.search("cat", 5, source="docs/*")] == ["cats"]
    assert spy.calls == [("cat", 25, {"source": "docs/*"})]
    retriever.search("cat", 40)
    assert spy.calls[-1][1] == 40
    assert retriever.search("cat", 0) == []


def test_options_are_checked():
    for bad in ({"candidates": 0}, {"batch_size": -1}, {"kind": "sideways"}, {"cache_size": -1}):
        with pytest.raises(ConfigError):
            Reranker(FakeBiEncoder(), **bad)
    with pytest.raises(ConfigError, match="encode"):
        Reranker(object())
    with pytest.raises(ConfigError, match="kind='cross'"):
        Reranker(FakeBiEncoder(), kind="cross")


def test_model_folders_load_as_the_right_kind(tmp_path, monkeypatch):
    made = []

    class Loaded:
        def __init__(self, where, device=None):
            made.append((type(self).__name__, where, device))

    fake: Any = types.ModuleType("sentence_transformers")  # given the attributes the loaders look up
    fake.SentenceTransformer = type("SentenceTransformer", (Loaded,), {})
    fake.CrossEncoder = type("CrossEncoder", (Loaded,), {})
    monkeypatch.setitem(sys.modules, "sentence_transformers", fake)

    bi = tmp_path / "bi"
    bi.mkdir()
    (bi / "modules.json").write_text("[]")
    (bi / "config.json").write_text('{"architectures": ["BertModel"]}')
    cross = tmp_path / "cross"
    cross.mkdir()
    (cross / "config.json").write_text('{"architectures": ["BertForSequenceClassification"]}')

    assert load_model(bi, device="cpu")[1] == "bi"
    assert load_model(cross)[1] == "cross"
    assert load_model(bi, kind="cross")[1] == "cross"
    assert made == [
        ("SentenceTransformer", str(bi), "cpu"),
        ("CrossEncoder", str(cross), None),
        ("CrossEncoder", str(bi), None),
    ]
    (tmp_path / "file.bin").write_text("x")
    with pytest.raises(ConfigError, match="folder"):
        load_model(tmp_path / "file.bin")
    with pytest.raises(ConfigError, match="no such model folder"):
        load_model(tmp_path / "missing")
    assert len(made) == 3  # neither bad path was handed to sentence-transformers


# -- the real model ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.rerank
def test_real_bi_encoder_reranks_a_lexical_near_miss_to_the_top():
    kb = KnowledgeBase()
    kb.add_text("Engine repair guide: repair the car's engine, repair the fuel pump.", "engine.md")
    kb.add_text("Repair of old books: glue the spine and repair the torn pages of the novel.", "books.md")
    kb.add_text("Repair shop opening hours and repair prices.", "shop.md")
    query = "repair a damaged paperback"
    assert kb.search(query, 3)[0].source != "books.md"
    reranker = Reranker(minilm_path(), fuse=False, device="cpu")
    assert reranker.kind == "bi"
    hits = RerankingRetriever(kb, reranker).search(query, 3)
    assert hits[0].source == "books.md"
    assert -1.0 <= hits[-1].score < hits[0].score <= 1.0


def test_stored_embeddings_are_reused():
    from clanker_rag._retrieval._dense import HybridRetriever

    kb = make_kb()
    hybrid = HybridRetriever(kb, FakeBiEncoder(), model_name="fake")
    hybrid.refresh()
    model = FakeBiEncoder()
    reranker = Reranker(model, embeddings=hybrid.store, cache_size=0, fuse=False)
    hits = RerankingRetriever(kb, reranker).search("report on a kitty", 3)
    assert hits[0].source == "c.md"
    assert model.texts == ["report on a kitty"]  # the passages came from the store


def test_evaluate_dataset_rerank(tmp_path):
    import json

    from clanker_rag._retrieval._eval import evaluate_dataset

    data = tmp_path / "beir"
    (data / "qrels").mkdir(parents=True)
    with open(data / "corpus.jsonl", "w") as fh:
        for doc_id, text in DOCS.items():
            fh.write(json.dumps({"_id": doc_id, "text": text}) + "\n")
    (data / "queries.jsonl").write_text(json.dumps({"_id": "q", "text": "report on a kitty"}) + "\n")
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\tc.md\t1\n")
    plain = evaluate_dataset(data)
    assert plain.n_queries == 1
    assert 0.0 < plain.metrics["mrr@10"] < 1.0
    model = FakeCrossEncoder()
    result = evaluate_dataset(data, rerank=model, candidates=3, batch_size=4)
    assert result.metrics["mrr@10"] == 1.0
    assert model.batch_sizes == [4] and len(model.pairs) == 3

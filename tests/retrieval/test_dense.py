import json
import math
from pathlib import Path
from typing import Any

import pytest

from clanker_rag import ConfigError, IndexFormatError, KnowledgeBase
from clanker_rag._retrieval._dense import DenseStore, HybridRetriever, update_embeddings
from tests.helpers._models import FakeBiEncoder, minilm_path

DOCS = {
    "cats.md": "Cats are small mammals. A cat sleeps most of the day and hunts mice at night.",
    "dogs.md": "Dogs are loyal companions. A dog barks at strangers and loves long walks.",
    "space.md": "The rocket reached orbit after a long burn of its second stage.",
    "bakery.md": "Fresh bread every morning: the dough rests overnight before baking.",
}
MODEL = "fake-concepts"


def make_kb() -> KnowledgeBase:
    kb = KnowledgeBase()
    for source, text in DOCS.items():
        kb.add_text(text, source, {"kind": "pets" if source in ("cats.md", "dogs.md") else "other"})
    return kb


def manifest(folder: Path) -> Path:
    return DenseStore.manifest_path(folder, MODEL)


# -- store -------------------------------------------------------------------------


def test_round_trip_and_no_recomputation(tmp_path):
    kb = make_kb()
    model = FakeBiEncoder()
    hybrid = HybridRetriever(kb, model, folder=tmp_path, model_name=MODEL)
    assert hybrid.refresh() == len(kb) == 4
    assert sorted(model.texts) == sorted(DOCS.values())
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 2 and files[0].endswith(".f32") and files[1].endswith(".json")
    body = json.loads(manifest(tmp_path).read_text())
    assert (body["model"], body["dim"], body["count"]) == (MODEL, 6, 4)
    assert (tmp_path / body["data"]).stat().st_size == 4 * 6 * 4

    store = DenseStore.load(tmp_path, MODEL)
    assert store is not None and len(store) == 4
    vec = store.vector(DOCS["space.md"])
    assert vec is not None
    assert math.isclose(sum(x * x for x in vec), 1.0, rel_tol=1e-5)  # stored unit length
    assert vec[2] > 0.99  # the "rocket/orbit" concept dominates

    fresh_model = FakeBiEncoder()
    again = HybridRetriever(kb, fresh_model, folder=tmp_path, model_name=MODEL)
    assert again.refresh() == 0
    assert fresh_model.texts == []
    assert [h.source for h in again.dense_search("spacecraft launch", 1)] == ["space.md"]
    assert fresh_model.texts == ["spacecraft launch"]  # only the query was embedded


def test_incremental_update_embeds_only_new_chunks_and_drops_stale_rows(tmp_path):
    kb = make_kb()
    model = FakeBiEncoder()
    hybrid = HybridRetriever(kb, model, folder=tmp_path, model_name=MODEL)
    hybrid.refresh()
    model.texts.clear()

    kb.add_text("A puppy is a young dog.", "puppy.md")
    kb.remove("bakery.md")
    kb.add_text("Cats are small mammals. A kitten is a young cat.", "cats.md")  # replaced
    hits = hybrid.search("canine", 5)  # searching notices the changes by itself
    assert sorted(model.texts) == sorted(
        ["A puppy is a young dog.", "Cats are small mammals. A kitten is a young cat.", "canine"]
    )
    assert hybrid.last_computed == 2
    assert {h.source for h in hits[:2]} == {"dogs.md", "puppy.md"}

    store = DenseStore.load(tmp_path, MODEL)
    assert store is not None and len(store) == 4
    assert DOCS["bakery.md"] not in store and DOCS["cats.md"] not in store
    assert "A puppy is a young dog." in store
    assert len(list(tmp_path.glob("*.f32"))) == 1  # the old data file was removed

    # a new process with the saved index and embeddings recomputes nothing
    kb.save(tmp_path)
    model2 = FakeBiEncoder()
    assert update_embeddings(KnowledgeBase.load(tmp_path), model2, model_name=MODEL) == 0
    assert model2.texts == []


def test_in_memory_without_a_folder():
    kb = make_kb()
    model = FakeBiEncoder()
    hybrid = HybridRetriever(kb, model, model_name=MODEL)
    assert hybrid.folder is None
    assert [h.source for h in hybrid.search("feline", 1)] == ["cats.md"]
    with pytest.raises(ConfigError, match="folder"):
        update_embeddings(kb, model)


# -- damaged files ---------------------------------------------------------------


def saved(tmp_path: Path) -> Path:
    HybridRetriever(make_kb(), FakeBiEncoder(), folder=tmp_path, model_name=MODEL).refresh()
    return manifest(tmp_path)


def test_truncated_manifest(tmp_path):
    path = saved(tmp_path)
    path.write_text(path.read_text()[:40])
    with pytest.raises(IndexFormatError, match=r"dense-.*\.json.*not valid JSON"):
        DenseStore.load(tmp_path, MODEL)
    with pytest.raises(IndexFormatError):
        HybridRetriever(make_kb(), FakeBiEncoder(), folder=tmp_path, model_name=MODEL).search("cat", 2)


def test_flipped_byte_in_data_file(tmp_path):
    path = saved(tmp_path)
    data = tmp_path / json.loads(path.read_text())["data"]
    raw = bytearray(data.read_bytes())
    raw[5] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(IndexFormatError, match="checksum mismatch"):
        DenseStore.load(tmp_path, MODEL)


def test_truncated_data_file(tmp_path):
    path = saved(tmp_path)
    data = tmp_path / json.loads(path.read_text())["data"]
    data.write_bytes(data.read_bytes()[:-4])
    with pytest.raises(IndexFormatError, match="expected 4x6 float32"):
        DenseStore.load(tmp_path, MODEL)


def test_missing_data_file_and_newer_format(tmp_path):
    path = saved(tmp_path)
    body = json.loads(path.read_text())
    body["format_version"] = 99
    path.write_text(json.dumps(body))
    with pytest.raises(IndexFormatError, match="newer clanker_rag"):
        DenseStore.load(tmp_path, MODEL)
    body["format_version"] = 1
    body["keys"] = "not base64!"
    path.write_text(json.dumps(body))
    with pytest.raises(IndexFormatError, match="base64"):
        DenseStore.load(tmp_path, MODEL)
    assert DenseStore.load(tmp_path / "nothing-here", MODEL) is None


def test_path_traversal_in_data_name_is_rejected(tmp_path):
    path = saved(tmp_path)
    body = json.loads(path.read_text())
    body["data"] = "../elsewhere.f32"
    path.write_text(json.dumps(body))
    with pytest.raises(IndexFormatError, match="data file name"):
        DenseStore.load(tmp_path, MODEL)


# -- hybrid ranking ----------------------------------------------------------------


def test_hybrid_finds_a_paraphrase_bm25_cannot():
    kb = make_kb()
    assert kb.search("feline") == []
    hybrid = HybridRetriever(kb, FakeBiEncoder(), model_name=MODEL)
    hits = hybrid.search("feline", 2)
    assert hits[0].source == "cats.md"
    assert hits[0].text == DOCS["cats.md"]


def test_hybrid_score_is_rrf_of_both_rankings():
    kb = make_kb()
    hybrid = HybridRetriever(kb, FakeBiEncoder(), model_name=MODEL, rrf_k=60, feedback=False)
    bm25 = [h.source for h in kb.search("dog barks at the rocket", 10)]
    dense = [h.source for h in hybrid.dense_search("dog barks at the rocket", 10)]
    fused = hybrid.search("dog barks at the rocket", 10)
    for hit in fused:
        expect = sum(1 / (60 + r.index(hit.source) + 1) for r in (bm25, dense) if hit.source in r)
        assert math.isclose(hit.score, expect)
    assert all(fused[i].score >= fused[i + 1].score for i in range(len(fused) - 1))
    # weights=(1, 0) leaves the BM25 order
    lexical_only = HybridRetriever(kb, FakeBiEncoder(), model_name=MODEL, weights=(1.0, 0.0), feedback=False)
    assert [h.source for h in lexical_only.search("dog barks at the rocket", 10)][: len(bm25)] == bm25


def test_default_fuses_plain_bm25_feedback_and_dense_by_rrf():
    kb = make_kb()
    query = "dog barks at the rocket"
    hybrid = HybridRetriever(kb, FakeBiEncoder(), model_name=MODEL)
    assert hybrid.lexical == "both"
    lists = [
        [h.source for h in kb.search(query, 100)],
        [h.source for h in kb.search(query, 100, feedback=True)],
        [h.source for h in hybrid.dense_search(query, 100)],
    ]
    fused = hybrid.search(query, 10)
    assert {h.source for h in fused} == set().union(*lists)
    for hit in fused:
        expect = sum(1 / (60 + r.index(hit.source) + 1) for r in lists if hit.source in r)
        assert math.isclose(hit.score, expect)
    # each lexical list carries the first weight: (0, 1) leaves the dense order
    dense_only = HybridRetriever(kb, FakeBiEncoder(), model_name=MODEL, weights=(0.0, 1.0))
    assert [h.source for h in dense_only.search(query, 10)] == lists[2]


def test_lexical_modes_and_the_older_feedback_flag():
    def mode(**options: Any) -> str:
        return HybridRetriever(make_kb(), FakeBiEncoder(), model_name=MODEL, **options).lexical

    assert mode(feedback=True) == mode(lexical="feedback") == "feedback"
    assert mode(feedback=False) == mode(lexical="plain") == "plain"
    assert mode(lexical="plain", feedback=False) == "plain"
    with pytest.raises(ConfigError, match=r"lexical='rm3' must be one of 'both', 'feedback', 'plain'"):
        mode(lexical="rm3")
    with pytest.raises(ConfigError, match="disagree"):
        mode(lexical="both", feedback=True)
    with pytest.raises(ConfigError, match="feedback='yes'"):
        mode(feedback="yes")
    with pytest.raises(ConfigError, match=r"weights\[1\]=-1.0 is out of range: expected a finite number >= 0"):
        mode(weights=(1.0, -1.0))
    with pytest.raises(ConfigError, match="k=nan"):
        mode(rrf_k=float("nan"))


def test_hybrid_filters_apply_to_the_dense_side():
    kb = make_kb()
    hybrid = HybridRetriever(kb, FakeBiEncoder(), model_name=MODEL)
    assert {h.source for h in hybrid.search("feline", 3, where={"kind": "other"})} == {"space.md", "bakery.md"}
    assert {h.source for h in hybrid.search("feline", 3, source="dogs")} == {"dogs.md"}
    assert {h.source for h in hybrid.search("feline", 3, source="*.md", where={"kind": "pets"})} == {
        "cats.md",
        "dogs.md",
    }


def test_bad_options():
    with pytest.raises(ConfigError):
        HybridRetriever(make_kb(), FakeBiEncoder(), depth=0)
    with pytest.raises(ConfigError):
        HybridRetriever(make_kb(), object())


# -- the real model ------------------------------------------------------------------

ARTICLES = {
    "feline.txt": "Domestic cats groom themselves for hours and purr when they are content.",
    "oven.txt": "Preheat the oven, knead the dough and let the loaf rise before it goes in.",
    "tides.txt": "The moon's gravity pulls the oceans, which causes high and low water twice a day.",
    "league.txt": "The home team scored twice in the second half and won the championship final.",
    "cpu.txt": "A processor executes instructions; a higher clock level makes it run faster.",
    "garden.txt": "Water tomato plants at the roots in the morning and stake them as they grow.",
}


@pytest.mark.slow
@pytest.mark.rerank
def test_real_model_hybrid_recovers_paraphrases(tmp_path):
    kb = KnowledgeBase()
    for source, text in ARTICLES.items():
        kb.add_text(text, source)
    path = minilm_path()
    hybrid = HybridRetriever(kb, path, folder=tmp_path)
    # no query word occurs in any article: BM25 is empty, dense finds the topic
    assert kb.search("kitty pets purring") == []
    assert hybrid.search("kitty pets purring", 3)[0].source == "feline.txt"
    assert kb.search("baking bread") == []
    assert hybrid.search("baking bread", 3)[0].source == "oven.txt"
    # shared words ("level", "makes") send BM25 to the processor article;
    # the tides article has no query word, hybrid brings it into the top 2
    query = "what makes the sea level go up and down"
    assert "tides.txt" not in [h.source for h in kb.search(query, 2)]
    assert "tides.txt" in [h.source for h in hybrid.search(query, 2)]
    assert len(DenseStore.load(tmp_path, hybrid.model_name) or ()) == len(ARTICLES)


# -- evaluation entry point ----------------------------------------------------------


def tiny_beir(folder: Path) -> Path:
    (folder / "qrels").mkdir(parents=True)
    docs = {"d1": "Cats hunt mice at night.", "d2": "Dogs bark at strangers.", "d3": "Bread rises in the oven."}
    with open(folder / "corpus.jsonl", "w") as fh:
        for doc_id, text in docs.items():
            fh.write(json.dumps({"_id": doc_id, "title": "", "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w") as fh:
        fh.write(json.dumps({"_id": "q1", "text": "feline"}) + "\n")
        fh.write(json.dumps({"_id": "q2", "text": "canine barking"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    return folder


def test_evaluate_dataset_hybrid(tmp_path):
    from clanker_rag._retrieval._eval import evaluate_dataset

    data = tiny_beir(tmp_path / "beir")
    plain = evaluate_dataset(data)
    assert plain.per_query["q1"]["ndcg@10"] == 0.0  # "feline" shares no word with d1
    assert plain.per_query["q2"]["ndcg@10"] == 1.0
    model = FakeBiEncoder()
    result = evaluate_dataset(data, hybrid=model, cache_dir=tmp_path / "cache", batch_size=2)
    assert result.per_query["q1"]["ndcg@10"] == 1.0
    assert result.per_query["q2"]["ndcg@10"] == 1.0
    assert set(model.batch_sizes) <= {1, 2}
    assert list((tmp_path / "cache").glob("dense-*.json"))
    with pytest.raises(ConfigError):
        evaluate_dataset(data, hybrid=model, search=lambda kb, q, k: [])


def test_pure_python_path_matches_numpy(monkeypatch):
    from clanker_rag._retrieval import _embed

    kb = make_kb()
    with_numpy = [(h.source, round(h.score, 6)) for h in HybridRetriever(kb, FakeBiEncoder()).dense_search("puppy", 4)]
    monkeypatch.setattr(_embed, "_numpy", lambda: None)
    without = [(h.source, round(h.score, 6)) for h in HybridRetriever(kb, FakeBiEncoder()).dense_search("puppy", 4)]
    assert without == with_numpy
    assert with_numpy[0][0] == "dogs.md" and with_numpy[0][1] > 0.9


def test_a_cross_encoder_folder_is_refused_for_hybrid(tmp_path, monkeypatch):
    import sys
    import types

    fake: Any = types.ModuleType("sentence_transformers")  # given the attributes the loaders look up
    fake.CrossEncoder = lambda where, device=None: types.SimpleNamespace(predict=lambda pairs, **kw: [0.0] * len(pairs))
    fake.SentenceTransformer = lambda where, device=None: pytest.fail("must not load a CrossEncoder as a bi-encoder")
    monkeypatch.setitem(sys.modules, "sentence_transformers", fake)
    (tmp_path / "config.json").write_text('{"architectures": ["XLMRobertaForSequenceClassification"]}')
    with pytest.raises(ConfigError, match="CrossEncoder only scores pairs"):
        HybridRetriever(make_kb(), tmp_path).search("cats", 2)


class _NoCounter:
    """A knowledge base seen only through its public methods, without ``generation``."""

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb
        self.path = None

    def __len__(self) -> int:
        return len(self.kb)

    def chunks(self):
        return self.kb.chunks()

    def search(self, query, k=10, **options):
        return self.kb.search(query, k, **options)


def test_a_knowledge_base_without_a_change_counter_is_still_followed() -> None:
    kb = make_kb()
    model = FakeBiEncoder()
    hybrid = HybridRetriever(_NoCounter(kb), model, folder=None, model_name=MODEL)
    assert [h.source for h in hybrid.dense_search("automobile", 4)] != ["cars.md"]
    kb.add_text("The car needs a new engine before the long drive.", "cars.md")
    assert [h.source for h in hybrid.dense_search("automobile", 1)] == ["cars.md"]
    kb.add_text("Bread dough, rested overnight.", "cars.md")  # replaced: same source, other text
    assert [h.source for h in hybrid.dense_search("automobile", 1)] != ["cars.md"]

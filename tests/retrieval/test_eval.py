import json
import math

import pytest

from clanker_rag._retrieval._eval import average_precision, evaluate_dataset, evaluate_run, load_beir, mrr, ndcg, recall


def test_metrics_match_hand_computed_values():
    qrels = {"d1": 3, "d2": 1, "d5": 2, "d9": 0}
    ranking = ["d2", "d3", "d1", "d4", "d5"]
    # DCG = 1/log2(2) + 3/log2(4) + 2/log2(6); IDCG = 3/log2(2) + 2/log2(3) + 1/log2(4)
    dcg = 1 / 1 + 3 / 2 + 2 / math.log2(6)
    idcg = 3 / 1 + 2 / math.log2(3) + 1 / 2
    assert ndcg(ranking, qrels, 10) == pytest.approx(dcg / idcg)
    assert ndcg(ranking, qrels, 1) == pytest.approx(1 / 3)
    # relevant = d1, d2, d5 (grade > 0); found at ranks 1, 3, 5
    assert recall(ranking, qrels, 100) == 1.0
    assert recall(ranking, qrels, 3) == pytest.approx(2 / 3)
    assert average_precision(ranking, qrels, 100) == pytest.approx((1 / 1 + 2 / 3 + 3 / 5) / 3)
    assert mrr(["d3", "d9", "d5"], qrels, 10) == pytest.approx(1 / 3)
    assert mrr(["d3", "d4"], qrels, 10) == 0.0


def test_evaluate_run_averages_over_judged_queries():
    qrels = {"q1": {"a": 1}, "q2": {"b": 2}, "q3": {"c": 0}}
    run = {"q1": ["a"], "q2": ["x", "b"]}
    result = evaluate_run(run, qrels)
    assert result.n_queries == 2  # q3 has no relevant document
    assert result.metrics["mrr@10"] == pytest.approx((1 + 1 / 2) / 2)
    assert result.metrics["ndcg@10"] == pytest.approx((1 + 1 / math.log2(3)) / 2)


def write_beir(folder, docs, queries, qrels):
    (folder / "qrels").mkdir(parents=True)
    corpus = "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, (t, x) in docs.items())
    (folder / "corpus.jsonl").write_text(corpus)
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": i, "text": x}) + "\n" for i, x in queries.items()))
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, ds in qrels.items() for d, g in ds.items())
    )


def test_evaluate_dataset_end_to_end(tmp_path):
    write_beir(
        tmp_path,
        {"1": ("Wings", "lift on swept wings"), "2": ("Heat", "heat transfer in boundary layers"), "3": ("", "poetry")},
        {"a": "swept wing lift", "b": "boundary layer heat"},
        {"a": {"1": 1}, "b": {"2": 2}},
    )
    data = load_beir(tmp_path)
    assert data.corpus["1"] == ("Wings", "lift on swept wings")
    result = evaluate_dataset(tmp_path)
    assert result.metrics == {"ndcg@10": 1.0, "recall@100": 1.0, "map@100": 1.0, "mrr@10": 1.0}


@pytest.mark.parametrize("name", ["tiny", "datasets/tiny"])
def test_eval_finds_a_data_set_under_clanker_rag_shared(tmp_path, monkeypatch, capsys, name):
    from clanker_rag._cli._main import main

    write_beir(
        tmp_path / "shared" / "datasets" / "tiny",
        {"1": ("Wings", "lift on swept wings"), "2": ("Heat", "heat transfer")},
        {"a": "swept wing lift"},
        {"a": {"1": 1}},
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("CLANKER_RAG_SHARED", raising=False)
    assert main(["eval", name, "--json"]) == 1
    assert "tiny" in capsys.readouterr().err
    monkeypatch.setenv("CLANKER_RAG_SHARED", str(tmp_path / "shared"))
    assert main(["eval", name, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ndcg@10"] == 1.0
    monkeypatch.setenv("CLANKER_RAG_SHARED", str(tmp_path / "shared"))
    assert main(["eval", "missing", "--json"]) == 1
    assert "CLANKER_RAG_SHARED" in capsys.readouterr().err


def test_slow_evaluations_report_progress_and_plain_bm25_stays_quiet(tmp_path, caplog):
    import logging

    docs = {str(i): ("", f"document number {i} about topic{i}") for i in range(30)}
    queries = {f"q{i}": f"topic{i}" for i in range(20)}
    write_beir(tmp_path, docs, queries, {f"q{i}": {str(i): 1} for i in range(20)})
    caplog.set_level(logging.INFO, logger="clanker_rag")
    result = evaluate_dataset(tmp_path, search=lambda kb, query, k: kb.search(query, k))
    progress = [r.getMessage() for r in caplog.records if r.name == "clanker_rag._retrieval._eval"]
    assert progress[0] == "indexed 30 documents; searching 20 queries"
    assert [m for m in progress if m.startswith("searched")] == [f"searched {n} of 20 queries" for n in range(2, 20, 2)]
    assert result.metrics["ndcg@10"] == 1.0
    caplog.clear()
    evaluate_dataset(tmp_path)
    quiet = [r.getMessage() for r in caplog.records if r.name == "clanker_rag._retrieval._eval"]
    assert quiet == ["indexed 30 documents; searching 20 queries"]

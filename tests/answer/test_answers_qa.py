"""The answer-accuracy QA set stays true to docs/ and its matcher means what it says."""

from __future__ import annotations

from pathlib import Path

from bench.answers_qa import QA, contains, correct, load, normalise, problems


def test_every_answer_is_in_its_doc_and_not_in_its_question() -> None:
    items = load()
    assert len(items) >= 40
    assert problems(items) == []


def test_the_splits_are_halves() -> None:
    tune, test = load(split="tune"), load(split="test")
    assert abs(len(tune) - len(test)) <= 1
    assert {qa.id for qa in tune}.isdisjoint(qa.id for qa in test)


def test_problems_reports_a_stale_answer(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("The proxy listens on port 8765.\n", encoding="utf-8")
    good = QA("q1", "docs/a.md", "Which port?", ("8765",), "tune")
    stale = QA("q2", "docs/a.md", "Which port?", ("8080",), "test")
    leaked = QA("q3", "docs/a.md", "Is it port 8765?", ("8765",), "test")
    missing = QA("q4", "docs/b.md", "Which port?", ("8765",), "test")
    found = problems([good, stale, leaked, missing], root=tmp_path)
    assert found == [
        "q2: '8080' is not in docs/a.md",
        "q3: '8765' is given away by the question",
        "q4: docs/b.md does not exist",
    ]


def test_contains_matches_whole_token_runs_only() -> None:
    assert contains("It listens on port 8765.", "8765")
    assert not contains("It listens on port 87650.", "8765")
    assert not contains("RM3 feedback", "rm")
    assert contains("use `--no-sync` here", "--no-sync")
    assert contains("The retrieval timeout is 10 seconds.", "10 s")
    assert contains("files up to 10MiB", "10 MiB")
    assert not contains("anything", "")


def test_normalise_and_correct() -> None:
    assert normalise("  **Snowball**\n  (Porter2) ") == "snowball (porter2)"
    qa = QA("q", "docs/x.md", "Which stemmer?", ("Snowball", "Porter2"), "tune")
    assert correct("Porter2 stemming", qa)
    assert not correct("no stemmer", qa)

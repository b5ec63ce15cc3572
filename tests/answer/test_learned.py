"""The learned sentence chooser: its weights, its candidates, its choice, and its place in FocusedRetriever."""

from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag._answer import _learned
from clanker_rag._answer._answer_types import asks_how, focus_types
from clanker_rag._answer._ask import CHOOSERS, answer_controller
from clanker_rag._answer._focusing import FocusedRetriever, SentenceQuery, best_sentence, sentence_units
from clanker_rag._answer._learned import FEATURES, PICK, WEIGHTS, candidates, learned_sentence, score
from clanker_rag._exceptions import ConfigError
from clanker_rag._text._analysis import Analyzer
from clanker_rag._types import Hit
from tests.helpers._passages import Fixed, hit

ANALYZER = Analyzer()
ROOT = Path(__file__).resolve().parents[2]


def asked(question: str, budget: int = 200, attach: int | None = 320) -> SentenceQuery:
    expected = focus_types(question)
    return SentenceQuery(question, set(ANALYZER(question)), ANALYZER, budget, expected, attach, 1.0, asks_how(question))


# -- the shipped weights -------------------------------------------------------------------


def test_there_is_one_finite_weight_per_feature_and_not_all_are_zero() -> None:
    assert len(WEIGHTS) == len(FEATURES) == len(set(FEATURES))
    assert all(math.isfinite(w) for w in WEIGHTS)
    assert any(w != 0.0 for w in WEIGHTS), "the weights were never fitted (python bench/train_selector.py --write)"
    assert PICK in (2, 3)


def test_the_module_imports_nothing_outside_the_standard_library() -> None:
    tree = ast.parse(Path(_learned.__file__).read_text(encoding="utf-8"))
    outside = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            outside += [a.name for a in node.names if a.name.split(".")[0] not in sys.stdlib_module_names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            outside += [node.module] if node.module.split(".")[0] not in sys.stdlib_module_names else []
    assert not outside


def test_importing_and_choosing_loads_no_numpy() -> None:
    code = (
        "import sys\n"
        "from clanker_rag._answer._learned import learned_sentence\n"
        "from clanker_rag._answer._focusing import SentenceQuery\n"
        "from clanker_rag._text._analysis import Analyzer\n"
        "from clanker_rag._types import Hit\n"
        "a = Analyzer()\n"
        "hits = [Hit('One. Two three.', 'a.md', 2.0), Hit('Four. Five.', 'b.md', 1.0)]\n"
        "learned_sentence(hits, SentenceQuery('two', set(a('two')), a, 200, frozenset(), 320, 1.0, False))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'scipy')))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_score_is_the_weighted_sum() -> None:
    assert score([1.0, 2.0, 0.5], [0.5, -1.0, 4.0]) == pytest.approx(0.5 - 2.0 + 2.0)
    assert score([0.0] * len(FEATURES)) == 0.0


# -- candidates and the choice --------------------------------------------------------------

SERVER = (
    "Running the server\n"
    "==================\n\n"
    "The development server reloads itself when a source file changes. It serves one request at a time "
    "unless threading is turned on.\n\n"
    "Set ``APP_WORKERS`` to choose how many processes serve requests.\n"
)


def test_every_sentence_of_every_passage_is_a_candidate_with_its_window() -> None:
    first = hit(SERVER, "server.rst", 3.0)
    second = hit("Other text here. And a second sentence.", "other.rst", 1.5)
    found = candidates([first, second], asked("Which environment variable sets the number of processes?"))
    per_hit = [len(sentence_units(h, set(), ANALYZER, 200).spans) for h in (first, second)]
    assert [(c.hit, c.unit) for c in found] == [(i, u) for i, n in enumerate(per_hit) for u in range(n)]
    for c in found:
        assert len(c.features) == len(FEATURES) and all(math.isfinite(x) for x in c.features)
        text = (first, second)[c.hit].text
        assert 0 <= c.start < c.end <= len(text)
    rank2 = FEATURES.index("rank1")
    assert {c.features[rank2] for c in found if c.hit == 1} == {1.0}
    assert {c.features[rank2] for c in found if c.hit == 0} == {0.0}


@pytest.mark.parametrize(
    ("question", "text", "answer"),
    [
        (
            "What port does the server listen on?",
            "Serving\n=======\n\nThe server listens for connections from browsers and other clients.\n\n"
            "It binds 127.0.0.1:8765.\n",
            "8765",
        ),
        (
            "Which environment variable chooses the name of the data file?",
            "Data file\n=========\n\nCoverage writes what it measured to a data file in the current directory "
            "when the program ends.\n\nSet ``COVERAGE_FILE`` to choose another name.\n",
            "COVERAGE_FILE",
        ),
    ],
)
def test_the_sentence_with_the_asked_for_type_is_chosen_though_it_lacks_the_questions_words(
    question: str, text: str, answer: str
) -> None:
    # The heading and the sentence before repeat the question's words; the answer's sentence
    # has few of them but holds what is asked for (a number, an environment variable).
    hits = [hit(text, "server.rst", 4.0), hit("A file is a thing on disk.", "glossary.rst", 3.0)]
    chosen = learned_sentence(hits, asked(question))
    spans = sentence_units(hits[0], set(), ANALYZER, 200).spans
    assert chosen[0] == 0
    a, b = spans[chosen[1]]
    assert answer in text[a:b]
    out = FocusedRetriever(
        Fixed(*hits),
        budget=200,
        sentence=True,
        answer_types=True,
        attach=320,
        pick=2,
        rank_prior=1.0,
        chooser=learned_sentence,
    ).search(question, 2)
    assert answer in out[0].text


def test_the_choice_does_not_depend_on_the_hash_seed() -> None:
    code = (
        "import json\n"
        "from clanker_rag._answer._learned import candidates, learned_sentence\n"
        "from clanker_rag._answer._focusing import SentenceQuery\n"
        "from clanker_rag._answer._answer_types import focus_types\n"
        "from clanker_rag._text._analysis import Analyzer\n"
        "from clanker_rag._types import Hit\n"
        "a = Analyzer()\n"
        f"text = {SERVER!r}\n"
        "q = 'Which environment variable sets how many processes serve requests by default?'\n"
        "s = SentenceQuery(q, set(a(q)), a, 200, focus_types(q), 320, 1.0, False)\n"
        "hits = [Hit(text, 'a.rst', 2.0), Hit(text[::-1], 'b.rst', 1.9), Hit(text.upper(), 'c.rst', 1.0)]\n"
        "print(json.dumps([learned_sentence(hits, s), [c.features for c in candidates(hits, s)]]))\n"
    )
    outs = []
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": seed}
        run = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, timeout=60
        )
        outs.append(json.loads(run.stdout))
    assert outs[0] == outs[1] == outs[2]


_WORDS = st.sampled_from(["server", "port", "default", "``--port``", "8000", "The", "is", "a", "run", "Use"])
_SENTENCE = st.lists(_WORDS, min_size=1, max_size=8).map(lambda ws: " ".join(ws) + ".")
_TEXT = st.lists(_SENTENCE, min_size=1, max_size=6).map(" ".join)


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(_TEXT, min_size=1, max_size=3),
    question=st.sampled_from(["What is the default port?", "How do I run the server?", "Which option sets the port?"]),
)
def test_the_choice_is_always_a_sentence_of_a_given_passage(texts: list[str], question: str) -> None:
    hits = [hit(text, f"{i}.md", 3.0 - i) for i, text in enumerate(texts)]
    i, u = learned_sentence(hits, asked(question))
    assert 0 <= i < len(hits)
    assert 0 <= u < len(sentence_units(hits[i], set(), ANALYZER, 200).spans)
    assert all(all(math.isfinite(x) for x in c.features) for c in candidates(hits, asked(question)))


# -- the hook ------------------------------------------------------------------------------


def test_focused_retriever_shows_the_chosen_passage_first_and_the_rules_stay_the_default() -> None:
    question = "Which environment variable makes the development server reload itself?"
    first = hit("The development server can reload itself. Reloading restarts the server process.", "a.rst", 4.0)
    second = hit("Reloading needs a flag.\n\nTurn it on with ``FLASK_DEBUG=1``.", "b.rst", 3.9)
    calls: list[tuple[int, SentenceQuery]] = []

    def second_passage(hits: object, query: SentenceQuery) -> tuple[int, int]:
        calls.append((len(hits), query))  # type: ignore[arg-type]
        return 1, 1

    out = FocusedRetriever(Fixed(first, second), budget=200, sentence=True, pick=2, chooser=second_passage).search(
        question, 2
    )
    assert out[0].source == "b.rst" and "FLASK_DEBUG" in out[0].text
    assert calls and calls[0][0] == 2 and calls[0][1].query == question
    rules = FocusedRetriever(Fixed(first, second), budget=200, sentence=True, pick=2).search(question, 2)
    terms = set(ANALYZER(question))
    expected = best_sentence([first, second], terms, ANALYZER, 200)
    assert rules[0].source == (first, second)[expected[0]].source


def test_ask_chooses_by_name_and_refuses_an_unknown_chooser() -> None:
    assert set(CHOOSERS) >= {"rules", "learned"}
    for name in CHOOSERS:
        answer_controller(Fixed(hit("Some text.", "a.md", 1.0)), question="What?", chooser=name)
    with pytest.raises(ConfigError, match="'magic'"):
        answer_controller(Fixed(), question="What?", chooser="magic")


GUIDE = (
    "Workers\n=======\n\n"
    "The server runs requests in worker processes. Each worker serves one request at a time.\n\n"
    "Set ``APP_WORKERS`` to choose how many processes serve requests. It defaults to ``4``.\n\n"
    "Threads are not used.\n"
)


def _overlap(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


def test_ranked_puts_the_learned_choice_first_and_never_overlapping_windows() -> None:
    hits = [hit(GUIDE, "workers.rst", 3.0), hit("Processes are started once. Each one serves requests.", "b.rst", 2.0)]
    query = asked("How many worker processes serve requests by default?")
    assert _learned.ranked(hits, query)[0] == learned_sentence(hits, query)
    found = {(c.hit, c.unit): (c.hit, c.start, c.end) for c in candidates(hits, query)}
    three = _learned.ranked(hits, query, 3)
    assert len(three) == 3 and len(set(three)) == 3
    windows = [found[pair] for pair in three]
    assert not any(_overlap(a, b) for k, a in enumerate(windows) for b in windows[k + 1 :])
    # The first two of three are the two asked for alone: one ranking, cut at n.
    assert _learned.ranked(hits, query, 2) == three[:2]
    assert _learned.learned_sentences(hits, query, 2) == three[:2]


@settings(max_examples=40, deadline=None)
@given(
    texts=st.lists(_TEXT, min_size=1, max_size=3),
    n=st.integers(min_value=1, max_value=4),
    question=st.sampled_from(["What is the default port?", "How do I run the server?", "Which option sets the port?"]),
)
def test_ranked_windows_are_candidates_and_never_overlap(texts: list[str], n: int, question: str) -> None:
    hits = [hit(text, f"{i}.md", 3.0 - i) for i, text in enumerate(texts)]
    query = asked(question)
    found = {(c.hit, c.unit): (c.hit, c.start, c.end) for c in candidates(hits, query)}
    out = _learned.ranked(hits, query, n)
    assert 1 <= len(out) <= n and all(pair in found for pair in out)
    windows = [found[pair] for pair in out]
    assert not any(_overlap(a, b) for k, a in enumerate(windows) for b in windows[k + 1 :])


def test_focused_retriever_shows_the_ranked_windows_first_in_their_order() -> None:
    first = hit("Reloading is slow. The server restarts itself.", "a.rst", 4.0)
    second = hit("Reloading needs a flag.\n\nTurn it on with ``FLASK_DEBUG=1``.", "b.rst", 3.9)

    def two(hits: object, query: SentenceQuery, n: int) -> list[tuple[int, int]]:
        assert n == 2
        return [(1, 1), (0, 1)]

    out = FocusedRetriever(Fixed(first, second), budget=200, sentence=True, pick=2, ranker=two, windows=2).search(
        "How do I turn on reloading?", 2
    )
    assert [h.source for h in out] == ["b.rst", "a.rst"]
    assert "FLASK_DEBUG=1" in out[0].text and out[1].text == "The server restarts itself."
    # One window (the default) asks the chooser, not the ranker.
    one = FocusedRetriever(Fixed(first, second), budget=200, sentence=True, pick=2, ranker=two).search("reloading", 2)
    assert len(one) == 2


@pytest.mark.parametrize(("windows", "ranker"), [(0, True), (6, True), (2, False)])
def test_focused_retriever_refuses_windows_it_cannot_show(windows: int, ranker: bool) -> None:
    with pytest.raises(ConfigError, match="windows"):
        FocusedRetriever(Fixed(), sentence=True, windows=windows, ranker=_learned.learned_sentences if ranker else None)


def test_ask_with_two_windows_injects_both_and_the_rules_keep_one() -> None:
    hits = [hit(GUIDE, "workers.rst", 3.0), hit("Processes are started once. Each one serves requests.", "b.rst", 2.0)]
    question = "How many worker processes serve requests by default?"
    two = answer_controller(Fixed(*hits), question=question, chooser="learned", windows=2, k=1)
    shown = two.retriever.search(question, two.k)
    assert two.k == 2 and len(shown[: two.k]) == 2
    a, b = shown[0], shown[1]
    assert isinstance(a, Hit) and isinstance(b, Hit)
    assert not (a.source == b.source and a.start < b.end and b.start < a.end)
    rules = answer_controller(Fixed(*hits), question=question, chooser="rules", windows=2, k=1)
    assert rules.k == 1
    for bad in (0, 6, True, 1.5):
        with pytest.raises(ConfigError, match="windows"):
            answer_controller(Fixed(*hits), question=question, windows=bad)  # type: ignore[arg-type]


def test_a_unit_is_code_when_indented_fenced_or_inside_a_fence() -> None:
    from clanker_rag._answer._focusing import is_code_at

    text = "Run it:\n\n    $ app run\n\n```\nx = 1\n```\n\nThen it serves.\n"
    assert not is_code_at(text, 0)
    assert is_code_at(text, text.index("$ app"))
    assert is_code_at(text, text.index("```"))
    assert is_code_at(text, text.index("x = 1"))
    assert not is_code_at(text, text.index("Then"))

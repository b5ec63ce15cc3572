"""The learned window chooser: its weights, its candidates, its choice, and its place in FocusedRetriever."""

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
from clanker_rag._answer._focusing import FocusedRetriever
from clanker_rag._answer._learned import FEATURES, PICK, WEIGHTS, best_window, candidates, score
from clanker_rag._answer._sentences import SentenceQuery, is_code_at, sentence_spans
from clanker_rag._text._analysis import Analyzer
from tests.helpers._passages import Fixed, hit

ANALYZER = Analyzer()
ROOT = Path(__file__).resolve().parents[2]


def asked(question: str, budget: int = 200, attach: int = 320) -> SentenceQuery:
    return SentenceQuery(question, set(ANALYZER(question)), ANALYZER, budget, attach)


# -- the shipped weights -------------------------------------------------------------------


def test_there_is_one_finite_weight_per_feature_and_not_all_are_zero() -> None:
    assert tuple(WEIGHTS) == FEATURES and len(set(FEATURES)) == len(FEATURES)
    assert all(math.isfinite(w) for w in WEIGHTS.values())
    assert any(w != 0.0 for w in WEIGHTS.values()), "never fitted (python bench/train_selector.py --write)"
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


def test_score_is_the_weighted_sum() -> None:
    assert score([1.0, 2.0, 0.5], [0.5, -1.0, 4.0]) == pytest.approx(0.5 - 2.0 + 2.0)
    assert score([0.0] * len(FEATURES)) == 0.0


# -- candidates and the choice --------------------------------------------------------------

SERVER = (
    "Running the daemon\n"
    "==================\n\n"
    "The lumen daemon restarts itself when its rule file changes. It handles one job at a time "
    "unless pooling is turned on.\n\n"
    "Set ``LUMEN_JOBS`` to choose how many processes handle jobs.\n"
)


def test_every_sentence_of_every_passage_is_a_candidate_with_its_window() -> None:
    first = hit(SERVER, "daemon.rst", 3.0)
    second = hit("Other text here. And a second sentence.", "other.rst", 1.5)
    found = candidates([first, second], asked("Which environment variable picks the process count?"))
    per_hit = [len(sentence_spans(h.text)) for h in (first, second)]
    assert [(c.hit, c.unit) for c in found] == [(i, u) for i, n in enumerate(per_hit) for u in range(n)]
    for c in found:
        assert len(c.features) == len(FEATURES) and all(math.isfinite(x) for x in c.features)
        assert 0 <= c.start < c.end <= len((first, second)[c.hit].text)
    rank1 = FEATURES.index("rank1")
    assert {c.features[rank1] for c in found if c.hit == 1} == {1.0}
    assert {c.features[rank1] for c in found if c.hit == 0} == {0.0}


@pytest.mark.parametrize(
    ("question", "text", "answer"),
    [
        (
            "Which environment variable chooses the name of the journal file?",
            "Journal file\n============\n\nLumen writes what it did to a journal file in the current folder "
            "when a job ends.\n\nSet ``LUMEN_JOURNAL`` to choose another name.\n",
            "LUMEN_JOURNAL",
        ),
    ],
)
def test_the_sentence_with_the_asked_for_type_is_chosen_though_it_lacks_the_questions_words(
    question: str, text: str, answer: str
) -> None:
    # The heading and the sentence before repeat the question's words; the answer's sentence
    # has few of them but holds what is asked for (a number, an environment variable).
    hits = [hit(text, "daemon.rst", 4.0), hit("A file is a thing on disk.", "glossary.rst", 3.0)]
    i, u = best_window(hits, asked(question))
    a, b = sentence_spans(text)[u]
    assert i == 0 and answer in text[a:b]
    out = FocusedRetriever(Fixed(*hits), budget=200, sentence=True).search(question, 2)
    assert answer in out[0].text


def test_the_choice_does_not_depend_on_the_hash_seed() -> None:
    code = (
        "import json\n"
        "from clanker_rag._answer._learned import best_window, candidates\n"
        "from clanker_rag._answer._sentences import SentenceQuery\n"
        "from clanker_rag._text._analysis import Analyzer\n"
        "from clanker_rag._types import Hit\n"
        "a = Analyzer()\n"
        f"text = {SERVER!r}\n"
        "q = 'Which environment variable picks the count of job processes by default?'\n"
        "s = SentenceQuery(q, set(a(q)), a, 200, 320)\n"
        "hits = [Hit(text, 'a.rst', 2.0), Hit(text[::-1], 'b.rst', 1.9), Hit(text.upper(), 'c.rst', 1.0)]\n"
        "print(json.dumps([best_window(hits, s), [c.features for c in candidates(hits, s)]]))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'scipy')))\n"
    ).replace("import json\n", "import json, sys\n")
    outs = []
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": seed}
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        choice, loaded = run.stdout.splitlines()
        assert loaded == "[]"  # the scorer is a dot product: no numpy
        outs.append(json.loads(choice))
    assert outs[0] == outs[1] == outs[2]


_WORDS = st.sampled_from(["daemon", "port", "default", "``--port``", "8000", "The", "is", "a", "run", "Use"])
_SENTENCE = st.lists(_WORDS, min_size=1, max_size=8).map(lambda ws: " ".join(ws) + ".")
_TEXT = st.lists(_SENTENCE, min_size=1, max_size=6).map(" ".join)


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(_TEXT, min_size=1, max_size=3),
    question=st.sampled_from(["What is the default port?", "How do I run the daemon?", "Which option sets the port?"]),
)
def test_the_choice_is_always_a_sentence_of_a_given_passage(texts: list[str], question: str) -> None:
    hits = [hit(text, f"{i}.md", 3.0 - i) for i, text in enumerate(texts)]
    i, u = best_window(hits, asked(question))
    assert 0 <= i < len(hits) and 0 <= u < len(sentence_spans(hits[i].text))
    assert all(all(math.isfinite(x) for x in c.features) for c in candidates(hits, asked(question)))


def test_focused_retriever_shows_the_chosen_window_first_and_chooses_within_the_top_passages() -> None:
    question = "Which environment variable makes the daemon restart itself?"
    first = hit("The daemon logs each restart. Restarting reloads the rule file.", "a.rst", 4.0)
    second = hit(
        "Restarting needs a switch.\n\nThe variable ``LUMEN_RESTART=1`` makes the daemon restart itself.", "b.rst", 3.9
    )
    out = FocusedRetriever(Fixed(first, second), budget=200, sentence=True).search(question, 2)
    assert out[0].source == "b.rst" and "LUMEN_RESTART=1" in out[0].text
    assert [h.source for h in out] == ["b.rst", "a.rst"]
    # A passage below the top PICK is never chosen, however well it answers.
    filler = [hit(f"The daemon restarts. Filler sentence {n}.", f"f{n}.rst", 4.0 - n / 10) for n in range(PICK)]
    out = FocusedRetriever(Fixed(*filler, second), budget=200, sentence=True).search(question, PICK + 1)
    assert out[0].source in {h.source for h in filler}


def test_passages_that_match_the_question_on_the_same_terms_agree_and_an_outlier_does_not() -> None:
    held = [{"pool", "drain", "error"}, {"explain", "detail", "error"}, {"pool", "drain"}]
    first, outlier, third = _learned._agreement(held)
    assert outlier < third <= first and first == pytest.approx((1 + 1 + 1) / (3 * 2))
    assert _learned._agreement([{"a"}]) == [1.0] and _learned._agreement([set(), {"a"}]) == [1.0, 0.0]


def test_the_window_comes_from_the_passage_the_others_agree_with() -> None:
    # The second passage matches the question on its request words ("explain", "detail"), rarer
    # than the topic's words; the first and third agree on the topic, and the first answers.
    question = "Explain how pool.drain handles errors in detail"
    topic = hit(
        "    If *keep_errors* is False, stopping drain() after it\n"
        "    has been marked done won't stop any queued jobs.\n"
        "    For instance, drain can be marked done after passing an\n"
        "    error to the caller, therefore, calling ``drain.stop()``\n"
        "    after catching an error (raised by one of the jobs) from\n"
        "    drain won't stop any other jobs.\n"
        '    """\n'
        "    if not jobs:\n"
        "        return pool.new_result()\n",
        "lumen/pool.py",
        8.5,
    )
    aside = hit(
        "    def send_failure(self, code, message=None, explain=None):\n"
        '        """Send and log a failure reply.\n\n'
        "        * code:    a reply code\n"
        "        * message: a short optional reason phrase.\n"
        "                   defaults to the short entry matching the reply code\n"
        "        * explain: a detailed message defaults to the long entry\n"
        "                   matching the reply code.\n\n"
        "        This sends a failure reply, logs the error, and finally sends\n"
        "        a page explaining the error to the user.\n"
        '        """\n',
        "lumen/reply.py",
        8.45,
    )
    tests = hit(
        "    def test_stop_drain(self):\n"
        "        pool = lumen.Pool()\n"
        "        async def job():\n"
        "            await pool.drain(lumen.sleep(0.05), keep_errors=True)\n"
        "        self.assertTrue(pool.empty())\n",
        "tests/test_pool.py",
        8.44,
    )
    out = FocusedRetriever(Fixed(topic, aside, tests), budget=200, sentence=True).search(question, 3)
    assert out[0].source == "lumen/pool.py" and "error to the caller" in out[0].text


def test_a_unit_is_code_when_indented_fenced_or_inside_a_fence() -> None:
    text = "Run it:\n\n    $ app run\n\n```\nx = 1\n```\n\nThen it serves.\n"
    assert not is_code_at(text, 0)
    assert is_code_at(text, text.index("$ app"))
    assert is_code_at(text, text.index("```"))
    assert is_code_at(text, text.index("x = 1"))
    assert not is_code_at(text, text.index("Then"))

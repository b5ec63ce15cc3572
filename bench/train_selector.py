"""Fit the learned sentence scorer (``clanker_rag/_answer/_learned.py``) and measure it collection by collection.

For every development question (the third-party collections of
``bench/docs_qa.jsonl`` not in ``bench_docs.HELD_OUT``, both halves of
``bench/answers_qa.jsonl`` as ``clanker``, and the man-page sets ``man`` to
``man4`` of ``bench/bench_heldout.py``, rendered as there; ``man5`` and
``man6`` stay out), the passages ``ask`` retrieves are recorded as the focusing
retriever receives them (release notes last), and every sentence of the top
``pick`` passages becomes a candidate with the features of
:func:`clanker_rag._answer._learned.candidates`.  Its label: the window
:func:`~clanker_rag._answer._focusing.focus_sentence` would inject for it
holds an accepted answer (``bench/answers_qa.py``'s ``correct``).

The model is a conditional logit: a softmax over one question's candidates,
maximising the probability of the candidates that hold the answer, with an L2
penalty, on standardised features (folded back into raw weights), fitted by
L-BFGS from zero: deterministic.  Features, ``pick`` and the penalty are
chosen by leave-one-collection-out cross-validation: fit on all
collections but one, choose for that one, count the questions whose injected text
holds the answer, of those whose answer is in the top 3 passages.

    python bench/train_selector.py                 # LOCO table
    python bench/train_selector.py --write         # ... and write the fitted weights into _learned.py

Needs numpy and scipy (bench extras); the library's scorer does not.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.answers_qa import QA, correct  # noqa: E402
from bench.answers_qa import load as load_own  # noqa: E402
from bench.bench_docs import HELD_OUT, PACKAGES, fetch  # noqa: E402
from bench.bench_heldout import questions as man_questions  # noqa: E402
from bench.bench_heldout import render_pages  # noqa: E402
from clanker_rag._answer._ask import AnswerSettings, answer_controller  # noqa: E402
from clanker_rag._answer._focusing import focus_sentence, sentence_query  # noqa: E402
from clanker_rag._answer._learned import FEATURES, candidates  # noqa: E402
from clanker_rag._answer._prompts import base_prompt  # noqa: E402
from clanker_rag._answer._windows import is_changelog  # noqa: E402
from clanker_rag._kb import KnowledgeBase  # noqa: E402
from clanker_rag._types import HitLike  # noqa: E402

QA_PATH = ROOT / "bench" / "docs_qa.jsonl"
LEARNED = ROOT / "clanker_rag" / "_answer" / "_learned.py"
OWN = "clanker"
# Man-page sets that have been reported on and are development data now; the newer sets (man5, man6) stay
# out: they are how the weights are judged on pages no one tuned on.
MAN = ("man", "man2", "man3", "man4")
# The held-out collections are never trained on: they are how the weights are judged.
DEV = (*(name for name in (*PACKAGES, OWN) if name not in HELD_OUT), *MAN)
TOP = 3
PENALTIES = (0.01, 0.03, 0.1, 0.3, 1.0)
PICKS = (2, 3)
CONFIGS = [(pick, penalty) for pick in PICKS for penalty in PENALTIES]


@dataclass
class Question:
    id: str
    collection: str
    top3: bool
    # pick -> (features of each candidate, label of each candidate)
    sets: dict[int, tuple[np.ndarray, np.ndarray]]
    # pick -> (passage, start, end) of each candidate's window: which windows overlap
    spans: dict[int, list[tuple[int, int, int]]]
    texts: list[str]  # the window each candidate of pick 3 would inject (for reading failures)
    question: str = ""


class _Recording:
    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb
        self.analyzer = kb.analyzer
        self.query = ""
        self.last: list[HitLike] = []

    def search(self, query: str, k: int = 10, **kwargs: Any) -> list[HitLike]:
        self.query = query
        self.last = list(self.kb.search(query, k, **kwargs))
        return self.last


def dev_items() -> list[tuple[str, QA]]:
    import json

    out = []
    for line in QA_PATH.read_text(encoding="utf-8").splitlines():
        if line.strip():
            obj = json.loads(line)
            out.append((obj["collection"], QA(obj["id"], "", obj["question"], tuple(obj["answers"]), "dev")))
    # Both halves of our own set: the test half has been reported on and is development data too.
    out += [(OWN, qa) for qa in load_own()]
    out += [(name, qa) for name in MAN for qa in man_questions(name)]
    return out


def question(kb: KnowledgeBase, collection: str, qa: QA) -> Question:
    """The candidates of ``qa`` as ``ask`` would weigh them (FocusedRetriever.search's steps, pick 2 and 3)."""
    rec = _Recording(kb)
    settings = AnswerSettings()
    # The retrieval ``ask`` runs: the controller's own query and k, through the recorder.
    ctl = answer_controller(rec, qa.question, settings)
    for _ in ctl.events(lambda prompt, stop: iter(()), base_prompt(qa.question, settings.mode), question=qa.question):
        pass
    hits = rec.last
    # The passages the chooser reads, as FocusedRetriever.search gives them: release notes only when nothing else.
    notes = [is_changelog(h.source, h.text) for h in hits]
    hits = [h for h, n in zip(hits, notes) if not n] or hits
    query = rec.query
    analyzer = kb.analyzer
    asked = sentence_query(query, analyzer, settings.window_chars, settings.attach_chars)
    sets = {}
    spans = {}
    texts: list[str] = []
    for pick in (2, 3):
        found = candidates(hits[:pick], asked)
        texts = [focus_sentence(hits[c.hit], asked, c.unit).text for c in found]
        labels = [correct(text, qa) for text in texts]
        x = np.array([c.features for c in found], dtype=float).reshape(len(found), len(FEATURES))
        sets[pick] = (x, np.array(labels, dtype=float))
        spans[pick] = [(c.hit, c.start, c.end) for c in found]
    top3 = any(correct(h.text, qa) for h in kb.search(qa.question, TOP))
    return Question(qa.id, collection, top3, sets, spans, texts, qa.question)


def gather(cache: Path) -> list[Question]:
    items = dev_items()
    out = []
    for name in DEV:
        kb = KnowledgeBase.default() if name == OWN else KnowledgeBase()
        if name in MAN:
            kb.ingest(render_pages(cache / "man-pages", name))
        elif name != OWN:
            kb.ingest(fetch(name, cache))
        out += [question(kb, name, qa) for coll, qa in items if coll == name]
    return out


# -- the model ---------------------------------------------------------------------------


def fit(qs: Sequence[Question], pick: int, cols: list[int], penalty: float) -> np.ndarray:
    """Raw weights (one per column of ``cols``) of the conditional logit fitted on ``qs``."""
    groups = []
    for q in qs:
        x, y = q.sets[pick]
        if len(y) and 0 < y.sum() < len(y):
            groups.append((x[:, cols], y.astype(bool)))
    allx = np.vstack([g[0] for g in groups])
    mean, std = allx.mean(axis=0), allx.std(axis=0)
    std[std < 1e-9] = 1.0
    x = (allx - mean) / std
    pos = np.concatenate([g[1] for g in groups])
    starts = np.cumsum([0] + [len(g[1]) for g in groups[:-1]])
    group = np.repeat(np.arange(len(groups)), [len(g[1]) for g in groups])
    n = len(groups)

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        # Per question: log(sum over all candidates) - log(sum over those holding the answer).
        s = x @ w
        top = np.maximum.reduceat(s, starts)
        p = np.exp(s - top[group])
        z = np.add.reduceat(p, starts)
        zp = np.add.reduceat(np.where(pos, p, 0.0), starts)
        total = float(np.sum(np.log(z) - np.log(zp)))
        coef = p / z[group] - np.where(pos, p, 0.0) / zp[group]
        grad = x.T @ coef
        return total / n + 0.5 * penalty * float(w @ w), grad / n + penalty * w

    res = minimize(loss, np.zeros(len(cols)), jac=True, method="L-BFGS-B", options={"maxiter": 500, "gtol": 1e-9})
    weights: np.ndarray = np.asarray(res.x) / std
    return weights


def chosen(q: Question, pick: int, cols: list[int], w: np.ndarray) -> bool:
    """Whether the window the weights choose for ``q`` holds the answer (ties to the earliest, as ``best_window``)."""
    x, y = q.sets[pick]
    if not len(y):
        return False
    s = [math.fsum(float(a) * float(b) for a, b in zip(w, row)) for row in x[:, cols]]
    return bool(y[max(range(len(s)), key=lambda k: (s[k], -k))])


def loco(qs: Sequence[Question], pick: int, penalty: float, names: Sequence[str] = DEV) -> dict[str, int]:
    """Collection -> questions whose injected text holds the answer, each scored by weights fitted without it."""
    out = {}
    for held in names:
        w = fit_on(qs, frozenset(names) - {held}, pick, penalty)
        out[held] = sum(chosen(q, pick, ALL, w) for q in qs if q.collection == held and q.top3)
    return out


ALL = list(range(len(FEATURES)))
_FITTED: dict[tuple[int, frozenset[str], int, float], np.ndarray] = {}


def fit_on(qs: Sequence[Question], names: frozenset[str], pick: int, penalty: float) -> np.ndarray:
    """:func:`fit` on the questions of ``names``, once: a nested LOCO fits each pair of left-out collections twice."""
    key = (id(qs), names, pick, penalty)
    if key not in _FITTED:
        _FITTED[key] = fit([q for q in qs if q.collection in names], pick, ALL, penalty)
    return _FITTED[key]


def best_config(results: dict[tuple[int, float], dict[str, int]]) -> tuple[int, float]:
    """The configuration with the most answers; ties to the smaller pick and the larger penalty."""
    return max(results, key=lambda c: (sum(results[c].values()), -c[0], c[1]))


def nested(qs: Sequence[Question]) -> dict[str, tuple[int, tuple[int, float]]]:
    """Collection -> (answers, configuration) with the configuration chosen by a LOCO over the other collections."""
    out = {}
    for held in DEV:
        rest = [name for name in DEV if name != held]
        config = best_config({c: loco(qs, *c, names=rest) for c in CONFIGS})
        w = fit_on(qs, frozenset(rest), *config)
        out[held] = (sum(chosen(q, config[0], ALL, w) for q in qs if q.collection == held and q.top3), config)
    return out


def write_weights(w: Sequence[float], pick: int) -> None:
    """Replace ``PICK`` and the ``WEIGHTS`` dict of ``_learned.py`` (feature: weight, a few a line)."""
    text = LEARNED.read_text(encoding="utf-8")
    lines, line = [], "   "
    for name, x in zip(FEATURES, w):
        item = f' "{name}": {x!r},'
        if len(line) + len(item) > 118:
            lines.append(line)
            line = "   "
        line += item
    body = "\n".join([*lines, line])
    new = f"PICK = {pick}\nWEIGHTS: dict[str, float] = {{\n{body}\n}}\n"
    pattern = re.compile(r"PICK = \d+\nWEIGHTS: dict\[str, float\] = \{\n(?:    [^\n]*\n)*\}\n")
    text, n = pattern.subn(lambda _: new, text, count=1)
    if n != 1:
        raise SystemExit(f"no WEIGHTS block found in {LEARNED}")
    LEARNED.write_text(text, encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "clanker-rag-bench-docs")
    parser.add_argument("--write", action="store_true", help="write the chosen weights into _learned.py")
    parser.add_argument("--nested", action="store_true", help="also choose the configuration inside each fold")
    args = parser.parse_args()
    qs = gather(args.cache)
    in_top = {name: sum(q.top3 for q in qs if q.collection == name) for name in DEV}
    oracle = {p: sum(q.top3 and bool(q.sets[p][1].sum()) for q in qs) for p in PICKS}
    total = sum(in_top.values())
    print(f"{len(qs)} questions, {total} with the answer in the top 3; some candidate holds it: {oracle}")
    results = {}
    for pick, penalty in CONFIGS:
        results[(pick, penalty)] = per = loco(qs, pick, penalty)
        print(f"learned pick {pick} penalty {penalty:<5}: {sum(per.values())}/{total}", flush=True)
    pick, penalty = best = best_config(results)
    print(f"\nchosen by LOCO: pick {pick}, penalty {penalty}")
    inner = nested(qs) if args.nested else {}
    extra = f" {'nested':>11}  (config chosen on the others)" if inner else ""
    print(f"{'collection':<11} {'top 3':>5} {'learned':>11}" + extra)
    for name in [*DEV, "all"]:
        n = total if name == "all" else in_top[name]
        got = sum(results[best].values()) if name == "all" else results[best][name]
        line = f"{name:<11} {n:>5} {got:>4} ({got / n:>4.0%})"
        if inner:
            got = sum(v[0] for v in inner.values()) if name == "all" else inner[name][0]
            line += f" {got:>4} ({got / n:>4.0%})" + ("" if name == "all" else f"  {inner[name][1]}")
        print(line)
    if args.write:
        w = fit(qs, pick, list(range(len(FEATURES))), penalty)
        write_weights([round(float(x), 6) for x in w], pick)
        print(f"weights written to {LEARNED.relative_to(ROOT)} (pick {pick})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

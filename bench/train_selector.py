"""Fit the learned sentence scorer (``clanker_rag/_answer/_learned.py``) and measure it collection by collection.

For every development question (the eight third-party collections of
``bench/docs_qa.jsonl`` and the tune half of ``bench/answers_qa.jsonl``, as
``clanker``), the passages ``ask`` retrieves are recorded as the focusing
retriever receives them (release notes last), and every sentence of the top
``pick`` passages becomes a candidate with the features of
:func:`clanker_rag._answer._learned.candidates`.  Its label: the window
:func:`~clanker_rag._answer._focusing.focus_sentence` would inject for it
holds an accepted answer (``bench/answers_qa.py``'s ``correct``).

The model is a conditional logit: a softmax over one question's candidates,
maximising the probability of the candidates that hold the answer, with an L2
penalty, on standardised features (folded back into raw weights), fitted by
L-BFGS from zero: deterministic.  Features, ``pick`` and the penalty are
chosen by leave-one-collection-out cross-validation: fit on eight
collections, choose for the ninth, count the questions whose injected text
holds the answer, of those whose answer is in the top 3 passages.

    python bench/train_selector.py                 # LOCO table: rules against learned
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

import numpy as np
from scipy.optimize import minimize

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.answers_qa import QA, correct  # noqa: E402
from bench.answers_qa import load as load_own  # noqa: E402
from bench.bench_docs import PACKAGES, fetch  # noqa: E402
from clanker_rag._answer import _ask  # noqa: E402
from clanker_rag._answer._answer_types import asks_how, focus_types  # noqa: E402
from clanker_rag._answer._focusing import focus_sentence  # noqa: E402
from clanker_rag._answer._learned import FEATURES, candidates  # noqa: E402
from clanker_rag._answer._prompts import base_prompt  # noqa: E402
from clanker_rag._answer._windows import is_changelog  # noqa: E402
from clanker_rag._kb import KnowledgeBase  # noqa: E402
from clanker_rag._types import HitLike  # noqa: E402

QA_PATH = ROOT / "bench" / "docs_qa.jsonl"
LEARNED = ROOT / "clanker_rag" / "_answer" / "_learned.py"
OWN = "clanker"
DEV = (*PACKAGES, OWN)
TOP = 3
PENALTIES = (0.003, 0.01, 0.03, 0.1, 0.3)
# Feature sets tried: every feature, and the rule score with the passage's rank alone (what a
# re-weighting of the current rules can do).
FEATURE_SETS = {
    "all": FEATURES,
    "rule+rank": ("rule", "rule_best", "rank1", "rank2", "ratio"),
    "no-rule": tuple(f for f in FEATURES if f not in ("rule", "rule_best", "prev_rule", "next_rule")),
}


@dataclass
class Question:
    id: str
    collection: str
    top3: bool
    # pick -> (features of each candidate, label of each candidate, index of the rules' choice)
    sets: dict[int, tuple[np.ndarray, np.ndarray, int]]


class _Recording:
    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb
        self.analyzer = kb.analyzer
        self.query = ""
        self.last: list[HitLike] = []

    def search(self, query: str, k: int = 10, **kwargs: object) -> list[HitLike]:
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
    out += [(OWN, qa) for qa in load_own(split="tune")]
    return out


def question(kb: KnowledgeBase, collection: str, qa: QA) -> Question:
    """The candidates of ``qa`` as ``ask`` would weigh them (FocusedRetriever.search's steps, pick 2 and 3)."""
    rec = _Recording(kb)
    # The retrieval ``ask`` runs: the controller's own query and k, through the recorder.
    ctl = _ask.answer_controller(rec, _ask.BASE_MODE, question=qa.question, focus_chars=None)
    for _ in ctl.events(lambda prompt, stop: iter(()), base_prompt(qa.question, _ask.BASE_MODE), question=qa.question):
        pass
    hits = rec.last
    notes = [is_changelog(h.source, h.text) for h in hits]
    hits = [h for h, n in zip(hits, notes) if not n] + [h for h, n in zip(hits, notes) if n]
    query = rec.query
    analyzer = kb.analyzer
    terms = set(analyzer(query))
    expected = focus_types(query)
    howto = asks_how(query)
    budget, attach, prior = _ask.ANSWER_FOCUS_CHARS or 200, _ask.ANSWER_ATTACH_CHARS, _ask.ANSWER_RANK_PRIOR
    sets = {}
    for pick in (2, 3):
        found = candidates(hits[:pick], terms, analyzer, budget, expected, attach, prior, howto)
        labels = [
            correct(focus_sentence(hits[c.hit], terms, analyzer, budget, expected, attach, c.unit, howto).text, qa)
            for c in found
        ]
        x = np.array([c.features for c in found], dtype=float).reshape(len(found), len(FEATURES))
        rule = next((k for k, c in enumerate(found) if c.features[FEATURES.index("rule_best")] == 1.0), 0)
        sets[pick] = (x, np.array(labels, dtype=float), rule)
    top3 = any(correct(h.text, qa) for h in kb.search(qa.question, TOP))
    return Question(qa.id, collection, top3, sets)


def gather(cache: Path) -> list[Question]:
    items = dev_items()
    out = []
    for name in DEV:
        kb = KnowledgeBase.default() if name == OWN else KnowledgeBase()
        if name != OWN:
            kb.ingest(fetch(name, cache))
        out += [question(kb, name, qa) for coll, qa in items if coll == name]
    return out


# -- the model ---------------------------------------------------------------------------


def fit(qs: Sequence[Question], pick: int, cols: list[int], penalty: float) -> np.ndarray:
    """Raw weights (one per column of ``cols``) of the conditional logit fitted on ``qs``."""
    groups = []
    for q in qs:
        x, y, _ = q.sets[pick]
        if len(y) and 0 < y.sum() < len(y):
            groups.append((x[:, cols], y.astype(bool)))
    allx = np.vstack([g[0] for g in groups])
    mean, std = allx.mean(axis=0), allx.std(axis=0)
    std[std < 1e-9] = 1.0
    scaled = [((x - mean) / std, y) for x, y in groups]

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        total, grad = 0.0, np.zeros_like(w)
        for x, y in scaled:
            s = x @ w
            m = s.max()
            p = np.exp(s - m)
            z = p.sum()
            pos = p[y]
            zp = pos.sum()
            total += math.log(z) - math.log(zp)
            grad += x.T @ (p / z) - x[y].T @ (pos / zp)
        n = len(scaled)
        return total / n + 0.5 * penalty * float(w @ w), grad / n + penalty * w

    res = minimize(loss, np.zeros(len(cols)), jac=True, method="L-BFGS-B", options={"maxiter": 500, "gtol": 1e-9})
    return np.asarray(res.x) / std


def chosen(q: Question, pick: int, cols: list[int], w: np.ndarray) -> bool:
    """Whether the candidate the weights choose for ``q`` holds the answer (ties to the earliest)."""
    x, y, _ = q.sets[pick]
    if not len(y):
        return False
    s = [math.fsum(float(a) * float(b) for a, b in zip(w, row)) for row in x[:, cols]]
    best = max(range(len(s)), key=lambda k: (s[k], -k))
    return bool(y[best])


def rules(q: Question, pick: int = 2) -> bool:
    x, y, rule = q.sets[pick]
    return bool(len(y)) and bool(y[rule])


def loco(qs: Sequence[Question], pick: int, names: Sequence[str], penalty: float) -> dict[str, int]:
    cols = [FEATURES.index(f) for f in names]
    out = {}
    for held in DEV:
        w = fit([q for q in qs if q.collection != held], pick, cols, penalty)
        out[held] = sum(chosen(q, pick, cols, w) for q in qs if q.collection == held and q.top3)
    return out


def write_weights(w: Sequence[float], command: str) -> None:
    text = LEARNED.read_text(encoding="utf-8")
    body = "".join(f"    {x!r},  # {name}\n" for name, x in zip(FEATURES, w))
    new = f"# Fitted by ``{command}`` (see bench/results/h26learn.md).\nWEIGHTS: tuple[float, ...] = (\n{body})\n"
    pattern = re.compile(r"# Fitted by ``.*?``.*?\nWEIGHTS: tuple\[float, \.\.\.\] = \((?:.*?\n)*?\)\n", re.S)
    text, n = pattern.subn(lambda _: new, text, count=1)
    if n != 1:
        raise SystemExit(f"no WEIGHTS block found in {LEARNED}")
    LEARNED.write_text(text, encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "clanker-rag-bench-docs")
    parser.add_argument("--write", action="store_true", help="write the chosen weights into _learned.py")
    args = parser.parse_args()
    qs = gather(args.cache)
    in_top = {name: sum(q.top3 for q in qs if q.collection == name) for name in DEV}
    oracle = {p: sum(q.top3 and bool(q.sets[p][1].sum()) for q in qs) for p in (2, 3)}
    base = {name: sum(rules(q) for q in qs if q.collection == name and q.top3) for name in DEV}
    total = sum(in_top.values())
    print(f"{len(qs)} questions, {total} with the answer in the top 3; some candidate holds it: {oracle}")
    print(f"rules (pick 2): {sum(base.values())}/{total}")
    results = {}
    for set_name, names in FEATURE_SETS.items():
        for pick in (2, 3):
            for penalty in PENALTIES:
                per = loco(qs, pick, names, penalty)
                results[(set_name, pick, penalty)] = per
                print(f"learned {set_name:<9} pick {pick} penalty {penalty:<6}: {sum(per.values())}/{total}", flush=True)
    best = max(results, key=lambda key: (sum(results[key].values()), -PENALTIES.index(key[2])))
    set_name, pick, penalty = best
    print(f"\nchosen: {set_name}, pick {pick}, penalty {penalty}")
    print(f"{'collection':<10} {'top 3':>5} {'rules':>11} {'learned':>11}")
    for name in DEV:
        n, r, learned = in_top[name], base[name], results[best][name]
        print(f"{name:<10} {n:>5} {r:>4} ({r / n:>4.0%}) {learned:>4} ({learned / n:>4.0%})")
    r, learned = sum(base.values()), sum(results[best].values())
    print(f"{'all':<10} {total:>5} {r:>4} ({r / total:>4.0%}) {learned:>4} ({learned / total:>4.0%})")
    if args.write:
        cols = [FEATURES.index(f) for f in FEATURE_SETS[set_name]]
        w = fit(qs, pick, cols, penalty)
        full = [0.0] * len(FEATURES)
        for c, x in zip(cols, w):
            full[c] = round(float(x), 6)
        write_weights(full, "python bench/train_selector.py --write")
        print(f"weights written to {LEARNED.relative_to(ROOT)} (pick {pick})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

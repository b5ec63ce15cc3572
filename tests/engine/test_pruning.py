"""full_scores: terms that hold none of the candidates are not looked up, and the scores stay bit for bit."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag._engine._pruning import above, cheap_essentials
from clanker_rag._engine._search import full_scores

impact = st.floats(0.01, 20.0, allow_nan=False, allow_infinity=False)
# Each term: weight and {chunk id: impact}; the candidates are chunk ids 0..29.
term = st.tuples(st.sampled_from([1.0, 2.0, 0.5]), st.dictionaries(st.integers(0, 29), impact, max_size=20))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(term, min_size=1, max_size=6), st.sets(st.integers(0, 29), min_size=1), st.floats(0.0, 30.0))
def test_skipping_terms_without_the_candidates_keeps_every_score(terms, cand_set, theta):
    plan = sorted(
        ((max(lists.values(), default=0.0) * w, tid, w) for tid, (w, lists) in enumerate(terms)),
        key=lambda item: (-item[0], item[1]),
    )
    cands = sorted(cand_set)
    # Terms holding none of the candidates, by plan position.
    absent = {i for i, (_, tid, _) in enumerate(plan) if not cand_set & terms[tid][1].keys()}
    looked_up: list[int] = []

    class Lists:  # the accessors full_scores reads: exact impacts only
        @staticmethod
        def scales(tid):
            return (1.0, 1.0)

        @staticmethod
        def lookup(tid, w, some, highest=-1):
            looked_up.append(tid)
            table = terms[tid][1]
            return [table.get(c, 0.0) * w for c in some]

    bounds = [ub for ub, _, _ in plan]
    skipped = full_scores(Lists(), plan, list(cands), theta, bounds, absent)  # type: ignore[arg-type]  # lookup only
    assert not {plan[i][1] for i in absent} & set(looked_up)
    every = full_scores(Lists(), plan, list(cands), theta, bounds, ())  # type: ignore[arg-type]
    # Pruning may keep a chunk below theta (the caller drops it); it never
    # loses one at or above it, and every score kept is the plain sum in
    # plan order, bit for bit.
    exact = {}
    for c in cands:
        score = 0.0
        for _, tid, w in plan:
            score = score + terms[tid][1].get(c, 0.0) * w
        exact[c] = score
    for kept in (skipped, every):
        assert all(exact[c] == s for c, s in zip(*kept))
        assert {c for c in cands if exact[c] >= theta} <= set(kept[0])
    if theta == 0.0:
        assert skipped[0] == cands


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.01, 20.0), st.integers(1, 10**6)), min_size=1, max_size=8),
    st.floats(0.0, 60.0),
)
def test_cheap_essentials_leave_out_less_than_theta(terms, theta):
    plan = sorted(((ub, tid, 1.0) for tid, (ub, _) in enumerate(terms)), key=lambda item: (-item[0], item[1]))
    lengths = [terms[tid][1] for _, tid, _ in plan]
    essential = cheap_essentials(plan, lengths, theta)
    assert essential == sorted(set(essential))
    left_out = [i for i in range(len(plan)) if i not in essential]
    # A chunk in none of the essential lists scores at most the left-out
    # bounds, which stay under theta: it cannot reach the top k.
    # (The tolerance: the sums here run in another order than the greedy's.)
    assert not left_out or above(sum(plan[i][0] for i in left_out)) < theta * (1 + 1e-12)
    # Greedy: no essential term could also be left out within theta.
    spent = sum(plan[i][0] for i in left_out)
    assert all(above(spent + plan[i][0]) >= theta * (1 - 1e-12) for i in essential)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.25]), max_size=40),
    st.randoms(use_true_random=False),
    st.sampled_from(["true", "shuffled", "swapped", "repeated", "short"]),
)
def test_an_impact_order_hint_is_used_only_when_it_is_the_order(imps, rnd, kind):
    from array import array

    from clanker_rag._engine._scoring import impact_order

    want = array("i", sorted(range(len(imps)), key=imps.__getitem__, reverse=True))
    hint = list(want)
    if kind == "shuffled":
        rnd.shuffle(hint)
    elif kind == "swapped" and len(hint) > 1:
        i = rnd.randrange(len(hint) - 1)
        hint[i], hint[i + 1] = hint[i + 1], hint[i]  # a tie in the wrong order, or a rise
    elif kind == "repeated" and len(hint) > 1:
        hint[-1] = hint[0]
    elif kind == "short":
        hint = hint[:-1]
    assert impact_order(imps, hint) == want


ratio = st.floats(0.9, 1.1, allow_nan=False)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(term, ratio, st.floats(0.0, 0.05)), min_size=1, max_size=5),
    st.sets(st.integers(0, 29), min_size=1),
    st.floats(0.0, 30.0),
    st.integers(0, 6),
)
def test_pruning_on_saved_impacts_keeps_every_chunk_that_may_reach_theta_or_the_top_k(terms, cand_set, theta, k):
    # A stale term's exact impacts are its saved ones times a ratio within
    # [lo, hi] (here the ratio itself, widened by a random margin); the
    # chunks are pruned on the saved ones, then scored exactly.
    exact_of = [{c: v * r for c, v in lists.items()} for (_, lists), r, _ in terms]
    plan = sorted(
        ((max(exact_of[tid].values(), default=0.0) * w, tid, w) for tid, ((w, _), _, _) in enumerate(terms)),
        key=lambda item: (-item[0], item[1]),
    )

    class Lists:
        @staticmethod
        def scales(tid):
            _, r, margin = terms[tid]
            return (r * (1 - margin), r * (1 + margin))

        @staticmethod
        def bound(tid, w, some, highest=-1):
            return [terms[tid][0][1].get(c, 0.0) * w for c in some]

        @staticmethod
        def lookup(tid, w, some, highest=-1):
            return [exact_of[tid].get(c, 0.0) * w for c in some]

    cands = sorted(cand_set)
    bounds = [ub * 1.0000001 for ub, _, _ in plan]
    found, scores = full_scores(Lists(), plan, list(cands), theta, bounds, (), k)  # type: ignore[arg-type]
    exact = {}
    for c in cands:
        score = 0.0
        for _, tid, w in plan:
            score = score + exact_of[tid].get(c, 0.0) * w
        exact[c] = score
    assert all(exact[c] == s for c, s in zip(found, scores))
    assert len(set(found)) == len(found)
    # Every chunk scoring at least theta and the k-th best score (with k) is kept.
    kth = sorted(exact.values(), reverse=True)[k - 1] if 0 < k <= len(cands) else 0.0
    assert {c for c in cands if exact[c] >= max(theta, kth)} <= set(found)

"""Draft calibration per depth (reliability diagrams, ECE, scale) on hand-built records."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest

from dynatree_core.records.reliability import KINDS, Calibration, calibration
from dynatree_core.records.trace import IterationRecord, Trace
from dynatree_core.policy.tree import DraftTree


def record(tree: DraftTree, argmax: list, path: list[int], index: int = 0) -> IterationRecord:
    return IterationRecord(index=index, prefix_len=0, tree=tree, target_argmax=argmax, accepted_path=path,
                           committed=[], bonus=None)


def fed(tree: DraftTree, u: int, tokens: list[int], probs: list[float]) -> None:
    """Record the draft's top-k at node u (as the growth loop does)."""
    tree.topk_tokens[u] = tokens
    tree.topk_logps[u] = [math.log(p) for p in probs]
    tree.confidences[u] = probs[0]


def random_record(rng: random.Random, index: int = 0) -> IterationRecord:
    """A random tree (level by level, up to depth 4) with random draft log-probs, the target's
    choices and an accepted root-to-node chain."""
    tree = DraftTree.with_root(rng.randrange(50))
    level = [0]
    for _ in range(rng.randint(1, 4)):
        nxt = []
        for u in level:
            for _ in range(rng.randint(1 if u == 0 else 0, 3)):
                lp = math.log(rng.uniform(0.01, 1.0))
                nxt.append(tree._append(rng.randrange(50), u, tree.depths[u] + 1, lp, tree.cum_logps[u] + lp))
        level = nxt
    for u in range(len(tree)):
        if tree.children(u) or rng.random() < 0.3:
            fed(tree, u, [rng.randrange(50), rng.randrange(50)], sorted([rng.uniform(0.05, 1.0), 0.01], reverse=True))
    argmax = [rng.randrange(50) for _ in range(len(tree))]
    path, u = [], 0
    while tree.children(u) and rng.random() < 0.7:
        u = rng.choice(tree.children(u))
        path.append(u)
    return record(tree, argmax, path, index)


# --- known answers ---------------------------------------------------------------------------
def calibrated_records(n: int, seed: int, skew=lambda c: c) -> list[IterationRecord]:
    """Chains of 4 fed nodes; node u's confidence c ~ U(0.02, 0.98) and the target picks the
    draft's top token with probability skew(c) (identity: a perfectly calibrated draft)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        tree = DraftTree.with_root(0)
        for d in range(4):
            if d:
                tree._append(d, d - 1, d, -0.1, -0.1 * d)
            c = rng.uniform(0.02, 0.98)
            fed(tree, d, [10, 11], [c, (1 - c) / 2])
        argmax = [10 if rng.random() < skew(tree.confidences[u]) else 11 for u in range(4)]
        out.append(record(tree, argmax, [], i))
    return out


def test_a_calibrated_draft_has_ece_near_zero_and_a_skewed_one_does_not():
    recs = calibrated_records(2500, seed=1)
    cal = calibration(recs, "confidence", bins=10)
    assert [dc.depth for dc in cal.depths] == [0, 1, 2, 3]
    assert all(dc.count == 2500 for dc in cal.depths) and cal.overall.count == 10_000
    assert cal.overall.ece < 0.03
    assert all(dc.ece < 0.06 for dc in cal.depths)
    assert cal.overall.scale == pytest.approx(1.0, abs=0.03)
    # observed = c^2: within each bin the gap mean(c - c^2) keeps its sign, so ECE ≈ E[c(1-c)]
    skewed = calibration(calibrated_records(2500, seed=1, skew=lambda c: c * c), "confidence")
    expected = (0.98 ** 2 / 2 - 0.98 ** 3 / 3 - 0.02 ** 2 / 2 + 0.02 ** 3 / 3) / 0.96
    assert skewed.overall.ece == pytest.approx(expected, abs=0.02)


def test_a_draft_that_always_says_0_9_and_is_right_half_the_time():
    recs = []
    for i in range(40):
        tree = DraftTree.with_root(3)
        fed(tree, 0, [1, 2], [0.9, 0.1])
        recs.append(record(tree, [1 if i % 2 else 2], [], i))
    cal = calibration(recs, "confidence", bins=10)
    dc = cal.overall
    assert (dc.count, dc.observed_rate) == (40, 0.5)
    assert dc.mean_predicted == pytest.approx(0.9)
    assert dc.ece == pytest.approx(0.4)
    assert dc.scale == pytest.approx(0.5 / 0.9)
    full = [b for b in dc.bins if b.count]
    assert len(full) == 1 and full[0].count == 40 and full[0].hi - full[0].lo == pytest.approx(0.1)
    assert full[0].lo <= 0.9 <= full[0].hi
    assert cal.depths == [dataclasses.replace(dc, depth=0)]  # one depth: the same numbers


def test_conditional_by_hand():
    #        root(7) -- a(4, q=.6) -- c(5, q=.5)
    #               \-- b(9, q=.3)
    tree = DraftTree.with_root(7)
    fed(tree, 0, [4, 9], [0.6, 0.3])
    a = tree._append(4, 0, 1, math.log(0.6), math.log(0.6))
    b = tree._append(9, 0, 1, math.log(0.3), math.log(0.3))
    fed(tree, a, [5], [0.5])
    c = tree._append(5, a, 2, math.log(0.5), math.log(0.3))
    # the target picks 9 after the root (b right, a wrong) and 5 after a (c right)
    cal = calibration(record(tree, [9, 5, 0, 0], [b]), "conditional", bins=4)
    d1, d2 = cal.depth(1), cal.depth(2)
    assert (d1.count, d2.count, cal.overall.count) == (2, 1, 3)
    assert d1.mean_predicted == pytest.approx(0.45) and d1.observed_rate == 0.5
    assert d2.mean_predicted == pytest.approx(0.5) and d2.observed_rate == 1.0
    # bins of width 0.25: 0.3 in [0.25, 0.5) observed 1, 0.6 in [0.5, 0.75) observed 0
    assert d1.ece == pytest.approx(0.5 * 0.7 + 0.5 * 0.6)
    assert d2.ece == pytest.approx(0.5)
    assert [bn.count for bn in cal.overall.bins] == [0, 1, 2, 0]
    assert cal.overall.scale == pytest.approx(2 / 1.4)
    # the target's choice after a unknown (argmax cut short): c has no observation
    short = calibration(record(tree, [9], [b]), "conditional")
    assert short.overall.count == 2 and short.depth(2) is None
    assert c == 3


def test_path_kind_counts_and_scale_match_a_direct_computation():
    rng = random.Random(5)
    recs = [random_record(rng, i) for i in range(60)]
    cal = calibration(recs, "path", bins=5)
    sums: dict[int, list[float]] = {}
    for rec in recs:
        on_path = set(rec.accepted_path)
        for u in range(1, len(rec.tree)):
            s = sums.setdefault(rec.tree.depths[u], [0, 0.0, 0])
            s[0] += 1
            s[1] += math.exp(rec.tree.cum_logps[u])
            s[2] += u in on_path
    assert [dc.depth for dc in cal.depths] == sorted(sums)
    for dc in cal.depths:
        n, pred, obs = sums[dc.depth]
        assert dc.count == n == sum(bn.count for bn in dc.bins)
        assert dc.mean_predicted == pytest.approx(pred / n)
        assert dc.observed_rate == pytest.approx(obs / n)
        assert dc.scale == pytest.approx(obs / pred)
        assert 0 <= dc.ece <= 1
        for bn in dc.bins:  # a bin holds exactly the predictions in [lo, hi)
            assert bn.count == sum(1 for r in recs for u in range(1, len(r.tree))
                                   if r.tree.depths[u] == dc.depth
                                   and bn.lo <= math.exp(r.tree.cum_logps[u]) < bn.hi + (bn.hi == 1.0))
    assert cal.overall.depth == -1 and cal.overall.count == sum(s[0] for s in sums.values())
    assert sum(s[2] for s in sums.values()) == sum(len(r.accepted_path) for r in recs)


def test_confidence_kind_reads_every_fed_node_and_only_those():
    rng = random.Random(8)
    recs = [random_record(rng, i) for i in range(40)]
    cal = calibration(recs, "confidence", bins=10)
    fed_nodes = [(r.tree.depths[u], r.tree.topk_tokens[u][0] == r.target_argmax[u])
                 for r in recs for u in range(len(r.tree)) if r.tree.topk_tokens[u] is not None]
    assert cal.overall.count == len(fed_nodes)
    assert cal.depths[0].depth == 0 and cal.depths[0].count == len(recs)  # every root here is fed
    assert cal.overall.observed_rate == pytest.approx(sum(o for _, o in fed_nodes) / len(fed_nodes))
    for dc in cal.depths:
        assert dc.count == sum(1 for d, _ in fed_nodes if d == dc.depth)


def test_max_depth_merges_deeper_nodes():
    rng = random.Random(9)
    recs = [random_record(rng, i) for i in range(40)]
    full = calibration(recs, "path")
    merged = calibration(recs, "path", max_depth=2)
    assert max(dc.depth for dc in full.depths) > 2
    assert [dc.depth for dc in merged.depths] == [1, 2]
    assert merged.depth(1) == full.depth(1)
    assert merged.depth(2).count == sum(dc.count for dc in full.depths if dc.depth >= 2)
    assert merged.overall == full.overall


def test_unlikely_and_certain_predictions_land_in_the_end_bins():
    tree = DraftTree.with_root(1)
    fed(tree, 0, [2, 3], [1.0, 1e-9])
    tree._append(2, 0, 1, 0.0, 0.0)
    tree._append(3, 0, 1, -math.inf, -math.inf)  # p = 0: a pruned-looking candidate
    cal = calibration(record(tree, [2, 0, 0], [1]), "path", bins=4)
    assert [b.count for b in cal.overall.bins] == [1, 0, 0, 1]
    assert cal.overall.ece == pytest.approx(0.0)
    assert cal.overall.scale == pytest.approx(1.0)


def test_source_forms_agree():
    rng = random.Random(2)
    recs = [random_record(rng, i) for i in range(12)]
    t1 = Trace(method="dynatree", config={}, target_name="t", draft_name="d", prompt_tokens=[1],
               iterations=recs[:7])
    t2 = Trace(method="dynatree", config={}, target_name="t", draft_name="d", prompt_tokens=[1],
               iterations=recs[7:])
    ref = calibration(recs, "conditional").to_dict()
    assert calibration([t1, t2], "conditional").to_dict() == ref
    assert calibration([recs[:7], recs[7:]], "conditional").to_dict() == ref
    assert calibration([t1, recs[7:]], "conditional").to_dict() == ref
    assert calibration(recs[0], "conditional").to_dict() == calibration([recs[0]], "conditional").to_dict()
    assert calibration(Trace.from_json(t1.to_json()), "path").to_dict() == calibration(t1, "path").to_dict()


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip(kind):
    rng = random.Random(4)
    cal = calibration([random_record(rng, i) for i in range(20)], kind, bins=7)
    assert cal.kind == kind and cal.n_bins == 7 and all(len(dc.bins) == 7 for dc in cal.depths)
    assert Calibration.from_dict(cal.to_dict()) == cal
    assert Calibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal


def test_empty_sources_give_an_empty_calibration():
    ar = record(DraftTree.empty(4), [5], [])  # AR: the root is never fed
    for source in ([], ar, [ar, ar]):
        cal = calibration(source, "confidence", bins=3)
        assert cal.depths == [] and cal.overall.count == 0
        assert cal.overall.ece is None and cal.overall.scale is None
        assert [b.count for b in cal.overall.bins] == [0, 0, 0]
        assert Calibration.from_dict(cal.to_dict()) == cal


def test_bad_input():
    rec = random_record(random.Random(1))
    with pytest.raises(ValueError, match="kind"):
        calibration(rec, kind="accuracy")
    for bins, err in ((0, ValueError), (-3, ValueError), (2.5, TypeError), (True, TypeError)):
        with pytest.raises(err, match="bins"):
            calibration(rec, bins=bins)
    with pytest.raises(ValueError, match="max_depth"):
        calibration(rec, max_depth=-1)
    for source in (5, "trace", {"iterations": []}, [rec, 3]):
        with pytest.raises(TypeError, match="source"):
            calibration(source)
    bad = random_record(random.Random(1))
    bad.tree.cum_logps[1] = 0.5  # a "probability" of e^0.5
    with pytest.raises(ValueError, match="source"):
        calibration(bad, "path")
    d = calibration(rec, "path").to_dict()
    with pytest.raises(ValueError, match="kind"):
        Calibration.from_dict({**d, "kind": "nope"})
    with pytest.raises(KeyError):
        Calibration.from_dict({k: v for k, v in d.items() if k != "overall"})
    with pytest.raises(TypeError, match="n_bins"):
        Calibration.from_dict({**d, "n_bins": "10"})

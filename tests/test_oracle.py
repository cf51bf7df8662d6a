"""The best-tree oracle against brute force over every small tree, on synthetic runs."""

from __future__ import annotations

import functools
import json
import math
import random

import pytest

from dynatree_core.records.oracle import (OracleIteration, OracleSummary, oracle_iterations, oracle_trace,
                                  summarize_oracle)
from dynatree_core.records.trace import IterationRecord, Trace
from dynatree_core.policy.tree import DraftTree

VOCAB = 6
#: the draft's probabilities for its ranks (the oracle reads only tokens; the values look real)
PROBS = (0.5, 0.25, 0.15, 0.1)


# --- a synthetic world: a deterministic draft top-k and target greedy choice per context -----
class World:
    """``draft(ctx)``: the draft's top-``k`` tokens after ``ctx``; ``target(ctx)``: the target's
    greedy token. Both depend on the last tokens only and are seeded (ints only: no str hash)."""

    def __init__(self, seed: int, k: int = 3, agree: float = 0.75):
        self.seed, self.k, self.agree = seed, k, agree

    @functools.lru_cache(maxsize=None)
    def _draft(self, key: tuple[int, ...]) -> tuple[int, ...]:
        rng = random.Random(hash((self.seed, 1) + key))
        return tuple(rng.sample(range(VOCAB), self.k))

    def draft(self, ctx) -> list[int]:
        return list(self._draft(tuple(ctx[-3:])))

    def target(self, ctx) -> int:
        rng = random.Random(hash((self.seed, 2) + tuple(ctx[-3:])))
        if rng.random() < self.agree:  # mostly one of the draft's candidates, top ranks favoured
            top = self.draft(ctx)
            return top[min(int(rng.expovariate(1.5)), len(top) - 1)]
        return rng.randrange(VOCAB)


def make_tree(world: World, ctx: list[int], plan: set[tuple[int, ...]], feed_leaves: bool) -> DraftTree:
    """The tree whose nodes are the rank paths in ``plan`` (ancestor-closed, root = ()), in BFS
    order. A node is fed to the draft (top-k recorded) iff it has children, or ``feed_leaves``."""
    tree = DraftTree.with_root(ctx[-1])
    paths = {0: ()}
    queue = [0]
    while queue:
        u = queue.pop(0)
        here = ctx + [tree.tokens[v] for v in tree.path_to(u)]
        kids = sorted(k for k in range(world.k) if paths[u] + (k,) in plan)
        if kids or (feed_leaves and plan):
            top = world.draft(here)
            tree.topk_tokens[u] = top
            tree.topk_logps[u] = [math.log(p) for p in PROBS[:len(top)]]
            tree.confidences[u] = PROBS[0]
            tree.branching[u] = len(kids)
        else:
            tree.stop_reasons[u] = "d_max"
        for k in kids:
            lp = math.log(PROBS[k])
            v = tree._append(world.draft(here)[k], u, tree.depths[u] + 1, lp, tree.cum_logps[u] + lp)
            paths[v] = paths[u] + (k,)
            queue.append(v)
    return tree


def simulate(world: World, prompt: list[int], plans: list[set], *, chain: bool = True,
             feed_leaves: bool = False, max_new: int | None = None) -> list[IterationRecord]:
    """Greedy speculative decoding of ``world`` with the given trees, recorded as the engine does:
    each record's ``chain_topk`` holds the draft's top-k after the previous round's accepted
    tokens it never fed (the draft reads them at level 0, before the root)."""
    ctx, out, records, pending_chain = list(prompt), 0, [], None
    for r, plan in enumerate(plans):
        if max_new is not None and out >= max_new:
            break
        tree = make_tree(world, ctx, plan, feed_leaves)
        argmax = [world.target(ctx + [tree.tokens[v] for v in tree.path_to(u)]) for u in range(len(tree))]
        path, bonus = tree.greedy_path(argmax)
        committed = [tree.tokens[u] for u in path] + [bonus]
        if max_new is not None:
            committed = committed[:max_new - out]
        records.append(IterationRecord(index=r, prefix_len=len(ctx) - 1, tree=tree, target_argmax=argmax,
                                       accepted_path=path, committed=committed,
                                       bonus=bonus if len(committed) == len(path) + 1 else None,
                                       chain_topk=pending_chain if chain else None))
        unfed = [u for u in path if tree.topk_tokens[u] is None]  # a suffix of the path
        pending_chain = [[world.draft(ctx + [tree.tokens[v] for v in tree.path_to(u)]), list(PROBS[:world.k])]
                         for u in unfed] or None
        ctx += committed
        out += len(committed)
    return records


def random_plan(rng: random.Random, k: int, n: int) -> set[tuple[int, ...]]:
    """A random ancestor-closed set of n rank paths (plus the root ())."""
    plan: set[tuple[int, ...]] = {()}
    while len(plan) < n + 1:
        parent = rng.choice(sorted(plan))
        plan.add(parent + (rng.randrange(k),))
    return plan


def random_run(seed: int, **kw) -> tuple[World, list[int], list[IterationRecord]]:
    rng = random.Random(seed)
    world = World(seed, k=kw.pop("k", 3))
    prompt = [rng.randrange(VOCAB) for _ in range(3)]
    plans = [random_plan(rng, world.k, rng.randint(1, 5)) for _ in range(kw.pop("iterations", 10))]
    return world, prompt, simulate(world, prompt, plans, **kw)


# --- brute force ---------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def all_trees(n: int, k: int) -> tuple[frozenset, ...]:
    """Every ancestor-closed set of at most n nodes of the k-ary candidate tree (nodes are rank
    paths; the root () is implied), so of depth <= n."""
    found = {frozenset()}
    frontier = {frozenset()}
    for _ in range(n):
        nxt = set()
        for s in frontier:
            for parent in [()] + list(s):
                for r in range(k):
                    child = parent + (r,)
                    if child not in s:
                        nxt.add(s | {child})
        found |= nxt
        frontier = nxt
    return tuple(found)


def brute_best(world: World, prompt: list[int], S: list[int], p: int, n: int, k: int) -> int:
    """Max over every tree of <= n candidate nodes (top-k of the *true* draft) of the tokens the
    *true* target accepts from root S[p], counting only what the run can observe: j accepted
    tokens need S[p + j + 1] (the bonus) to exist. S starts at the prompt's last token."""
    room = len(S) - 2 - p
    # the target's greedy walk as draft ranks (it does not depend on the tree, so walk it once)
    ctx, greedy = prompt[:-1] + S[: p + 1], []
    while len(greedy) < n:
        choice, top = world.target(ctx), world.draft(ctx)[:k]
        if choice not in top:
            break
        greedy.append(top.index(choice))
        ctx.append(choice)
    best = 0
    for tree in all_trees(n, k):
        accepted = 0
        while accepted < len(greedy) and tuple(greedy[: accepted + 1]) in tree:
            accepted += 1
        best = max(best, min(accepted, room))
    return best


def sequence_and_roots(prompt: list[int], records: list[IterationRecord]) -> tuple[list[int], list[int]]:
    S, roots = [prompt[-1]], []
    for rec in records:
        roots.append(len(S) - 1)
        S += rec.committed
    return S, roots


# --- the oracle is the best tree -------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("k", [1, 2, 3])
def test_best_equals_brute_force_over_every_tree(seed, k):
    world, prompt, records = random_run(seed, iterations=8)
    S, roots = sequence_and_roots(prompt, records)
    rows = oracle_iterations(records, top_k=k)
    assert len(rows) == len(records)
    assert not any(r.truncated for r in rows)  # chains fill every gap: the reach is exact
    for row, p in zip(rows, roots):
        for n in range(0, 5):
            assert row.best(n) == brute_best(world, prompt, S, p, n, k), (seed, k, row, n)


@pytest.mark.parametrize("seed", range(6))
def test_default_top_k_is_the_recorded_width(seed):
    world, prompt, records = random_run(seed, iterations=6)
    rows = oracle_iterations(records)
    assert {r.top_k for r in rows} == {3}
    assert [r.reach for r in rows] == [r.reach for r in oracle_iterations(records, top_k=3)]
    S, roots = sequence_and_roots(prompt, records)
    assert [r.best(4) for r in rows] == [brute_best(world, prompt, S, p, 4, 3) for p in roots]


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("chain", [True, False])
def test_a_policy_never_beats_the_oracle_at_its_own_size(seed, chain):
    world, prompt, records = random_run(seed, iterations=12, chain=chain)
    rows = oracle_iterations(records)
    for row, rec in zip(rows, records):
        assert row.nodes == rec.tree.num_drafted
        assert row.accepted == len(rec.accepted_path)  # no run cut here: nothing capped
        assert row.accepted <= row.best(row.nodes)
        assert row.reach >= row.accepted  # its own accepted path is a tree of candidates
    summary = summarize_oracle(rows)
    assert summary.gap_own >= 0
    assert summary.mean_accepted == pytest.approx(sum(len(r.accepted_path) for r in records) / len(records))


def test_missing_chain_truncates_and_the_chain_fills_the_gap():
    # every iteration drafts a chain of 2 and never feeds its last node: the draft's view after
    # that token is known only from the next round's chain_topk
    world = World(11, k=3, agree=1.0)  # the target always picks a draft candidate: long reaches
    prompt = [1, 2, 3]
    plans = [{(), (0,), (0, 0)} for _ in range(10)]
    full = simulate(world, prompt, plans, chain=True)
    gappy = simulate(world, prompt, plans, chain=False)
    assert [r.committed for r in full] == [r.committed for r in gappy]  # the same run
    with_chain, without = oracle_iterations(full), oracle_iterations(gappy)
    S, roots = sequence_and_roots(prompt, full)
    for r, (a, b, rec) in enumerate(zip(with_chain, without, full)):
        assert not a.truncated
        assert a.best(6) == brute_best(world, prompt, S, roots[r], 6, 3)
        ends_unfed = rec.accepted_path and rec.tree.topk_tokens[rec.accepted_path[-1]] is None
        if ends_unfed and r < len(full) - 1:
            # the walk passes the accepted path, then needs the unfed last token's distribution
            assert b.truncated and b.reach == len(rec.accepted_path) <= a.reach
        assert b.reach <= a.reach  # a lower bound
    assert any(b.truncated for b in without) and any(a.reach > b.reach for a, b in zip(with_chain, without))


def test_hand_built_gap_filled_by_chain_topk():
    # iteration 0: root 5 -> 7 accepted (7 never fed), bonus 8; iteration 1: root 8 -> 9, bonus 4.
    t0 = DraftTree.with_root(5)
    t0.topk_tokens[0], t0.topk_logps[0] = [7, 1], [-0.1, -2.5]
    t0._append(7, 0, 1, -0.1, -0.1)
    t1 = DraftTree.with_root(8)
    t1.topk_tokens[0], t1.topk_logps[0] = [9, 2], [-0.2, -2.0]
    t1._append(9, 0, 1, -0.2, -0.2)
    r0 = IterationRecord(index=0, prefix_len=4, tree=t0, target_argmax=[7, 8], accepted_path=[1],
                         committed=[7, 8], bonus=8)
    r1 = IterationRecord(index=1, prefix_len=6, tree=t1, target_argmax=[9, 4], accepted_path=[1],
                         committed=[9, 4], bonus=4)
    # S = [5, 7, 8, 9, 4]; P = [0, 2]; D_0 = [7, 1], D_1 unknown, D_2 = [9, 2]
    rows = oracle_iterations([r0, r1])
    assert (rows[0].reach, rows[0].truncated) == (1, True)
    assert (rows[1].reach, rows[1].truncated) == (1, False)  # room: 9 accepted, 4 its bonus
    r1.chain_topk = [[[3, 8], [-0.5, -1.0]]]  # the draft read 7 at level 0: 8 is its rank 1
    rows = oracle_iterations([r0, r1])
    assert (rows[0].reach, rows[0].truncated) == (3, False)  # 7, 8, 9 (bonus 4)
    assert oracle_iterations([r0, r1], top_k=1)[0].reach == 1  # 8 is rank 1: outside the top-1
    r1.chain_topk = [[[3, 6], [-0.5, -1.0]]]
    assert oracle_iterations([r0, r1])[0].reach == 1 and not oracle_iterations([r0, r1])[0].truncated


def test_tree_distribution_beats_a_chain_row_for_the_same_index():
    # both the tree of iteration 1 (its root, fed) and a chain row claim D_2: the tree wins
    t0 = DraftTree.with_root(5)
    t0.topk_tokens[0], t0.topk_logps[0] = [7], [-0.1]
    t0._append(7, 0, 1, -0.1, -0.1)
    t1 = DraftTree.with_root(8)
    t1.topk_tokens[0], t1.topk_logps[0] = [9], [-0.2]
    r0 = IterationRecord(index=0, prefix_len=0, tree=t0, target_argmax=[7, 8], accepted_path=[1],
                         committed=[7, 8], bonus=8)
    r1 = IterationRecord(index=1, prefix_len=2, tree=t1, target_argmax=[9], accepted_path=[],
                         committed=[9], bonus=9)
    t2 = DraftTree.with_root(9)
    r2 = IterationRecord(index=2, prefix_len=3, tree=t2, target_argmax=[1], accepted_path=[],
                         committed=[1], bonus=1, chain_topk=[[[4], [-0.3]], [[4], [-0.3]]])
    # S = [5, 7, 8, 9, 1]; r2's chain claims D_1 = D_2 = [4]; the tree of iteration 1 has D_2 = [9]
    rows = oracle_iterations([r0, r1, r2], top_k=1)
    assert rows[1].reach == 1  # D_2 = [9] from the tree: 9 accepted, bonus 1 exists
    assert rows[0].reach == 1  # D_0 = [7] ok, D_1 = [4] from the chain: 8 rejected


def test_between_chain_rows_the_earliest_reader_wins():
    t0 = DraftTree.with_root(5)
    t0.topk_tokens[0], t0.topk_logps[0] = [7], [-0.1]
    t0._append(7, 0, 1, -0.1, -0.1)  # accepted, never fed
    r0 = IterationRecord(index=0, prefix_len=0, tree=t0, target_argmax=[7, 8], accepted_path=[1],
                         committed=[7, 8], bonus=8)
    r1 = IterationRecord(index=1, prefix_len=2, tree=DraftTree.empty(8), target_argmax=[9], accepted_path=[],
                         committed=[9], bonus=9, chain_topk=[[[8], [-0.2]]])
    r2 = IterationRecord(index=2, prefix_len=3, tree=DraftTree.empty(9), target_argmax=[1], accepted_path=[],
                         committed=[1], bonus=1, chain_topk=[[[7], [-0.1]], [[4], [-0.3]], [[9], [-0.2]]])
    # S = [5, 7, 8, 9, 1]; D_1 is [8] by r1's chain (read first) and [4] by r2's: r1's is kept
    rows = oracle_iterations([r0, r1, r2], top_k=1)
    assert (rows[0].reach, rows[0].truncated) == (3, False)  # 7, 8, 9 with D_0, D_1, D_2
    assert rows[1].reach == 1 and rows[1].top_k == 1


def test_top_k_limits_the_candidates_and_defaults_to_the_shortest_list():
    t0 = DraftTree.with_root(5)
    t0.topk_tokens[0], t0.topk_logps[0] = [1, 2, 7], [-1.0, -1.5, -2.0]  # 7 is rank 2
    t0._append(1, 0, 1, -1.0, -1.0)
    r0 = IterationRecord(index=0, prefix_len=0, tree=t0, target_argmax=[7, 0], accepted_path=[],
                         committed=[7], bonus=7)
    t1 = DraftTree.with_root(7)
    t1.topk_tokens[0], t1.topk_logps[0] = [3, 4], [-0.5, -1.0]
    t1._append(3, 0, 1, -0.5, -0.5)
    r1 = IterationRecord(index=1, prefix_len=1, tree=t1, target_argmax=[3, 6], accepted_path=[1],
                         committed=[3, 6], bonus=6)
    assert [r.top_k for r in oracle_iterations([r0, r1])] == [2, 2]  # the shortest list: 2
    assert oracle_iterations([r0, r1])[0].reach == 0
    assert oracle_iterations([r0, r1], top_k=2)[0].reach == 0
    assert oracle_iterations([r0, r1], top_k=3)[0].reach == 2  # 7 (rank 2), then 3, bonus 6
    assert oracle_iterations([r0, r1], top_k=3)[0].best(1) == 1


def test_mismatched_roots_raise():
    _, _, records = random_run(4, iterations=5)
    with pytest.raises(ValueError, match=r"records\[2\].*consecutive"):
        oracle_iterations(records[:2] + records[3:])
    _, _, other = random_run(5, iterations=3)
    with pytest.raises(ValueError, match="consecutive"):
        oracle_iterations(records[:2] + other)


def test_inconsistent_path_raises():
    _, _, records = random_run(4, iterations=4)
    rec = next(r for r in records if r.accepted_path)
    rec.committed = [rec.committed[0] + 1] + rec.committed[1:]
    with pytest.raises(ValueError, match="committed"):
        oracle_iterations(records[: records.index(rec) + 1])


def test_run_cut_at_the_budget_caps_the_last_iteration():
    world = World(2, k=3, agree=1.0)
    prompt = [0, 1, 2]
    plans = [{(), (0,), (0, 0), (0, 0, 0), (0, 1)} for _ in range(12)]
    for max_new in range(1, 9):
        records = simulate(world, prompt, plans, max_new=max_new)
        S, roots = sequence_and_roots(prompt, records)
        assert len(S) - 1 == max_new
        rows = oracle_iterations(records)
        last, rec = rows[-1], records[-1]
        room = max(len(S) - 2 - roots[-1], 0)
        assert last.reach <= room and last.accepted == min(len(rec.accepted_path), room)
        for row, p in zip(rows, roots):
            assert row.best(5) == brute_best(world, prompt, S, p, 5, 3)
            assert row.accepted <= row.best(row.nodes)


def test_ar_iterations_count_with_nothing_accepted():
    world = World(6, k=3)
    records = simulate(world, [3, 4, 5], [{()} for _ in range(4)])  # root only, never fed
    rows = oracle_iterations(records)
    assert [(r.nodes, r.accepted) for r in rows] == [(0, 0)] * 4
    assert all(r.truncated for r in rows[:-1]) and all(r.top_k == 0 for r in rows)
    s = summarize_oracle(rows)
    assert (s.n, s.mean_accepted, s.mean_oracle, s.iterations, s.truncated_fraction) == (0, 0.0, 0.0, 4, 0.75)


def test_trace_input_and_json_round_trip():
    _, prompt, records = random_run(7, iterations=6)
    trace = Trace(method="dynatree", config={}, target_name="t", draft_name="d", prompt_tokens=prompt,
                  iterations=records)
    direct = oracle_iterations(records)
    assert oracle_trace(trace) == direct == oracle_iterations(trace)
    assert any(r.chain_topk for r in records)
    assert oracle_trace(Trace.from_json(trace.to_json())) == direct


# --- the summary --------------------------------------------------------------------------------
def test_summary_by_hand():
    rows = [OracleIteration(0, accepted=1, nodes=3, reach=4, truncated=False, top_k=2),
            OracleIteration(1, accepted=0, nodes=0, reach=0, truncated=True, top_k=2),
            OracleIteration(2, accepted=2, nodes=4, reach=2, truncated=False, top_k=2)]
    s = summarize_oracle(rows, n_curve=5)
    assert s.n == round(7 / 3) == 2
    assert s.mean_nodes == pytest.approx(7 / 3)  # the mean itself, which n rounds to whole nodes
    assert summarize_oracle(rows, n=4).mean_nodes == pytest.approx(7 / 3)  # a given n leaves the mean as it is
    assert s.mean_accepted == pytest.approx(1.0)
    assert s.mean_oracle == pytest.approx((2 + 0 + 2) / 3)
    assert s.gap == pytest.approx(4 / 3 - 1)
    assert s.mean_oracle_own == pytest.approx((3 + 0 + 2) / 3)
    assert s.gap_own == pytest.approx(5 / 3 - 1)
    assert s.truncated_fraction == pytest.approx(1 / 3)
    assert s.curve == pytest.approx([0, 2 / 3, 4 / 3, 5 / 3, 2, 2])
    assert (s.iterations, s.top_k) == (3, 2)
    assert summarize_oracle(rows, n=4).mean_oracle == pytest.approx(2.0)
    # several runs pool their iterations
    pooled = summarize_oracle([rows, rows[:1]], n_curve=5)
    assert pooled.iterations == 4 and pooled.mean_accepted == pytest.approx(1.0)
    assert pooled.curve[1] == pytest.approx(3 / 4)


def test_summary_round_trip():
    _, _, records = random_run(1, iterations=9)
    s = summarize_oracle(oracle_iterations(records), n_curve=8)
    assert len(s.curve) == 9 and s.curve == sorted(s.curve)
    back = OracleSummary.from_dict(s.to_dict())
    assert back == s
    assert OracleSummary.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    # a summary written before the mean size was kept reads back with it unknown, not as the rounded n
    old = {k: v for k, v in s.to_dict().items() if k != "mean_nodes"}
    assert OracleSummary.from_dict(old).mean_nodes is None


# --- bad input ---------------------------------------------------------------------------------
def test_bad_input():
    _, _, records = random_run(2, iterations=3)
    rows = oracle_iterations(records)
    with pytest.raises(ValueError, match="rows"):
        summarize_oracle([])
    with pytest.raises(ValueError, match="top_k"):
        oracle_iterations(records, top_k=0)
    with pytest.raises(TypeError, match="top_k"):
        oracle_iterations(records, top_k=2.0)
    with pytest.raises(TypeError, match="records"):
        oracle_iterations(5)
    with pytest.raises(TypeError, match=r"records\[1\]"):
        oracle_iterations([records[0], "x"])
    with pytest.raises(ValueError, match="n must be"):
        rows[0].best(-1)
    with pytest.raises(ValueError, match="n must be"):
        summarize_oracle(rows, n=-2)
    with pytest.raises(ValueError, match="n_curve"):
        summarize_oracle(rows, n_curve=-1)
    with pytest.raises(TypeError, match=r"rows\[0\]"):
        summarize_oracle([1, 2])
    with pytest.raises(TypeError, match="trace"):
        oracle_trace(records)
    mixed = [OracleIteration(0, 1, 2, 3, False, top_k=2), OracleIteration(0, 1, 2, 3, False, top_k=4)]
    with pytest.raises(ValueError, match="top_k"):
        summarize_oracle(mixed)
    d = summarize_oracle(rows).to_dict()
    with pytest.raises(KeyError):
        OracleSummary.from_dict({k: v for k, v in d.items() if k != "gap"})
    with pytest.raises(ValueError, match="unknown"):
        OracleSummary.from_dict({**d, "extra": 1})
    with pytest.raises(TypeError, match="mean_oracle"):
        OracleSummary.from_dict({**d, "mean_oracle": "high"})
    bad = list(records)
    bad[0] = IterationRecord(**{**vars(bad[0]), "accepted_path": [len(bad[0].tree) + 3]})
    with pytest.raises(ValueError, match="accepted_path"):
        oracle_iterations(bad)


def test_an_accepted_lookup_tail_token_is_a_candidate_of_the_reach():
    # iteration 0: root 5 -> 7 (drafted, rank 0) -> 6 (a lookup-tail node: not in the draft's top-k)
    # accepted, bonus 8; iteration 1: root 8 -> 9, bonus 4. S = [5, 7, 6, 8, 9, 4], P = [0, 3].
    t0 = DraftTree.with_root(5)
    t0.topk_tokens[0], t0.topk_logps[0] = [7, 1], [-0.1, -2.5]
    t0._append(7, 0, 1, -0.1, -0.1)
    t0.topk_tokens[1], t0.topk_logps[1] = [2, 3], [-0.3, -1.5]  # the draft after 7: 6 is not there
    t0._append(6, 1, 2, -0.1, -0.2)
    t0.stop_reasons[2] = "lookup_tail"
    t1 = DraftTree.with_root(8)
    t1.topk_tokens[0], t1.topk_logps[0] = [9, 2], [-0.2, -2.0]
    t1._append(9, 0, 1, -0.2, -0.2)
    r0 = IterationRecord(index=0, prefix_len=4, tree=t0, target_argmax=[7, 6, 8], accepted_path=[1, 2],
                         committed=[7, 6, 8], bonus=8)
    r1 = IterationRecord(index=1, prefix_len=7, tree=t1, target_argmax=[9, 4], accepted_path=[1],
                         committed=[9, 4], bonus=4)
    rows = oracle_iterations([r0, r1])
    # the run's own counts, tail included: ℓ = 2 (one of them the tail's) on 2 nodes
    assert [(r.accepted, r.nodes, r.tail_accepted, r.tail_nodes) for r in rows] == [(2, 2, 1, 1), (1, 1, 0, 0)]
    # 7 (draft), 6 (the tail's proposal), then D_2 (after 6) unknown: a lower bound at 2
    assert (rows[0].reach, rows[0].truncated) == (2, True)
    assert all(r.accepted <= r.best(r.nodes) for r in rows)
    summary = summarize_oracle(rows)
    assert summary.mean_accepted == 1.5 and summary.mean_tail_accepted == 0.5
    # without the tail's proposal as a candidate the walk would stop after 7: the run would beat it
    t0.stop_reasons[2] = None
    assert oracle_iterations([r0, r1])[0].reach == 1

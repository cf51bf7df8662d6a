"""The torch-free tree policy: breadth, depth gate, pruning, budget, replay and history."""

from __future__ import annotations

import math

import pytest

from dynatree_core.policy.config import DynaTreeConfig, FixedTreeConfig, GrowthRule, HistoryConfig, LinearConfig
from dynatree_core.policy.history import HistoryAdapter
from dynatree_core.policy.tree import UNRECORDED, DraftTree
from dynatree_core.policy.growth import grow_tree
from dynatree_core.policy.replay import replay_partial, replay_tree


def propose_with(probs_by_depth):
    """Every node at depth d gets candidates with probabilities probs_by_depth[d]."""
    def propose(tree, ids):
        out = []
        for i in ids:
            ps = probs_by_depth[tree.depths[i]]
            out.append(([100 * i + r + 2 for r in range(len(ps))], [math.log(p) for p in ps]))
        return out
    return propose


def rule(**kw):
    base = dict(d0=3, d_max=6, b_min=1, b_mid=2, b_max=3, tau_h=0.9, tau_l=0.4, rho_stop=0.0,
                rho_deep=0.0, tau=0.0, n_max=1000)
    base.update(kw)
    return GrowthRule(**base)


@pytest.mark.parametrize("conf,expected", [(0.95, 1), (0.9, 1), (0.6, 2), (0.4, 2), (0.3, 3)])
def test_breadth_follows_confidence(conf, expected):
    rest = (1 - conf) / 7
    tree = grow_tree(1, rule(d_max=1), propose_with({0: [conf] + [rest] * 7}))
    assert tree.branching[0] == expected
    assert tree.confidences[0] == pytest.approx(conf)
    assert len(tree.children(0)) == expected


def test_depth_gate_rho_stop_and_deep_expansion():
    # each level: top token prob 0.95 -> p(u) shrinks slowly along the top chain
    probs = {d: [0.95, 0.03, 0.02] for d in range(10)}
    r = rule(d0=2, d_max=6, rho_stop=0.02, rho_deep=0.8, b_min=1)
    tree = grow_tree(1, r, propose_with(probs))
    # the top chain has p = 0.95^d >= 0.8 up to depth 4, so it goes past D0=2 (deep expansion)
    assert tree.depth == 5
    reasons = {tree.stop_reasons[i] for i in range(len(tree)) if tree.depths[i] == 5}
    assert reasons == {"depth_gate"}


def test_rho_stop_stops_unlikely_branches():
    probs = {d: [0.5, 0.3, 0.2] for d in range(10)}
    tree = grow_tree(1, rule(d0=5, rho_stop=0.2, b_min=3, b_mid=3, b_max=3), propose_with(probs))
    for i in range(len(tree)):
        if tree.stop_reasons[i] == "rho_stop":
            assert math.exp(tree.cum_logps[i]) < 0.2
        if tree.stop_reasons[i] == "expanded":
            assert math.exp(tree.cum_logps[i]) >= 0.2


def test_tau_prunes_children_without_verifying_them():
    probs = {d: [0.6, 0.3, 0.1] for d in range(10)}
    tree = grow_tree(1, rule(d_max=2, b_min=3, b_mid=3, b_max=3, tau=0.15), propose_with(probs))
    assert all(math.exp(c) >= 0.15 for c in tree.cum_logps)
    assert tree.pruned and all(p.reason == "tau" and math.exp(p.cum_logp) < 0.15 for p in tree.pruned)


def test_budget_keeps_the_most_probable_children():
    probs = {0: [0.5, 0.3, 0.2], 1: [0.9, 0.05, 0.05], 2: [0.9, 0.05, 0.05]}
    tree = grow_tree(1, rule(d_max=3, b_min=3, b_mid=3, b_max=3, n_max=5), propose_with(probs))
    assert tree.num_drafted == 5
    kept = sorted(math.exp(c) for c in tree.cum_logps[4:])
    dropped = [math.exp(p.cum_logp) for p in tree.pruned if p.reason == "n_max"]
    assert dropped and max(dropped) <= min(kept) + 1e-12


@pytest.mark.parametrize("n_max", [1, 2, 7])
def test_node_budget_is_never_exceeded(n_max):
    probs = {d: [0.4, 0.35, 0.25] for d in range(10)}
    tree = grow_tree(1, FixedTreeConfig(d=5, b=3, tau=0.0, n_max=n_max).growth_rule(), propose_with(probs))
    assert tree.num_drafted == n_max


def test_linear_config_is_a_chain_of_k():
    probs = {d: [0.5, 0.5] for d in range(10)}
    tree = grow_tree(1, LinearConfig(k=4).growth_rule(), propose_with(probs))
    assert tree.parents == [-1, 0, 1, 2, 3] and tree.draft_calls == 4


def test_bfs_order_parents_precede_children():
    probs = {d: [0.4, 0.35, 0.25] for d in range(10)}
    tree = grow_tree(1, FixedTreeConfig(d=4, b=3, tau=0.0, n_max=50).growth_rule(), propose_with(probs))
    assert all(p < i for i, p in enumerate(tree.parents) if p >= 0)
    assert tree.depths == sorted(tree.depths)


def test_replay_reproduces_and_shrinks_trees_without_a_model():
    probs = {d: [0.5, 0.3, 0.2] for d in range(10)}
    big = grow_tree(1, FixedTreeConfig(d=4, b=3, tau=0.0, n_max=100).growth_rule(), propose_with(probs))
    same = replay_tree(big, FixedTreeConfig(d=4, b=3, tau=0.0, n_max=100).growth_rule())
    assert same.tokens == big.tokens and same.parents == big.parents
    small = replay_tree(big, FixedTreeConfig(d=2, b=2, tau=0.0, n_max=100).growth_rule())
    assert small.num_drafted == 2 + 4
    with pytest.raises(KeyError, match="never computed"):
        replay_tree(big, FixedTreeConfig(d=6, b=3, tau=0.0, n_max=1000).growth_rule())


def test_greedy_path_and_bonus():
    probs = {d: [0.5, 0.3, 0.2] for d in range(10)}
    tree = grow_tree(1, FixedTreeConfig(d=2, b=2, tau=0.0).growth_rule(), propose_with(probs))
    # children of root: nodes 1, 2 (tokens 2, 3); children of node 2: nodes 5, 6 (tokens 202, 203)
    argmax = [0] * len(tree)
    argmax[0], argmax[2], argmax[6] = 3, 203, 77
    assert tree.greedy_path(argmax) == ([2, 6], 77)
    argmax[0] = 99
    assert tree.greedy_path(argmax) == ([], 99)


def _small_tree() -> DraftTree:
    # root 1; nodes 1, 2 (tokens 2, 3); under 1: nodes 3, 4 (102, 103); under 2: nodes 5, 6 (202, 203)
    probs = {d: [0.5, 0.3, 0.2] for d in range(10)}
    return grow_tree(1, FixedTreeConfig(d=2, b=2, tau=0.0).growth_rule(), propose_with(probs))


def test_greedy_walk_matches_greedy_path_when_every_choice_is_known():
    tree = _small_tree()
    argmax = [0] * len(tree)
    argmax[0], argmax[2], argmax[6] = 3, 203, 77
    assert tree.greedy_walk(argmax) == ([2, 6], 77, True)
    assert tree.greedy_path(argmax) == ([2, 6], 77)
    argmax[0] = 99  # rejected at the root: the walk is complete, just short
    assert tree.greedy_walk(argmax) == ([], 99, True)


def test_greedy_walk_stops_at_an_unknown_choice_in_the_middle_of_the_path():
    tree = _small_tree()
    argmax = [3, None, None, None, None, None, None]  # node 2 is accepted; after it: unknown
    assert tree.greedy_walk(argmax) == ([2], None, False)
    # unknown choices off the accepted path do not matter
    argmax[2], argmax[6] = 203, 77
    assert tree.greedy_walk(argmax) == ([2, 6], 77, True)
    # a choice that leaves the tree needs no knowledge below it
    argmax[2] = 999
    assert tree.greedy_walk(argmax) == ([2], 999, True)
    # unknown at the root: nothing accepted, and that is only a lower bound
    assert tree.greedy_walk([None] * len(tree)) == ([], None, False)


def test_greedy_walk_treats_a_short_argmax_as_unknown_and_greedy_path_refuses_it():
    tree = _small_tree()
    assert tree.greedy_walk([3]) == ([2], None, False)
    assert tree.greedy_walk([]) == ([], None, False)
    with pytest.raises(ValueError, match="after node 2"):
        tree.greedy_path([3, 0, None, 0, 0, 0, 0])
    with pytest.raises(ValueError, match="greedy_walk"):
        tree.greedy_path([])


def test_token_path_names_a_node_by_its_tokens_from_the_root():
    tree = _small_tree()
    assert tree.token_path(0) == (1,)
    assert tree.token_path(2) == (1, 3)
    assert tree.token_path(6) == (1, 3, 203)
    assert len({tree.token_path(i) for i in range(len(tree))}) == len(tree)
    small = replay_tree(tree, FixedTreeConfig(d=1, b=2, tau=0.0).growth_rule())
    assert [small.token_path(i) for i in range(len(small))] == [tree.token_path(i) for i in range(3)]


def test_replay_partial_is_replay_tree_when_the_recording_suffices():
    probs = {d: [0.5, 0.3, 0.2] for d in range(10)}
    big = grow_tree(1, FixedTreeConfig(d=4, b=3, tau=0.0, n_max=100).growth_rule(), propose_with(probs))
    for r in (FixedTreeConfig(d=4, b=3, tau=0.0, n_max=100).growth_rule(),
              FixedTreeConfig(d=2, b=2, tau=0.0, n_max=5).growth_rule(), rule(d_max=3, tau=0.1)):
        tree, stopped = replay_partial(big, r)
        assert stopped == [] and tree.to_dict() == replay_tree(big, r).to_dict()


@pytest.mark.parametrize("tau", [0.0, 0.01])
def test_replay_partial_stops_where_the_recorded_candidates_run_out(tau):
    probs = {d: [0.5, 0.3, 0.2] for d in range(10)}
    recorded = grow_tree(1, FixedTreeConfig(d=2, b=2, tau=0.0).growth_rule(), propose_with(probs))
    wider = FixedTreeConfig(d=3, b=3, tau=tau, n_max=100).growth_rule()
    with pytest.raises(KeyError, match="never computed"):
        replay_tree(recorded, wider)
    tree, stopped = replay_partial(recorded, wider)
    # the recording expanded the root and its two children (depths 0, 1) only
    assert [tree.depths[i] for i in stopped] == [1] + [2] * 6 and stopped == sorted(stopped)
    assert all(tree.stop_reasons[i] == UNRECORDED and tree.children(i) == [] for i in stopped)
    assert all(tree.confidences[i] is None and tree.branching[i] == 0 and tree.topk_tokens[i] is None
               for i in stopped)
    assert tree.draft_calls == 2 and tree.pruned == []
    # where the recording knew the draft, the replay is what the draft itself grows
    full = grow_tree(1, wider, propose_with(probs))
    assert tree.tokens == full.tokens[:len(tree)] and tree.parents == full.parents[:len(tree)]
    # the node the recording never reached (3rd root candidate, rank 2) had been cut by b=2
    assert tree.token_path(stopped[0]) == (1, 4)


def test_replay_partial_spends_no_budget_on_unrecorded_nodes():
    probs = {0: [0.9, 0.1], 1: [0.6, 0.4]}
    # recorded: the root (confident: breadth 1) and its child token 2 (breadth 2) were expanded
    recorded = grow_tree(1, rule(d_max=2, b_min=1, b_mid=2, b_max=2), propose_with(probs))
    assert recorded.tokens == [1, 2, 102, 103]
    tree, stopped = replay_partial(recorded, rule(d_max=3, b_min=2, b_mid=2, b_max=2, n_max=3))
    # token 3 (node 2) is new: it stops unexpanded; the last budget unit goes to 102, not to it
    assert tree.tokens == [1, 2, 3, 102] and stopped == [2]
    assert tree.stop_reasons == ["expanded", "expanded", UNRECORDED, "n_max"]
    assert [(p.parent, p.token, p.reason) for p in tree.pruned] == [(1, 103, "n_max")]


def test_grow_tree_counts_no_draft_call_for_a_level_it_could_not_propose():
    calls = []

    def propose(tree, ids):
        calls.append(list(ids))
        return [([2, 3], [math.log(0.6), math.log(0.4)]) if tree.depths[i] == 0 else None for i in ids]

    tree = grow_tree(1, rule(d_max=4, b_min=2, b_mid=2, b_max=2), propose)
    assert calls == [[0], [1, 2]] and tree.draft_calls == 1
    assert tree.stop_reasons == ["expanded", UNRECORDED, UNRECORDED]


def test_replay_partial_with_tau_zero_keeps_zero_probability_candidates_like_replay_tree():
    recorded = grow_tree(1, rule(d_max=1, b_min=2, b_mid=2, b_max=2),
                         lambda t, ids: [([2, 3], [0.0, -math.inf])])
    r = rule(d_max=1, b_min=2, b_mid=2, b_max=2, tau=0.0)
    tree, stopped = replay_partial(recorded, r)
    assert stopped == [] and tree.tokens == [1, 2, 3] and tree.to_dict() == replay_tree(recorded, r).to_dict()
    deeper, stopped = replay_partial(recorded, rule(d_max=2, b_min=2, b_mid=2, b_max=2, tau=0.0))
    assert deeper.tokens == [1, 2, 3] and stopped == [1, 2]


def test_history_adapter_moves_d0_and_tau_h_toward_target_acceptance():
    cfg = DynaTreeConfig(history=HistoryConfig(window=3, target_acceptance=0.5, eta_d=0.1, eta_h=0.1))
    up = HistoryAdapter(cfg)
    for _ in range(20):
        up.update(1.0)  # accepting everything: draft more aggressively
    assert up.state.d0 > cfg.d0 and up.state.tau_h < cfg.tau_h
    assert up.state.d0 <= cfg.d_max - 1 and up.state.tau_h > cfg.tau_l
    assert len(up.state.window) == 3
    down = HistoryAdapter(cfg)
    for _ in range(20):
        down.update(0.0)
    assert down.state.d0 < cfg.d0 and down.state.tau_h > cfg.tau_h
    assert down.state.d0 >= 1 and down.state.tau_h <= 0.99
    assert down.rule().d0 == down.state.d0_effective


def test_history_disabled_never_changes_the_rule():
    cfg = DynaTreeConfig.ablation("breadth_depth")
    a = HistoryAdapter(cfg)
    before = a.rule()
    a.update(1.0)
    assert a.rule() == before


def test_ablation_variants_lower_to_the_expected_rules():
    fixed = DynaTreeConfig.ablation("fixed_backbone").growth_rule()
    assert fixed.b_min == fixed.b_mid == fixed.b_max == 2 and fixed.d_max == 5 and fixed.rho_stop == 0.0
    full = DynaTreeConfig.ablation("full")
    assert full.adaptive and full.growth_rule().b_max == 3

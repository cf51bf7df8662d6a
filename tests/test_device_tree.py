"""The device-side tree (dynatree_core.runtime.tree.tree) against the torch-free reference (tree.py).

Both grow trees from the same draft distributions (a deterministic function of the node's token
path, so the reference's host ``propose`` and the device ``propose`` answer alike); every field of
the trees, the masks, positions, pruned candidates and the selected paths must be identical.
"""

from __future__ import annotations

import copy
import dataclasses

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynatree_core import generate, iterate
from dynatree_core.policy.config import (DynaTreeConfig, Eagle2Config, FixedTreeConfig, GrowthRule, HistoryConfig,
                                  LinearConfig, SequoiaConfig)
from dynatree_core.policy.cost_model import CostModel
from dynatree_core.drafters import Proposal
from dynatree_core.runtime.tree.tree import DeviceTree
from dynatree_core.runtime.host_syncs import HostSyncs, to_device
from dynatree_core.runtime import backend
from dynatree_core.runtime.tree.to_host import host_tree
from dynatree_core.policy.tree import DraftTree
from dynatree_core.policy.growth import grow_tree

from helpers import assert_one_read_and_the_size, cached_pair
from helpers.sync_lint import SyncLint
from helpers.device_tree import FakeDrafter, VOCAB, all_rules, draw_target_choices

CPU = torch.device("cpu")


def _grow_both(rule: GrowthRule, root: int, extra_k: int, ties: bool):
    k = rule.max_breadth + extra_k
    ref = grow_tree(root, rule, FakeDrafter(k, ties).host_propose)
    syncs = HostSyncs(pack=ties or None)  # both read paths: packed (a GPU's) and direct
    dev = DeviceTree(root, rule, k, CPU).grow(FakeDrafter(k, ties), syncs)
    return ref, dev, syncs


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rule=all_rules, root=st.integers(0, VOCAB - 1), extra_k=st.integers(0, 2), ties=st.booleans())
def test_device_growth_builds_the_reference_tree(rule, root, extra_k, ties):
    ref, dev, syncs = _grow_both(rule, root, extra_k, ties)
    got = host_tree(dev.fetch(HostSyncs(pack=True)), dev.draft_calls)
    assert got.to_dict() == ref.to_dict()  # tokens, parents, depths, log-probs, reasons, top-k, pruned
    assert dev.n == len(ref) and (dev.orig is not None or dev.depth == ref.depth)
    # the masks and positions the verify forward reads come from the device arrays
    assert np.array_equal(dev.tree_mask().numpy(), ref.ancestor_mask())
    assert np.array_equal(dev.position_offsets().numpy(), ref.position_offsets())
    # at most one host sync per draft level: none where the rule fixes every level's size, one per
    # level where breadth follows the draft's confidence (a level's size is the draft's to decide)
    assert syncs.count <= ref.draft_calls
    if rule.static_counts:
        assert syncs.count == 0
    elif len({rule.b_min, rule.b_mid, rule.b_max}) > 1 and not rule.shape:
        assert syncs.count == ref.draft_calls


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rule=all_rules, root=st.integers(0, VOCAB - 1), ties=st.booleans(), data=st.data())
def test_device_selection_finds_the_reference_path(rule, root, ties, data):
    ref, dev, _ = _grow_both(rule, root, 0, ties)
    if dev.n > len(ref.tokens):
        raise AssertionError("device tree larger than the reference")
    argmax = draw_target_choices(ref, data)
    path, bonus = ref.greedy_path(argmax)
    syncs = HostSyncs()
    sel = dev.select(torch.tensor(argmax), syncs)
    assert (sel.path, sel.bonus) == (path, bonus)
    assert syncs.count == 1
    assert sel.arrays["argmax"].tolist() == argmax


def test_budget_ties_keep_parent_then_rank_order():
    """Equal path probabilities across parents: the budget keeps the earlier parent's, lower rank first."""
    rule = GrowthRule.full(d=2, b=3, tau=0.0, n_max=5)

    class Flat(FakeDrafter):  # a uniform draft: every candidate of a level ties
        def host_propose(self, tree, ids):
            return [(list(range(3)), [float(np.float32(math.log(1 / 3)))] * 3) for _ in ids]

        def propose(self, tree, ids, level):
            q = ids.shape[0]
            return Proposal(torch.arange(3).repeat(q, 1), torch.full((q, 3), float(np.float32(math.log(1 / 3)))))

    ref = grow_tree(0, rule, Flat(3, False).host_propose)
    dev = DeviceTree(0, rule, 3, CPU).grow(Flat(3, False), HostSyncs())
    got = host_tree(dev.fetch(HostSyncs()), dev.draft_calls)
    assert got.to_dict() == ref.to_dict()
    assert got.parents == [-1, 0, 0, 0, 1, 1]  # level 2: node 1's first two children, node 2's none


@pytest.mark.parametrize("pack", [True, None])  # the GPU's packed transfer, and the CPU's direct read
def test_host_syncs_fetch_round_trips_every_dtype_in_one_transfer(pack):
    syncs = HostSyncs(pack)
    got = syncs.fetch(i=torch.tensor([3, -1]), b=torch.tensor([True, False]), f=torch.tensor([0.1], dtype=torch.float32),
                      d=torch.tensor(2.5, dtype=torch.float64), s=torch.tensor(7))
    assert syncs.count == 1
    assert got["i"].tolist() == [3, -1] and got["b"].tolist() == [True, False]
    assert got["f"][0] == float(np.float32(0.1)) and got["d"] == 2.5 and int(got["s"]) == 7
    assert [got[n].dtype for n in "ibfds"] == [np.int64, np.bool_, np.float64, np.float64, np.int64]
    assert to_device([1, 2], CPU).tolist() == [1, 2]


def test_deferred_tree_is_built_on_first_read():
    built = []

    def build():
        built.append(1)
        return DraftTree.with_root(5)

    t = DraftTree.deferred(build)
    assert not built
    assert t.tokens == [5] and t.depth == 0 and built == [1]
    assert t.to_dict() == DraftTree.with_root(5).to_dict() and built == [1]
    with pytest.raises(AttributeError):
        t.no_such_field


@pytest.mark.parametrize("method,config", [
    ("ar", None), ("linear", LinearConfig(k=3)), ("fixed_tree", FixedTreeConfig(d=3, b=2, n_max=8)),
    ("dynatree", DynaTreeConfig()), ("dynatree", DynaTreeConfig(kv_mode="recompute"))])
def test_the_loop_syncs_once_per_draft_level_and_once_per_verify(method, config):
    pair = cached_pair("llama", "sdpa", 0.02)
    recs = list(iterate(pair, [5, 9, 14, 3], method, config, max_new_tokens=24, ignore_eos=True))
    assert recs
    static = config is not None and config.growth_rule().static_counts
    assert static == (method == "linear")  # a fixed tree prunes by tau: its level sizes depend on the draft
    for rec in recs:
        # static level sizes (linear): the verify's read alone
        assert rec.host_syncs == (1 if static else rec.draft_forwards + 1)
        assert rec.draft_forwards == (0 if method == "ar" else rec.tree.draft_calls)
    m = generate(pair, [5, 9, 14, 3], method, config, max_new_tokens=24, ignore_eos=True).metrics
    assert m.host_sync_excess <= 0 and m.host_syncs == sum(r.host_syncs for r in recs)
    assert 0 < m.forward_time_s < m.wall_time_s and m.engine_overhead_ms is not None


def test_untraced_records_build_their_trees_lazily_and_alike():
    pair = cached_pair("llama", "sdpa", 0.02)
    cfg = DynaTreeConfig(trace_top_k=4)
    fast = list(iterate(pair, [5, 9, 14], "dynatree", cfg, max_new_tokens=16, ignore_eos=True))
    traced = list(iterate(pair, [5, 9, 14], "dynatree", cfg, max_new_tokens=16, ignore_eos=True, trace=True))
    assert "_build" in vars(fast[0].tree)  # not materialised until read
    for a, b in zip(fast, traced):
        assert a.tree.tokens == b.tree.tokens and a.tree.parents == b.tree.parents
        assert a.accepted_path == b.accepted_path and a.committed == b.committed


#: every method's loop, with what makes each one touch the device differently: a history adapter
#: that moves tau_h every iteration, a cost-aware fill, EAGLE-2's rerank, Sequoia's static shape
LOOP_CONFIGS = [
    ("ar", None), ("linear", LinearConfig(k=3)), ("fixed_tree", FixedTreeConfig(d=3, b=2, tau=0.01, n_max=8)),
    ("dynatree", DynaTreeConfig(history=HistoryConfig(window=2, eta_h=0.2))),
    ("dynatree", DynaTreeConfig(cost_aware=True, cost=CostModel(verify_s=(0.01,) * 12, draft_s=0.0005))),
    ("eagle2", Eagle2Config(k=3, depth=3, n_total=6)),
    ("sequoia", SequoiaConfig(n_max=8, d_max=4, acceptance=(0.5, 0.2, 0.1)))]


@pytest.mark.parametrize("method,config", LOOP_CONFIGS)
def test_the_loop_reads_the_device_only_where_it_counts(method, config, monkeypatch):
    pair = cached_pair("llama", "sdpa", 0.02)
    assert SyncLint(monkeypatch).steady_calls(pair, [5, 9, 14, 3], method, config) == []


@pytest.mark.parametrize("method,config", [("linear", LinearConfig(k=4)), ("dynatree", None)])
def test_the_feature_and_lookup_drafters_read_the_device_only_where_it_counts(method, config, monkeypatch):
    """The default pair's drafter kind (a feature draft with prompt lookup mixed in), on a prompt
    that repeats itself so that lookup proposes continuations."""
    from dynatree_core.drafters import LookupMix
    from dynatree_core.pairs.pair import ModelPair
    from dynatree_core.pairs.tiny import tiny_feature_pair

    base = tiny_feature_pair()
    pair = ModelPair(target=base.target, draft=base.draft, tokenizer=base.tokenizer, lookup=LookupMix())
    assert SyncLint(monkeypatch).steady_calls(pair, [5, 9, 14, 3, 7, 5, 9, 14, 3, 7, 5, 9], method, config) == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run by scripts/gpu_check.sh)")
@pytest.mark.parametrize("method,config", LOOP_CONFIGS + [("dynatree", DynaTreeConfig())])
def test_cuda_reports_no_synchronisation_the_loop_did_not_count(method, config):
    from dynatree_core.pairs.pair import ModelPair
    from dynatree_core.engine.sync_audit import audit_host_syncs

    # copies: the cached models are shared with every other test (moving them, even back, would
    # strand the pairs that share their target on whatever device the move left it)
    cached = cached_pair("llama", "sdpa", 0.02)
    pair = ModelPair(target=copy.deepcopy(cached.target).to("cuda"), draft=copy.deepcopy(cached.draft).to("cuda"),
                     target_name="tiny", draft_name="tiny")
    rows = audit_host_syncs(pair, [5, 9, 14, 3], method, config, max_new_tokens=16)
    assert rows
    static = config is None or config.growth_rule().static_counts  # AR, linear, EAGLE-2 at tau = 0
    for row in rows:
        assert row["observed"] <= row["counted"] == (1 if static else row["draft_levels"] + 1), row


# --- the device-resident draft phase (the fast path's: no host read until the verification) --------
from dynatree_core.runtime.tree.tree import resident_shape  # noqa: E402
from dynatree_core.runtime.tree.phase import DraftPhase  # noqa: E402
from dynatree_core.runtime.tree.level_step import level_step, resident_step  # noqa: E402
from dynatree_core.runtime.static.compile_cache import own_code  # noqa: E402
from helpers.device_tree import eagle_rules, rules, shape_rules, uniform_rules  # noqa: E402

#: every policy the resident path runs (the cost-aware rule reads each level's size: eager-style)
resident_rules = st.one_of(rules, shape_rules, eagle_rules, uniform_rules)


def _grow_resident(rule: GrowthRule, root: int, k: int, ties: bool, step=None, early_exit: bool = False):
    syncs = HostSyncs(pack=True)  # the GPU's read path: every read counted
    phase = DraftPhase("static", CPU, step=step) if step is not None else None
    dev = DeviceTree(root, rule, k, CPU, resident=True, phase=phase, early_exit=early_exit)
    return dev.grow(FakeDrafter(k, ties), syncs), syncs


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rule=resident_rules, root=st.integers(0, VOCAB - 1), extra_k=st.integers(0, 2), ties=st.booleans(),
       early_exit=st.booleans(), data=st.data())
def test_resident_growth_builds_the_reference_tree_without_reading_the_device(rule, root, extra_k, ties, early_exit,
                                                                              data):
    """A fixed frontier, every level run (padding where nothing is expanded) or stopped where the
    device has posted an empty frontier, the counts read with the selection: the same tree node for
    node, the same path, one host read in all."""
    k = rule.max_breadth + extra_k
    ref = grow_tree(root, rule, FakeDrafter(k, ties).host_propose)
    dev, syncs = _grow_resident(rule, root, k, ties, early_exit=early_exit)
    assert syncs.count == 0  # growth read nothing
    argmax = draw_target_choices(ref, data)
    sel = dev.select(torch.tensor(argmax + [0] * (dev.n - len(argmax))), syncs)
    assert syncs.count == 1
    assert host_tree(sel.arrays, dev.draft_calls).to_dict() == ref.to_dict()
    assert (sel.path, sel.bonus) == ref.greedy_path(argmax)
    assert dev.n == len(ref) and dev.draft_calls == ref.draft_calls
    assert dev.orig is not None or dev.depth == ref.depth


def test_the_early_exit_runs_the_levels_that_expand_and_never_reads_the_device():
    """On a CPU the posted flag lands at once: the resident growth runs exactly the levels the eager
    one does (a padding level past the tree's depth never runs), with no counted read."""
    rule = DynaTreeConfig.gpu().growth_rule()

    class Counting(FakeDrafter):
        calls = 0

        def propose(self, tree, ids, level):
            Counting.calls += 1
            return super().propose(tree, ids, level)

    ref = grow_tree(3, rule, FakeDrafter(4, False).host_propose)
    dev = DeviceTree(3, rule, 4, CPU, resident=True, early_exit=True).grow(Counting(4, False), HostSyncs(pack=True))
    assert Counting.calls == ref.draft_calls < dev.levels
    sel = dev.select(torch.zeros(dev.n, dtype=torch.long), HostSyncs(pack=True))
    assert host_tree(sel.arrays, dev.draft_calls).to_dict() == ref.to_dict()


def test_the_frontier_width_bound_is_what_rho_stop_allows():
    """At most ⌊1/ρ_stop⌋ nodes of one depth have p(u) >= ρ_stop: the bound is the frontier's width."""
    base = GrowthRule(d0=3, d_max=6, b_min=1, b_mid=2, b_max=4, tau_h=0.8, tau_l=0.3, rho_stop=0.1, rho_deep=0.5,
                      tau=0.0, n_max=64)
    assert resident_shape(base, 8) == (6, 10, 65)
    assert resident_shape(dataclasses.replace(base, rho_stop=0.25), 8)[1] == 4  # 1/0.25 exactly: 4, not 3
    assert resident_shape(GrowthRule.chain(4), 1) == (4, 1, 5)
    assert resident_shape(GrowthRule.full(3, 2, 0.0, 64), 2)[1] == 4  # B^(levels - 1)
    assert resident_shape(dataclasses.replace(base, lookup_tail=6, tail_n_max=6), 8)[2] == 71


def test_a_frontier_wider_than_its_bound_is_an_error_not_a_silent_cut():
    """The overflow check works: a width forced below what a level expands fails at the selection."""
    rule = GrowthRule.full(2, 3, 0.0, 12)
    dev = DeviceTree(0, rule, 3, CPU, resident=True)
    dev.width = 1  # level 1 expands 3 nodes
    dev.grow(FakeDrafter(3, False), HostSyncs())
    with pytest.raises(RuntimeError, match="frontier's width"):
        dev.select(torch.zeros(dev.n, dtype=torch.long), HostSyncs())


@pytest.mark.parametrize("rule", [
    DynaTreeConfig.gpu().growth_rule(), DynaTreeConfig.cpu().growth_rule(), GrowthRule.chain(3),
    GrowthRule.full(3, 2, 0.02, 8), Eagle2Config(k=3, depth=3, n_total=6).growth_rule(),
    SequoiaConfig(n_max=8, d_max=4, acceptance=(0.5, 0.2, 0.1)).growth_rule()],
    ids=["dynatree-gpu", "dynatree-cpu", "linear", "fixed", "eagle2", "sequoia"])
def test_the_level_step_compiles_whole_for_every_policy(rule):
    """torch.compile(fullgraph=True) traces the level step without a graph break: no data-dependent
    Python control flow, no host read (dynamo's eager backend: the tracing is the proof, inductor's
    code generation is the GPU's runtime); the compiled step grows the same tree."""
    # a code object of its own (no dynamo reset): the real step's graphs stay those the runtime made
    step = torch.compile(own_code(resident_step), fullgraph=True, dynamic=False, backend="eager")
    k = max(rule.max_breadth, 2)
    plain, _ = _grow_resident(rule, 7, k, False)
    compiled, syncs = _grow_resident(rule, 7, k, False, step=step)
    assert syncs.count == 0
    argmax = torch.zeros(plain.n, dtype=torch.long)
    a, b = plain.select(argmax, HostSyncs()).arrays, compiled.select(argmax, HostSyncs()).arrays
    assert a.keys() == b.keys() and all(np.array_equal(a[x], b[x]) for x in a)


@pytest.mark.parametrize("method,config", [mc for mc in LOOP_CONFIGS if not getattr(mc[1], "cost_aware", False)]
                         + [("dynatree", DynaTreeConfig.cpu()), ("dynatree", DynaTreeConfig.gpu())])
def test_the_fast_path_reads_the_device_once_per_iteration(method, config, monkeypatch):
    """The device-resident draft phase: one counted read per iteration (the selection, which
    carries the tree's counts), whatever the policy, where the size read is not worth its price (a GPU's
    choice where it saves too little); one more where it is (a CPU's: free); and nothing uncounted (the lint)."""
    pair = cached_pair("llama", "sdpa", 0.02)
    prompt = [5, 9, 14, 3, 5, 9, 14]
    assert SyncLint(monkeypatch).steady_calls(pair, prompt, method, config, "static") == []
    run = iterate(pair, prompt, method, config, max_new_tokens=24, ignore_eos=True, runtime="static")
    assert_one_read_and_the_size(list(run), run)
    monkeypatch.setattr(backend, "read_price", lambda device: 1.0)  # untimed, and not free: never made
    recs = list(iterate(pair, prompt, method, config, max_new_tokens=24, ignore_eos=True, runtime="static"))
    assert recs and all(r.host_syncs == 1 for r in recs)


def test_the_cost_aware_rule_on_the_fast_path_still_reads_each_level():
    """The one policy that keeps a read per level on the fast path: its E / T rule sizes each level."""
    pair = cached_pair("llama", "sdpa", 0.02)
    cfg = DynaTreeConfig(cost_aware=True, cost=CostModel(verify_s=(0.01,) * 12, draft_s=0.0005))
    recs = list(iterate(pair, [5, 9, 14, 3], "dynatree", cfg, max_new_tokens=16, ignore_eos=True, runtime="static"))
    assert all(r.host_syncs == r.draft_forwards + 1 for r in recs)

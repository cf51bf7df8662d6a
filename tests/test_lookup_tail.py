"""The prompt-lookup tail (GrowthRule.lookup_tail): its spans against a plain-Python reference, the
device tree against the torch-free reference growth, exactness with every drafting method, EOS
inside a tail, the history's view of it, traces, replays and bad input."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynatree_core import generate, iterate
from dynatree_core.policy.config import (ARConfig, DynaTreeConfig, Eagle2Config, FixedTreeConfig, GrowthRule, LinearConfig,
                                  SequoiaConfig)
from dynatree_core.runtime.tree.tree import DeviceTree
from dynatree_core.runtime.host_syncs import HostSyncs
from dynatree_core.runtime.tree.to_host import host_tree
from dynatree_core.drafters import DraftContext, LookupDrafter, PromptLookup
from dynatree_core.runtime.ngram import lookup_spans
from dynatree_core.policy.tree import LOOKUP_TAIL
from dynatree_core.policy.growth import grow_tree
from dynatree_core.policy.tail import lookup_span
from dynatree_core.policy.replay import replay_partial

from helpers import cached_pair, reference_greedy
from helpers.device_tree import VOCAB, FakeDrafter, all_rules, draw_target_choices
from helpers.exactness import ARCHS, ATTNS, method_configs
from helpers.lookup import check_eos_stop

CPU = torch.device("cpu")

small_seqs = st.lists(st.integers(0, 5), min_size=0, max_size=40)  # a small alphabet: n-grams repeat


@settings(max_examples=300, deadline=None)
@given(seq=small_seqs, paths=st.lists(st.lists(st.integers(0, 6), max_size=4), min_size=1, max_size=4),
       lo=st.integers(1, 3), extra=st.integers(0, 3), m=st.integers(1, 8))
def test_lookup_spans_match_the_reference(seq, paths, lo, extra, m):
    """The device's copy (one batched op for every context) gives the plain-Python spans: tokens,
    how many are real, and log(C / (C + 1)) to the bit."""
    source = PromptLookup(max_ngram=lo + extra, min_ngram=lo)
    width = source.max_ngram
    rows = []
    for p in paths:
        ctx = (seq + p)[-width:]
        rows.append([-1] * (width - len(ctx)) + ctx)
    span, lps, real = lookup_spans(torch.tensor(seq, dtype=torch.long), torch.tensor(rows, dtype=torch.long),
                                   source, m)
    for r, p in enumerate(paths):
        want = lookup_span(seq, seq + p, m, source.max_ngram, source.min_ngram)
        n = int(real[r])
        assert n == len(want)
        assert span[r, :n].tolist() == [t for t, _ in want]
        assert lps[r, :n].tolist() == [lp for _, lp in want]


def test_a_span_prefers_the_latest_occurrence_with_room_after_it():
    # "1 2" occurs at 0 and 4; the later one has only one token after it, so the span is read after the first
    seq = [1, 2, 7, 8, 9, 1, 2, 5]
    assert [t for t, _ in lookup_span(seq, [3, 1, 2], 3)] == [7, 8, 9]
    assert [t for t, _ in lookup_span(seq, [3, 1, 2], 1)] == [5]  # room enough: the latest
    assert [t for t, _ in lookup_span(seq, [9, 1, 2], 3)] == [5]  # the longest match wins: "9 1 2"
    assert lookup_span(seq, [3, 4], 3) == []  # no match of two tokens
    assert lookup_span(seq, [8, 2], 3) == []  # a one-token match is not followed


def _with_tail(rule: GrowthRule, m: int, budget: int) -> GrowthRule:
    return dataclasses.replace(rule, lookup_tail=m, tail_n_max=budget)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rule=all_rules, seq=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=30).map(lambda s: s * 2),
       m=st.integers(1, 6), budget=st.integers(1, 12), room=st.integers(0, 10), ties=st.booleans(), data=st.data())
def test_device_tail_builds_the_reference_tree_and_path(rule, seq, m, budget, room, ties, data):
    """Grow the same tree on the device and in the reference, add the tail to both: every field,
    the mask, the positions and the selected path agree; the tail costs one host read."""
    rule = _with_tail(rule, m, budget)
    root = seq[-1]
    k = rule.max_breadth
    max_depth = rule.d_max + room
    lookup = LookupDrafter(PromptLookup(max_ngram=5))
    lookup.start(seq, DraftContext())

    def tail(tree, leaves):
        return [lookup_span(seq, seq + list(tree.token_path(i))[1:], m) for i in leaves]

    ref = grow_tree(root, rule, FakeDrafter(k, ties).host_propose, tail, max_depth)
    dev = DeviceTree(root, rule, k, CPU).grow(FakeDrafter(k, ties), HostSyncs())
    syncs = HostSyncs(pack=ties or None)
    dev.add_tail(lookup.committed_on(dev.device), lookup.source, syncs, max_depth)
    got = host_tree(dev.fetch(HostSyncs(pack=True)), dev.draft_calls)
    assert got.to_dict() == ref.to_dict()
    assert np.array_equal(dev.tree_mask().numpy(), ref.ancestor_mask())
    assert np.array_equal(dev.position_offsets().numpy(), ref.position_offsets())
    n_tail = ref.stop_reasons.count(LOOKUP_TAIL)
    assert dev.tail_nodes == n_tail <= budget and syncs.count <= 1
    assert all(d <= max_depth for d, r in zip(ref.depths, ref.stop_reasons) if r == LOOKUP_TAIL)
    argmax = draw_target_choices(ref, data)  # mostly a child's token: paths run into the tail
    sel = dev.select(torch.tensor(argmax), HostSyncs())
    assert (sel.path, sel.bonus) == ref.greedy_path(argmax)


# repetitive prompts, so that lookup has something to copy; any prompt must stay exact
tail_prompts = st.lists(st.integers(2, 9), min_size=1, max_size=12).map(lambda p: tuple(p * 2))
tails = st.tuples(st.integers(1, 8), st.integers(1, 12))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arch=st.sampled_from(ARCHS), attn=st.sampled_from(ATTNS), noise=st.sampled_from([0.0, 0.1, 1.0]),
       mc=method_configs.filter(lambda mc: mc[0] != "ar"), tail=tails, prompt=tail_prompts, n=st.integers(0, 24))
def test_every_decoder_with_a_lookup_tail_equals_target_greedy(arch, attn, noise, mc, tail, prompt, n):
    method, config = mc
    config = config.replace(lookup_tail=tail[0], tail_n_max=tail[1])
    res = generate(cached_pair(arch, attn, noise), list(prompt), method, config, max_new_tokens=n, ignore_eos=True)
    assert res.tokens == reference_greedy(arch, attn, prompt, n)
    assert res.metrics.new_tokens == n


@settings(max_examples=30, deadline=None)
@given(arch=st.sampled_from(ARCHS), mc=method_configs.filter(lambda mc: mc[0] != "ar"), tail=tails,
       prompt=tail_prompts, cut=st.integers(0, 15))
def test_a_lookup_tail_stops_at_the_first_eos_even_inside_an_accepted_tail(arch, mc, tail, prompt, cut):
    method, config = mc
    # an exact draft: paths run to the leaves, and the tails below them get accepted
    check_eos_stop(cached_pair(arch, "sdpa", 0.0), arch, (method, config.replace(lookup_tail=tail[0],
                                                                                  tail_n_max=tail[1])), prompt, cut)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("method,config", [
    ("linear", LinearConfig(k=1, lookup_tail=1, tail_n_max=1)),
    ("fixed_tree", FixedTreeConfig(d=1, b=3, n_max=1, lookup_tail=8, tail_n_max=1)),
    ("dynatree", DynaTreeConfig(n_max=1, lookup_tail=6, tail_n_max=12, kv_mode="recompute")),
    ("dynatree", DynaTreeConfig.cpu(lookup_tail=6, tail_n_max=6)),
    ("eagle2", Eagle2Config(k=3, depth=4, n_total=3, lookup_tail=4, tail_n_max=8)),
    ("sequoia", SequoiaConfig(n_max=6, d_max=3, acceptance=(0.5, 0.2), lookup_tail=4, tail_n_max=4)),
])
@pytest.mark.parametrize("n", [1, 2, 40])
def test_edge_configs_with_a_lookup_tail_are_exact(arch, method, config, n):
    """Budgets of 1, depth 1, EAGLE-2's rerank and Sequoia's static tree under a tail, and token
    budgets that leave no room for one (the tail never goes past max_new_tokens)."""
    prompt = (5, 9, 2, 33, 7, 5, 9, 2, 33)
    res = generate(cached_pair(arch, "eager", 0.0), list(prompt), method, config, max_new_tokens=n, ignore_eos=True)
    assert res.tokens == reference_greedy(arch, "eager", prompt, n)


def _repetitive_run(config: DynaTreeConfig, n: int = 96):
    """An exact draft on a tiny target whose greedy output soon repeats itself: the drafted paths
    run to their leaves, and lookup continues them."""
    pair = cached_pair("llama", "sdpa", 0.0)
    prompt = [5, 9, 14, 3, 5, 9, 14, 3]
    return list(iterate(pair, prompt, "dynatree", config, max_new_tokens=n, ignore_eos=True, trace=True))


def test_tail_nodes_are_verified_accepted_and_counted_apart_from_the_draft():
    base = DynaTreeConfig(n_max=4, d0=1, d_max=2)
    recs = _repetitive_run(base.replace(lookup_tail=6, tail_n_max=6))
    plain = _repetitive_run(base)
    tail_nodes = [(r, i) for r in recs for i, s in enumerate(r.tree.stop_reasons) if s == LOOKUP_TAIL]
    assert tail_nodes, "lookup never continued a leaf"
    for r, i in tail_nodes:  # never fed to the draft, verified by the target
        assert r.tree.topk_tokens[i] is None and r.tree.confidences[i] is None
        assert r.target_argmax[i] is not None and r.tree.parents[i] < i
    # tails get accepted on a repetitive continuation: fewer iterations for the same tokens
    assert any(r.tree.stop_reasons[i] == LOOKUP_TAIL for r in recs for i in r.accepted_path)
    assert len(recs) < len(plain)
    assert [t for r in recs for t in r.committed] == [t for r in plain for t in r.committed]
    # a tail's lookup is one more host read, budgeted like a level; acceptance counts tail nodes as drafted
    res = generate(cached_pair("llama", "sdpa", 0.0), [5, 9, 14, 3, 5, 9, 14, 3], "dynatree",
                   base.replace(lookup_tail=6, tail_n_max=6), max_new_tokens=96, ignore_eos=True)
    assert res.metrics.host_sync_excess <= 0 and 0.0 <= res.metrics.acceptance_rate <= 1.0
    # the history reads the draft's acceptance, accepted drafted nodes over the drafted depth: with
    # tail nodes counted it would pass 1 where a path runs into a tail
    for r in recs:
        assert all(0.0 <= a <= 1.0 for a in r.history_after["window"])


def test_a_replay_reattaches_the_recorded_tails():
    cfg = DynaTreeConfig(n_max=4, d0=1, d_max=2, lookup_tail=6, tail_n_max=6)
    cfg = cfg.replace(history=dataclasses.replace(cfg.history, enabled=False))
    rule = cfg.growth_rule()  # the config's rule carries its tail
    assert (rule.lookup_tail, rule.tail_n_max) == (6, 6)
    recs = _repetitive_run(cfg)
    with_tail = [r for r in recs if LOOKUP_TAIL in r.tree.stop_reasons]
    assert with_tail
    for r in with_tail:
        again, stopped = replay_partial(r.tree, rule)
        assert again.to_dict() == r.tree.to_dict() and not stopped
        # without the tail, the replay is the drafted tree alone
        bare, _ = replay_partial(r.tree, dataclasses.replace(rule, lookup_tail=0))
        assert LOOKUP_TAIL not in bare.stop_reasons and len(bare) < len(r.tree)


def test_a_drafter_without_its_own_lookup_gets_one_for_the_tail():
    """The independent model draft (no lookup mixed in): the loop keeps a lookup of its own."""
    pair = cached_pair("gpt_neox", "sdpa", 0.1)
    assert pair.lookup is None
    prompt = [5, 9, 14, 3, 5, 9, 14, 3]
    res = generate(pair, prompt, "linear", LinearConfig(k=2, lookup_tail=5), max_new_tokens=60, ignore_eos=True,
                   trace=True)
    assert res.tokens == reference_greedy("gpt_neox", "sdpa", tuple(prompt), 60)
    assert any(LOOKUP_TAIL in r.tree.stop_reasons for r in res.trace.iterations)
    assert res.trace.config["lookup_tail"] == 5 and res.trace.config["tail_n_max"] == 6


@pytest.mark.parametrize("make,field,match", [
    (lambda: LinearConfig(lookup_tail=-1), "lookup_tail", r"lookup_tail must be >= 0"),
    (lambda: DynaTreeConfig(lookup_tail=2, tail_n_max=0), "tail_n_max", r"tail_n_max must be >= 1"),
    (lambda: DynaTreeConfig(lookup_tail=1.5), "lookup_tail", r"lookup_tail"),
    (lambda: ARConfig(lookup_tail=3), "lookup_tail", r"lookup_tail must be 0 for method 'ar'"),
])
def test_bad_tail_settings_are_refused_naming_the_parameter(make, field, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_the_parameter_explorer_replays_a_recorded_tail():
    """The explorer starts at the recorded rule, lookup tail included, and rebuilds the recorded tree."""
    import dynatree_viz as dv

    pair = cached_pair("llama", "sdpa", 0.0)
    cfg = DynaTreeConfig(n_max=4, d0=1, d_max=2, lookup_tail=6, tail_n_max=6)
    trace = generate(pair, [5, 9, 14, 3, 5, 9, 14, 3], "dynatree", cfg, max_new_tokens=64, ignore_eos=True,
                     trace=True).trace
    i = next(i for i, r in enumerate(trace.iterations) if LOOKUP_TAIL in r.tree.stop_reasons)
    ex = dv.explore(trace, iteration=i, tokenizer=lambda ids: " ".join(map(str, ids)))
    assert ex.error is None
    assert ex.result.tree.tokens == trace.iterations[i].tree.tokens
    assert LOOKUP_TAIL in ex.result.tree.stop_reasons


@pytest.mark.parametrize("arch", ARCHS)
def test_a_live_session_grows_the_tail_generate_grows(arch):
    """The explorer's live backend (TreeSession) adds the same tail as the decode loop's first iteration."""
    from dynatree_core.engine.session import TreeSession

    pair = cached_pair(arch, "sdpa", 0.0)
    # a prompt whose last tokens occurred before, followed by what the target writes after them:
    # the drafted leaves' contexts then match, and the first iteration has a tail
    base = [2, 4, 6, 8, 10]
    prompt = base + reference_greedy(arch, "sdpa", tuple(base), 6) + base
    cfg = FixedTreeConfig(d=2, b=2, tau=0.0, lookup_tail=4, tail_n_max=4)
    first = generate(pair, prompt, "fixed_tree", cfg, max_new_tokens=30, ignore_eos=True, trace=True).trace[0]
    assert LOOKUP_TAIL in first.tree.stop_reasons
    tree, argmax = TreeSession(pair, prompt).regrow(cfg.growth_rule())
    assert tree.tokens == first.tree.tokens and tree.stop_reasons == first.tree.stop_reasons
    assert argmax == first.target_argmax


def test_the_oracle_scores_a_tail_and_agrees_with_the_runs_own_metrics():
    """The oracle scores a tail's nodes like drafted ones: its ℓ̄ and mean tree size are the run's
    own Metrics (a replay that left the tail out, as it once did, would report the drafted part
    only: smaller here), and no iteration beats the best tree of its own size."""
    from dynatree_core.records.oracle import oracle_trace, summarize_oracle

    cfg = DynaTreeConfig(n_max=4, d0=1, d_max=2, lookup_tail=6, tail_n_max=6)
    res = generate(cached_pair("llama", "sdpa", 0.0), [5, 9, 14, 3, 5, 9, 14, 3], "dynatree", cfg,
                   max_new_tokens=96, ignore_eos=True, trace=True)
    rows = oracle_trace(res.trace)
    summary = summarize_oracle(rows)
    assert summary.mean_accepted == pytest.approx(res.metrics.mean_accepted_length)
    assert sum(r.nodes for r in rows) / len(rows) == pytest.approx(res.metrics.mean_tree_size)
    assert summary.mean_tail_accepted > 0  # the tail accepted tokens: without them ℓ̄ would be smaller
    assert summary.mean_accepted - summary.mean_tail_accepted < res.metrics.mean_accepted_length
    assert all(r.accepted <= r.best(r.nodes) for r in rows)
    assert summary.gap_own >= 0

"""Several prompts at once (:mod:`dynatree_core.engine.batch`): every row is its prompt's batch-1 decode.

Property tests over tiny random GPT-NeoX and Llama models: B from 1 to 5, random prompt lengths and
budgets (0 and 1 among them), every method with random configs (both KV modes), greedy against the
target's own ``generate``, ``match`` and ``rejection`` against the row's batch-1 run with its seed.
The batch must really be one: one target forward per batch iteration and one draft forward per
level whatever B (counted by forward hooks), and a deliberately desynchronised variant (a row's
positions taken from its padded column) is shown to fail.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynatree_core import generate, iterate
from dynatree_core.engine.batch import BatchRun
from dynatree_core.pairs.pair import ModelPair
from dynatree_core.policy.batch_budget import BatchBudget, BatchCost
from dynatree_core.policy.config import DynaTreeConfig, HistoryConfig, LinearConfig
from dynatree_core.drafters import LookupMix
from dynatree_core.policy.lookup import PromptLookup
from dynatree_core.records.trace import Trace
from dynatree_core.runtime.cache.rows import RowsCache

from helpers import cached_pair, cached_target, reference_greedy
from helpers.exactness import ARCHS, ATTNS, DIFFERING_NOISE, method_configs, prompts

batch_prompts = st.lists(prompts, min_size=1, max_size=5)
#: the runtimes a batch runs on: the dynamic caches, and static buffers with bucketed verify widths
RUNTIMES = ("eager", "static")


def _greedy_rows(arch, attn, rows, news):
    return [reference_greedy(arch, attn, p, n) for p, n in zip(rows, news)]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arch=st.sampled_from(ARCHS), attn=st.sampled_from(ATTNS), noise=st.sampled_from((0.0, 0.02, 0.1, 1.0)),
       mc=method_configs, rows=batch_prompts, runtime=st.sampled_from(RUNTIMES), data=st.data())
def test_every_row_equals_the_target_greedy(arch, attn, noise, mc, rows, runtime, data):
    method, config = mc
    news = data.draw(st.lists(st.integers(0, 16), min_size=len(rows), max_size=len(rows)))
    res = generate(cached_pair(arch, attn, noise), [list(p) for p in rows], method, config, max_new_tokens=news,
                   ignore_eos=True, runtime=runtime)
    assert [r.tokens for r in res] == _greedy_rows(arch, attn, rows, news)
    assert [r.metrics.new_tokens for r in res] == news


@settings(max_examples=25, deadline=None)
@given(arch=st.sampled_from(ARCHS), mc=method_configs, rows=st.lists(prompts, min_size=2, max_size=4),
       cut=st.integers(0, 11), runtime=st.sampled_from(RUNTIMES), data=st.data())
def test_a_row_stops_at_its_first_eos_even_inside_an_accepted_path(arch, mc, rows, cut, runtime, data):
    method, config = mc
    pair = cached_pair(arch, "sdpa", 0.0)  # an identical draft: the EOS lands inside an accepted path
    which = data.draw(st.integers(0, len(rows) - 1))
    eos = reference_greedy(arch, "sdpa", rows[which], 12)[cut]
    res = generate(pair, [list(p) for p in rows], method, config, max_new_tokens=12, eos_token_id=eos,
                   runtime=runtime)
    for p, r in zip(rows, res):
        ref = reference_greedy(arch, "sdpa", p, 12)
        expected = ref[: ref.index(eos) + 1] if eos in ref else ref
        assert r.tokens == expected
        assert r.metrics.stopped_by == ("eos" if eos in ref else "max_new_tokens")


@pytest.mark.parametrize("verify", ["match", "rejection"])
@pytest.mark.parametrize("method", ["linear", "fixed_tree", "dynatree", "eagle2", "sequoia"])
def test_sampled_rows_equal_their_batch_one_runs_with_their_seeds(verify, method):
    """``match``: each row is seeded AR with its seed; ``rejection``: each row draws from its own
    stream, so it is its batch-1 run with that seed, token for token (its draws never depend on its
    neighbours: the row's prompt is unchanged while the others change)."""
    pair = cached_pair("llama", "sdpa", DIFFERING_NOISE["llama"])
    rows, seeds = [[5, 9, 2, 33, 7], [1, 2], [40, 41, 42, 43, 44, 45, 3], [7]], [3, 4, 5, 6]
    kw = dict(max_new_tokens=14, ignore_eos=True, temperature=0.8, top_p=0.95, verify=verify)
    res = generate(pair, rows, method, seed=seeds, **kw)
    alone = [generate(pair, p, method, seed=s, **kw).tokens for p, s in zip(rows, seeds)]
    assert [r.tokens for r in res] == alone
    if verify == "match":  # and that is seeded AR's
        assert alone == [generate(pair, p, "ar", seed=s, **kw | {"verify": "match"}).tokens
                         for p, s in zip(rows, seeds)]
    others = generate(pair, [[9, 9, 9], rows[1], [2] * 11, [30, 31]], method, seed=[11, 4, 12, 13], **kw)
    assert others[1].tokens == res[1].tokens


class _Forwards:
    """Counts a module's forward calls (the batch's: one call serves every row)."""

    def __init__(self, module: torch.nn.Module):
        self.calls = 0
        self.handle = module.register_forward_hook(self._hook)

    def _hook(self, *args):
        self.calls += 1


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("rows", [1, 3, 5])
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_one_target_forward_per_batch_iteration_and_one_draft_forward_per_level(arch, rows, runtime):
    pair = cached_pair(arch, "sdpa", DIFFERING_NOISE[arch])
    prompts_ = [[5 + b, 9, 2, 33, 7][: 2 + b] for b in range(rows)]
    t, d = _Forwards(pair.target), _Forwards(pair.draft)
    try:
        run = iterate(pair, prompts_, "dynatree", DynaTreeConfig(n_max=12), max_new_tokens=[12 + 3 * b for b in
                                                                                          range(rows)],
                      ignore_eos=True, runtime=runtime)
        its = list(run)
        res = run.finish()
    finally:
        t.handle.remove()
        d.handle.remove()
    # one prefill, then one verify forward per batch iteration for all active rows
    assert t.calls == 1 + len(its) == run.target_forwards
    # one draft forward per level: the deepest row's levels each iteration, not a sum over rows
    assert d.calls == sum(i.draft_forwards for i in its) == run.draft_forwards
    levels = [max(r.draft_forwards for r in i.records.values()) for i in its]
    assert [i.draft_forwards for i in its] == levels
    if rows > 1:  # a loop over rows would run each row's forwards: strictly more
        assert t.calls < 1 + sum(r.metrics.iterations for r in res)
        assert d.calls < sum(r.metrics.draft_forwards for r in res)
    for i in its:
        widest = max(len(r.tree.tokens) for r in i.records.values())
        # static shapes: the widest tree padded to the next bucket (1, 2, 4, 8, 16 for N_max 12)
        assert i.padded_width == (widest if runtime == "eager" else next(b for b in run.buckets if b >= widest))


def test_rows_positions_taken_from_the_padded_columns_fail(monkeypatch):
    """The desynchronised variant earlier batched implementations shipped (positions from the padded
    cache index, not the row's own count) changes tokens: the property above would catch it."""
    arch = "llama"
    rows = [[5, 9, 2, 33, 7, 8, 9, 10, 11], [1, 2], [40, 41, 42]]
    news = [10, 10, 10]
    forward = RowsCache.forward

    def desync(self, ids, positions, allowed, seen=None, clock=None, hidden=False, feats=None):
        q = ids.shape[1]
        padded = torch.arange(self.width, self.width + q)[None].expand_as(positions)
        return forward(self, ids, padded, allowed, seen, clock, hidden, feats)

    pair = cached_pair(arch, "sdpa", DIFFERING_NOISE[arch])
    good = [r.tokens for r in generate(pair, rows, "dynatree", max_new_tokens=news, ignore_eos=True)]
    assert good == _greedy_rows(arch, "sdpa", [tuple(r) for r in rows], news)
    monkeypatch.setattr(RowsCache, "forward", desync)
    bad = [r.tokens for r in generate(pair, rows, "dynatree", max_new_tokens=news, ignore_eos=True)]
    assert bad != good


@pytest.mark.parametrize("arch", ARCHS)
def test_batch_of_one_grows_todays_trees_node_for_node(arch):
    """The batch path at B = 1 records the very trees, paths and histories of a batch-1 run."""
    pair = cached_pair(arch, "sdpa", DIFFERING_NOISE[arch])
    prompt = [5, 9, 2, 33, 7]
    one = generate(pair, prompt, "dynatree", max_new_tokens=24, ignore_eos=True, trace=True).trace
    batch = generate(pair, [prompt], "dynatree", max_new_tokens=24, ignore_eos=True, trace=True)[0].trace
    assert len(one) == len(batch) and batch.tokens == one.tokens
    for a, b in zip(one, batch):
        ta, tb = a.tree.to_dict(), b.tree.to_dict()
        for key in ("tokens", "parents", "depths", "branching", "stop_reasons", "topk_tokens", "draft_calls"):
            assert ta.get(key) == tb.get(key), key
        # batch 1 feeds a chain level under the model's own causal default, the batch under an explicit
        # 4D mask: sdpa rounds those differently in the 7th digit, never enough to change a token here
        assert tb["logps"] == pytest.approx(ta["logps"], rel=1e-5, abs=1e-6)
        assert (a.accepted_path, a.committed, a.history_after) == (b.accepted_path, b.committed, b.history_after)
    assert one.batch is None and batch.batch == {"size": 1, "row": 0}


def test_batch_traces_name_their_row_iteration_and_padded_width_and_survive_json():
    pair = cached_pair("gpt_neox", "sdpa", DIFFERING_NOISE["gpt_neox"])
    res = generate(pair, [[5, 9, 2], [7, 7, 1, 4, 2, 9], [3]], "dynatree", max_new_tokens=[6, 16, 11],
                   ignore_eos=True, trace=True)
    for b, r in enumerate(res):
        tr = Trace.from_json(r.trace.to_json())
        assert tr.batch == {"size": 3, "row": b}
        assert [rec.batch["iteration"] for rec in tr] == list(range(len(tr)))
        for rec in tr:
            assert rec.batch["nodes"] == len(rec.tree.tokens) <= rec.batch["padded_width"]
            assert b in rec.batch["active"]
    # the short row leaves the batch: later iterations name fewer active rows
    last = res[1].trace.iterations[-1].batch
    assert 0 not in last["active"]


def test_each_row_adapts_its_own_history():
    pair = cached_pair("llama", "sdpa", DIFFERING_NOISE["llama"])
    cfg = DynaTreeConfig(history=HistoryConfig(enabled=True, window=3, eta_d=0.5, eta_h=0.5))
    rows = [[5, 9, 2, 33, 7], [40, 41, 42, 43]]
    res = generate(pair, rows, "dynatree", cfg, max_new_tokens=20, ignore_eos=True)
    alone = [generate(pair, p, "dynatree", cfg, max_new_tokens=20, ignore_eos=True) for p in rows]
    assert [r.history_state for r in res] == [a.history_state for a in alone]
    # and a list of histories continues each row from its own
    again = generate(pair, rows, "dynatree", cfg, max_new_tokens=8, ignore_eos=True,
                     history=[r.history_state for r in res])
    assert [r.tokens for r in again] == [generate(pair, p, "dynatree", cfg, max_new_tokens=8, ignore_eos=True,
                                                  history=a.history_state).tokens for p, a in zip(rows, alone)]


@pytest.mark.parametrize("arch", ARCHS)
def test_prompt_lookup_rows_lookup_mixed_into_the_draft_and_a_lookup_tail_are_exact(arch):
    rows = [[5, 9, 2, 5, 9, 2, 5], [7, 8, 7, 8, 7], [3]]
    news = [14, 9, 12]
    lookup = ModelPair(target=cached_target(arch, "sdpa"), draft=PromptLookup(max_ngram=3),
                       target_name=f"tiny-{arch}", draft_name="lookup")
    ref = _greedy_rows(arch, "sdpa", [tuple(r) for r in rows], news)
    assert [r.tokens for r in generate(lookup, rows, "linear", LinearConfig(k=4), max_new_tokens=news,
                                       ignore_eos=True)] == ref
    mixed = cached_pair(arch, "sdpa", DIFFERING_NOISE[arch])
    mixed = ModelPair(target=mixed.target, draft=mixed.draft, lookup=LookupMix(), target_name=f"tiny-{arch}",
                      draft_name="noisy+lookup")
    for method in ("linear", "dynatree", "eagle2"):
        assert [r.tokens for r in generate(mixed, rows, method, max_new_tokens=news, ignore_eos=True)] == ref
    sampled = dict(max_new_tokens=news, ignore_eos=True, temperature=0.8, seed=[1, 2, 3])
    assert [r.tokens for r in generate(mixed, rows, "dynatree", **sampled)] == [
        generate(mixed, p, "dynatree", **sampled | {"seed": s, "max_new_tokens": n}).tokens
        for p, s, n in zip(rows, [1, 2, 3], news)]
    tail = DynaTreeConfig(lookup_tail=3)
    res = generate(cached_pair(arch, "sdpa", DIFFERING_NOISE[arch]), rows, "dynatree", tail, max_new_tokens=news,
                   ignore_eos=True)
    assert [r.tokens for r in res] == ref


def test_bad_batches_are_refused_before_any_model_work():
    pair = cached_pair("llama", "sdpa", 0.0)
    t = _Forwards(pair.target)
    try:
        cases = [
            (([],), "at least one token"),  # an empty list reads as one empty prompt
            (([[1, 2], []],), "at least one token"),
            (([[1, 2], "text"],), "mixes"),
            (([[1, 2], [3]],), "one per prompt", dict(max_new_tokens=[4, 5, 6])),
            (([[1, 2], [3]],), "one per prompt", dict(temperature=0.7, seed=[1])),
            (([[1, 2], [3]],), "context window", dict(max_new_tokens=[4, 10_000])),
            (([[1, 2], [3]],), "eager or the static", dict(runtime="compiled")),
            (([[1, 2], [3]],), "plain traces", dict(trace="replay")),
            (([[1, 2], [3]],), "pass runtime='static'", dict(buckets=(8,))),
            (([[1, 2], [3]],), "static_len=8 is too short", dict(runtime="static", static_len=8)),
            (([[1, 2], [3]],), "add a bucket", dict(runtime="static", buckets=(1, 2, 4))),
            (([[1, 2], [3]],), "budget must be", dict(budget="yes")),
        ]
        for args, words, *kw in cases:
            with pytest.raises((ValueError, TypeError), match=words):
                generate(pair, *args, **(kw[0] if kw else {}))
    finally:
        t.handle.remove()
    assert t.calls == 0


def test_an_int_list_is_still_one_prompt():
    pair = cached_pair("llama", "sdpa", 0.0)
    res = generate(pair, [5, 9, 2], "dynatree", max_new_tokens=5, ignore_eos=True)
    assert res.tokens == reference_greedy("llama", "sdpa", (5, 9, 2), 5)
    assert isinstance(generate(pair, [[5, 9, 2]], max_new_tokens=5, ignore_eos=True), list)


@pytest.mark.parametrize("arch", ARCHS)
def test_batch_run_compacts_dead_entries_exactly(arch, monkeypatch):
    """Rejected entries between accepted ones stay dead in their row's mask; with the threshold at 2
    every few iterations compact them (one gather per layer), and every row is still its greedy decode."""
    from dynatree_core.runtime.cache import dynamic

    monkeypatch.setattr(dynamic, "COMPACT_AFTER", 2)  # the default threshold of every cache, the rows' included
    pair = cached_pair(arch, "sdpa", DIFFERING_NOISE[arch])
    cfg = DynaTreeConfig(tau=0.0, n_max=24, b_min=2, b_mid=3, b_max=3, rho_stop=0.001)
    rows = [[5, 9, 2], [1, 2, 3, 4, 5, 6, 7, 8], [4]]
    compactions = []
    compact = RowsCache.compact

    def spy(self):
        compactions.append(self.width - max(self.count))
        compact(self)

    monkeypatch.setattr(RowsCache, "compact", spy)
    res = generate(pair, rows, "dynatree", cfg, max_new_tokens=30, ignore_eos=True)
    assert compactions and min(compactions) >= 2
    assert [r.tokens for r in res] == _greedy_rows(arch, "sdpa", [tuple(r) for r in rows], [30] * 3)


def _static_run(arch: str, monkeypatch, static_len: int | None) -> tuple[list[list[int]], list, list]:
    """A static batch of three rows (30 new tokens each, trees up to 25 nodes: bucket 32) with the
    threshold compaction off, so only a lack of room compacts; what every forward and gather saw."""
    from dynatree_core.runtime.cache import dynamic
    from dynatree_core.runtime.cache.rows_static import SlotKV

    monkeypatch.setattr(dynamic, "COMPACT_AFTER", 10 ** 6)
    seen, gathers = [], []
    run, gather = SlotKV.run, SlotKV.gather

    def spy_run(self, ids, positions, mask, hidden, feats=None):
        out = run(self, ids, positions, mask, hidden, feats)
        keys = self.layers[0].keys
        seen.append((self.capacity, keys.shape[2], (ids.shape[0], keys.data_ptr()), ids.shape[1]))
        return out

    def spy_gather(self, order, width):
        gathers.append(width)
        gather(self, order, width)

    monkeypatch.setattr(SlotKV, "run", spy_run)
    monkeypatch.setattr(SlotKV, "gather", spy_gather)
    cfg = DynaTreeConfig(tau=0.0, n_max=24, b_min=2, b_mid=3, b_max=3, rho_stop=0.001)
    res = generate(cached_pair(arch, "sdpa", DIFFERING_NOISE[arch]), STATIC_ROWS, "dynatree", cfg,
                   max_new_tokens=30, ignore_eos=True, runtime="static", static_len=static_len)
    return [r.tokens for r in res], seen, gathers


#: three prompts of different lengths (the longest row: 8 + 30 tokens)
STATIC_ROWS = [[5, 9, 2], [1, 2, 3, 4, 5, 6, 7, 8], [4]]


@pytest.mark.parametrize("arch", ARCHS)
def test_a_static_batch_writes_in_place_and_compacts_when_its_columns_run_out(arch, monkeypatch):
    """The static runtime keeps the target's cache in one set of [B, heads, capacity, dim] buffers:
    every forward attends over all of them and writes in place (the buffers move only when a
    finished row leaves). At the least static_len it accepts (the longest row + the widest bucket), the dead
    columns run out the room and a compaction in place makes it; every row is still its greedy decode."""
    tokens, seen, gathers = _static_run(arch, monkeypatch, 8 + 30 + 32)
    assert tokens == _greedy_rows(arch, "sdpa", [tuple(r) for r in STATIC_ROWS], [30] * 3)
    assert gathers, "the dead columns never ran out the room"
    assert {(cap, cols) for cap, cols, _, _ in seen} == {(70, 70)}
    # one allocation per batch size (a finished row leaves: the buffers shrink once): writes in place.
    # Counted per batch size, not as distinct addresses: the allocator may hand a freed buffer's address
    # to a later, smaller one, and that is still one allocation per size.
    per_size = {rows: {ptr for _, _, (r, ptr), _ in seen if r == rows} for _, _, (rows, _), _ in seen}
    assert all(len(ptrs) == 1 for ptrs in per_size.values()), per_size
    assert len(per_size) > 1, "no row finished before the others: the shrink was never exercised"
    verify = [q for *_, q in seen[1:]]  # after the prefill: the verify forwards, each a bucket
    assert set(verify) <= {1, 2, 4, 8, 16, 24, 32} and max(verify) > 1


def test_a_static_store_that_lets_queries_see_past_the_rows_columns_is_caught(monkeypatch):
    """The columns past the rows cache's width hold what earlier forwards wrote and a crop left (a
    rejected suffix): a variant that leaves them visible decodes other tokens, so the exactness
    above is what the mask keeps."""
    from dynatree_core.runtime.cache.rows_static import SlotKV
    from dynatree_core.runtime.model.compat import cache_kwargs

    def unmasked(self, ids, positions, mask, hidden, feats=None):
        rows, q = ids.shape
        full = torch.zeros((rows, 1, q, self.capacity), dtype=mask.dtype)  # every column visible
        full[..., :mask.shape[-1]] = mask
        self.cache.write_at(self.width, q)
        self.width = mask.shape[-1]
        return self.model(input_ids=ids, attention_mask=full, position_ids=positions, use_cache=True,
                          **cache_kwargs(self.model, self.cache)).logits, None

    monkeypatch.setattr(SlotKV, "run", unmasked)
    tokens, *_ = _static_run("llama", monkeypatch, None)
    assert tokens != _greedy_rows("llama", "sdpa", [tuple(r) for r in STATIC_ROWS], [30] * 3)


def test_with_seeds_keeps_every_other_setting():
    from dynatree_core.engine.batch import with_seeds
    from dynatree_core.policy.sampling import SamplingConfig

    cfg = SamplingConfig(temperature=0.7, top_p=0.9, seed=1, verify="rejection")
    got = with_seeds(cfg, [4, 5])
    assert [g.seed for g in got] == [4, 5] and all(dataclasses.replace(g, seed=1) == cfg for g in got)


# --- the batch's shared node budget ------------------------------------------------------------
def _cost(slope: float, rows: tuple[int, ...] = (1, 4)) -> "BatchCost":
    """c(B, w) = 0.05 + slope·B·w seconds, d(B) = 5 ms: a steep slope makes AR the cheaper choice."""
    return BatchCost(rows, tuple(tuple(0.05 + slope * b * w for w in range(1, 40)) for b in rows),
                     tuple(0.005 for _ in rows))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arch=st.sampled_from(ARCHS), noise=st.sampled_from((0.0, 0.02, 0.1)), mc=method_configs, rows=batch_prompts,
       slope=st.sampled_from((0.0, 1e-4, 2e-3, 0.05)), n=st.integers(1, 14))
def test_every_row_is_exact_under_the_shared_budget(arch, noise, mc, rows, slope, n):
    method, config = mc
    res = generate(cached_pair(arch, "sdpa", noise), [list(p) for p in rows], method, config, max_new_tokens=n,
                   ignore_eos=True, budget=BatchBudget(_cost(slope)))
    assert [r.tokens for r in res] == _greedy_rows(arch, "sdpa", rows, [n] * len(rows))


def test_the_budget_picks_the_width_of_the_best_rate_and_ar_when_verifying_costs_too_much():
    flat = BatchBudget(_cost(0.0))  # more nodes cost nothing: every node pays
    got = flat.choose([[0.9, 0.5, 0.1], [0.8]], levels=2)
    assert (got.width, got.keep) == (4, [3, 1])
    steep = BatchBudget(_cost(0.5))  # a token costs ten AR steps' fixed part: no node pays
    got = steep.choose([[0.9, 0.5, 0.1], [0.8]], levels=2)
    assert (got.width, got.keep, got.predicted) == (1, [0, 0], 0.0)
    assert not steep.drafts(2)  # it sits the next iteration out...
    assert steep.drafts(2)  # ...and probes again
    steep.choose([[0.9], [0.8]], levels=1)
    assert [steep.drafts(2) for _ in range(3)] == [False, False, True]  # the back-off (at that B) doubled
    # in between, the width trades the nodes' p(u) against c(B, w): the 0.1 node is not worth its slot
    mid = BatchBudget(_cost(0.002))
    assert mid.choose([[0.9, 0.5, 0.1], [0.8]], levels=0).width == 3
    # on the static runtime a verify is padded to a bucket: W is one, and the rows fill its padding (a width
    # of 3 would run at 4 anyway, so the 0.1 node takes the slot the padding would)
    padded = BatchBudget(_cost(0.002), buckets=(1, 2, 4, 8))
    got = padded.choose([[0.9, 0.5, 0.1], [0.8]], levels=0)
    assert (got.width, got.keep) == (4, [3, 1])
    assert BatchBudget(_cost(0.0), buckets=(1, 2, 4, 8)).choose([[0.9] * 5, [0.8]], levels=0).width == 8


def _decisions(b: BatchBudget, rows: int, n: int, rates: dict[bool, float]) -> list[bool]:
    """n iterations of a budget at ``rows`` rows where drafting / AR iterations commit at ``rates``
    tokens per second (each iteration commits ``rows`` tokens): whether each one drafted."""
    out = []
    for _ in range(n):
        d = b.drafts(rows)
        out.append(d)
        b.observe_time(rows, d, rows, rows / rates[d])
    return out


def test_measured_rates_decide_whether_to_draft_after_enough_of_each():
    from dynatree_core.policy.batch_budget import MIN_SAMPLES

    # drafting slower than AR: explore (a drafting iteration, then an AR step) until each side has its
    # samples, then sit out and probe again after 1, 2, 4, ... iterations, or after as many as keep the
    # probes' loss within PROBE_SHARE of the time where that is more
    slow = _decisions(BatchBudget(_cost(0.0)), 3, 2 * MIN_SAMPLES + 16, {True: 9.0, False: 15.0})
    assert slow[:2 * MIN_SAMPLES] == [True, False] * MIN_SAMPLES
    probes = [i for i, d in enumerate(slow) if d and i >= 2 * MIN_SAMPLES]
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert gaps == sorted(gaps)  # the back-off grows between probes
    # drafting faster: after the exploration it always drafts
    fast = _decisions(BatchBudget(_cost(0.0)), 3, 2 * MIN_SAMPLES + 8, {True: 20.0, False: 15.0})
    assert all(fast[2 * MIN_SAMPLES:])


def _probe_loss(budget: BatchBudget, rates: dict[bool, float], n: int = 200) -> float:
    """The share of n iterations' time (after the exploration) the probes lost against AR steps."""
    from dynatree_core.policy.batch_budget import MIN_SAMPLES

    rows = 3
    made = _decisions(budget, rows, 2 * MIN_SAMPLES + n, rates)[2 * MIN_SAMPLES:]
    t = {d: rows / r for d, r in rates.items()}  # an iteration's seconds (each commits `rows` tokens)
    lost = sum(t[True] * (1 - rates[True] / rates[False]) for d in made if d)
    return lost / sum(t[d] for d in made)


@pytest.mark.parametrize("rates", [{True: 9.0, False: 15.0}, {True: 4.0, False: 15.0}, {True: 14.0, False: 15.0}])
def test_where_speculation_loses_its_probes_lose_at_most_their_share_of_the_time(rates, monkeypatch):
    """A probe costs t_d · (1 - r_spec / r_AR) more than the AR steps it replaces, so the wait before the
    next is at least that over PROBE_SHARE · t_AR (MAX_SKIP at most). Doubling the wait from 1 alone (the
    variant below) spends far more of a batch's time probing where a probe is dear."""
    from dynatree_core.policy import batch_budget
    from dynatree_core.policy.batch_budget import MAX_SKIP, PROBE_SHARE

    t = {d: 3 / r for d, r in rates.items()}
    floor = t[True] * (1 - rates[True] / rates[False]) / (MAX_SKIP * t[False])  # what MAX_SKIP allows
    assert _probe_loss(BatchBudget(_cost(0.0)), rates) <= max(PROBE_SHARE, floor) + 0.01
    if rates[True] < 5:  # where a probe is dear, doubling from 1 loses more than the share
        monkeypatch.setattr(batch_budget, "PROBE_SHARE", float("inf"))
        assert _probe_loss(BatchBudget(_cost(0.0)), rates) > PROBE_SHARE + 0.01


def test_a_probe_that_finds_speculation_faster_brings_it_back():
    """Rates change (another part of a text, other rows): after the back-off a probe measures
    speculation again, and once its sums beat AR's the batch drafts again. A budget that compares
    the same stale sums at every back-off's end never probes, and never comes back."""
    b = BatchBudget(_cost(0.0))
    _decisions(b, 2, 16, {True: 5.0, False: 15.0})
    later = _decisions(b, 2, 120, {True: 60.0, False: 15.0})  # a probe within MAX_SKIP iterations
    assert later[-10:] == [True] * 10

    class Stale(BatchBudget):  # the wrong variant: a back-off's end re-reads the same sums
        def drafts(self, rows):
            self._probe = False
            return super().drafts(rows)

    stale = Stale(_cost(0.0))
    _decisions(stale, 2, 16, {True: 5.0, False: 15.0})
    assert not any(_decisions(stale, 2, 120, {True: 60.0, False: 15.0}))


class _Scripted(BatchBudget):
    """A budget that drafts on a script (True/False per iteration), keeps every node and prices forwards
    at its calibration alone."""

    def __init__(self, script):
        super().__init__(_cost(0.0))
        self.script = list(script)

    def drafts(self, rows):
        return self.script.pop(0) if self.script else True

    # Its prices are the test's: the run's measured forward seconds (which differ from machine to machine,
    # and made a depth cap appear here and not on CI) neither rescale c and d nor teach o(B).
    def observe_forwards(self, rows, width, levels, verify_s, draft_s):
        pass

    def observe_time(self, rows, drafted, committed, seconds, forwards_s=None, weights=None):
        super().observe_time(rows, drafted, committed, seconds, None, weights)

    def choose(self, probs, levels, weights=None):
        from dynatree_core.policy.batch_budget import BatchChoice
        return BatchChoice(max(len(p) for p in probs) + 1, [len(p) for p in probs], 1.0, 1.0, 0.0)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_draft_that_sat_out_catches_up_exactly(arch):
    """Iterations the budget sits out run no draft forward; the next level 0 feeds every token
    committed meanwhile. With a draft identical to the target every drafted chain is then accepted
    whole: a draft that lost a token would propose something else and see it rejected."""
    pair = cached_pair(arch, "sdpa", 0.0)
    cfg = LinearConfig(k=3)
    script = [True, False, False, True, False, True, True, False, False, False, True]
    rows = [[5, 9, 2, 33], [1, 2], [40, 41, 42, 43, 44, 45]]
    d = _Forwards(pair.draft)
    try:
        run = iterate(pair, rows, "linear", cfg, max_new_tokens=30, ignore_eos=True, budget=_Scripted(script))
        its = list(run)
    finally:
        d.handle.remove()
    drafted = [i for i in its if next(iter(i.records.values())).batch["budget"]["drafted"]]
    # the draft's read of the prompts (at the first drafting iteration), then only the iterations' levels
    assert len(drafted) < len(its) and d.calls == run.draft_forwards == 1 + sum(i.draft_forwards for i in drafted)
    assert all(i.draft_forwards == 0 for i in its if i not in drafted)
    for i in drafted:
        for rec in i.records.values():
            assert len(rec.accepted_path) == max(rec.tree.depths)  # the whole chain, as deep as it was drafted
    assert [r.tokens for r in run.finish()] == _greedy_rows(arch, "sdpa", [tuple(r) for r in rows], [30] * 3)


def test_a_draft_that_forgets_what_it_sat_out_is_caught(monkeypatch):
    """The wrong catch-up (the tokens committed while the draft sat out are dropped) still decodes
    exactly (the target verifies) but its chains are rejected: the check above fails on it."""
    from dynatree_core.drafters.batch_model import BatchModelDraft

    commit = BatchModelDraft.commit

    def forgetful(self, kept):
        for b, slot in enumerate(self.slot):
            if slot is None and b in kept:
                kept[b] = (kept[b][0], [], *kept[b][2:])
        commit(self, kept)

    monkeypatch.setattr(BatchModelDraft, "commit", forgetful)
    pair = cached_pair("llama", "sdpa", 0.0)
    run = iterate(pair, [[5, 9, 2, 33], [1, 2]], "linear", LinearConfig(k=3), max_new_tokens=30, ignore_eos=True,
                  budget=_Scripted([True, False, False, True, True, True]))
    its = list(run)
    whole = [len(rec.accepted_path) == max(rec.tree.depths) for i in its for rec in i.records.values()
             if rec.batch["budget"]["drafted"]]
    assert not all(whole)


def test_the_budget_learns_what_an_iteration_costs_besides_its_forwards():
    """o(B) is the drafting iterations' wall time less the seconds in their forwards; a larger o(B)
    makes wider trees pay (their fixed cost is shared by more tokens)."""
    b = BatchBudget(_cost(0.004))
    probs = [[0.9, 0.6, 0.3, 0.1], [0.8, 0.2]]
    before = b.choose(probs, levels=2).width
    forwards = b.cost.verify(2, before) + 2 * b.cost.draft(2)
    b.observe_time(2, True, 5, forwards + 0.5, forwards)
    assert b.overhead[2] == pytest.approx(0.5)
    assert b.choose(probs, levels=2).width > before


def _draft_widths(arch: str, rows: list[list[int]], script: list[bool]) -> tuple[list[int], Any, list, list]:
    """A budgeted DynaTree batch on ``script``: the query width of every draft forward, the run, its iterations
    and its results (12 new tokens a row)."""
    pair = cached_pair(arch, "sdpa", DIFFERING_NOISE[arch])
    widths: list[int] = []
    handle = pair.draft.register_forward_hook(lambda m, a, k, o: widths.append(int(k["input_ids"].shape[1])),
                                              with_kwargs=True)
    try:
        run = iterate(pair, rows, "dynatree", max_new_tokens=12, ignore_eos=True, budget=_Scripted(script))
        its = list(run)
        res = run.finish()
    finally:
        handle.remove()
    assert [r.tokens for r in res] == _greedy_rows(arch, "sdpa", [tuple(r) for r in rows], [12] * len(rows))
    return widths, run, its, res


#: two prompts longer than the chain view, and a short one
READ_ROWS = [list(range(2, 32)), list(range(40, 61)), [5, 9, 2]]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("first", [0, 3])
def test_under_the_budget_the_draft_reads_the_prompts_at_the_first_drafting_iteration(arch, first):
    """With a shared budget the draft reads the prompts (and what was committed since) in one forward for every
    row at the first drafting iteration, before its levels, so that iteration's level 0 reads only the root:
    the rates the budget measures do not charge the prompt to speculation. Every row stays exact."""
    widths, run, its, _ = _draft_widths(arch, READ_ROWS, [False] * first + [True] * 20)
    assert len(widths) == run.draft_forwards == 1 + sum(i.draft_forwards for i in its)
    assert all(i.draft_forwards == 0 for i in its[:first])  # sat out: nothing read yet
    # every prompt token but the root, plus the tokens committed while sitting out (the longest row; others padded)
    assert widths[0] == 30 - 1 + first
    assert widths[1] == 1  # the first level 0 reads the root alone


def test_a_batch_that_never_drafts_never_has_its_draft_read_the_prompts():
    """The draft's read of the prompts waits for a drafting iteration: a budget that sits out throughout runs
    no draft forward at all, the prompts' included (a fully sat-out batch read them in vain before)."""
    widths, run, its, res = _draft_widths("llama", READ_ROWS, [False] * 20)
    assert widths == [] and run.draft_forwards == 0
    assert all(i.draft_forwards == 0 for i in its)


def test_the_draft_s_read_of_the_prompts_counts_with_the_prefill_not_with_its_iteration(monkeypatch):
    """The read's seconds go to ``prefill_s``; the iteration the budget is told about starts after it."""
    from dynatree_core.drafters.batch_model import BatchModelDraft

    prefill, told = BatchModelDraft.prefill, []

    def slow(self, clock=None):
        time.sleep(1.0)  # a read that takes far longer than this tiny batch's iterations (even on a slow VM)
        return prefill(self, clock)

    class Telling(_Scripted):
        def observe_time(self, rows, drafted, committed, seconds, forwards_s=None, weights=None):
            told.append((drafted, seconds))
            super().observe_time(rows, drafted, committed, seconds, forwards_s, weights)

    monkeypatch.setattr(BatchModelDraft, "prefill", slow)
    pair = cached_pair("llama", "sdpa", DIFFERING_NOISE["llama"])
    run = iterate(pair, READ_ROWS, "dynatree", max_new_tokens=6, ignore_eos=True,
                  budget=Telling([False, False, True, True, True, True]))
    list(run)
    assert run.prefill_s >= 1.0
    assert told[2][0] and told[2][1] < 1.0  # the first drafting iteration, without the read


def test_one_unlucky_iteration_moves_s_but_does_not_zero_it():
    from dynatree_core.policy.batch_budget import SCALE_PRIOR

    b = BatchBudget(_cost(0.0))
    b.observe(predicted=3.0, accepted=0)  # the first drafted tree: nothing accepted
    assert b.scale == pytest.approx(SCALE_PRIOR / (3.0 + SCALE_PRIOR)) and 0.05 < b.scale < 1
    assert b.choose([[0.9, 0.8]], levels=1).width == 3  # free nodes still pay
    for _ in range(20):
        b.observe(predicted=2.0, accepted=3)  # the draft's p(u) underrates it: s follows the evidence
    assert b.scale > 1.3


# --- how deep a drafting iteration grows, chosen before its levels run --------------------------
def _levels_cost(draft_s: float) -> BatchCost:
    """A flat verify (50 ms at any width) and ``draft_s`` seconds a draft level: only the levels' price
    and what they bring decide the depth."""
    return BatchCost((1, 4), tuple(tuple(0.05 for _ in range(1, 40)) for _ in (1, 4)), (draft_s, draft_s))


def _measured(b: BatchBudget, accepted: list[int], levels: int = 6) -> BatchBudget:
    """MIN_SAMPLES drafting iterations of trees two nodes wide at every depth down to ``levels``, row b's
    path reaching depth accepted[b]."""
    from dynatree_core.policy.batch_budget import MIN_SAMPLES

    depths = [[d for d in range(1, levels + 1) for _ in range(2)] for _ in accepted]
    for _ in range(MIN_SAMPLES):
        b.observe_depths(levels, accepted, depths)
    return b


def test_the_budget_grows_the_levels_that_pay_and_explores_the_rest():
    """L* trades what a level brings (the measured share of rows whose path reached its depth) against
    its price: paths that never pass depth 2 make deeper levels a loss when levels cost something, and
    still no gain when they are free; paths that reach every measured depth leave the rules' D_max. Until
    MIN_SAMPLES drafting iterations are measured, and on every EXPLORE_DEPTH-th choice, the rows grow as
    deep as their rules allow."""
    from dynatree_core.policy.batch_budget import EXPLORE_DEPTH

    fresh = BatchBudget(_levels_cost(0.02))
    assert fresh.levels(2, 8) == 8  # nothing measured yet: as deep as the rules allow
    shallow = _measured(BatchBudget(_levels_cost(0.02)), [2, 2])
    choices = [shallow.levels(2, 8) for _ in range(2 * EXPLORE_DEPTH)]
    assert sorted(set(choices)) == [2, 8] and choices.count(8) == 2  # capped, but every 8th explores
    assert _measured(BatchBudget(_levels_cost(0.0)), [2, 2]).levels(2, 8) == 2  # free levels that bring nothing
    deep = _measured(BatchBudget(_levels_cost(0.002)), [6, 6])
    assert deep.levels(2, 8) == 8  # every measured level pays: the deepest is the best, deeper unknown
    assert _measured(BatchBudget(_levels_cost(0.02)), [6, 6]).levels(2, 4) == 4  # never past the rules' D_max
    # a level's price weighs: at 30 ms a level the third level (half the rows reach it) no longer pays
    mixed = _measured(BatchBudget(_levels_cost(0.03)), [3, 2])
    assert mixed.levels(2, 8) == 2 and _measured(BatchBudget(_levels_cost(0.001)), [3, 2]).levels(2, 8) == 3


@pytest.mark.parametrize("arch", ARCHS)
def test_a_depth_cap_grows_no_deeper_and_every_row_stays_exact(arch):
    """Under a budget whose levels cost as much as a verify, the batch's trees grow only as deep as the
    measured acceptance pays for once it is measured: each capped iteration's trees stop at L*, it runs
    at most L* draft forwards, its record says L*, and every row is its greedy decode."""
    pair = cached_pair(arch, "sdpa", DIFFERING_NOISE[arch])
    rows = [[5, 9, 2, 33], [1, 2, 3, 4, 5, 6], [40, 41]]
    budget = _Scripted([])
    budget.cost = _levels_cost(0.05)
    run = iterate(pair, rows, "dynatree", DynaTreeConfig(tau=0.0, b_min=2, b_mid=2, b_max=2, d_max=6, n_max=24),
                  max_new_tokens=40, ignore_eos=True, budget=budget)
    its = list(run)
    capped = [i for i in its if (next(iter(i.records.values())).batch["budget"].get("levels") or 6) < 6]
    assert capped and len(capped) < len(its)
    for i in capped:
        cap = next(iter(i.records.values())).batch["budget"]["levels"]
        assert i.draft_forwards <= cap
        assert all(max(rec.tree.depths) <= cap for rec in i.records.values())
    assert [r.tokens for r in run.finish()] == _greedy_rows(arch, "sdpa", [tuple(r) for r in rows], [40] * 3)

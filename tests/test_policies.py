"""The tree policies beyond the paper's: cost-aware DynaTree, EAGLE-2, Sequoia (configs, rules,
calibration and its cache, benchmark specs). Their exactness is in test_exactness.py and their
device/reference equality in test_device_tree.py."""

from __future__ import annotations

import json
import math
import warnings

import pytest
import torch

from dynatree_core import generate
from dynatree_core.engine import calibrate
from dynatree_core.bench.methods import POLICY_LABELS, method_specs, parse_methods
from dynatree_core.policy.config import DynaTreeConfig, Eagle2Config, GrowthRule, SequoiaConfig, config_from_dict
from dynatree_core.policy.cost_model import CostModel
from dynatree_core.policy.history import HistoryAdapter
from dynatree_core.policy.growth import CostState, grow_tree

from helpers import cached_pair, reference_greedy

FLAT = CostModel(verify_s=(0.05,) * 16, draft_s=0.0)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNATREE_CACHE_DIR", str(tmp_path / "cache"))


# --- configs and bad input -----------------------------------------------------------------
@pytest.mark.parametrize("kwargs,name", [
    (dict(k=0), "k"), (dict(depth=0), "depth"), (dict(k=2, depth=2, n_total=7), "n_total"),
    (dict(n_total=0), "n_total")])
def test_eagle2_bad_parameters_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Eagle2Config(**kwargs)


@pytest.mark.parametrize("kwargs,name", [
    (dict(n_max=0), "n_max"), (dict(d_max=0), "d_max"), (dict(acceptance=(0.7, 0.5)), "acceptance"),
    (dict(acceptance=()), "acceptance"), (dict(acceptance=(1.2,)), "acceptance")])
def test_sequoia_bad_parameters_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SequoiaConfig(**kwargs)


def test_cost_aware_config_needs_a_cost_model_and_round_trips_through_json():
    with pytest.raises(ValueError, match="cost"):
        DynaTreeConfig(cost_aware=True).growth_rule()
    with pytest.raises(TypeError, match="cost"):
        DynaTreeConfig(cost_aware=True, cost=[0.1, 0.2])
    cfg = DynaTreeConfig(cost_aware=True, cost=FLAT, n_max=256)
    rule = cfg.growth_rule()
    assert rule.cost_aware and rule.n_max == FLAT.n_max == 15  # the curve bounds N_max
    back = config_from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert back == cfg and back.cost.verify_s == FLAT.verify_s


def test_cost_model_rejects_bad_curves_and_interpolates():
    with pytest.raises(ValueError, match="verify_s"):
        CostModel(verify_s=(), draft_s=0.0)
    with pytest.raises(ValueError, match="verify_s"):
        CostModel(verify_s=(0.1, -1.0), draft_s=0.0)
    with pytest.raises(ValueError, match="draft_s"):
        CostModel(verify_s=(0.1,), draft_s=math.nan)
    m = CostModel.from_points({1: 0.04, 3: 0.06, 6: 0.03}, 0.001)
    assert m.verify_s == pytest.approx((0.04, 0.05, 0.06, 0.05, 0.04, 0.03))  # non-monotone kept
    assert m.verify(7) == math.inf and m.n_max == 5 and m.sizes == (1, 3, 6)


def test_cost_model_fit_recovers_a_line_and_never_goes_negative():
    line = [(n, 2, {"draft": 0.006, "verify": 0.02 + 0.001 * n, "commit": 0.001}) for n in (2, 5, 9)]
    m = CostModel.fit(line + [(4, 1, {"commit": 0.5})])  # an untimed iteration is skipped
    assert m.verify_s == pytest.approx([0.02 + 0.001 * n for n in range(1, 10)]) and m.sizes == (2, 5, 9)
    assert m.draft_s == pytest.approx(0.003) and m.iteration_s == pytest.approx(0.001)
    assert m.iteration_cost(5, 2) == pytest.approx(0.006 + 0.025 + 0.001) and m.iteration_cost(11, 2) == math.inf
    assert CostModel.fit(line, n_tokens=12).n_max == 11 and "fitted to 3" in m.meta["source"]
    falling = CostModel.fit([(2, 1, {"draft": 0.0, "verify": 0.03}), (6, 1, {"draft": 0.0, "verify": 0.01})])
    assert falling.verify_s == pytest.approx((0.02,) * 6)  # a negative slope: the flat mean
    steep = CostModel.fit([(2, 1, {"draft": 0.0, "verify": 0.01}), (4, 1, {"draft": 0.0, "verify": 0.03})])
    assert steep.verify(1) > 0 and steep.verify(4) / steep.verify(2) == pytest.approx(2)  # through 0
    with pytest.raises(ValueError, match="samples"):
        CostModel.fit([(3, 1, {"commit": 0.1})])
    with pytest.raises(ValueError, match="samples"):
        CostModel.fit([(3, 1, {"draft": 0.0, "verify": 0.0})])


# --- the cost-aware rule ---------------------------------------------------------------------
def _uniform(k: int, p: float):
    def propose(tree, ids):
        return [(list(range(k)), [math.log(p)] * k) for _ in ids]
    return propose


def test_cost_rule_grows_where_verification_is_free_and_stops_where_it_is_not():
    base = dict(d0=8, d_max=8, b_min=2, b_mid=2, b_max=2, tau_h=0.9, tau_l=0.1, rho_stop=0.0, rho_deep=0.0,
                tau=0.0, draft_cost=0.0)
    free = grow_tree(0, GrowthRule(n_max=15, verify_cost=(0.05,) * 16, **base), _uniform(2, 0.45))
    # flat cost, no draft cost: every node adds expected tokens for nothing, so the budget fills
    assert free.num_drafted == 15
    steep = grow_tree(0, GrowthRule(n_max=15, verify_cost=tuple(0.05 * n for n in range(1, 17)), **base),
                      _uniform(2, 0.45))
    # c(n) proportional to n: one token per forward-of-one-token is the best rate, so nothing pays
    assert steep.num_drafted == 0 and steep.stop_reasons[0] == "cost"


def test_cost_rule_takes_the_prefix_with_the_best_rate():
    """A non-monotone curve: 3 nodes cost more than 5, so the level keeps 4 (c(5) cheapest)."""
    rule = GrowthRule(d0=1, d_max=1, b_min=4, b_mid=4, b_max=4, tau_h=0.9, tau_l=0.1, rho_stop=0.0, rho_deep=0.0,
                      tau=0.0, n_max=4, verify_cost=(0.07, 0.12, 0.13, 0.10, 0.09), draft_cost=0.01)
    tree = grow_tree(0, rule, _uniform(4, 0.2))
    rates = [(1 + 0.2 * j) / (0.01 + rule.cost(1 + j)) for j in range(5)]
    assert tree.num_drafted == max(range(5), key=lambda j: (rates[j], -j)) == 4
    st = CostState(rule)
    assert st.add_level([math.log(0.2)] * 4, 1) == 4 and st.expected == pytest.approx(1.8)


def test_depth_calibration_scales_an_overconfident_draft_down():
    cfg = DynaTreeConfig(cost_aware=True, cost=FLAT, d_max=4, d0=2)
    ad = HistoryAdapter(cfg)
    assert ad.rule().depth_scale == ()
    for _ in range(20):  # the draft says 0.9 at depth 1 and 0.8 at depth 2; nothing is ever accepted
        ad.update(0.0, accepted=0, depth_mass=[0.9, 0.8])
    scale = ad.rule().depth_scale
    assert scale[0] == 1.0 and scale[1] == pytest.approx(1 / 19) and scale[2] == pytest.approx(1 / 17)
    assert len(ad.state.to_dict()["calibration"]) == 20


# --- EAGLE-2 -----------------------------------------------------------------------------------
def test_eagle2_reranks_to_the_most_probable_nodes():
    cfg = Eagle2Config(k=2, depth=3, n_total=4)
    probs = {0: [0.6, 0.3], 1: [0.9, 0.05], 2: [0.5, 0.4]}

    def propose(tree, ids):
        return [([1, 2], [math.log(p) for p in probs[tree.depths[i]]]) for i in ids]

    tree = grow_tree(0, cfg.growth_rule(), propose)
    assert tree.num_drafted == 4
    ps = sorted((math.exp(c) for c in tree.cum_logps[1:]), reverse=True)
    assert ps == pytest.approx([0.6, 0.54, 0.3, 0.27])
    assert any(p.reason == "rerank" for p in tree.pruned)
    assert all(tree.parents[i] < i for i in range(1, len(tree)))  # still a BFS-ordered tree


def test_eagle2_and_sequoia_decode_exactly_on_the_model_drafter_and_report_their_trees():
    pair = cached_pair("gpt_neox", "eager", 0.02)
    prompt = [5, 9, 2, 33, 7]
    ref = reference_greedy("gpt_neox", "eager", tuple(prompt), 24)
    e = generate(pair, prompt, "eagle2", Eagle2Config(k=3, depth=3, n_total=5), 24, ignore_eos=True, trace=True)
    assert e.tokens == ref and max(r.num_nodes for r in e.trace) <= 5
    s = generate(pair, prompt, "sequoia", None, 24, ignore_eos=True, trace=True)  # acceptance measured
    assert s.tokens == ref
    acc = s.trace.config["acceptance"]
    assert acc and sum(acc) <= 1 + 1e-9 and s.trace.config["n_max"] == 16


# --- calibration and its cache -----------------------------------------------------------------
def test_calibration_is_cached_and_another_devices_cache_is_not_used(monkeypatch):
    pair = cached_pair("llama", "sdpa", 0.02)
    first = calibrate.cost_model(pair, sizes=(1, 2, 4))
    assert first.sizes == (1, 2, 4) and first.n_max == 3 and first.draft_s > 0
    assert first.matches(**{k: v for k, v in calibrate.pair_key(pair).items()})

    def boom(*a, **k):
        raise AssertionError("measured again although cached")

    monkeypatch.setattr(calibrate, "measure_costs", boom)
    assert calibrate.cost_model(pair) == first
    # the same cache file, but written for another device: recalibrate and say so
    path = calibrate._cache_path(calibrate.pair_key(pair))
    doc = json.loads(path.read_text())
    doc["cost"]["device"] = "cuda:Some Other GPU"
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(calibrate, "measure_costs", lambda p, sizes=None, runtime="eager": first)
    with pytest.warns(UserWarning, match="recalibrating"):
        assert calibrate.cost_model(pair) == first


def test_the_acceptance_vector_is_cached_by_the_drafts_weights_not_its_name(monkeypatch):
    """A draft fine-tuned and shipped under the same name must not read the old weights' vector."""
    import copy
    import dataclasses

    pair = cached_pair("llama", "sdpa", 0.02)
    calls = []

    def measure(p, ranks=calibrate.DEFAULT_RANKS, tokens=64):
        calls.append(p)
        return tuple(0.1 * (len(calls)) for _ in range(ranks))

    monkeypatch.setattr(calibrate, "measure_acceptance", measure)
    first = calibrate.acceptance_vector(pair)
    assert calibrate.acceptance_vector(pair) == first and len(calls) == 1  # cached
    tuned = copy.deepcopy(pair.draft)
    with torch.no_grad():
        next(tuned.parameters()).add_(0.01)  # the same architecture and name, other weights
    other = dataclasses.replace(pair, draft=tuned)
    assert calibrate.pair_key(other) == calibrate.pair_key(pair)  # the cost curve is still shared
    assert calibrate.draft_fingerprint(other) != calibrate.draft_fingerprint(pair)
    assert calibrate.acceptance_vector(other) != first and len(calls) == 2  # measured for these weights
    assert calibrate.acceptance_vector(pair) == first and len(calls) == 2  # the old one still cached
    assert calibrate.draft_fingerprint(dataclasses.replace(pair, draft=None)) == "none"


def test_the_draft_level_is_priced_as_the_cost_aware_rule_builds_it(monkeypatch):
    """A fixed tree's level gives a first price; the cost-aware rule then runs under that curve and
    its own levels (with the rule's arithmetic) set draft_s. Both prices are kept."""
    pair = cached_pair("llama", "sdpa", 0.02)
    seen = []

    def level(p, tokens=32, config=None, runtime="eager"):
        seen.append(config)
        return 0.004 if config is None else 0.009

    monkeypatch.setattr(calibrate, "measure_draft_level", level)
    model = calibrate.measure_costs(pair, sizes=(1, 2, 4), repeats=1)
    assert seen[0] is None  # the fixed tree first
    assert isinstance(seen[1], DynaTreeConfig) and seen[1].cost_aware and seen[1].cost.draft_s == 0.004
    assert seen[1].cost.verify_s == model.verify_s  # priced under the curve just measured
    assert model.draft_s == 0.009 and model.meta["draft_s_fixed_tree"] == 0.004
    assert "draft level 9.0 ms (as the cost-aware rule builds it; a fixed tree's 4.0 ms)" in calibrate.describe(model)
    # a rule that drafts nothing under the first price keeps it
    def nothing(p, tokens=32, config=None, runtime="eager"):
        if config is not None:
            raise calibrate.CalibrationError("the calibration run drafted nothing")
        return 0.004

    monkeypatch.setattr(calibrate, "measure_draft_level", nothing)
    assert calibrate.measure_costs(pair, sizes=(1, 2), repeats=1).draft_s == 0.004


def test_a_cost_aware_level_is_timed_from_a_real_run():
    """Without stubs: the cost-aware run on the tiny pair drafts and gives a positive price."""
    pair = cached_pair("llama", "sdpa", 0.02)
    first = CostModel(verify_s=(0.01,) * 12, draft_s=0.0005)
    priced = calibrate.price_cost_aware_levels(pair, first)
    assert priced.draft_s > 0 and priced.meta["draft_s_fixed_tree"] == 0.0005
    assert priced.verify_s == first.verify_s and priced.iteration_s == first.iteration_s


def _scripted_forwards(monkeypatch, fail_from: int | None = None, burst: range = range(0)):
    """Verify forwards that take 10 ms per token, except the calls in ``burst`` (counted over all
    sizes, in call order), which take a second: load from elsewhere on a shared machine. Sizes
    from ``fail_from`` run out of memory."""
    real_forward, last, calls, timing = calibrate.pl.forward, [0], [], [False]

    def forward(model, ids, *a, **k):  # the draft-level and overhead runs pass through untouched
        if timing[0]:
            last[0] = ids.shape[1]
            if fail_from is not None and ids.shape[1] >= fail_from:
                raise torch.OutOfMemoryError("scripted")
        return real_forward(model, ids, *a, **k)

    def timed(fn, device):
        timing[0] = True
        try:
            fn()
        finally:
            timing[0] = False
        calls.append(last[0])
        return 1.0 if len(calls) - 1 in burst else 0.01 * last[0]

    monkeypatch.setattr(calibrate.pl, "forward", forward)
    monkeypatch.setattr(calibrate, "_timed", timed)
    return calls


def test_the_cost_curve_is_timed_round_robin_so_a_burst_of_load_does_not_bend_it(monkeypatch):
    pair = cached_pair("llama", "sdpa", 0.02)
    sizes = (1, 2, 3)
    # a burst over 6 consecutive measured forwards: timed size by size it would take 6 of one
    # size's 7 repeats; round-robin it takes 2 of each size's, and the medians drop it
    first_measured = 2 * len(sizes)  # after the two warm-up rounds
    calls = _scripted_forwards(monkeypatch, burst=range(first_measured + 4, first_measured + 10))
    cost = calibrate.measure_costs(pair, sizes=sizes, prefix_len=16, repeats=7)
    assert calls[:len(sizes) * 9] == list(sizes) * 9  # one forward per size per round
    assert cost.verify_s == pytest.approx((0.01, 0.02, 0.03))


def test_a_size_that_runs_out_of_memory_ends_the_curve(monkeypatch):
    pair = cached_pair("llama", "sdpa", 0.02)
    _scripted_forwards(monkeypatch, fail_from=4)
    with pytest.warns(UserWarning, match="the cost curve ends at 3 tokens"):
        cost = calibrate.measure_costs(pair, sizes=(1, 2, 3, 4, 6), prefix_len=16, repeats=3)
    assert cost.sizes == (1, 2, 3) and cost.verify_s == pytest.approx((0.01, 0.02, 0.03))
    _scripted_forwards(monkeypatch, fail_from=2)
    with pytest.raises(calibrate.CalibrationError, match="over 2 tokens"):
        calibrate.measure_costs(pair, sizes=(1, 2, 4), prefix_len=16, repeats=3)


def test_a_calibration_that_cannot_run_falls_back_to_the_preset_budget(monkeypatch):
    pair = cached_pair("llama", "sdpa", 0.02)

    def fail(*a, **k):
        raise calibrate.CalibrationError("out of memory for 2 tokens")

    monkeypatch.setattr(calibrate, "measure_costs", fail)
    with pytest.warns(UserWarning, match="falling back"):
        cfg = calibrate.prepare_config(DynaTreeConfig(cost_aware=True), pair)
    assert not cfg.cost_aware and cfg.n_max == DynaTreeConfig.cpu().n_max


def test_generate_fills_in_and_records_the_cost_curve():
    pair = cached_pair("llama", "sdpa", 0.02)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = generate(pair, [5, 9, 14], "dynatree", DynaTreeConfig(cost_aware=True), 16, ignore_eos=True, trace=True)
    assert res.tokens == reference_greedy("llama", "sdpa", (5, 9, 14), 16)
    cost = res.trace.config["cost"]
    assert cost["device"].startswith("cpu") and len(cost["verify_s"]) == max(calibrate.DEFAULT_SIZES)


# --- benchmark specs ---------------------------------------------------------------------------
def test_policies_expand_and_the_fixed_grid_gets_one_row_per_shape():
    names = parse_methods("ar,policies")
    assert names == ["ar", *POLICY_LABELS]
    specs = method_specs(names, preset="cpu", k=[2, 3], d=[3, 4], b=[1, 2], eagle2={"k": 2, "depth": 3, "n_total": 6},
                         sequoia={"n_max": 8})
    labels = [s.label for s in specs]
    assert labels[:3] == ["ar", "linear:k=2", "linear:k=3"]
    assert [lab for lab in labels if lab.startswith("fixed_tree")] == [
        "fixed_tree:d=3,b=1", "fixed_tree:d=3,b=2", "fixed_tree:d=4,b=1", "fixed_tree:d=4,b=2"]
    by = {s.label: s.config for s in specs}
    assert by["dynatree:cost"].cost_aware and by["dynatree:cost"].n_max == DynaTreeConfig.paper().n_max
    assert by["dynatree:cpu"].n_max == DynaTreeConfig.cpu().n_max and by["dynatree:paper"].n_max == 256
    assert by["eagle2"].n_total == 6 and by["sequoia"].n_max == 8
    with pytest.raises(ValueError, match="n_total"):
        method_specs(["eagle2"], eagle2={"k": 1, "depth": 1, "n_total": 2})


def test_the_chain_top_k_is_recorded_only_where_records_are_read():
    """Level 0's extra top-k rows (the oracle's view of accepted leaves) cost work on every
    iteration: only a trace or ``record_top_k`` (the benchmark) asks for them."""
    from dynatree_core import iterate

    pair = cached_pair("llama", "sdpa", 0.02)
    cfg = DynaTreeConfig(d0=1, d_max=2, trace_top_k=4)
    plain = list(iterate(pair, [5, 9, 14], "dynatree", cfg, max_new_tokens=24, ignore_eos=True))
    traced = list(iterate(pair, [5, 9, 14], "dynatree", cfg, max_new_tokens=24, ignore_eos=True, trace=True))
    recorded = list(iterate(pair, [5, 9, 14], "dynatree", cfg, max_new_tokens=24, ignore_eos=True, record_top_k=4))
    assert all(r.chain_topk is None for r in plain)
    for recs in (traced, recorded):
        assert any(r.chain_topk for r in recs[1:])  # the prompt's rows at iteration 0, leaves after
        assert all(len(row[0]) == 4 for r in recs if r.chain_topk for row in r.chain_topk)
    assert [r.committed for r in plain] == [r.committed for r in traced] == [r.committed for r in recorded]

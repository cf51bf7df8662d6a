"""Exactness: every decoder emits exactly the target's greedy tokens (model.generate).

Property tests over tiny random GPT-NeoX and Llama models, eager and sdpa attention, drafts
from identical to unrelated, random prompts, random valid configs and both KV modes.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynatree_core import generate
from dynatree_core.policy.config import (ARConfig, DynaTreeConfig, Eagle2Config, FixedTreeConfig, HistoryConfig,
                                  LinearConfig, SequoiaConfig)
from dynatree_core.policy.cost_model import CostModel
from dynatree_core.pairs.tiny import VOCAB_SIZE

from helpers import assert_decodes, cached_pair, reference_greedy

ARCHS = ("llama", "gpt_neox")
ATTNS = ("eager", "sdpa")
NOISES = (0.0, 0.02, 0.1, 1.0)
KV = st.sampled_from(["gather", "recompute"])

prompts = st.lists(st.integers(2, VOCAB_SIZE - 1), min_size=1, max_size=12).map(tuple)


@st.composite
def dynatree_configs(draw):
    d_max = draw(st.integers(2, 8))
    b = sorted(draw(st.lists(st.integers(1, 4), min_size=3, max_size=3)))
    tau_l = draw(st.floats(0.02, 0.9))
    tau_h = draw(st.floats(tau_l + 0.01, 0.99))
    rho_stop = draw(st.floats(0.001, 0.5))
    rho_deep = draw(st.floats(rho_stop + 0.01, 0.99))
    return DynaTreeConfig(
        d0=draw(st.integers(1, d_max - 1)), d_max=d_max, b_min=b[0], b_mid=b[1], b_max=b[2],
        tau_h=tau_h, tau_l=tau_l, rho_stop=rho_stop, rho_deep=rho_deep,
        tau=draw(st.sampled_from([0.0, 0.001, 0.05, 0.3])), n_max=draw(st.integers(1, 64)),
        dynamic_breadth=draw(st.booleans()), dynamic_depth=draw(st.booleans()),
        history=HistoryConfig(enabled=draw(st.booleans()), window=draw(st.integers(1, 10)),
                              target_acceptance=draw(st.floats(0.05, 0.95)),
                              eta_d=draw(st.floats(0, 1)), eta_h=draw(st.floats(0, 1))),
        kv_mode=draw(KV))


@st.composite
def cost_aware_configs(draw):
    """Cost-aware DynaTree with a random measured-looking curve (flat stretches, steps)."""
    steps = draw(st.lists(st.sampled_from([0.0, 0.001, 0.004, 0.02]), min_size=1, max_size=24))
    curve = [0.047 + sum(steps[:i + 1]) for i in range(len(steps))]
    cfg = draw(dynatree_configs())
    return cfg.replace(cost_aware=True, cost=CostModel(verify_s=tuple(curve),
                                                       draft_s=draw(st.sampled_from([0.0, 0.002, 0.01]))))


@st.composite
def eagle2_configs(draw):
    k, depth = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    drafted = k + (depth - 1) * k * k
    return Eagle2Config(k=k, depth=depth, n_total=draw(st.integers(1, drafted)), kv_mode=draw(KV))


@st.composite
def sequoia_configs(draw):
    raw = draw(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=4))
    total = max(1.0, sum(raw) / draw(st.floats(0.3, 1.0)))
    return SequoiaConfig(n_max=draw(st.integers(1, 24)), d_max=draw(st.integers(1, 8)),
                         acceptance=tuple(a / total for a in raw), kv_mode=draw(KV))


method_configs = st.one_of(
    st.builds(ARConfig, kv_mode=KV).map(lambda c: ("ar", c)),
    st.builds(LinearConfig, k=st.integers(1, 8), kv_mode=KV).map(lambda c: ("linear", c)),
    st.builds(FixedTreeConfig, d=st.integers(1, 6), b=st.integers(1, 4),
              tau=st.sampled_from([0.0, 0.01, 0.1]), n_max=st.integers(1, 48),
              kv_mode=KV).map(lambda c: ("fixed_tree", c)),
    dynatree_configs().map(lambda c: ("dynatree", c)),
    cost_aware_configs().map(lambda c: ("dynatree", c)),
    eagle2_configs().map(lambda c: ("eagle2", c)),
    sequoia_configs().map(lambda c: ("sequoia", c)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arch=st.sampled_from(ARCHS), attn=st.sampled_from(ATTNS), noise=st.sampled_from(NOISES),
       mc=method_configs, prompt=prompts, n=st.integers(0, 24))
def test_every_decoder_equals_target_greedy(arch, attn, noise, mc, prompt, n):
    method, config = mc
    assert_decodes(cached_pair(arch, attn, noise), prompt, method, config, n, reference_greedy(arch, attn, prompt, n))


@settings(max_examples=40, deadline=None)
@given(arch=st.sampled_from(ARCHS), mc=method_configs, prompt=prompts, cut=st.integers(0, 15))
def test_stops_at_first_eos_even_inside_an_accepted_path(arch, mc, prompt, cut):
    method, config = mc
    # An identical draft: drafted paths are accepted, so the EOS lands inside one.
    pair = cached_pair(arch, "sdpa", 0.0)
    ref = reference_greedy(arch, "sdpa", prompt, 16)
    eos = ref[cut]
    expected = ref[: ref.index(eos) + 1]
    res = generate(pair, list(prompt), method, config, max_new_tokens=16, eos_token_id=eos)
    assert res.tokens == expected
    assert res.metrics.stopped_by == "eos"


#: budgets of 1, depth 1, the shallowest DynaTree, a wide recompute tree (shared with other drafters' tests)
EDGE_CONFIGS = [
    ("linear", LinearConfig(k=1)),
    ("fixed_tree", FixedTreeConfig(d=1, b=3, n_max=1)),
    ("fixed_tree", FixedTreeConfig(d=6, b=3, tau=0.0, n_max=1)),
    ("dynatree", DynaTreeConfig(n_max=1)),
    ("dynatree", DynaTreeConfig(d0=1, d_max=2, b_min=3, b_mid=3, b_max=3, rho_stop=0.001, rho_deep=0.002)),
    ("dynatree", DynaTreeConfig(kv_mode="recompute", tau=0.0, n_max=200, b_min=2, b_mid=3, b_max=4)),
    # cost-aware with a flat curve (big trees pay), a budget of 1, EAGLE-2's rerank down to 1 and 3 nodes,
    # Sequoia with a certain rank 0 (a chain) and a spread vector
    ("dynatree", DynaTreeConfig(cost_aware=True, cost=CostModel(verify_s=(0.05,) * 24, draft_s=0.0),
                                b_min=2, b_mid=3, b_max=4)),
    ("dynatree", DynaTreeConfig(cost_aware=True, cost=CostModel(verify_s=(0.05, 0.05), draft_s=0.0))),
    ("eagle2", Eagle2Config(k=3, depth=4, n_total=1)),
    ("eagle2", Eagle2Config(k=4, depth=3, n_total=3, kv_mode="recompute")),
    ("sequoia", SequoiaConfig(n_max=6, d_max=6, acceptance=(1.0,))),
    ("sequoia", SequoiaConfig(n_max=12, d_max=4, acceptance=(0.5, 0.2, 0.1))),
]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("attn", ATTNS)
@pytest.mark.parametrize("method,config", EDGE_CONFIGS)
def test_edge_configs_are_exact(arch, attn, method, config):
    pair = cached_pair(arch, attn, 0.0)
    prompt = (5, 9, 2, 33, 7)
    res = generate(pair, list(prompt), method, config, max_new_tokens=30, ignore_eos=True)
    assert res.tokens == reference_greedy(arch, attn, prompt, 30)


def test_identical_draft_accepts_more_than_one_token_per_iteration():
    """Sanity for the selection logic: with draft == target, linear K=4 commits 5 per round."""
    pair = cached_pair("llama", "sdpa", 0.0)
    res = generate(pair, [4, 8, 15, 16, 23], "linear", LinearConfig(k=4), max_new_tokens=25, ignore_eos=True)
    assert res.metrics.iterations == 5
    assert res.metrics.acceptance_rate == 1.0
    assert res.metrics.tokens_per_iteration == 5.0


def test_history_state_carries_across_prompts():
    pair = cached_pair("gpt_neox", "sdpa", 0.02)
    cfg = DynaTreeConfig()
    first = generate(pair, [3, 4, 5], "dynatree", cfg, max_new_tokens=20, ignore_eos=True)
    assert first.history_state is not None and first.history_state.window
    second = generate(pair, [6, 7, 8], "dynatree", cfg, max_new_tokens=20, ignore_eos=True,
                      history=first.history_state, trace=True)
    assert second.tokens == reference_greedy("gpt_neox", "sdpa", (6, 7, 8), 20)
    # the second run started from the first run's window, not from scratch
    assert second.trace[0].history_before["window"] == first.history_state.window
    drafted = sum(rec.acceptance is not None for rec in second.trace)
    assert len(second.history_state.window) == min(cfg.history.window,
                                                   len(first.history_state.window) + drafted)


def test_tree_session_regrow_matches_the_first_iteration_of_generate():
    from dynatree_core.engine.session import TreeSession

    pair = cached_pair("llama", "sdpa", 0.02)
    prompt = [7, 3, 9, 12]
    cfg = FixedTreeConfig(d=3, b=2, tau=0.0)
    run = generate(pair, prompt, "fixed_tree", cfg, max_new_tokens=10, ignore_eos=True, trace=True)
    session = TreeSession(pair, prompt)
    for _ in range(2):  # regrowing twice gives the same answer: the prefilled caches are untouched
        tree, argmax = session.regrow(cfg.growth_rule())
        first = run.trace[0]
        assert tree.tokens == first.tree.tokens and tree.parents == first.tree.parents
        assert argmax == first.target_argmax

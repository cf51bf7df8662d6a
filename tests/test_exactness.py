"""Exactness: every decoder emits exactly the target's greedy tokens (model.generate).

Property tests over tiny random GPT-NeoX and Llama models, eager and sdpa attention, drafts
from identical to unrelated, random prompts, random valid configs and both KV modes.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynatree_core import generate
from dynatree_core.policy.config import DynaTreeConfig, FixedTreeConfig, LinearConfig

from helpers import assert_decodes, cached_pair, reference_greedy
from helpers.exactness import ARCHS, ATTNS, DIFFERING_NOISE, EDGE_CONFIGS, method_configs, prompts

NOISES = (0.0, 0.02, 0.1, 1.0)


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


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("attn", ATTNS)
@pytest.mark.parametrize("method,config", EDGE_CONFIGS)
def test_edge_configs_are_exact(arch, attn, method, config):
    pair = cached_pair(arch, attn, 0.0)
    prompt = (5, 9, 2, 33, 7)
    res = generate(pair, list(prompt), method, config, max_new_tokens=30, ignore_eos=True)
    assert res.tokens == reference_greedy(arch, attn, prompt, 30)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("method,config", EDGE_CONFIGS)
def test_edge_configs_are_exact_with_a_draft_that_differs(arch, method, config):
    """The same edge configs with a draft that is not the target: drafted tokens are rejected as well
    as accepted (with the identical draft above nothing is ever rejected)."""
    pair = cached_pair(arch, "sdpa", DIFFERING_NOISE[arch])
    prompt = (5, 9, 2, 33, 7)
    res = generate(pair, list(prompt), method, config, max_new_tokens=30, ignore_eos=True)
    assert res.tokens == reference_greedy(arch, "sdpa", prompt, 30)
    assert 0 < res.metrics.acceptance_rate < 1, res.metrics.acceptance_rate


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

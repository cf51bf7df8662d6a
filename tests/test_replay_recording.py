"""A recording made for replay (generate(..., trace="replay")): exact output, DynaTree's own
accepted path, and a strict replay of any setting inside the page ranges never lacks data."""

from __future__ import annotations

import random

import pytest

from dynatree_core import DynaTreeConfig, generate
from dynatree_core.policy.replay import replay_tree, setting_rule
from dynatree_core.records.trace import Trace
from helpers import cached_pair
from helpers.knob_settings import random_setting

PROMPT = [5, 9, 13, 2, 7, 11, 3, 8, 14, 6]  # token ids (the tiny pairs here carry no tokenizer)


@pytest.fixture(scope="module", params=["llama", "gpt_neox"])
def recorded(request):
    pair = cached_pair(request.param, "sdpa", 0.02)  # both tiny architectures
    cfg = DynaTreeConfig.paper()
    ar = generate(pair, PROMPT, "ar", max_new_tokens=24, ignore_eos=True)
    own = generate(pair, PROMPT, "dynatree", cfg, max_new_tokens=24, trace=True, ignore_eos=True)
    rec = generate(pair, PROMPT, "dynatree", cfg, max_new_tokens=24, trace="replay", ignore_eos=True)
    return ar, own, rec


def test_a_replay_recording_commits_the_targets_tokens_along_dynatrees_own_path(recorded):
    ar, own, rec = recorded
    assert rec.tokens == ar.tokens  # exact
    # the configured setting's own tree: the same accepted lengths and committed tokens per iteration
    assert [r.accepted_length for r in rec.trace.iterations] == [r.accepted_length for r in own.trace.iterations]
    assert [r.committed for r in rec.trace.iterations] == [r.committed for r in own.trace.iterations]
    info = rec.trace.replay
    assert len(info["nodes"]) == len(info["d_max_cap"]) == len(rec.trace.iterations)
    # the envelope holds more than the own tree wherever the draft ran
    assert sum(info["nodes"]) > sum(r.num_nodes for r in own.trace.iterations)


def test_a_strict_replay_of_any_setting_inside_the_page_ranges_never_lacks_data(recorded):
    rec = Trace.from_json(recorded[2].trace.to_json())  # as a saved file holds it
    rng = random.Random(0)
    grown = 0
    for _ in range(400):
        i = rng.randrange(len(rec.iterations))
        rule = setting_rule(random_setting(rng), rec.replay["d_max_cap"][i])
        tree = replay_tree(rec.iterations[i].tree, rule)  # raises KeyError where data lacks
        grown += len(tree) - 1
    assert grown > 400  # the settings grew real trees


def test_the_envelope_holds_deep_trees_a_small_budget_reaches(recorded):
    """N_max is spent level by level: a narrow tree with a small budget goes deeper than the
    widest budgeted one, and the envelope still holds it."""
    rec = recorded[2].trace
    deep = dict(b_min=1, b_mid=1, b_max=1, n_max=3, d0=1, d_max=12, rho_stop=0.02, rho_deep=0.03, tau=0.0,
                tau_h=0.9, tau_l=0.4)
    depths = [replay_tree(r.tree, setting_rule(deep, cap)).depth
              for r, cap in zip(rec.iterations, rec.replay["d_max_cap"])]
    assert max(depths) >= 2


def test_a_sampled_replay_recording_under_match_equals_seeded_ar(llama_pair):
    kw = dict(max_new_tokens=16, ignore_eos=True, temperature=0.8, seed=3)
    ar = generate(llama_pair, PROMPT, "ar", **kw)
    rec = generate(llama_pair, PROMPT, "dynatree", DynaTreeConfig.paper(), trace="replay", verify="match", **kw)
    assert rec.tokens == ar.tokens
    rng = random.Random(1)
    for _ in range(100):
        i = rng.randrange(len(rec.trace.iterations))
        replay_tree(rec.trace.iterations[i].tree, setting_rule(random_setting(rng), rec.trace.replay["d_max_cap"][i]))


@pytest.mark.parametrize("kwargs, message", [
    (dict(config=DynaTreeConfig.cpu()), "lookup_tail=0"),
    (dict(config=DynaTreeConfig.paper(b_max=8)), "b_max must be in the page's range"),
    (dict(config=DynaTreeConfig.paper(), temperature=0.8, verify="rejection"), "verify='match'"),
    (dict(method="linear"), "method must be 'dynatree'"),
])
def test_a_replay_recording_refuses_what_the_page_cannot_regrow(llama_pair, kwargs, message):
    kwargs.setdefault("method", "dynatree")
    with pytest.raises(ValueError, match=message):
        generate(llama_pair, PROMPT, max_new_tokens=4, trace="replay", **kwargs)

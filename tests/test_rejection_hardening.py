"""Speculative sampling's settings and rejection path, hardened (issue 39, part 4).

* ``seed`` defaults to None (0 when sampling); at temperature 0 a seed, a verify rule or a draft noise
  is refused (``tests/test_bad_input.py``); a dict written before ``draft_noise`` reads back as the
  drafts it described;
* the smallest temperature, MIN_TEMPERATURE, keeps the warped logits finite and draws the greedy tokens;
* ``TargetChoice.scores`` are the warped logits under rejection too (the candidate loop once
  overwrote them with its candidate column), ``.p`` their softmax;
* a linear run under rejection draws one candidate per node (Leviathan's chain) whatever the
  benchmark's ``record_top_k`` asks the drafter to record.

The statistical tests of rejection sampling are ``tests/test_sampling_stats.py``; the shared-noise
coupling's closed form is ``tests/test_gumbel_coupling.py``.
"""

from __future__ import annotations

import pytest
import torch

from dynatree_core import generate, iterate
from dynatree_core.policy.config import DynaTreeConfig, LinearConfig
from dynatree_core.policy.sampling import MIN_TEMPERATURE, SamplingConfig
from dynatree_core.runtime.sampling import DraftCandidates, TargetSampler, warp

from helpers import cached_pair


def test_seed_and_draft_noise_defaults_and_old_dicts():
    """seed: None at temperature 0, 0 when sampling unless given; draft_noise: "shared" in force under
    match, nothing under rejection or greedy; a dict written before draft_noise existed (under match)
    reads back as "none" (its drafts were the top-B); an old greedy dict with seed 0 still reads."""
    assert SamplingConfig().seed is None and SamplingConfig(temperature=0.7).seed == 0
    assert SamplingConfig(temperature=0.7, seed=9).seed == 9
    assert SamplingConfig(temperature=MIN_TEMPERATURE).temperature == MIN_TEMPERATURE == 1e-6  # allowed
    assert SamplingConfig(temperature=0.7).noise == "shared"
    assert SamplingConfig(temperature=0.7, draft_noise="none").noise == "none"
    assert SamplingConfig(temperature=0.7, verify="rejection").noise is None and SamplingConfig().noise is None
    old_match = {"temperature": 0.7, "top_p": 1.0, "top_k": 0, "seed": 3, "verify": "match"}
    assert SamplingConfig.from_dict(old_match).noise == "none"
    assert SamplingConfig.from_dict({**old_match, "verify": None}).noise == "none"
    assert SamplingConfig.from_dict({**old_match, "verify": "rejection"}).noise is None
    old_greedy = SamplingConfig.from_dict({"temperature": 0.0, "top_p": 1.0, "top_k": 0, "seed": 0, "verify": None})
    assert old_greedy == SamplingConfig() and old_greedy.seed is None
    for cfg in (SamplingConfig(), SamplingConfig(temperature=0.7, seed=4),
                SamplingConfig(temperature=0.7, draft_noise="none"),
                SamplingConfig(temperature=0.9, top_k=5, verify="rejection")):
        back = SamplingConfig.from_dict(cfg.to_dict())
        assert (back.rule, back.noise, back.seed, back.temperature, back.top_k) == (
            cfg.rule, cfg.noise, cfg.seed, cfg.temperature, cfg.top_k)


@pytest.mark.parametrize("verify", ["match", "rejection"])
def test_the_smallest_temperature_is_finite_and_draws_the_greedy_tokens(verify):
    """At MIN_TEMPERATURE the warped logits stay finite (logits / T in float32) and p is one-hot on the
    argmax, so both rules emit greedy decoding's tokens."""
    pair = cached_pair("llama", "sdpa", 0.3)
    logits = torch.randn((3, 74), generator=torch.Generator().manual_seed(0)) * 30
    assert torch.isfinite(warp(logits, SamplingConfig(temperature=MIN_TEMPERATURE))).all()
    greedy = generate(pair, [3, 4, 5], "dynatree", DynaTreeConfig(tau=0.0), max_new_tokens=16, ignore_eos=True)
    res = generate(pair, [3, 4, 5], "dynatree", DynaTreeConfig(tau=0.0), max_new_tokens=16, ignore_eos=True,
                   temperature=MIN_TEMPERATURE, verify=verify, seed=2)
    assert res.tokens == greedy.tokens


@pytest.mark.parametrize("verify", ["match", "rejection"])
def test_the_target_choice_keeps_the_warped_scores(verify):
    """TargetChoice.scores are the warped logits (float64 [n, V], -inf outside top-k) under either
    rule, and .p their softmax."""
    cfg = SamplingConfig(temperature=0.8, top_k=5, verify=verify)
    g = torch.Generator().manual_seed(0)
    n, vocab, k = 4, 12, 3
    logits = torch.randn((n, vocab), generator=g) * 2
    q = torch.softmax(torch.randn((n, vocab), generator=g), -1)
    cands = torch.stack([torch.randperm(vocab, generator=g)[:k] for _ in range(n)])
    draft = DraftCandidates(cands, torch.ones(n, dtype=torch.bool), q.float())
    choice = TargetSampler(cfg, torch.Generator().manual_seed(1)).choose(
        logits, torch.tensor([0, 1, 1, 2]), 2, 5, draft if verify == "rejection" else None)
    assert choice.scores.dtype == torch.float64 and choice.scores.shape == (n, vocab)
    assert torch.equal(choice.scores, warp(logits, cfg).double())
    assert (torch.isfinite(choice.scores).sum(-1) == 5).all()
    assert torch.allclose(choice.p, torch.softmax(choice.scores, -1), rtol=0, atol=1e-15)
    assert torch.allclose(choice.p.sum(-1), torch.ones(n, dtype=torch.float64))
    assert all(choice.p[i, t] > 0 for i, t in enumerate(choice.tokens.tolist()))


def test_a_linear_run_under_rejection_draws_one_candidate_per_node_whatever_it_records():
    """Leviathan's chain samples one draft token per step: the benchmark's record_top_k=4 (its oracle's
    candidates) must not widen it to four draws per node. One coin and one candidate per expanded
    node, traced or not, and the same tokens seed for seed as without record_top_k."""
    pair = cached_pair("llama", "sdpa", 0.3)
    kw = dict(max_new_tokens=24, ignore_eos=True, temperature=1.0, verify="rejection")
    for seed in range(3):
        plain = generate(pair, [3, 4, 5], "linear", LinearConfig(k=3), seed=seed, **kw)
        traced = iterate(pair, [3, 4, 5], "linear", LinearConfig(k=3), trace=True, seed=seed, record_top_k=4, **kw)
        recs = list(traced)
        untraced = iterate(pair, [3, 4, 5], "linear", LinearConfig(k=3), seed=seed, record_top_k=4, **kw)
        list(untraced)
        assert traced.result.tokens == plain.tokens == untraced.result.tokens
        drafted = [rec for rec in recs if rec.tree.num_drafted]
        assert drafted
        for rec in drafted:
            assert all(len(c) == 1 for c in rec.sampling["coins"])
            rows = [row for row in rec.tree.topk_tokens if row is not None]  # expanded nodes' candidates
            assert rows and all(len(row) == 1 for row in rows)

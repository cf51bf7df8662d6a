"""Shared draft noise under ``verify="match"``: the drafts are ranked by log q + the Gumbel noise the
target's draw uses at the same position, and what the tree reads as a child's probability is the
coupled confidence softmax(log q + g). Exactness (every decoder equals seeded AR, shared or not) is
``tests/test_sampling.py``'s property; this file checks the mechanism and that it does what it is for.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dynatree_core import generate
from dynatree_core.policy.config import DynaTreeConfig, LinearConfig
from dynatree_core.policy.sampling import SamplingConfig, coupled_confidence, coupled_scores, coupling_scale
from dynatree_core.records.trace import Trace
from dynatree_core.runtime.sampling import DraftSampler, make_samplers

from helpers import cached_pair

CPU = torch.device("cpu")


def test_candidates_are_the_top_of_the_perturbed_scores_with_their_coupled_confidence():
    cfg = SamplingConfig(temperature=0.8, seed=123)
    draft, target = make_samplers(cfg, CPU, 50)
    assert draft.noise is target.noise  # one stream: each position's row is computed once
    logq = torch.log_softmax(torch.randn((3, 50), generator=torch.Generator().manual_seed(0)) * 2, -1)
    tokens, logc = draft.candidates(logq, 4, torch.arange(3), position=17)
    for r in range(3):
        ref = coupled_scores(logq[r].numpy(), 123, 17)
        assert tokens[r].tolist() == list(np.argsort(-ref, kind="stable")[:4])
        conf = coupled_confidence(ref, coupling_scale(0.8))  # beta_0 / T
        np.testing.assert_allclose(logc[r].numpy(), np.log(conf[tokens[r].numpy()]), rtol=1e-5)
    # a sparse head: columns map to token ids, and each token keeps its own noise
    vocab_ids = torch.tensor([3, 7, 11, 40, 49])
    tokens, _ = draft.candidates(logq[:1, :5], 2, torch.arange(1), vocab_ids, position=17)
    full = np.full(50, -np.inf)
    full[vocab_ids.numpy()] = logq[0, :5].numpy()
    assert tokens[0].tolist() == list(np.argsort(-coupled_scores(full, 123, 17), kind="stable")[:2])


def test_independent_drafts_keep_the_top_k_of_q_and_rejection_refuses_shared_noise():
    cfg = SamplingConfig(temperature=0.8, seed=1, draft_noise="none")
    draft, _ = make_samplers(cfg, CPU, 50)
    logq = torch.log_softmax(torch.randn((2, 50), generator=torch.Generator().manual_seed(1)), -1)
    tokens, lps = draft.candidates(logq, 3, torch.arange(2), position=5)
    assert draft.noise is None and torch.equal(tokens, logq.topk(3).indices) and torch.equal(lps, logq.topk(3).values)
    with pytest.raises(ValueError, match="draft_noise"):
        SamplingConfig(temperature=0.8, verify="rejection", draft_noise="shared")
    with pytest.raises(ValueError, match="draft_noise"):
        SamplingConfig(draft_noise="shared")  # temperature 0: no noise to share
    with pytest.raises(ValueError, match="draft_noise must be one of"):
        SamplingConfig(temperature=1.0, draft_noise="gumbel")
    with pytest.raises(ValueError, match="position"):
        DraftSampler(SamplingConfig(temperature=1.0), 50, noise=draft.noise or make_samplers(
            SamplingConfig(temperature=1.0), CPU, 50)[0].noise).candidates(logq, 2, torch.arange(2))


@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])
def test_a_draft_equal_to_the_target_is_always_accepted_with_shared_noise(arch):
    """q = p: the two perturbed argmaxes are the same token, so a linear chain is accepted whole
    at any temperature; ranked by q alone it is not (the target's draw often is not q's top)."""
    pair = cached_pair(arch, "sdpa", 0.0)
    prompt = [5, 9, 2, 33, 7]
    runs = {}
    for noise in ("shared", "none"):
        cfg = SamplingConfig(temperature=1.0, seed=4, draft_noise=noise)
        runs[noise] = generate(pair, prompt, "linear", LinearConfig(k=4), max_new_tokens=40, ignore_eos=True,
                               sampling=cfg)
    shared, independent = runs["shared"].metrics, runs["none"].metrics
    assert runs["shared"].tokens == runs["none"].tokens
    assert shared.acceptance_rate == 1.0 and shared.iterations == 8  # 5 tokens per round
    assert independent.acceptance_rate < 0.8


def test_shared_noise_accepts_more_with_a_draft_that_differs():
    """A noisy draft at temperature 1: DynaTree accepts more per round with the shared noise (the same
    seeds and prompts, every output equal)."""
    pair = cached_pair("llama", "sdpa", 0.3)
    got = {}
    for noise in ("shared", "none"):
        lengths = []
        for seed, prompt in enumerate(([5, 9, 2, 33], [7, 1, 40, 12, 8], [3, 3, 19])):
            cfg = SamplingConfig(temperature=1.0, seed=seed, draft_noise=noise)
            res = generate(pair, prompt, "dynatree", DynaTreeConfig(tau=0.0, n_max=16), max_new_tokens=48,
                           ignore_eos=True, sampling=cfg)
            lengths.append(res.metrics.tokens_per_iteration)
        got[noise] = float(np.mean(lengths))
    assert got["shared"] > 1.2 * got["none"], got


def test_traces_record_the_draft_noise_and_old_ones_load_as_independent():
    pair = cached_pair("llama", "sdpa", 0.3)
    res = generate(pair, [5, 9, 2], "dynatree", DynaTreeConfig(tau=0.0), max_new_tokens=6, trace=True,
                   ignore_eos=True, temperature=0.7, seed=3)
    d = res.trace.to_dict()
    assert d["sampling"]["draft_noise"] == "shared"
    assert SamplingConfig.from_dict(d["sampling"]).noise == "shared"
    old = dict(d["sampling"])
    del old["draft_noise"]  # a trace written before shared noise existed drafted the top-B of q
    assert SamplingConfig.from_dict(old).noise == "none"
    assert Trace.from_dict(d).sampling["draft_noise"] == "shared"


def test_a_trace_records_the_drafts_perturbed_scores_beside_the_targets():
    """Each expanded node's draft side of the coupling: its children are the draft's largest log q + g,
    each score is log q plus the noise of the position the children fill, and the JSON round-trips."""
    from dynatree_core.policy.sampling import gumbel_noise

    pair = cached_pair("llama", "sdpa", 0.3)
    cfg = SamplingConfig(temperature=0.9, seed=8)
    res = generate(pair, [5, 9, 2, 33], "dynatree", DynaTreeConfig(tau=0.0, n_max=12), max_new_tokens=10,
                   trace=True, ignore_eos=True, sampling=cfg)
    checked = 0
    for rec in res.trace:
        if rec.draft_forwards == 0:  # the last round drafts nothing (one token left: the bonus)
            assert "draft_score_top" not in rec.sampling
            continue
        rows = rec.sampling["draft_score_top"]
        for u, row in enumerate(rows):
            if rec.tree.topk_tokens[u] is None:
                assert row is None
                continue
            tokens, scores, logq = row
            assert tokens[:len(rec.tree.topk_tokens[u])] == rec.tree.topk_tokens[u]
            assert scores == sorted(scores, reverse=True)
            position = rec.prefix_len + rec.tree.depths[u] + 1
            g = gumbel_noise(8, position, int(pair.target.config.vocab_size))
            np.testing.assert_allclose(np.array(scores) - np.array(logq), g[tokens], atol=1e-9)
            checked += 1
    assert checked >= 5
    again = Trace.from_json(res.trace.to_json())
    assert again.iterations[0].sampling["draft_score_top"] == res.trace.iterations[0].sampling["draft_score_top"]


@pytest.mark.parametrize("sampling", [None, SamplingConfig(temperature=0.9, seed=6)])
def test_a_tree_session_returns_the_targets_probability_of_every_drafted_token(sampling):
    """What the live explorer colours by: the same p(token | parent) a traced run records."""
    from dynatree_core.engine.session import TreeSession

    pair = cached_pair("llama", "sdpa", 0.3)
    cfg = DynaTreeConfig(tau=0.0, n_max=12)
    first = generate(pair, [7, 3, 9, 12], "dynatree", cfg, max_new_tokens=8, ignore_eos=True, trace=True,
                     sampling=sampling).trace[0]
    got = TreeSession(pair, [7, 3, 9, 12], top_k=cfg.trace_top_k).regrow(cfg.growth_rule(), sampling)
    tree, choices = got  # unpacks as the pair it always was
    assert tree.tokens == first.tree.tokens and choices == first.target_argmax
    assert got.target_prob[0] is None
    np.testing.assert_allclose(got.target_prob[1:], first.target_prob_drafted[1:], rtol=1e-5)


def test_generate_and_iterate_take_draft_noise_as_a_keyword():
    pair = cached_pair("llama", "sdpa", 0.3)
    a = generate(pair, [5, 9, 2], "linear", max_new_tokens=8, temperature=0.7, seed=1, draft_noise="none", trace=True)
    assert a.trace.sampling["draft_noise"] == "none"
    from dynatree_core import iterate

    run = iterate(pair, [5, 9, 2], "linear", max_new_tokens=8, temperature=0.7, seed=1, draft_noise="shared")
    assert [t for rec in run for t in rec.committed] == a.tokens  # the same seeded AR tokens
    with pytest.raises(ValueError, match="draft_noise"):
        generate(pair, [5, 9, 2], "linear", max_new_tokens=8, draft_noise="shared")  # greedy: refused

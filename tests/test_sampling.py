"""Speculative sampling: the warped distribution is Hugging Face's, seeded AR is reproducible, every
decoder under ``verify="match"`` emits exactly seeded AR's tokens, the device's rejection sampling
is the reference's, and bad settings fail before any model work.

The statistical test of ``verify="rejection"`` (20,000 seeded runs per method) is
``tests/test_sampling_stats.py``.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from dynatree_core import generate, iterate
from dynatree_core.drafters import LookupMix, PromptLookup
from dynatree_core.policy.config import DynaTreeConfig, FixedTreeConfig, LinearConfig
from dynatree_core.policy.sampling import (SamplingConfig, gumbel_max, gumbel_noise, inverse_cdf as ref_inverse_cdf,
                                           recursive_rejection, warp_probs)
from dynatree_core.records.trace import Trace
from dynatree_core.runtime.sampling import DraftCandidates, NoiseStream, TargetSampler, inverse_cdf, probs, warp

from helpers import cached_pair
from helpers.exactness import ARCHS, ATTNS, DIFFERING_NOISE, EDGE_CONFIGS, method_configs, prompts
from helpers.features import feature_pair

TEMPERATURES = (0.3, 0.7, 1.0, 1.5)
samplings = st.builds(SamplingConfig, temperature=st.sampled_from(TEMPERATURES),
                      top_p=st.sampled_from([1.0, 0.95, 0.8, 0.5]), top_k=st.sampled_from([0, 0, 1, 5, 20]),
                      seed=st.integers(0, 2 ** 40), draft_noise=st.sampled_from([None, "shared", "none"]))


# --- the distribution --------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(cfg=samplings, seed=st.integers(0, 1000), width=st.sampled_from([3, 17, 74, 300]),
       scale=st.sampled_from([0.1, 1.0, 5.0]))
def test_the_warped_logits_are_hugging_faces(cfg, seed, width, scale):
    """Temperature, then top-k, then top-p: the same scores, -inf included, as HF's warpers in
    ``generate(do_sample=True)``'s order."""
    logits = torch.randn((4, width), generator=torch.Generator().manual_seed(seed)) * scale
    hf = LogitsProcessorList([TemperatureLogitsWarper(cfg.temperature)]
                             + ([TopKLogitsWarper(cfg.top_k)] if cfg.top_k else [])
                             + ([TopPLogitsWarper(cfg.top_p)] if cfg.top_p < 1 else []))
    assert torch.equal(warp(logits, cfg), hf(None, logits.clone()))
    # the torch-free reference agrees with the device code
    ref = np.stack([warp_probs(row, cfg) for row in logits.double().numpy()])
    np.testing.assert_allclose(probs(logits, cfg).numpy(), ref, rtol=1e-5, atol=1e-7)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 1000), width=st.integers(1, 50), u=st.floats(0.0, 1.0, exclude_max=True))
def test_inverse_cdf_matches_the_reference_and_never_draws_a_zero(seed, width, u):
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(width, generator=g, dtype=torch.float64) * (torch.rand(width, generator=g) > 0.5)
    if p.sum() == 0:
        p[0] = 1.0
    p = p / p.sum()
    tok = int(inverse_cdf(p[None], torch.tensor([u], dtype=torch.float64))[0])
    assert tok == ref_inverse_cdf(p.numpy(), u) and p[tok] > 0


def test_the_noise_is_a_counter_based_gumbel_stream_the_device_reproduces():
    g = gumbel_noise(7, 105, 20000)
    dev = NoiseStream(7, 20000, torch.device("cpu"))
    # the same values whatever else was drawn: the integer hashing is identical, and numpy's and torch's
    # float64 log may differ in the last bit on some builds (no decoder compares the two: all read the device's)
    np.testing.assert_allclose(dev.rows(100, 8)[5].numpy(), g, rtol=1e-13, atol=1e-13)
    assert np.array_equal(dev.row(105, 300).numpy(), dev.row(105).numpy()[:300])  # a token's noise, any width
    np.testing.assert_allclose(dev.row(105, 20100).numpy()[:20000], dev.row(105).numpy(), rtol=1e-13, atol=1e-13)
    assert not np.array_equal(gumbel_noise(8, 105, 20000), g) and not np.array_equal(gumbel_noise(7, 106, 20000), g)
    assert gumbel_in_ks_band(g)
    # and seeds far apart (the high half of a 63-bit seed counts too)
    assert not np.array_equal(gumbel_noise(7 + 2 ** 40, 105, 100), g[:100])


def gumbel_in_ks_band(g: np.ndarray) -> bool:
    """Gumbel: exp(-exp(-g)) is uniform; whether its empirical CDF stays within a Kolmogorov-Smirnov
    band (alpha 1e-3)."""
    u = np.sort(np.exp(-np.exp(-g)))
    return bool(np.max(np.abs(u - np.arange(1, u.size + 1) / u.size)) < 1.95 / np.sqrt(u.size))


def test_noise_that_is_not_gumbel_falls_outside_the_band():
    """The band has power: exponential noise (-log u of the same uniforms) and Gumbel noise of a
    tenth too small a scale both leave it."""
    g = gumbel_noise(7, 105, 20000)
    u = np.exp(-np.exp(-g))  # the stream's uniforms
    assert not gumbel_in_ks_band(-np.log(u)) and not gumbel_in_ks_band(0.9 * g)


#: the logits of the Gumbel-max draw's test, and the 1 - 1e-4 quantile of chi-square with 4 degrees of freedom
GUMBEL_LOGITS, CHI2_4 = np.array([2.0, 1.0, 0.5, 0.0, -1.0]), 23.5


def gumbel_max_chi2(tokens: list[int] | np.ndarray) -> float:
    """Pearson's statistic of 20,000 drawn ``tokens`` against p (T = 1)."""
    p = warp_probs(GUMBEL_LOGITS, SamplingConfig(temperature=1.0))
    draws = np.bincount(tokens, minlength=5)
    return float(((draws - 20000 * p) ** 2 / (20000 * p)).sum())


def test_gumbel_max_draws_from_p():
    """argmax(log p + g) over many positions has the frequencies of p (chi-square, alpha 1e-4); the
    same test rejects the draw with the noise at half its scale (the draw of p at temperature 1/2)."""
    cfg = SamplingConfig(temperature=1.0, seed=3)
    assert gumbel_max_chi2([gumbel_max(GUMBEL_LOGITS, cfg, t) for t in range(20000)]) < CHI2_4
    g = gumbel_noise(3, np.arange(20000)[:, None], 5)  # the same positions' noise, at once
    assert gumbel_max_chi2(np.argmax(GUMBEL_LOGITS + 0.5 * g, -1)) > 5 * CHI2_4


# --- rejection sampling on the device is the reference --------------------------------------------
@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10 ** 6), n=st.integers(1, 5), width=st.integers(2, 12), k=st.integers(0, 4))
def test_device_rejection_sampling_is_the_reference(seed, n, width, k):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn((n, width), generator=g, dtype=torch.float64) * 2, -1)
    q = torch.softmax(torch.randn((n, width), generator=g, dtype=torch.float64) * 2, -1)
    k = min(k, width)
    cands = torch.stack([torch.randperm(width, generator=g)[:k] for _ in range(n)]) if k else \
        torch.zeros((n, 0), dtype=torch.long)
    fed = torch.rand(n, generator=g) > 0.3
    q = q * fed[:, None]
    sampler = TargetSampler(SamplingConfig(temperature=1.0, verify="rejection"), torch.Generator().manual_seed(seed))
    out = sampler._rejection(torch.log(p), DraftCandidates(cands, fed, q.float() if k else None))
    p = torch.softmax(torch.log(p), -1)  # what the sampler computes from the scores it is given
    # the same draws, in the same order, by the reference
    g2 = torch.Generator().manual_seed(seed)
    coins = torch.rand((n, k), generator=g2, dtype=torch.float64).numpy()
    last = torch.rand(n, generator=g2, dtype=torch.float64).numpy()
    for i in range(n):
        cand = cands[i].tolist() if fed[i] else []
        qi = q[i].float().double().numpy()  # the device keeps q rows in float32
        tok, steps, _ = recursive_rejection(p[i].numpy(), qi, cand, coins[i], last[i])
        assert int(out.tokens[i]) == tok
        accepted = [j for j, st_ in enumerate(steps) if st_.accepted]
        rank = int(out.accepted_rank[i])
        if not fed[i]:
            assert rank == -2
        elif accepted:
            assert cand[rank] == tok
        else:
            assert rank == -1


# --- settings ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,match", [
    (dict(temperature=-0.1), "temperature must be a finite number >= 0"),
    (dict(temperature=float("nan")), "temperature must be"),
    (dict(temperature=0.7, top_p=0.0), r"top_p must be in \(0, 1\]"),
    (dict(temperature=0.7, top_p=1.5), r"top_p must be in \(0, 1\]"),
    (dict(temperature=0.7, top_k=-1), "top_k must be an integer >= 0"),
    (dict(temperature=0.7, top_k=2.5), "top_k must be an integer >= 0"),
    (dict(temperature=0.7, seed="3"), "seed must be an integer"),
    (dict(temperature=0.7, seed=1.0), "seed must be an integer"),
    (dict(temperature=0.7, verify="speculative"), "verify must be one of"),
    (dict(temperature=0, verify="match"), "verify='match' applies only when sampling"),
    (dict(temperature=0, verify="rejection"), "verify='rejection' applies only when sampling"),
    (dict(top_p=0.9), "top_p and top_k apply only when sampling"),
])
def test_bad_sampling_settings_fail_naming_the_parameter(kwargs, match, monkeypatch):
    pair = cached_pair("llama", "sdpa", 0.02)
    monkeypatch.setattr(type(pair.target), "forward", lambda *a, **k: pytest.fail("a model ran"))
    with pytest.raises(ValueError, match=match):
        generate(pair, [3, 4, 5], "dynatree", max_new_tokens=4, **kwargs)


def test_rejection_needs_drafts_and_sampling_or_keywords_not_both(monkeypatch):
    pair = cached_pair("llama", "sdpa", 0.02)
    monkeypatch.setattr(type(pair.target), "forward", lambda *a, **k: pytest.fail("a model ran"))
    with pytest.raises(ValueError, match="method='ar' drafts none"):
        generate(pair, [3, 4], "ar", max_new_tokens=4, temperature=0.7, verify="rejection")
    with pytest.raises(ValueError, match="not both"):
        generate(pair, [3, 4], "ar", max_new_tokens=4, temperature=0.7, sampling=SamplingConfig(temperature=1.0))


# --- seeded AR and match -----------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def seeded_ar(arch: str, attn: str, prompt: tuple[int, ...], n: int, cfg: SamplingConfig) -> list[int]:
    pair = cached_pair(arch, attn, 0.02)
    return generate(pair, list(prompt), "ar", max_new_tokens=n, ignore_eos=True, sampling=cfg).tokens


def test_seeded_ar_token_depends_on_seed_position_and_p_alone():
    """Continuing from the first half of a seeded run reproduces its second half: each token was
    drawn by Gumbel-max with its absolute position's noise."""
    cfg = SamplingConfig(temperature=1.0, seed=11)
    prompt = (5, 9, 14, 3)
    full = seeded_ar("llama", "sdpa", prompt, 24, cfg)
    rest = seeded_ar("llama", "sdpa", prompt + tuple(full[:10]), 14, cfg)
    assert rest == full[10:]
    other = seeded_ar("llama", "sdpa", prompt, 24, dataclasses.replace(cfg, seed=12))
    assert other != full  # a different seed draws differently (a 74-token vocabulary at T=1)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arch=st.sampled_from(ARCHS), attn=st.sampled_from(ATTNS), noise=st.sampled_from([0.0, 0.02, 0.1, 1.0]),
       mc=method_configs, prompt=prompts, n=st.integers(0, 20), cfg=samplings)
def test_every_decoder_under_match_emits_seeded_ar_tokens(arch, attn, noise, mc, prompt, n, cfg):
    method, config = mc
    pair = cached_pair(arch, attn, noise)
    res = generate(pair, list(prompt), method, config, max_new_tokens=n, ignore_eos=True, sampling=cfg)
    assert res.tokens == seeded_ar(arch, attn, prompt, n, cfg)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("method,config", EDGE_CONFIGS)
def test_edge_configs_under_match_emit_seeded_ar_tokens(arch, method, config):
    cfg = SamplingConfig(temperature=0.7, top_p=0.95, seed=5)
    prompt = (5, 9, 2, 33, 7)
    res = generate(cached_pair(arch, "sdpa", 0.0), list(prompt), method, config, max_new_tokens=30,
                   ignore_eos=True, sampling=cfg)
    assert res.tokens == seeded_ar(arch, "sdpa", prompt, 30, cfg)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("method,config", EDGE_CONFIGS)
def test_edge_configs_under_match_emit_seeded_ar_tokens_with_a_draft_that_differs(arch, method, config):
    """The same with a draft that is not the target: drafted tokens are rejected as well as accepted."""
    cfg = SamplingConfig(temperature=0.7, top_p=0.95, seed=5)
    prompt = (5, 9, 2, 33, 7)
    res = generate(cached_pair(arch, "sdpa", DIFFERING_NOISE[arch]), list(prompt), method, config, max_new_tokens=30,
                   ignore_eos=True, sampling=cfg)
    assert res.tokens == seeded_ar(arch, "sdpa", prompt, 30, cfg)
    assert 0 < res.metrics.acceptance_rate < 1, res.metrics.acceptance_rate


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arch=st.sampled_from(ARCHS), mc=method_configs, prompt=prompts, cut=st.integers(0, 11), cfg=samplings)
def test_match_stops_at_the_first_eos_even_inside_an_accepted_path(arch, mc, prompt, cut, cfg):
    method, config = mc
    pair = cached_pair(arch, "sdpa", 0.0)  # an identical draft: EOS lands inside accepted paths
    ref = seeded_ar(arch, "sdpa", prompt, 12, cfg)
    eos = ref[cut]
    res = generate(pair, list(prompt), method, config, max_new_tokens=12, eos_token_id=eos, sampling=cfg)
    assert res.tokens == ref[: ref.index(eos) + 1]
    assert res.metrics.stopped_by == "eos"


def _drafter_pairs() -> dict:
    base = cached_pair("llama", "sdpa", 0.05)
    feature = feature_pair("sdpa", 1, 0)
    return {"lookup": dataclasses.replace(base, draft=PromptLookup()),
            "model+lookup": dataclasses.replace(base, lookup=LookupMix()),
            "feature": feature, "feature+lookup": dataclasses.replace(feature, lookup=LookupMix())}


@pytest.mark.parametrize("kind", ["lookup", "model+lookup", "feature", "feature+lookup"])
@pytest.mark.parametrize("method,config", [("linear", LinearConfig(k=3)), ("dynatree", DynaTreeConfig.cpu()),
                                           ("fixed_tree", FixedTreeConfig(d=3, b=2, tau=0.0)), ("eagle2", None)])
def test_every_drafter_under_match_emits_seeded_ar_tokens(kind, method, config):
    pair = _drafter_pairs()[kind]
    prompt = [5, 9, 14, 3, 22, 7, 31, 12, 5, 9, 14, 3]  # repeats: the lookup has matches
    ar = generate(pair, prompt, "ar", max_new_tokens=30, ignore_eos=True, sampling=SamplingConfig(temperature=0.8, seed=2))
    for noise in ("shared", "none"):  # drafts ranked with the target's noise, or without it
        cfg = SamplingConfig(temperature=0.8, seed=2, draft_noise=noise)
        res = generate(pair, prompt, method, config, max_new_tokens=30, ignore_eos=True, sampling=cfg)
        assert res.tokens == ar.tokens, noise


# --- temperature 0 and rejection runs -------------------------------------------------------------
def _timeless(d):
    if isinstance(d, dict):
        return {k: _timeless(v) for k, v in d.items() if k not in ("timings", "metrics", "versions")}
    if isinstance(d, list):
        return [_timeless(v) for v in d]
    return d


def test_temperature_zero_is_todays_greedy_decoding_bit_for_bit():
    pair = cached_pair("gpt_neox", "sdpa", 0.02)
    a = generate(pair, [3, 4, 5], "dynatree", DynaTreeConfig.cpu(), max_new_tokens=24, trace=True, ignore_eos=True)
    b = generate(pair, [3, 4, 5], "dynatree", DynaTreeConfig.cpu(), max_new_tokens=24, trace=True, ignore_eos=True,
                 temperature=0.0)
    assert a.tokens == b.tokens
    with pytest.raises(ValueError, match="seed=99 applies only when sampling"):  # never silently ignored
        generate(pair, [3, 4, 5], "dynatree", max_new_tokens=4, temperature=0.0, seed=99)
    da, db = a.trace.to_dict(), b.trace.to_dict()
    assert "sampling" not in da and "sampling" not in da["iterations"][0]  # greedy JSON unchanged
    assert _timeless(da) == _timeless(db)


@pytest.mark.parametrize("method,config", [("linear", LinearConfig(k=3)), ("fixed_tree", FixedTreeConfig(d=3, b=2)),
                                           ("dynatree", DynaTreeConfig(tau=0.0)), ("eagle2", None),
                                           ("sequoia", None)])
def test_rejection_runs_are_reproducible_with_a_seed_and_traced(method, config):
    pair = cached_pair("llama", "sdpa", 0.3)
    kw = dict(max_new_tokens=20, ignore_eos=True, temperature=1.0, verify="rejection")
    a = generate(pair, [3, 4, 5], method, config, seed=4, trace=True, **kw)
    b = generate(pair, [3, 4, 5], method, config, seed=4, **kw)  # untraced: the same draws
    c = generate(pair, [3, 4, 5], method, config, seed=5, **kw)
    assert a.tokens == b.tokens and len(a.tokens) == 20
    assert a.tokens != c.tokens
    rec = next(r for r in a.trace if r.tree.num_drafted)
    s = rec.sampling
    n = len(rec.tree.tokens)
    assert len(s["uniform"]) == n and len(s["accepted_rank"]) == n and len(s["coins"][0]) == len(rec.tree.topk_tokens[0])
    # each node's token has positive probability under p; accepted candidates were drafted there
    assert all(p > 0 for p in s["choice_prob"])
    for i, r in enumerate(s["accepted_rank"]):
        if r >= 0:
            assert rec.tree.topk_tokens[i][r] == rec.target_argmax[i]
    back = Trace.from_json(a.trace.to_json())
    assert back.sampling == a.trace.sampling and back.iterations[0].sampling == a.trace.iterations[0].sampling


def test_match_trace_records_what_drew_each_token():
    pair = cached_pair("llama", "sdpa", 0.02)
    cfg = SamplingConfig(temperature=0.7, top_k=10, seed=3)
    run = iterate(pair, [3, 4, 5, 6], "dynatree", DynaTreeConfig(tau=0.0), max_new_tokens=12, trace=True,
                  ignore_eos=True, sampling=cfg)
    recs = list(run)
    assert run.result.trace.sampling == cfg.to_dict()
    for rec in recs:
        s = rec.sampling
        for i, depth in enumerate(rec.tree.depths):
            # node i's token fills position prefix_len + depth + 1: drawn with that position's noise
            drawn = rec.target_argmax[i]
            g = gumbel_noise(3, rec.prefix_len + depth + 1, pair.target.config.vocab_size)
            assert s["gumbel"][i] == g[drawn]
            tokens, scores = s["score_top"][i]  # the largest log p + g is the drawn token's
            assert tokens[0] == drawn and scores == sorted(scores, reverse=True)
            assert abs(scores[0] - (np.log(s["choice_prob"][i]) + g[drawn])) < 1e-6
            tokens, ps = s["p_top"][i]
            assert len(tokens) == 8 and ps == sorted(ps, reverse=True) and len([p for p in ps if p > 0]) <= 10
        for i in range(1, len(rec.tree.tokens)):  # the warped p of each drafted token, from its parent's row
            assert 0.0 <= rec.target_prob_drafted[i] <= 1.0


@pytest.mark.parametrize("verify", ["match", "rejection"])
def test_a_tree_session_regrows_the_first_iteration_of_a_sampled_run(verify):
    """The live explorer's backend draws like the decode loop's first iteration, and the same
    seed draws the same way on every regrow."""
    from dynatree_core.engine.session import TreeSession

    pair = cached_pair("llama", "sdpa", 0.3)
    prompt = [7, 3, 9, 12]
    cfg = DynaTreeConfig(tau=0.0, n_max=12)
    sampling = SamplingConfig(temperature=0.9, seed=6, verify=verify)
    first = generate(pair, prompt, "dynatree", cfg, max_new_tokens=8, ignore_eos=True, trace=True,
                     sampling=sampling).trace[0]
    session = TreeSession(pair, prompt, top_k=cfg.trace_top_k)
    for _ in range(2):
        tree, choices = session.regrow(cfg.growth_rule(), sampling)
        assert tree.tokens == first.tree.tokens and tree.parents == first.tree.parents
        assert choices == first.target_argmax

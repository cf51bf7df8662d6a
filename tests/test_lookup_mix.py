"""Prompt lookup mixed into a model draft (LookupMix / MixDrafter): the mixture against a
plain-Python reference, exactness with both model drafters and every method, EOS, edge configs,
the chain view, what is recorded, and bad input."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynatree_core import ModelPair, generate
from dynatree_core.policy.config import DynaTreeConfig, LinearConfig
from dynatree_core.runtime.ngram import CompactVocab, lookup_matches
from dynatree_core.drafters import DraftContext, LookupMix, MixDrafter, PromptLookup, make_drafter, mix_topk

from helpers import cached_pair, reference_greedy
from helpers.exactness import ARCHS, EDGE_CONFIGS, method_configs
from helpers.features import check_session_regrow, feature_pair, target_greedy
from helpers.lookup import check_eos_stop, lookup_prompts, reference_lookup


def reference_mix(seq: list[int], ctx: list[int], draft: dict[int, float], mix: LookupMix, k: int
                  ) -> dict[int, float]:
    """The mixture in plain Python: λ r(t) + (1 - λ) q_D(t) over the draft's listed tokens and the
    lookup's top-k, λ = C / (C + κ_n) for the longest matched n-gram (C occurrences)."""
    src = mix.lookup
    lam, share = 0.0, {}
    for n in range(min(src.max_ngram, len(seq) - 1), src.min_ngram - 1, -1):
        if len(ctx) < n:
            continue
        occ = [i for i in range(len(seq) - n) if seq[i:i + n] == ctx[-n:]]
        if occ:
            lam = len(occ) / (len(occ) + mix.prior[min(n, len(mix.prior)) - 1])
            for i in occ:
                share[seq[i + n]] = share.get(seq[i + n], 0.0) + 1 / len(occ)
            break
    lookup_top, _ = reference_lookup(seq, ctx, src, k)
    cands = list(draft) + [t for t in lookup_top if t not in draft]
    return {t: lam * share.get(t, 0.0) + (1 - lam) * draft.get(t, 0.0) for t in cands}


@settings(max_examples=300, deadline=None)
@given(seq=st.lists(st.integers(0, 6), min_size=0, max_size=40),
       tails=st.lists(st.lists(st.integers(0, 7), max_size=3), min_size=1, max_size=4),
       n=st.integers(1, 3), k=st.integers(1, 4), kappa=st.lists(st.floats(0.05, 20.0), min_size=1, max_size=3),
       compact=st.booleans(), data=st.data())
def test_mix_topk_matches_the_reference(seq, tails, n, k, kappa, compact, data):
    mix = LookupMix(PromptLookup(max_ngram=n), prior=tuple(kappa))
    width = n + 3
    rows, drafts = [], []
    for t in tails:
        ctx = (seq + t)[-width:]
        rows.append([-1] * (width - len(ctx)) + ctx)
        # the draft's top-k: distinct ids (some beyond the lookup's vocabulary bound), decreasing probs
        ids = data.draw(st.lists(st.integers(0, 12), min_size=k, max_size=k, unique=True))
        ps = sorted(data.draw(st.lists(st.floats(0.001, 1.0), min_size=k, max_size=k)), reverse=True)
        total = sum(ps) * 1.25  # the top-k never holds all the mass
        drafts.append({i: p / total for i, p in zip(ids, ps)})
    draft_ids = torch.tensor([list(d) for d in drafts], dtype=torch.long)
    draft_lps = torch.tensor([[math.log(p) for p in d.values()] for d in drafts])
    seq_t = torch.tensor(seq, dtype=torch.long)
    vocab = CompactVocab.of(seq) if compact else max(seq, default=0) + 1
    m = lookup_matches(seq_t, torch.tensor(rows, dtype=torch.long), mix.lookup, vocab=vocab)
    ids, lps = mix_topk((draft_ids, draft_lps), m, mix, k)
    assert ids.shape == (len(tails), k)
    for r, t in enumerate(tails):
        ref = reference_mix(seq, seq + t, drafts[r], mix, k)
        got = dict(zip(ids[r].tolist(), lps[r].exp().tolist()))
        assert len(got) == k  # distinct tokens
        for tok, p in got.items():
            assert p == pytest.approx(ref[tok], rel=1e-5, abs=1e-7)
        # the k most probable of the reference's candidates (ties may pick either token)
        kth = sorted(ref.values(), reverse=True)[k - 1]
        assert min(got.values()) >= kth - 1e-6
        assert lps[r].tolist() == sorted(lps[r].tolist(), reverse=True)


def test_no_match_leaves_the_draft_as_it_is():
    mix = LookupMix()
    m = lookup_matches(torch.tensor([1, 2, 3]), torch.tensor([[-1, -1, 9]]), mix.lookup, vocab=4)
    ids, lps = torch.tensor([[7, 3]]), torch.log(torch.tensor([[0.6, 0.3]]))
    got_ids, got_lps = mix_topk((ids, lps), m, mix, 2)
    assert got_ids.tolist() == [[7, 3]] and torch.allclose(got_lps, lps)


def test_a_strong_match_outranks_the_draft():
    """A trigram seen three times, always followed by 5: λ = 3 / (3 + κ_3) of the mass goes to 5."""
    mix = LookupMix(PromptLookup(max_ngram=3), prior=(8.0, 2.0, 1.0))
    seq = [1, 2, 3, 5, 1, 2, 3, 5, 1, 2, 3, 5, 1, 2, 3]
    m = lookup_matches(torch.tensor(seq), torch.tensor([[1, 2, 3]]), mix.lookup, vocab=6)
    ids, lps = mix_topk((torch.tensor([[4, 5]]), torch.log(torch.tensor([[0.7, 0.1]]))), m, mix, 2)
    assert ids.tolist() == [[5, 4]]
    assert lps.exp().tolist()[0] == pytest.approx([0.75 + 0.25 * 0.1, 0.25 * 0.7])


# ----------------------------------------------------------------------------- exactness

def mix_pair(arch: str, noise: float = 0.02, **mix) -> ModelPair:
    base = cached_pair(arch, "sdpa", noise)
    return dataclasses.replace(base, lookup=LookupMix(**mix))


mixes = st.builds(lambda n, kappa: dict(lookup=PromptLookup(max_ngram=n), prior=tuple(kappa)),
                  st.integers(1, 5), st.lists(st.floats(0.05, 10.0), min_size=1, max_size=5))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arch=st.sampled_from(ARCHS), noise=st.sampled_from([0.02, 0.5]), mc=method_configs, prompt=lookup_prompts,
       n=st.integers(0, 24), mix=mixes)
def test_every_decoder_with_model_plus_lookup_equals_target_greedy(arch, noise, mc, prompt, n, mix):
    method, config = mc
    res = generate(mix_pair(arch, noise, **mix), list(prompt), method, config, max_new_tokens=n, ignore_eos=True)
    assert res.tokens == reference_greedy(arch, "sdpa", prompt, n)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(head_seed=st.sampled_from([0, 1, 3]), mc=method_configs, prompt=lookup_prompts, n=st.integers(0, 24),
       mix=mixes)
def test_every_decoder_with_feature_plus_lookup_equals_target_greedy(head_seed, mc, prompt, n, mix):
    method, config = mc
    pair = dataclasses.replace(feature_pair("sdpa", head_seed), lookup=LookupMix(**mix))
    res = generate(pair, list(prompt), method, config, max_new_tokens=n, ignore_eos=True)
    assert res.tokens == target_greedy("sdpa", 0, prompt, n)


@settings(max_examples=30, deadline=None)
@given(arch=st.sampled_from(ARCHS), mc=method_configs, prompt=lookup_prompts, cut=st.integers(0, 15))
def test_model_plus_lookup_stops_at_the_first_eos_even_inside_an_accepted_path(arch, mc, prompt, cut):
    check_eos_stop(mix_pair(arch), arch, mc, prompt, cut)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("method,config", EDGE_CONFIGS)
def test_edge_configs_with_model_plus_lookup_are_exact(arch, method, config):
    prompt = (5, 9, 2, 33, 7, 5, 9, 2, 33)
    res = generate(mix_pair(arch, 0.5), list(prompt), method, config, max_new_tokens=30, ignore_eos=True)
    assert res.tokens == reference_greedy(arch, "sdpa", prompt, 30)


# ----------------------------------------------------------------------------- what it adds, records

def test_the_mix_accepts_more_than_a_poor_draft_alone_on_a_repetitive_continuation():
    """With a poor draft (noise 0.5) the tiny target's repetitive greedy output is drafted by the
    lookup part: fewer iterations than the draft alone, the same tokens, the same draft forwards
    per level (the lookup runs no model)."""
    prompt = [5, 9, 14, 3, 5, 9, 14, 3]
    alone = generate(cached_pair("llama", "sdpa", 0.5), prompt, "linear", LinearConfig(k=4), max_new_tokens=96,
                     ignore_eos=True)
    mixed = generate(mix_pair("llama", 0.5), prompt, "linear", LinearConfig(k=4), max_new_tokens=96,
                     ignore_eos=True, trace=True)
    assert mixed.tokens == alone.tokens
    assert mixed.metrics.iterations < alone.metrics.iterations
    assert mixed.metrics.draft_forwards / mixed.metrics.iterations == pytest.approx(4.0, abs=1.0)
    d = mixed.trace.drafter
    assert d["kind"] == "model+lookup" and d["lookup"]["prior"] == list(LookupMix().prior)


def test_kind_settings_and_forwards_come_from_the_model_drafter():
    pair = mix_pair("gpt_neox")
    assert pair.drafter_kind == "model+lookup"
    fpair = dataclasses.replace(feature_pair("sdpa", 0), lookup=LookupMix())
    assert fpair.drafter_kind == "feature+lookup"
    d = make_drafter(fpair.draft, fpair.lookup)
    assert isinstance(d, MixDrafter) and d.kind == "feature+lookup" and d.needs_target_hidden
    ctx = DraftContext(top_k=3, keep_chain=True)
    d.start([4, 7], ctx, torch.zeros((1, fpair.draft.config.feature_width)))
    s = d.settings()
    assert s["kind"] == "feature+lookup" and s["lookup"]["max_ngram"] == 5 and s["top_k"] == 3
    assert d.base.ctx is ctx and d.lookup.ctx is ctx  # one context for the model drafter and the lookup
    d.base.forwards = 5
    assert d.forwards == 5


def test_the_chain_view_mixes_the_model_rows_with_the_lookup_as_it_stood():
    """Level 0's chain rows (the oracle's view of committed tokens): each the model drafter's row
    mixed with the lookup over the tokens known at that point."""
    pair = mix_pair("llama", 0.5)
    prompt = [5, 9, 14, 3, 5, 9, 14, 3, 5, 9]
    res = generate(pair, prompt, "dynatree", DynaTreeConfig(), max_new_tokens=40, ignore_eos=True, trace=True)
    base = generate(cached_pair("llama", "sdpa", 0.5), prompt, "dynatree", DynaTreeConfig(), max_new_tokens=40,
                    ignore_eos=True, trace=True)
    assert res.tokens == base.tokens
    ctx = DraftContext(top_k=8, keep_chain=True)
    drafter = make_drafter(pair.draft, pair.lookup)
    from dynatree_core.policy.config import GrowthRule
    from dynatree_core.runtime.tree.tree import DeviceTree

    drafter.start(prompt, ctx)
    tree = DeviceTree(prompt[-1], GrowthRule.chain(1), 8, torch.device("cpu"))
    ids, lps = drafter.propose(tree, torch.zeros(1, dtype=torch.long), 0).chain
    rows = ids.shape[0]
    assert rows == len(prompt) - 1
    alone = make_drafter(pair.draft)
    alone.start(prompt, ctx)
    b_ids, b_lps = alone.propose(DeviceTree(prompt[-1], GrowthRule.chain(1), 8, torch.device("cpu")),
                                 torch.zeros(1, dtype=torch.long), 0).chain
    for r in range(rows):
        p = len(prompt) - 1 - rows + r  # the row stands after prompt[p]
        ref = reference_mix(prompt[:p + 1], prompt[:p + 1], dict(zip(b_ids[r].tolist(), b_lps[r].exp().tolist())),
                            pair.lookup, 8)
        for tok, lp in zip(ids[r].tolist(), lps[r].tolist()):
            assert math.exp(lp) == pytest.approx(ref[tok], rel=1e-5, abs=1e-7)


def test_a_session_regrows_the_first_iteration_of_generate_with_the_mix():
    """The explorer's TreeSession forks the mixed drafter (model and lookup state) per regrow."""
    check_session_regrow(mix_pair("llama", 0.5), [5, 9, 14, 3, 5, 9, 14, 3, 5], "model+lookup")


# ----------------------------------------------------------------------------- bad input

def test_bad_mix_settings_name_the_parameter():
    with pytest.raises(ValueError, match=r"prior needs at least one pseudo-count"):
        LookupMix(prior=())
    with pytest.raises(ValueError, match=r"prior\[1\] \(κ_2\) must be a number > 0"):
        LookupMix(prior=(1.0, 0.0, 1.0))
    with pytest.raises(TypeError, match="LookupMix lookup must be a PromptLookup"):
        LookupMix(lookup=3)


def test_a_mix_needs_a_model_draft():
    pair = cached_pair("llama", "sdpa", 0.02)
    with pytest.raises(TypeError, match="lookup must be a LookupMix"):
        ModelPair(target=pair.target, draft=pair.draft, lookup=PromptLookup())
    with pytest.raises(ValueError, match="draft is None"):
        ModelPair(target=pair.target, draft=None, lookup=LookupMix())
    with pytest.raises(ValueError, match="draft is a PromptLookup"):
        ModelPair(target=pair.target, draft=PromptLookup(), lookup=LookupMix())


# ----------------------------------------------------------------------------- fitting and measuring the mix

def _records(y, p_y, counts_rows, ngram, top_ids, top_p):
    from dynatree_core.distill.lookup_fit import PositionRecords
    from dynatree_core.runtime.ngram import LookupMatches

    counts = torch.tensor(counts_rows, dtype=torch.float32)
    return PositionRecords(torch.tensor(y), torch.tensor(p_y), torch.tensor(top_ids),
                           torch.log(torch.tensor(top_p)), LookupMatches(counts, torch.zeros_like(counts),
                                                                         torch.tensor(ngram),
                                                                         torch.arange(counts.shape[1]), dense=True))


def test_fit_trusts_a_lookup_that_is_right_and_not_one_that_is_wrong():
    """Trigram matches always name the target's token, unigram matches never do: the fit gives
    κ_3 the grid's smallest value and κ_1 its largest, and the mix then agrees where the draft did not."""
    from dynatree_core.distill.lookup_fit import KAPPA_GRID, agreement, fit_prior

    # vocab 4; the draft always says 0 (p 0.6); the target says 1 at trigram rows, 2 at unigram rows
    rows, ys, ngram = [], [], []
    for i in range(20):
        tri = i % 2 == 0
        rows.append([0, 1, 0, 0] if tri else [0, 0, 0, 1])
        ys.append(1 if tri else 2)
        ngram.append(3 if tri else 1)
    rec = _records(ys, [0.1] * 20, rows, ngram, [[0, 1, 2]] * 20, [[0.6, 0.1, 0.1]] * 20)
    prior = fit_prior(rec, PromptLookup(max_ngram=3))
    assert prior[2] == min(KAPPA_GRID) and prior[0] == max(KAPPA_GRID)
    assert prior[1] == 1.0  # no bigram rows: left at its neutral value
    mix = LookupMix(PromptLookup(max_ngram=3), prior=prior)
    assert agreement(rec, None) == 0.0 and agreement(rec, mix) == 0.5


@pytest.mark.parametrize("kind", ["model", "feature"])
def test_position_records_are_the_drafts_distribution_and_the_engines_lookup(kind):
    from dynatree_core.distill.lookup_fit import agreement, draft_logprobs, hit_counts, position_records

    pair = cached_pair("llama", "sdpa", 0.5) if kind == "model" else feature_pair("sdpa", 1)
    prompt = [5, 9, 14, 3, 5, 9, 14]
    cont = reference_greedy("llama", "sdpa", tuple(prompt), 12)
    source = PromptLookup(max_ngram=3)
    rec = position_records(pair.draft, pair.target, prompt, cont, source, k=4)
    assert rec.y.tolist() == cont and len(rec) == 12
    lp = draft_logprobs(pair.draft, pair.target, prompt + cont)
    for i, p in enumerate(range(len(prompt) - 1, len(prompt) + 11)):
        assert rec.top_ids[i, 0] == lp[p].argmax()
        assert float(rec.p_y[i]) == pytest.approx(float(lp[p, cont[i]].exp()), rel=1e-5)
        seq = (prompt + cont)[:p + 1]
        toks, _ = reference_lookup(seq, seq, source, 4)
        got = rec.matches.top(4)[i].tolist()
        assert got[:len(toks)] == toks
    own = sum(int(rec.top_ids[i, 0]) == y for i, y in enumerate(cont)) / 12
    assert agreement(rec, None) == pytest.approx(own)
    counts = hit_counts(rec, LookupMix())
    assert counts["mix"] == (round(agreement(rec, LookupMix()) * 12), 12)
    assert counts["draft"] == (round(own * 12), 12)
    look = sum(int(rec.matches.top(1)[i, 0]) == y and int(rec.matches.ngram[i]) > 0 for i, y in enumerate(cont))
    either = sum((int(rec.matches.top(1)[i, 0]) == y and int(rec.matches.ngram[i]) > 0)
                 or int(rec.top_ids[i, 0]) == y for i, y in enumerate(cont))
    assert counts["lookup"] == (look, 12) and counts["either"] == (either, 12)

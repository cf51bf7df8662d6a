"""The model-free prompt-lookup drafter: its proposals against a plain-Python reference, the node
contexts it reads from the device tree, exactness with every method, records and bad input."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynatree_core import ModelPair, generate, iterate
from dynatree_core.policy.config import DynaTreeConfig, GrowthRule, LinearConfig
from dynatree_core.runtime.tree.tree import DeviceTree
from dynatree_core.runtime.host_syncs import HostSyncs
from dynatree_core.runtime.tree.to_host import host_tree
from dynatree_core.runtime.ngram import CompactVocab, lookup_topk
from dynatree_core.drafters import DraftContext, LookupDrafter, PromptLookup, make_drafter

from helpers import cached_target, reference_greedy
from helpers.exactness import ARCHS, EDGE_CONFIGS, method_configs
from helpers.lookup import check_eos_stop, lookup_prompts, reference_lookup

CPU = torch.device("cpu")


small_seqs = st.lists(st.integers(0, 6), min_size=0, max_size=40)  # a small alphabet: n-grams repeat


@settings(max_examples=300, deadline=None)
@given(seq=small_seqs, tails=st.lists(st.lists(st.integers(0, 7), max_size=3), min_size=1, max_size=4),
       lo=st.integers(1, 3), extra=st.integers(0, 2), k=st.integers(1, 5), compact=st.booleans())
def test_lookup_topk_matches_the_reference(seq, tails, lo, extra, k, compact):
    """Counting over every id below a bound (dense) or over the sequence's distinct tokens
    (:class:`CompactVocab`, what the drafter uses) gives the reference's proposals."""
    source = PromptLookup(max_ngram=lo + extra, min_ngram=lo)
    width = source.max_ngram + 3
    rows = []
    for t in tails:  # a context: the committed tokens, then a drafted path (left-padded with -1)
        ctx = (seq + t)[-width:]
        rows.append([-1] * (width - len(ctx)) + ctx)
    vocab = CompactVocab.of(seq) if compact else max(seq, default=0) + 1
    ids, lps = lookup_topk(torch.tensor(seq, dtype=torch.long), torch.tensor(rows, dtype=torch.long), source, k,
                           vocab=vocab)
    for r, t in enumerate(tails):
        toks, ref_lps = reference_lookup(seq, seq + t, source, k)
        got_lps = lps[r].tolist()
        assert ids[r, :len(toks)].tolist() == toks
        assert got_lps[:len(toks)] == pytest.approx(ref_lps, rel=1e-6)
        assert all(x == -math.inf for x in got_lps[len(toks):])  # nothing more was seen
        assert got_lps == sorted(got_lps, reverse=True)


@settings(max_examples=200, deadline=None)
@given(seq=st.lists(st.integers(0, 5), min_size=2, max_size=40), n=st.integers(1, 3), k=st.integers(1, 4),
       fresh=st.integers(1, 20))
def test_the_chain_view_sees_each_position_as_it_was(seq, n, k, fresh):
    """With keep_chain, level 0 also reports what the lookup would have proposed after each token
    committed since the last level 0 (the oracle's view), from the tokens known at that point."""
    source = PromptLookup(max_ngram=n)
    d = LookupDrafter(source)
    prefix = seq[:max(1, len(seq) - fresh)]
    d.start(prefix, DraftContext(top_k=k, keep_chain=True))
    d.propose(DeviceTree(prefix[-1], GrowthRule.chain(1), k, CPU), torch.tensor([0]), level=0)
    d.commit([], seq[len(prefix):])  # the rest arrives as one iteration's commit
    ids, lps = d.propose(DeviceTree(seq[-1], GrowthRule.chain(1), k, CPU), torch.tensor([0]), level=0).chain
    rows = min(len(seq) - len(prefix), 17) - 1  # at most CHAIN_ROWS, the root excluded
    assert ids.shape[0] == rows
    for r in range(rows):
        p = len(seq) - 1 - rows + r
        toks, ref = reference_lookup(seq, seq[:p + 1], source, k, limit=p)
        assert ids[r, :len(toks)].tolist() == toks and lps[r, :len(toks)].tolist() == pytest.approx(ref, rel=1e-6)
        assert all(x == -math.inf for x in lps[r, len(toks):].tolist())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seq=st.lists(st.integers(0, 5), min_size=1, max_size=30), n=st.integers(1, 4), d=st.integers(1, 4))
def test_node_contexts_are_the_committed_tokens_then_the_path(seq, n, d):
    """Grow a real tree with the drafter; each level's contexts are what the reference reads."""
    source = PromptLookup(max_ngram=n)
    drafter = LookupDrafter(source)
    drafter.start(seq, DraftContext(top_k=3))
    seen = []
    real = drafter._contexts

    def spy(tree, ids, level):
        ctx = real(tree, ids, level)
        seen.append((ids.tolist(), ctx.tolist()))
        return ctx

    drafter._contexts = spy
    rule = GrowthRule.full(d, 2, 0.0, 12)
    tree = DeviceTree(seq[-1], rule, 3, CPU).grow(drafter, HostSyncs())
    host = host_tree(tree.fetch(HostSyncs()), tree.draft_calls)
    assert seen
    for ids, rows in seen:
        for i, row in zip(ids, rows):
            full = seq + list(host.token_path(i))[1:]  # the root is the last committed token
            want = full[-len(row):]
            assert row[len(row) - len(want):] == want and set(row[:len(row) - len(want)]) <= {-1}


def lookup_pair(arch: str, attn: str = "sdpa", **kwargs) -> ModelPair:
    return ModelPair(target=cached_target(arch, attn), draft=PromptLookup(**kwargs), target_name=f"tiny-{arch}",
                     draft_name="prompt-lookup")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arch=st.sampled_from(ARCHS), mc=method_configs, prompt=lookup_prompts, n=st.integers(0, 24),
       ngram=st.integers(1, 4))
def test_every_decoder_with_prompt_lookup_equals_target_greedy(arch, mc, prompt, n, ngram):
    method, config = mc
    res = generate(lookup_pair(arch, max_ngram=ngram), list(prompt), method, config, max_new_tokens=n,
                   ignore_eos=True)
    assert res.tokens == reference_greedy(arch, "sdpa", prompt, n)


@settings(max_examples=30, deadline=None)
@given(arch=st.sampled_from(ARCHS), mc=method_configs, prompt=lookup_prompts, cut=st.integers(0, 15))
def test_prompt_lookup_stops_at_the_first_eos_even_inside_an_accepted_path(arch, mc, prompt, cut):
    check_eos_stop(lookup_pair(arch), arch, mc, prompt, cut)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("method,config", EDGE_CONFIGS)
def test_edge_configs_with_prompt_lookup_are_exact(arch, method, config):
    prompt = (5, 9, 2, 33, 7, 5, 9, 2, 33)
    res = generate(lookup_pair(arch, attn="eager"), list(prompt), method, config, max_new_tokens=30,
                   ignore_eos=True)
    assert res.tokens == reference_greedy(arch, "eager", prompt, 30)


def test_the_lookup_accepts_a_repeated_continuation_and_records_its_kind():
    """The target's greedy output soon repeats on a tiny random model: the lookup then drafts it."""
    pair = lookup_pair("llama")
    prompt = [5, 9, 14, 3]
    recs = list(iterate(pair, prompt, "dynatree", DynaTreeConfig(), max_new_tokens=64, ignore_eos=True, trace=True))
    res = generate(pair, prompt, "linear", LinearConfig(k=4), max_new_tokens=64, ignore_eos=True, trace=True)
    assert res.tokens == reference_greedy("llama", "sdpa", tuple(prompt), 64)
    assert res.trace.drafter["kind"] == "lookup" and res.trace.drafter["max_ngram"] == 3
    assert pair.drafter_kind == "lookup"
    # a repetitive continuation gets accepted drafts: fewer iterations than tokens
    assert res.metrics.iterations < 64 and sum(len(r.accepted_path) for r in recs) > 0
    assert res.metrics.draft_forwards == 0  # no model ran


def test_bad_lookup_settings_name_the_parameter():
    with pytest.raises(ValueError, match="min_ngram"):
        PromptLookup(min_ngram=0)
    with pytest.raises(TypeError, match="max_ngram"):  # a non-integer is a type error, as in every int check
        PromptLookup(max_ngram=2.5)
    with pytest.raises(ValueError, match=r"min_ngram \(3\) must be <= max_ngram \(2\)"):
        PromptLookup(max_ngram=2, min_ngram=3)
    assert isinstance(make_drafter(PromptLookup()), LookupDrafter)


@settings(max_examples=60, deadline=None)
@given(prompt=st.lists(st.integers(0, 30), min_size=1, max_size=12),
       commits=st.lists(st.lists(st.integers(0, 40), max_size=5), max_size=6))
def test_the_compact_vocabulary_follows_the_commits(prompt, commits):
    """The drafter's device copy of the committed tokens and of their distinct tokens, extended at
    each commit, equals one built from scratch (and a fork keeps its own)."""
    d = LookupDrafter(PromptLookup())
    d.start(prompt, DraftContext(top_k=2))
    tree = DeviceTree(prompt[-1], GrowthRule.chain(1), 2, CPU)
    d.propose(tree, torch.tensor([0]), level=0)
    seq = list(prompt)
    for c in commits:
        fork = d.fork()
        d.commit([], c)
        seq += c
        seq_t, vocab = d._on(CPU)
        want = CompactVocab.of(seq)
        assert seq_t.tolist() == seq
        assert vocab.tokens.tolist() == want.tokens.tolist()
        assert vocab.seq_index.tolist() == want.seq_index.tolist()
        assert fork.seq == seq[:len(seq) - len(c)]  # the fork did not see this commit

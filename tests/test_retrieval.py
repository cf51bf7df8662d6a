"""Retrieval drafting (Datastore, RetrievalDrafter, RetrievalMix): the index against a scan of the
store, exactness alone and mixed into both model drafters (greedy and seeded sampling, every method),
what it records, that it drafts what the store holds, and bad settings."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynatree_core import ModelPair, generate
from dynatree_core.drafters import (Datastore, DraftContext, LookupMix, RetrievalDrafter, RetrievalMix,
                                    RetrievalMixDrafter, make_drafter)
from dynatree_core.drafters.retrieval import SEPARATOR
from dynatree_core.policy.config import DynaTreeConfig, FixedTreeConfig, LinearConfig
from dynatree_core.policy.sampling import SamplingConfig

from helpers import cached_pair, reference_greedy
from helpers.exactness import ARCHS, EDGE_CONFIGS, method_configs
from helpers.features import feature_pair, target_greedy
from helpers.lookup import lookup_prompts


def scan(seqs: list[list[int]], ctx: list[int], lo: int, hi: int, followers: int) -> tuple[int, list[tuple[int, int]]]:
    """The reference: the longest n (hi down to lo) whose last n context tokens occur inside one
    sequence with a token after them; that n-gram's followers as (token, count), most frequent first,
    ties to the one seen first (sequences in order), at most ``followers``."""
    for n in range(hi, lo - 1, -1):
        tail = ctx[-n:]
        if len(tail) < n or min(tail) < 0:
            continue
        seen: dict[int, int] = {}
        for s in seqs:
            for i in range(len(s) - n):
                if s[i:i + n] == tail:
                    seen[s[i + n]] = seen.get(s[i + n], 0) + 1
        if seen:
            order = sorted(seen, key=lambda t: -seen[t])  # stable: first seen first among equal counts
            return n, [(t, seen[t]) for t in order[:followers]]
    return 0, []


@settings(max_examples=300, deadline=None)
@given(seqs=st.lists(st.lists(st.integers(0, 5), max_size=30), max_size=6),
       ctxs=st.lists(st.lists(st.integers(-1, 6), min_size=0, max_size=7), min_size=1, max_size=5),
       lo=st.integers(1, 3), span=st.integers(0, 3), followers=st.integers(1, 4))
def test_the_index_returns_what_a_scan_of_the_store_returns(seqs, ctxs, lo, span, followers):
    hi = lo + span
    store = Datastore(seqs, max_ngram=hi, min_ngram=lo, followers=followers)
    width = max(len(c) for c in ctxs)
    rows = np.asarray([[-1] * (width - len(c)) + c for c in ctxs], dtype=np.int64).reshape(len(ctxs), width)
    ngram, fol, cnt = store.lookup(rows)
    for r, c in enumerate(ctxs):
        n, ref = scan(seqs, [-1] * (width - len(c)) + c, lo, hi, followers)
        assert ngram[r] == n
        assert list(zip(fol[r].tolist(), cnt[r].astype(int).tolist())) == ref
    m = store.matches(rows, 3, torch.device("cpu"))
    ids, lps = m.topk(3)
    for r, c in enumerate(ctxs):  # the proposals: the followers in order, log(count / (C + 1))
        _, ref = scan(seqs, [-1] * (width - len(c)) + c, lo, hi, followers)
        total = sum(k for _, k in ref)
        got = [(t, lp) for t, lp in zip(ids[r].tolist(), lps[r].tolist()) if lp > -np.inf]
        assert [t for t, _ in got] == [t for t, _ in ref[:3]]
        assert [lp for _, lp in got] == pytest.approx([np.log(k / (total + 1)) for _, k in ref[:3]])


# ----------------------------------------------------------------------------- exactness

STORE_PROMPTS = ((5, 9, 14, 3), (7, 7, 2, 30), (12, 5, 9), (3, 3, 3, 4, 5))


@functools.lru_cache(maxsize=None)
def tiny_store(arch: str = "llama", max_ngram: int = 4, min_ngram: int = 1) -> Datastore:
    """The tiny target's own greedy continuations of a few prompts (what the shipped store is for SmolLM2)."""
    seqs = [list(p) + reference_greedy(arch, "sdpa", p, 40) for p in STORE_PROMPTS]
    return Datastore(seqs, max_ngram=max_ngram, min_ngram=min_ngram, name=f"tiny-{arch}")


def retrieval_pair(arch: str, noise: float = 0.5, **mix) -> ModelPair:
    return dataclasses.replace(cached_pair(arch, "sdpa", noise), lookup=RetrievalMix(store=tiny_store(arch), **mix))


mixes = st.builds(lambda kappa, n: dict(retrieval_prior=tuple(kappa), prior=(256.0, 16.0, 2.0)[:n]),
                  st.lists(st.floats(0.05, 10.0), min_size=1, max_size=4), st.integers(1, 3))
store_prompts = st.one_of(st.sampled_from(STORE_PROMPTS), lookup_prompts)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arch=st.sampled_from(ARCHS), noise=st.sampled_from([0.02, 0.5]), mc=method_configs, prompt=store_prompts,
       n=st.integers(0, 24), mix=mixes)
def test_every_decoder_with_model_plus_lookup_plus_retrieval_equals_target_greedy(arch, noise, mc, prompt, n, mix):
    method, config = mc
    res = generate(retrieval_pair(arch, noise, **mix), list(prompt), method, config, max_new_tokens=n, ignore_eos=True)
    assert res.tokens == reference_greedy(arch, "sdpa", prompt, n)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(head_seed=st.sampled_from([0, 1, 3]), mc=method_configs, prompt=store_prompts, n=st.integers(0, 24))
def test_every_decoder_with_feature_plus_lookup_plus_retrieval_equals_target_greedy(head_seed, mc, prompt, n):
    method, config = mc
    pair = dataclasses.replace(feature_pair("sdpa", head_seed), lookup=RetrievalMix(store=tiny_store()))
    res = generate(pair, list(prompt), method, config, max_new_tokens=n, ignore_eos=True)
    assert res.tokens == target_greedy("sdpa", 0, prompt, n)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arch=st.sampled_from(ARCHS), mc=method_configs, prompt=store_prompts, n=st.integers(0, 24))
def test_every_decoder_with_the_retrieval_drafter_alone_equals_target_greedy(arch, mc, prompt, n):
    method, config = mc
    pair = dataclasses.replace(cached_pair(arch, "sdpa", 0.5), draft=RetrievalDrafter(tiny_store(arch)))
    res = generate(pair, list(prompt), method, config, max_new_tokens=n, ignore_eos=True)
    assert res.tokens == reference_greedy(arch, "sdpa", prompt, n)


@pytest.mark.parametrize("method,config", EDGE_CONFIGS)
def test_edge_configs_with_the_retrieval_mix_are_exact(method, config):
    prompt = (5, 9, 14, 3, 7, 7)
    res = generate(retrieval_pair("llama"), list(prompt), method, config, max_new_tokens=30, ignore_eos=True)
    assert res.tokens == reference_greedy("llama", "sdpa", prompt, 30)


def _sampling_pairs() -> dict[str, ModelPair]:
    base = cached_pair("llama", "sdpa", 0.05)
    store = tiny_store()
    return {"retrieval": dataclasses.replace(base, draft=RetrievalDrafter(store)),
            "model+lookup+retrieval": dataclasses.replace(base, lookup=RetrievalMix(store=store)),
            "feature+lookup+retrieval": dataclasses.replace(feature_pair("sdpa", 1, 0),
                                                            lookup=RetrievalMix(store=store))}


@pytest.mark.parametrize("kind", ["retrieval", "model+lookup+retrieval", "feature+lookup+retrieval"])
@pytest.mark.parametrize("method,config", [("linear", LinearConfig(k=3)), ("dynatree", DynaTreeConfig.cpu()),
                                           ("fixed_tree", FixedTreeConfig(d=3, b=2, tau=0.0)), ("eagle2", None)])
def test_every_retrieval_drafter_under_match_emits_seeded_ar_tokens(kind, method, config):
    pair = _sampling_pairs()[kind]
    prompt = [5, 9, 14, 3, 22, 7, 5, 9]  # the store's first prompt and more: retrieval has matches
    ar = generate(pair, prompt, "ar", max_new_tokens=30, ignore_eos=True,
                  sampling=SamplingConfig(temperature=0.8, seed=2))
    for noise in ("shared", "none"):
        cfg = SamplingConfig(temperature=0.8, seed=2, draft_noise=noise)
        res = generate(pair, prompt, method, config, max_new_tokens=30, ignore_eos=True, sampling=cfg)
        assert res.tokens == ar.tokens, noise


def test_a_session_regrows_the_first_iteration_of_generate_with_the_retrieval_mix():
    from helpers.features import check_session_regrow

    check_session_regrow(retrieval_pair("llama"), [5, 9, 14, 3, 5, 9], "model+lookup+retrieval")


# ----------------------------------------------------------------------------- what it adds, records

def test_retrieval_drafts_the_continuation_the_store_holds():
    """A prompt the store continued: with a poor draft, the mix accepts more per iteration than prompt
    lookup mixed in alone (same tokens), and the retrieval drafter alone accepts whole spans."""
    prompt = list(STORE_PROMPTS[1])
    plain = dataclasses.replace(cached_pair("llama", "sdpa", 0.5), lookup=LookupMix())
    runs = [generate(p, prompt, "dynatree", DynaTreeConfig.cpu(), max_new_tokens=40, ignore_eos=True)
            for p in (plain, retrieval_pair("llama"))]
    assert runs[0].tokens == runs[1].tokens
    assert runs[1].metrics.iterations < runs[0].metrics.iterations
    alone = dataclasses.replace(plain, draft=RetrievalDrafter(tiny_store()), lookup=None)
    res = generate(alone, prompt, "linear", LinearConfig(k=6), max_new_tokens=40, ignore_eos=True)
    assert res.tokens == runs[0].tokens and res.metrics.iterations <= 8  # 40 tokens, up to 7 an iteration


def test_kind_and_settings_are_recorded():
    pair = retrieval_pair("gpt_neox")
    assert pair.drafter_kind == "model+lookup+retrieval"
    d = make_drafter(pair.draft, pair.lookup)
    assert isinstance(d, RetrievalMixDrafter) and d.kind == "model+lookup+retrieval"
    res = generate(pair, [5, 9, 14, 3], "dynatree", DynaTreeConfig.cpu(), max_new_tokens=12, ignore_eos=True,
                   trace=True)
    s = res.trace.drafter
    assert s["kind"] == "model+lookup+retrieval" and s["lookup"]["prior"] == list(LookupMix().prior)
    assert s["lookup"]["retrieval"]["name"] == "tiny-gpt_neox" and s["lookup"]["retrieval"]["max_ngram"] == 4
    assert s["lookup"]["retrieval"]["sequences"] == len(STORE_PROMPTS)
    alone = RetrievalDrafter(tiny_store())
    alone.start([1, 2], DraftContext(top_k=2))
    assert alone.settings()["kind"] == "retrieval" and alone.settings()["store"]["min_ngram"] == 1
    feature = dataclasses.replace(feature_pair("sdpa", 0), lookup=RetrievalMix(store=tiny_store()))
    assert feature.drafter_kind == "feature+lookup+retrieval"
    assert make_drafter(feature.draft, feature.lookup).needs_target_hidden


def test_the_shipped_store_loads_and_is_small():
    from dynatree_core.drafters.retrieval import STORE_DIR

    assert (STORE_DIR / "store.npy").stat().st_size < 3_000_000
    store = Datastore.default()
    assert store.settings()["sequences"] > 100 and store.tokens.max() == SEPARATOR


# ----------------------------------------------------------------------------- bad input

def test_bad_settings_name_the_parameter():
    with pytest.raises(ValueError, match="max_ngram"):
        Datastore([[1, 2, 3]], max_ngram=0)
    with pytest.raises(ValueError, match="min_ngram"):
        Datastore([[1, 2, 3]], max_ngram=2, min_ngram=3)
    with pytest.raises(ValueError, match="followers"):
        Datastore([[1, 2, 3]], followers=0)
    with pytest.raises(ValueError, match="token ids"):
        Datastore([[1, SEPARATOR]])
    with pytest.raises(ValueError, match=r"retrieval_prior\[1\]"):
        RetrievalMix(store=tiny_store(), retrieval_prior=(4.0, 0.0))
    with pytest.raises(TypeError, match="store must be a Datastore"):
        RetrievalMix(store="store.npy")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="store must be a Datastore"):
        RetrievalDrafter([[1, 2]])  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError, match="no datastore"):
        Datastore.load("/nonexistent/store")
    with pytest.raises(ValueError, match="mixes prompt lookup into a model draft"):
        dataclasses.replace(cached_pair("llama", "sdpa", 0.5), draft=RetrievalDrafter(tiny_store()),
                            lookup=RetrievalMix(store=tiny_store()))

"""The fast path's compiled regions (runtime/static/regions.py): each traces whole, and running them compiled
grows the very trees the eager path grows.

On the ``compiled`` and ``graphs`` runtimes every piece of a draft level around the draft's forward
is one ``torch.compile(fullgraph=True)`` region (the forward's inputs, the head's top-k, prompt lookup
with the mixture, the growth rule's step), a level a drafter lends is one region with its forward
inside (``one_level``; level 0 with its chain: ``chain_level``), and so are the verify forward's inputs. Here the ``static`` runtime is made
to compile them with dynamo's eager backend (the tracing is the proof that there is no graph break, no host read and no
data-dependent Python branch; inductor's code generation is the GPU's runtime), inside real decodes.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynatree_core import iterate
from dynatree_core.drafters import LookupMix, PromptLookup
from dynatree_core.policy.config import DynaTreeConfig, Eagle2Config, LinearConfig, SequoiaConfig
from dynatree_core.runtime.static import regions
from dynatree_core.runtime.static.compile_cache import own_code
from dynatree_core.runtime.static.fast_path import _PATHS
from dynatree_core.runtime.ngram import (CompactVocab, StaticSeq, compact_ids, lookup_matches, static_matches,
                                         tree_contexts)

from helpers import assert_one_read_and_the_size, cached_pair
from helpers.features import feature_pair

PROMPT = [5, 9, 14, 3, 22, 7, 31, 12, 5, 9, 14, 3, 22, 7]


@pytest.fixture
def regions_traced(monkeypatch):
    """The static runtime compiles the regions (fullgraph, dynamo's eager backend); yields the
    compiled functions by name."""
    made: dict[str, object] = {}

    def compiled(fn, runtime, device):
        if runtime != "static":
            return fn
        if fn.__qualname__ not in made:
            made[fn.__qualname__] = torch.compile(fn, fullgraph=True, dynamic=False, backend="eager")
        return made[fn.__qualname__]

    def whole(fn, backend, scope=None):  # a whole draft level: one code object per bucket, as Region gives
        made[fn.__name__] = fn  # one_level (phase.whole_level) or chain_level (level 0: phase.whole_chain)
        return torch.compile(own_code(fn), fullgraph=True, dynamic=False, backend="eager")

    torch._dynamo.reset()
    for module in ("dynatree_core.runtime.static.regions", "dynatree_core.runtime.tree.phase",
                   "dynatree_core.runtime.static.draft_forwards", "dynatree_core.drafters.feature_drafter",
                   "dynatree_core.drafters.model_drafter", "dynatree_core.drafters.mix",
                   "dynatree_core.runtime.backend"):
        monkeypatch.setattr(f"{module}.compiled", compiled)
    monkeypatch.setattr("dynatree_core.runtime.tree.phase.COMPILING", ("static",))
    monkeypatch.setattr("dynatree_core.runtime.tree.phase.Region", whole)
    with torch._dynamo.config.patch(recompile_limit=4, fail_on_recompile_limit_hit=True):
        yield made
    for paths in _PATHS.values():  # the whole levels compiled here must not serve a later test's static run
        for path in paths.values():
            path.levels.clear()
    torch._dynamo.reset()


def _trees(run) -> list[tuple[list[int], list[int]]]:
    return [(r.tree.tokens, r.tree.parents) for r in run]


@pytest.mark.parametrize("kind", ["feature+lookup", "model+lookup", "feature"])
def test_every_region_compiles_whole_and_grows_the_eager_trees(kind, regions_traced):
    base = cached_pair("llama", "sdpa", 0.05)
    feature = feature_pair("sdpa", 1, 0)
    pair = {"model+lookup": dataclasses.replace(base, lookup=LookupMix()), "feature": feature,
            "feature+lookup": dataclasses.replace(feature, lookup=LookupMix())}[kind]
    configs = [("dynatree", DynaTreeConfig.gpu()), ("eagle2", Eagle2Config(k=3, depth=4, n_total=10)),
               ("linear", LinearConfig(k=3)), ("sequoia", SequoiaConfig(n_max=8, d_max=4, acceptance=(0.6, 0.2)))]
    seen: set[str] = set()
    for method, config in configs:
        torch._dynamo.reset()  # a run's regions compile afresh: few graphs per run (the limit), none per level
        regions_traced.clear()
        eager = list(iterate(pair, PROMPT, method, config, max_new_tokens=24, ignore_eos=True, runtime="eager"))
        fast_run = iterate(pair, PROMPT, method, config, max_new_tokens=24, ignore_eos=True, runtime="static")
        fast = list(fast_run)
        assert [r.committed for r in fast] == [r.committed for r in eager]
        assert _trees(fast) == _trees(eager), method
        assert_one_read_and_the_size(fast, fast_run)
        seen |= set(regions_traced)
    # a lookup mixture proposes level by level (its regions: the chain's inputs, the inputs, the head's top-k,
    # the mixture, the step); a drafter alone lends each level to the draft phase (one whole level, level 0's
    # with the chain; the phase makes its step at the run's start)
    parts = {"chain_inputs", "level_inputs", "mix_level", "resident_step"} | (
        {"head_topk"} if kind.startswith("feature") else {"logits_topk"})
    whole = {"one_level", "chain_level", "resident_step"}
    assert seen == {"verify_inputs"} | (parts if kind.endswith("lookup") else whole)


def test_every_marked_region_is_one_the_fast_path_runs():
    """Nothing is marked a region (and so left out of the engine's op count) that no test traces."""
    from dynatree_core.runtime.tree.phase import whole_chain, whole_level

    # the whole-level regions are marked when a draft phase builds them, not at import: build them here
    # (nothing runs), so the set does not depend on which tests ran before in this process (xdist)
    whole_level(lambda: None, lambda: None), whole_chain(lambda: None, lambda: None)
    names = {code.co_name for code in regions.REGIONS}
    assert names == {"level_step", "resident_step", "level_inputs", "chain_inputs", "head_topk", "logits_topk",
                     "mix_level", "verify_inputs", "one_level",  # a whole draft level (phase.whole_level)
                     "chain_level"}  # level 0 whole, its chain with it (phase.whole_chain)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seq=st.lists(st.integers(0, 5), min_size=1, max_size=40), extra=st.integers(0, 30),
       level=st.integers(0, 3), n=st.integers(1, 5), k=st.integers(1, 8), data=st.data())
def test_lookup_over_static_buffers_equals_the_growing_one(seq, extra, level, n, k, data):
    """Prompt lookup over the static buffers (a fixed capacity, device lengths, contexts of a fixed
    width at any level) finds the counts, n-grams and top-k of the lookup over the live sequence,
    for random sequences (few distinct tokens: fewer than k, often) and random tree paths."""
    source = PromptLookup(max_ngram=n, min_ngram=1)
    index: dict[int, int] = {}
    pos = compact_ids(index, seq)
    s = StaticSeq.empty(len(seq) + extra, torch.device("cpu"))
    s.extend(seq, pos, list(index))
    # a chain of `level` tree nodes below the root (the last committed token), node i at depth i
    path = data.draw(st.lists(st.integers(0, 6), min_size=level, max_size=level))
    cap = level + 3
    anc = torch.zeros((cap, cap), dtype=torch.bool)
    for i in range(level + 1):
        anc[i, :i + 1] = True
    depths = torch.arange(cap)
    tokens = torch.tensor([seq[-1]] + path + [0] * (cap - level - 1))
    ids = torch.tensor([level])
    got = tree_contexts(s.seq, s.lens[0], anc, depths, tokens, ids, torch.tensor(level), n)
    want = ([-1] * n + seq + path)[-n:]
    assert got[0].tolist() == want
    live = lookup_matches(torch.tensor(seq), got, source, CompactVocab(torch.tensor(list(index)), torch.tensor(pos)))
    static = static_matches(s, got, source)
    u = len(index)
    assert static.ngram.tolist() == live.ngram.tolist()
    assert torch.equal(static.counts[:, :u], live.counts) and not static.counts[:, u:].any()
    kk = min(k, u)
    si, li = static.top_index(k), live.top_index(k)
    # the followers, by count then recency; after them tokens that never followed (count 0, in an
    # order top-k leaves open: no rule reads it), or with no match the first tokens in order
    lead = int((live.counts.gather(1, li) > 0).sum()) if live.ngram[0] > 0 else kk
    assert torch.equal(static.tokens[si[:, :lead]], live.tokens[li[:, :lead]])
    assert not static.counts.gather(1, si[:, lead:]).any()
    assert (si[:, kk:] >= u).all()  # past the real tokens: ranked last


def test_the_lookups_static_buffer_refuses_to_overflow():
    s = StaticSeq.empty(4, torch.device("cpu"))
    s.extend([1, 2, 3], [0, 1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="static buffer holds 4 tokens"):
        s.extend([4, 5], [3, 4], [4, 5])
    assert s.length == 3 and np.array_equal(s.lens.numpy(), [3, 3])


def test_a_later_run_reuses_the_compiled_regions(regions_traced):
    """The regions compile once per run's shapes: a second prompt (a new drafter, new static buffers,
    another tree) runs on the graphs the first compiled, none traced again."""
    from torch._dynamo.utils import counters

    pair = dataclasses.replace(feature_pair("sdpa", 1, 0), lookup=LookupMix())
    traced = []
    for prompt in (PROMPT, PROMPT[3:] + [40, 41, 42]):
        before = counters["stats"]["unique_graphs"]
        list(iterate(pair, prompt, "dynatree", DynaTreeConfig.gpu(), max_new_tokens=16, ignore_eos=True,
                     runtime="static"))
        traced.append(counters["stats"]["unique_graphs"] - before)
    assert traced[0] >= 5 and traced[1] == 0  # the first run traced every region

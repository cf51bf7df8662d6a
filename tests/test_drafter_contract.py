"""The drafter contract as docs/drafters.md writes it: its example drafter, run from the page, is exact
under every method, greedy and sampled, and nothing outside a drafter sets its attributes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dynatree_core import generate
from dynatree_core.drafters import DraftContext, Drafter
from dynatree_core.pairs.pair import ModelPair
from dynatree_core.pairs.tiny import VOCAB_SIZE, tiny_pair
from dynatree_core.policy.config import (DynaTreeConfig, Eagle2Config, FixedTreeConfig, LinearConfig,
                                         SequoiaConfig)

DOC = Path(__file__).resolve().parents[1] / "docs" / "drafters.md"
PROMPT = [5, 9, 14, 3, 22, 7, 31, 12, 18, 4, 9, 14, 3, 22, 7]
CONFIGS = {"linear": LinearConfig(k=3), "fixed_tree": FixedTreeConfig(d=3, b=2, tau=0.0, n_max=12),
           "dynatree": DynaTreeConfig(d0=3, d_max=5, n_max=16), "eagle2": Eagle2Config(k=3, depth=3, n_total=10),
           "sequoia": SequoiaConfig(n_max=8, d_max=4, acceptance=(0.5, 0.2, 0.1))}


def _example() -> type:
    """The page's example drafter (the first python block after "The drafter contract"), executed."""
    text = DOC.read_text()
    block = re.search(r"### The drafter contract.*?```python\n(.*?)```", text, re.S)
    assert block is not None, "docs/drafters.md lost its drafter example"
    assert len(block.group(1).strip().splitlines()) <= 35  # a drafter of one's own stays short
    space: dict = {}
    exec(compile(block.group(1), str(DOC), "exec"), space)
    return space["BigramDrafter"]


class _Guarded:
    """Mixed into a drafter: any attribute set by code that is not one of the drafter's own methods fails."""

    def __setattr__(self, name, value):
        import sys

        caller = sys._getframe(1).f_locals.get("self")
        if caller is not self:
            raise AssertionError(f"{name} set on the drafter from outside it")
        object.__setattr__(self, name, value)


def _pair(drafter: Drafter) -> ModelPair:
    return ModelPair(target=tiny_pair("llama", noise=0.05).target, draft=drafter)


@pytest.mark.parametrize("method", sorted(CONFIGS))
def test_the_documented_drafter_is_exact_greedy_and_sampled(method):
    bigram = _example()
    guarded = type("GuardedBigram", (_Guarded, bigram), {})(VOCAB_SIZE)
    pair = _pair(guarded)
    assert pair.drafter_kind == "bigram"
    ar = generate(pair, PROMPT, "ar", max_new_tokens=30, ignore_eos=True)
    got = generate(pair, PROMPT, method, CONFIGS[method], max_new_tokens=30, ignore_eos=True, trace=True)
    assert got.tokens == ar.tokens and got.metrics.draft_forwards == 0
    assert got.trace.drafter["kind"] == "bigram" and isinstance(guarded.ctx, DraftContext)
    assert sum(len(r.accepted_path) for r in got.trace.iterations) > 0  # the bigrams do get accepted
    seeded = generate(pair, PROMPT, "ar", max_new_tokens=30, ignore_eos=True, temperature=0.8, seed=4)
    sampled = generate(pair, PROMPT, method, CONFIGS[method], max_new_tokens=30, ignore_eos=True, temperature=0.8,
                       seed=4)
    assert sampled.tokens == seeded.tokens


def test_the_guard_catches_an_attribute_set_from_outside():
    """The check above can fail: the loop of old set ``drafter.clock`` and ``drafter.sampler``."""
    guarded = type("GuardedBigram", (_Guarded, _example()), {})(VOCAB_SIZE)
    with pytest.raises(AssertionError, match="clock set on the drafter from outside"):
        guarded.clock = None


def test_a_drafter_of_ones_own_cannot_take_a_lookup_mix():
    from dynatree_core.drafters import LookupMix

    with pytest.raises(ValueError, match="mixes prompt lookup into a model draft; draft is a BigramDrafter"):
        ModelPair(target=tiny_pair("llama").target, draft=_example()(VOCAB_SIZE), lookup=LookupMix())

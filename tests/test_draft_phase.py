"""The draft phase (runtime/tree/phase.py): a drafter that lends its levels has each level after the
root's run as ONE call (inputs, forward, head, step), which grows the very trees the parts grow, traces
whole with ``fullgraph=True`` (forward included) and costs the host at most three dispatches a level."""

from __future__ import annotations

import pytest
import torch

from dynatree_core import iterate
from dynatree_core.drafters.feature_drafter import FeatureDrafter
from dynatree_core.drafters.model_drafter import ModelDrafter
from dynatree_core.pairs.tiny import tiny_feature_pair, tiny_pair
from dynatree_core.policy.config import (DynaTreeConfig, Eagle2Config, FixedTreeConfig, LinearConfig,
                                         SequoiaConfig)
from dynatree_core.runtime.static.compile_cache import BACKEND_ENV
from dynatree_core.runtime.tree.tree import DeviceTree

from helpers import cached_pair
from helpers.features import feature_pair
from helpers.scripts import load_script

PROMPT = [5, 9, 14, 3, 22, 7, 31, 12, 5, 9, 14, 3, 22, 7]
CONFIGS = [("dynatree", DynaTreeConfig.gpu()), ("dynatree", DynaTreeConfig.cpu()),
           ("eagle2", Eagle2Config(k=3, depth=4, n_total=10)), ("linear", LinearConfig(k=3)),
           ("fixed_tree", FixedTreeConfig(d=3, b=2, n_max=12)),
           ("sequoia", SequoiaConfig(n_max=8, d_max=4, acceptance=(0.6, 0.2)))]


def _run(pair, method, config, trace, grown):
    """Each verified tree (tokens, parents, the path) and each iteration's committed tokens and draft
    forwards of one run (``grown`` collects the trees: :func:`_recording`)."""
    grown.clear()
    recs = list(iterate(pair, PROMPT, method, config, max_new_tokens=24, ignore_eos=True, runtime="static",
                        trace=trace))
    return [(r.committed, r.draft_forwards) for r in recs], list(grown)


def _recording(monkeypatch) -> list:
    grown: list = []
    select = DeviceTree.select

    def recording(self, *args, **kwargs):
        sel = select(self, *args, **kwargs)
        grown.append((sel.arrays["tokens"].tolist(), sel.arrays["parents"].tolist(), sel.path))
        return sel

    monkeypatch.setattr(DeviceTree, "select", recording)
    return grown


@pytest.mark.parametrize("trace", [False, True])
@pytest.mark.parametrize("kind", ["model", "feature"])
def test_a_lent_level_grows_the_tree_the_parts_grow(kind, trace, monkeypatch):
    """Whole levels (what every greedy model or feature drafter on a fast path lends) against the same
    run proposed part by part (the drafter lending nothing): the same trees node for node, the same
    tokens, the same draft forwards, for every policy. Untraced, level 0 (the chain and the root) is
    lent too; traced, it is proposed (a trace keeps the chain's view) and the later levels are lent."""
    pair = cached_pair("llama", "sdpa", 0.05) if kind == "model" else feature_pair("sdpa", 1, 0)
    lent: list[int] = []
    drafter = ModelDrafter if kind == "model" else FeatureDrafter
    lend = drafter.lend_level
    grown = _recording(monkeypatch)

    def counting(self, tree, level):
        out = lend(self, tree, level)
        if out is not None:
            lent.append(level)
        return out

    for method, config in CONFIGS:
        monkeypatch.setattr(drafter, "lend_level", counting)
        whole = _run(pair, method, config, trace, grown)
        assert (0 in lent) is not trace, (method, lent)  # level 0 lent exactly when no chain view is kept
        assert any(level > 0 for level in lent), (method, lent)  # the check is not vacuous
        monkeypatch.setattr(drafter, "lend_level", lambda self, tree, level: None)
        parts = _run(pair, method, config, trace, grown)
        assert whole == parts, method
        lent.clear()


def test_a_sampled_drafter_lends_nothing():
    """Under sampling a level's candidates are draws from a seeded stream: the drafter proposes them."""
    pair = cached_pair("llama", "sdpa", 0.05)
    run = iterate(pair, PROMPT, "dynatree", DynaTreeConfig.gpu(), max_new_tokens=6, ignore_eos=True,
                  runtime="static", temperature=0.8, seed=0)
    next(run)
    assert run.drafter.ctx.sampler is not None
    assert run.drafter.lend_level(object(), 1) is None


def _count_ops():
    return load_script("count_ops")


#: what a tree costs the host besides its levels after the root's, at most: its setup (the step rule's copy, the
#: count and budget scalars, the frontier's views) and level 0 (the chain's staged copy, one call, the early
#: exit's flag; a feature draft's chain features two more). Level 0 run as parts costs 25 (model) or 37 (feature)
TREE_AND_ROOT = 20


@pytest.mark.parametrize("kind", ["model", "feature"])
def test_a_compiled_level_is_at_most_three_host_dispatches(kind, monkeypatch):
    """On ``compiled`` (dynamo's eager backend: the same graphs and calls, no code generation) each level
    after the root's costs the host at most 3 dispatches: the level's scalars (one copy), the whole
    level (one compiled call) and the early exit's flag (one copy). Measured as the slope of a tree's
    growth dispatches over the levels it ran, between iterations that ran different numbers of levels:
    what a level adds, whatever the root's level and the tree's setup cost. The whole level also traced
    fullgraph, the forward inside it. A tree that ran level 0 alone (its setup and the root's level, the
    chain included) costs at most :data:`TREE_AND_ROOT`."""
    monkeypatch.setenv(BACKEND_ENV, "eager")
    mod = _count_ops()
    mod.CompiledCalls.install(monkeypatch.setattr)
    # a fresh pair: its fast paths' forwards are built (and so counted) here
    pair = tiny_pair("llama", noise=0.05) if kind == "model" else tiny_feature_pair()
    grows: list[tuple[int, int, int]] = []
    grow = DeviceTree.grow

    def counted(self, drafter, syncs):
        before = drafter.forwards
        with mod.OpCounter() as ops, mod.CompiledCalls() as calls:
            out = grow(self, drafter, syncs)
        grows.append((drafter.forwards - before, ops.total + sum(calls.calls.values()), calls.calls["region"]))
        return out

    config = DynaTreeConfig.gpu()
    list(iterate(pair, PROMPT, "dynatree", config, max_new_tokens=48, ignore_eos=True, runtime="compiled"))  # compiles
    monkeypatch.setattr(DeviceTree, "grow", counted)
    list(iterate(pair, PROMPT, "dynatree", config, max_new_tokens=48, ignore_eos=True, runtime="compiled"))
    seen: dict[int, set[int]] = {}
    for levels, dispatches, _ in grows[1:]:  # the first tree's level 0 reads the prompt
        seen.setdefault(levels, set()).add(dispatches)
    assert len(seen) >= 2, seen  # iterations that ran different numbers of levels
    # the least a level count cost (a level 0 that compacts the draft's cache costs more: rare, and per tree)
    # a tree that ran no forward at all (its root's level was lent nothing to do) is no level's price
    cost = {levels: min(d) for levels, d in seen.items() if levels >= 1}
    ls = sorted(cost)
    assert len(ls) >= 2 and ls[0] == 1, seen
    slopes = [(cost[b] - cost[a]) / (b - a) for a, b in zip(ls, ls[1:])]
    assert max(slopes) <= 3, (slopes, cost)
    assert cost[1] <= TREE_AND_ROOT, cost


@pytest.mark.parametrize("parts", ["every level", "level 0"])
def test_the_dispatch_count_fails_a_level_run_as_parts(parts, monkeypatch):
    """The same measure on a drafter that lends nothing (its level as parts: a copy, three compiled
    regions, a forward and the eager ops between them) finds more than 3 a level, and on one that lends
    every level but the root's finds the tree and its root's level over :data:`TREE_AND_ROOT`: the test
    above can fail."""
    lend = ModelDrafter.lend_level
    monkeypatch.setattr(ModelDrafter, "lend_level", lambda self, tree, level: (
        None if parts == "every level" or level == 0 else lend(self, tree, level)))
    with pytest.raises(AssertionError, match=r"^\(\[" if parts == "every level" else "^{"):
        test_a_compiled_level_is_at_most_three_host_dispatches("model", monkeypatch)

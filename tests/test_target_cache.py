"""The target's cache across iterations (:mod:`dynatree_core.runtime.cache.dynamic`): rejected tree entries
are masked, not moved, and the result is the same as a cache holding only the committed tokens."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from dynatree_core import generate
from dynatree_core.runtime.model import forwards as pl
from dynatree_core.runtime.cache import dynamic
from dynatree_core.policy.config import DynaTreeConfig, Eagle2Config, FixedTreeConfig, LinearConfig
from dynatree_core.runtime.backend import EagerTarget
from dynatree_core.runtime.cache.dynamic import TargetCache

from helpers import cached_pair, cached_target, grow_device_tree as _grow, reference_greedy


def _tree(root: int, d: int = 3, b: int = 2):
    """(the tree on the device, the same tree on the host)."""
    return _grow(root, FixedTreeConfig(d=d, b=b, tau=0.0).growth_rule(), torch.device("cpu"))


def _prefilled(model, prefix: list[int], **kw) -> TargetCache:
    kv = TargetCache(**kw)
    EagerTarget(model, kv).prefill(torch.tensor([prefix[:-1]], device=model.device), False, None)
    return kv


def _verify(model, kv: TargetCache, tree):
    """The decode loop's verify step (the eager backend) of a device tree over ``kv``."""
    return EagerTarget(model, kv).verify(tree, False, None)


def _fresh_logits(model, tokens: list[int], tree) -> torch.Tensor:
    """A tree verified over a cache holding exactly ``tokens`` (all but the tree's root)."""
    return _verify(model, _prefilled(model, tokens + [0]), tree).logits


@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_dead_entries_are_invisible(arch, attn):
    """Two trees verified in a row, the first's accepted path off its first branch: the second
    tree's logits equal those over a fresh cache of the committed tokens alone."""
    model = cached_target(arch, attn)
    prefix = [9, 8, 7, 6]
    kv = _prefilled(model, prefix)
    first_dev, first = _tree(prefix[-1])
    v = _verify(model, kv, first_dev)
    leaf = len(first) - 1  # the last node: its path skips the siblings before it
    path = first.path_to(leaf)
    kv.keep(len(prefix) - 1, [0] + path)
    assert kv.dead > 0 and kv.committed == len(prefix) + len(path)
    assert v.prefix_len == len(prefix) - 1
    committed = prefix + [first.tokens[j] for j in path]
    second, _ = _tree(97 % 60 + 2, d=2, b=3)
    got = _verify(model, kv, second)
    assert got.prefix_len == len(committed)  # positions are logical: the dead entries take none
    want = _fresh_logits(model, committed, second)
    torch.testing.assert_close(got.logits, want, rtol=1e-4, atol=1e-4)
    assert got.argmax.tolist() == want.argmax(dim=-1).tolist()


@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])
def test_compaction_leaves_the_cache_of_the_committed_tokens(arch):
    model = cached_target(arch, "sdpa")
    prefix = [3, 14, 15, 42]
    kv = _prefilled(model, prefix)
    dev, tree = _tree(prefix[-1])
    _verify(model, kv, dev)
    path = tree.path_to(len(tree) - 1)
    kv.keep(len(prefix) - 1, [0] + path)
    dead = kv.dead
    assert dead > 0 and kv.physical == kv.committed + dead
    kv.compact()
    assert kv.dead == 0 and kv.compactions == 1 and kv.physical == kv.committed
    fresh = DynamicCache()
    pl.forward(model, torch.tensor([prefix + [tree.tokens[j] for j in path]], device=model.device), fresh)
    for a, b in zip(kv.cache.layers, fresh.layers):
        torch.testing.assert_close(a.keys, b.keys, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(a.values, b.values, rtol=1e-4, atol=1e-5)


def test_a_chain_never_leaves_dead_entries_and_the_threshold_compacts():
    model = cached_target("llama", "sdpa")
    prefix = [5, 6, 7]
    kv = _prefilled(model, prefix, compact_after=3)
    chain, _ = _tree(prefix[-1], d=4, b=1)
    _verify(model, kv, chain)
    kv.keep(2, [0, 1, 2])  # root + the first two: the rejected tail is cropped
    assert (kv.committed, kv.dead, kv.physical) == (5, 0, 5) and kv.dead_mask(model.device) is None
    dev, tree = _tree(9)
    _verify(model, kv, dev)
    path = tree.path_to(len(tree) - 1)
    kv.keep(5, [0] + path)  # more dead entries than compact_after: compacted at once
    assert kv.dead == 0 and kv.compactions == 1 and kv.physical == kv.committed == 5 + 1 + len(path)


def test_bad_use_is_refused():
    model = cached_target("llama", "sdpa")
    kv = _prefilled(model, [5, 6, 7])
    _verify(model, kv, _tree(7)[0])
    with pytest.raises(ValueError, match="start must be the first unresolved entry"):
        kv.keep(0, [0])
    with pytest.raises(ValueError, match="ascending"):
        kv.keep(2, [0, 2, 1])
    with pytest.raises(ValueError, match="ascending offsets below"):
        kv.keep(2, [0, 99])
    with pytest.raises(ValueError, match="compact_after"):
        TargetCache(compact_after=0)
    kv.keep(2, [0, 2])
    pl.forward(model, torch.tensor([[4]], device=model.device), kv.cache)  # written and never resolved
    with pytest.raises(RuntimeError, match="never resolved"):
        kv.dead_mask(model.device)


@pytest.mark.parametrize("compact_after", [1, 5, 10**9])
@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])
@pytest.mark.parametrize("method,config", [
    ("fixed_tree", FixedTreeConfig(d=3, b=3, tau=0.0, n_max=20)),
    ("dynatree", DynaTreeConfig(b_min=2, b_mid=3, b_max=4, n_max=40)),
    ("eagle2", Eagle2Config(k=3, depth=3, n_total=8)),
    ("linear", LinearConfig(k=4)),
])
def test_decoding_is_exact_whenever_the_cache_compacts(monkeypatch, compact_after, arch, method, config):
    """Compacting after every iteration, now and then, or never: the same greedy tokens."""
    monkeypatch.setattr(dynamic, "COMPACT_AFTER", compact_after)
    pair = cached_pair(arch, "sdpa", 0.1)
    prompt = (5, 9, 2, 33, 7, 12)
    res = generate(pair, list(prompt), method, config, max_new_tokens=40, ignore_eos=True)
    assert res.tokens == reference_greedy(arch, "sdpa", prompt, 40)

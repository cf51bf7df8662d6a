"""Tree attention: one masked forward over a tree gives every node the logits of sequential
decoding along its own root-to-node path, for each architecture and attention kernel."""

from __future__ import annotations


import numpy as np
import pytest
import torch
from transformers import DynamicCache

from dynatree_core.policy.config import FixedTreeConfig
from dynatree_core.policy.growth import grow_tree
from dynatree_core.runtime.cache.dynamic import cache_length, keep_selected
from dynatree_core.runtime.model import forwards as pl
from dynatree_core.runtime.backend import EagerTarget

from helpers import cached_target, fake_propose as _fake_propose, grow_device_tree as _grow


def _sequential_logits(model, tokens: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([tokens], device=model.device)).logits[0, -1]


def _prefilled(model, prefix: list[int]) -> EagerTarget:
    """The eager target backend holding ``prefix[:-1]`` (the last token is the tree's root)."""
    target = EagerTarget(model)
    target.prefill(torch.tensor([prefix[:-1]], device=model.device), False, None)
    return target


@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_tree_logits_equal_sequential_path_logits(arch, attn):
    model = cached_target(arch, attn)
    prefix = [5, 17, 29, 3, 11, 40]
    dev, tree = _grow(prefix[-1], FixedTreeConfig(d=3, b=3, tau=0.0, n_max=30).growth_rule(), model.device)
    ref = grow_tree(prefix[-1], FixedTreeConfig(d=3, b=3, tau=0.0, n_max=30).growth_rule(), _fake_propose)
    assert (tree.tokens, tree.parents, tree.depths) == (ref.tokens, ref.parents, ref.depths)
    assert len(tree) > 10 and tree.depth == 3
    v = _prefilled(model, prefix).verify(dev, False, None)  # the engine's and the session's verify step
    logits = v.logits
    assert v.prefix_len == len(prefix) - 1 and v.start == len(prefix) - 1
    assert v.argmax.tolist() == logits.argmax(dim=-1).tolist()
    for i in range(len(tree)):
        path = prefix + [tree.tokens[j] for j in tree.path_to(i)]
        torch.testing.assert_close(logits[i], _sequential_logits(model, path), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])
def test_bfs_index_positions_would_be_wrong(arch):
    """The reason positions follow depth: BFS-index positions change the logits."""
    model = cached_target(arch, "eager")
    prefix = [5, 17, 29]
    tree = grow_tree(prefix[-1], FixedTreeConfig(d=2, b=3, tau=0.0).growth_rule(), _fake_propose)
    outs = []
    for offsets in (tree.position_offsets(), np.arange(len(tree))):
        cache = DynamicCache()
        pl.forward(model, torch.tensor([prefix[:-1]], device=model.device), cache)
        allowed = pl.with_prefix(tree.ancestor_mask(), 2)
        outs.append(pl.forward(model, torch.tensor([tree.tokens], device=model.device), cache, allowed, 2 + offsets))
    last = len(tree) - 1
    assert not torch.allclose(outs[0][last], outs[1][last], atol=1e-3)


def test_float_mask_is_additive_zero_or_dtype_min():
    allowed = np.array([[True, False], [True, True]])
    m = pl.additive_mask(allowed, torch.float16, torch.device("cpu"))
    assert m.shape == (1, 1, 2, 2) and m.dtype == torch.float16
    assert m[0, 0, 0, 1] == torch.finfo(torch.float16).min and m[0, 0, 1].eq(0).all()


@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])
def test_keep_selected_equals_a_fresh_cache_of_the_kept_tokens(arch):
    model = cached_target(arch, "sdpa")
    prefix = [9, 8, 7, 6]
    dev, tree = _grow(prefix[-1], FixedTreeConfig(d=3, b=2, tau=0.0).growth_rule(), model.device)
    target = _prefilled(model, prefix)
    past = target.verify(dev, False, None).prefix_len
    cache = target.cache.cache
    leaf = len(tree) - 1
    path = tree.path_to(leaf)
    keep_selected(cache, past, [0] + path)
    fresh = DynamicCache()
    pl.forward(model, torch.tensor([prefix + [tree.tokens[j] for j in path]], device=model.device), fresh)
    assert cache_length(cache) == cache_length(fresh)
    for a, b in zip(cache.layers, fresh.layers):
        torch.testing.assert_close(a.keys, b.keys, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(a.values, b.values, rtol=1e-4, atol=1e-5)

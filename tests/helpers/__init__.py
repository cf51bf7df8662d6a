"""Shared test helpers (one place): tiny-model builders, reference decodes and assertions.

Test files import from here, never from another test file or from ``conftest``.
``DYNATREE_TEST_DEVICE`` (default ``cpu``) names the device the tiny models and the reference
tensors live on; the models are always built on the CPU (same seeds, same weights) and then moved.
"""

from __future__ import annotations

import copy
import functools
import math
import os

import torch

from dynatree_core.drafters import Proposal
from dynatree_core.pairs.tiny import noisy_copy, tiny_model
from dynatree_core.pairs.pair import ModelPair
from dynatree_core.policy.tree import DraftTree
from dynatree_core.runtime.tree.tree import DeviceTree
from dynatree_core.runtime.host_syncs import HostSyncs
from dynatree_core.runtime.tree.to_host import host_tree

#: where the tiny models and reference tensors live (``DYNATREE_TEST_DEVICE``, default cpu)
DEVICE = torch.device(os.environ.get("DYNATREE_TEST_DEVICE", "cpu") or "cpu")


@functools.lru_cache(maxsize=None)
def _cpu_target(arch: str, attn: str) -> torch.nn.Module:
    return tiny_model(arch, seed=0, attn=attn)


@functools.lru_cache(maxsize=None)
def cached_target(arch: str, attn: str, kernel: str = "torch") -> torch.nn.Module:
    """The tiny target; ``kernel="onednn"``: a copy with its linear layers packed for oneDNN
    (:mod:`dynatree_core.runtime.model.linear_kernels`), a model of its own to decode exactly like."""
    model = _cpu_target(arch, attn)
    if kernel != "torch":
        model = set_kernel(copy.deepcopy(model), kernel)
    return model if DEVICE.type == "cpu" else copy.deepcopy(model).to(DEVICE)


def set_kernel(model: torch.nn.Module, kernel: str) -> torch.nn.Module:
    from dynatree_core.runtime.model.linear_kernels import set_linear_kernel

    set_linear_kernel(model, kernel)
    return model


@functools.lru_cache(maxsize=None)
def cached_pair(arch: str, attn: str, noise: float, kernel: str = "torch") -> ModelPair:
    target = cached_target(arch, attn, kernel)
    draft = set_kernel(noisy_copy(_cpu_target(arch, attn), noise, seed=1), kernel)  # noise drawn on the CPU
    return ModelPair(target=target, draft=draft if DEVICE.type == "cpu" else draft.to(DEVICE),
                     target_name=f"tiny-{arch}", draft_name=f"tiny-{arch}-noise{noise}")


@functools.lru_cache(maxsize=None)
def reference_greedy(arch: str, attn: str, prompt: tuple[int, ...], n: int, kernel: str = "torch") -> list[int]:
    """The target's own greedy decoding via ``model.generate`` (EOS never stops it here), on the
    linear ``kernel`` its pair runs on."""
    if n == 0:
        return []
    model = cached_target(arch, attn, kernel)
    with torch.inference_mode():
        out = model.generate(torch.tensor([list(prompt)], device=DEVICE), do_sample=False, max_new_tokens=n,
                             min_new_tokens=n, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def assert_decodes(pair: ModelPair, prompt, method: str, config, n: int, expected: list[int]) -> None:
    """``method`` on ``pair`` emits exactly ``expected`` (n tokens, EOS ignored)."""
    from dynatree_core import generate

    res = generate(pair, list(prompt), method, config, max_new_tokens=n, ignore_eos=True)
    assert res.tokens == expected
    assert res.metrics.new_tokens == n  # max_new_tokens is exact


def assert_one_read_and_the_size(records, run) -> None:
    """A fast-path run's resident draft phase reads the device once per iteration (the selection), and once
    more where the run read a tree's real size before its verify (free on a CPU, so wherever a smaller
    bucket holds the tree: :class:`~dynatree_core.runtime.static.size_read.SizeRead`)."""
    size = run.target.size_read
    assert all(r.host_syncs in (1, 2) for r in records)
    assert sum(r.host_syncs for r in records) == len(records) + size.reads


def fake_propose(tree, ids):
    """Host proposer for grow_tree: deterministic but varied, breadth 3 everywhere, ids from the node id."""
    out = []
    for i in ids:
        toks = [(7 * i + 3 * r + 5) % 60 + 2 for r in range(4)]
        out.append((toks, [math.log(p) for p in (0.5, 0.3, 0.15, 0.05)]))
    return out


class FakeDeviceDrafter:
    """:func:`fake_propose` as a device drafter: grows on a DeviceTree the tree grow_tree builds."""

    def propose(self, tree, ids, level):
        rows = fake_propose(None, ids.tolist())
        return Proposal(torch.tensor([r[0] for r in rows]), torch.tensor([r[1] for r in rows], dtype=torch.float32))


def grow_device_tree(root: int, rule, device) -> tuple[DeviceTree, DraftTree]:
    """A tree grown on the device by the fake drafter, and the same tree on the host."""
    tree = DeviceTree(root, rule, 4, device).grow(FakeDeviceDrafter(), HostSyncs())
    return tree, host_tree(tree.fetch(HostSyncs()), tree.draft_calls)

"""Shared test helpers (one place): tiny-model builders, reference decodes and assertions.

Test files import from here, never from another test file or from ``conftest``.
``DYNATREE_TEST_DEVICE`` (default ``cpu``) names the device the tiny models and the reference
tensors live on; the models are always built on the CPU (same seeds, same weights) and then moved.
"""

from __future__ import annotations

import copy
import functools
import os

import torch

from dynatree_core.pairs.tiny import noisy_copy, tiny_model
from dynatree_core.pairs.pair import ModelPair

#: where the tiny models and reference tensors live (``DYNATREE_TEST_DEVICE``, default cpu)
DEVICE = torch.device(os.environ.get("DYNATREE_TEST_DEVICE", "cpu") or "cpu")


@functools.lru_cache(maxsize=None)
def _cpu_target(arch: str, attn: str) -> torch.nn.Module:
    return tiny_model(arch, seed=0, attn=attn)


@functools.lru_cache(maxsize=None)
def cached_target(arch: str, attn: str, kernel: str = "torch") -> torch.nn.Module:
    """The tiny target; ``kernel="onednn"``: a copy with its linear layers packed for oneDNN
    (:mod:`dynatree_core.runtime.linear_kernels`), a model of its own to decode exactly like."""
    model = _cpu_target(arch, attn)
    if kernel != "torch":
        model = set_kernel(copy.deepcopy(model), kernel)
    return model if DEVICE.type == "cpu" else copy.deepcopy(model).to(DEVICE)


def set_kernel(model: torch.nn.Module, kernel: str) -> torch.nn.Module:
    from dynatree_core.runtime.linear_kernels import set_linear_kernel

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

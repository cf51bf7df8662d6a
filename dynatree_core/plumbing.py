"""Model plumbing: attention masks, position ids and KV-cache surgery (no tree policy here).

Everything the engine feeds a model goes through these helpers:

* masks are 4D **float additive** ([batch=1, heads=1, new, past+new]; 0 = may attend, dtype-min =
  may not). A 4D *bool* mask silently gives wrong logits with ``eager`` attention in
  transformers 5.x, so bool masks never reach a model;
* positions follow tree **depth**, not the BFS index: rotary models (Llama, GPT-NeoX) would
  otherwise see siblings at different distances from the prefix;
* caches are ``transformers.DynamicCache`` objects edited per layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
from transformers import DynamicCache

from .masks import causal_visibility, with_prefix  # noqa: F401 (part of the plumbing API)


def additive_mask(allowed: np.ndarray, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Float additive mask [1, 1, q, kv] from a bool [q, kv] matrix (True = may attend)."""
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~torch.from_numpy(np.ascontiguousarray(allowed)), torch.finfo(dtype).min)
    return mask.to(device)[None, None]


def cache_length(cache: DynamicCache) -> int:
    return cache.get_seq_length()


def crop(cache: DynamicCache, length: int) -> None:
    """Keep the first ``length`` entries of every layer."""
    drop = cache_length(cache) - length
    if drop > 0:
        cache.crop(-drop)


@torch.inference_mode()
def keep_selected(cache: DynamicCache, start: int, selected: Sequence[int]) -> None:
    """Keep entries [0, start) plus ``start + i`` for i in ``selected`` (ascending), drop the rest.

    Used to keep the accepted path of a verified tree: its entries are moved down to
    [start, start + len(selected)) and the cache is cut there. Nothing is recomputed.
    """
    selected = list(selected)
    if selected != list(range(len(selected))):  # already contiguous at the front: no move needed
        src = torch.as_tensor([start + i for i in selected], dtype=torch.long)
        for layer in cache.layers:
            idx = src.to(layer.keys.device)
            layer.keys[:, :, start:start + len(selected)] = layer.keys.index_select(2, idx)
            layer.values[:, :, start:start + len(selected)] = layer.values.index_select(2, idx)
    crop(cache, start + len(selected))


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    return next(model.parameters()).dtype


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work so timings are honest (a no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.inference_mode()
def forward(model: torch.nn.Module, input_ids: torch.Tensor, cache: DynamicCache,
            allowed: np.ndarray | None = None, position_ids: np.ndarray | None = None) -> torch.Tensor:
    """One cached forward of new tokens ``input_ids`` [1, q]; returns logits [q, vocab].

    ``allowed`` (bool [q, past + q]) says which cache entries and new tokens each new token
    may attend to; ``position_ids`` (int [q]) are absolute positions. Both default to a causal
    chain continuing the cache.
    """
    out = model(**_inputs(model, input_ids, cache, allowed, position_ids))
    return out.logits[0]


@torch.inference_mode()
def forward_with_hidden(model: torch.nn.Module, input_ids: torch.Tensor, cache: DynamicCache,
                        allowed: np.ndarray | None = None, position_ids: np.ndarray | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`forward`, also returning the final (post-norm) hidden states [q, hidden].

    Runs the base model and the LM head separately - the very ops ``ForCausalLM.forward`` runs,
    so the logits are the same - to hand the hidden states to a feature drafter for free.
    """
    out = model.base_model(**_inputs(model, input_ids, cache, allowed, position_ids))
    hidden = out.last_hidden_state
    return model.get_output_embeddings()(hidden)[0], hidden[0]


@dataclass
class Verified:
    """What one verification forward over ``[root] + tree`` gives."""

    logits: torch.Tensor  # [n, vocab], row i: the target's next-token scores after node i
    hidden: torch.Tensor | None  # [n, hidden] final hidden states (for a feature drafter), or None
    prefix_len: int  # cache length before the forward: the committed tokens except the root
    position_ids: np.ndarray  # prefix_len + depth(u): positions follow depth, not the BFS index
    argmax: list[int]  # the target's greedy choice after every node


@torch.inference_mode()
def verify_tree(model: torch.nn.Module, tree: Any, cache: DynamicCache, want_hidden: bool = False) -> Verified:
    """The target reads the root and every node of ``tree`` (a :class:`~dynatree_core.tree.DraftTree`)
    in ONE forward: each node sees the cached prefix, its ancestors and itself (tree mask), at
    position prefix + depth. The cache is extended by all nodes (the commit phase cuts it back)."""
    prefix_len = cache_length(cache)
    allowed = with_prefix(tree.ancestor_mask(), prefix_len)
    pos = prefix_len + tree.position_offsets()
    inp = torch.tensor([tree.tokens], device=model_device(model))
    hidden = None
    if want_hidden:
        logits, hidden = forward_with_hidden(model, inp, cache, allowed, pos)
    else:
        logits = forward(model, inp, cache, allowed, pos)
    return Verified(logits, hidden, prefix_len, pos, logits.argmax(dim=-1).tolist())


@torch.inference_mode()
def prefill(model: torch.nn.Module, input_ids: torch.Tensor, cache: DynamicCache,
            want_hidden: bool) -> torch.Tensor | None:
    """Extend the cache by the causal chain ``input_ids`` [1, q] (a prompt prefix). With
    ``want_hidden`` (a feature drafter needs them) return the final hidden states [q, hidden]
    from the base model alone - no logits are needed for the prompt - else None."""
    if want_hidden:
        return model.base_model(**_inputs(model, input_ids, cache, None, None)).last_hidden_state[0]
    forward(model, input_ids, cache)
    return None


def _inputs(model: torch.nn.Module, input_ids: torch.Tensor, cache: DynamicCache,
            allowed: np.ndarray | None, position_ids: np.ndarray | None) -> dict:
    q = input_ids.shape[1]
    past = cache_length(cache)
    device = input_ids.device
    if allowed is None:
        allowed = with_prefix(causal_visibility(q), past)
    if position_ids is None:
        position_ids = np.arange(past, past + q)
    assert allowed.shape == (q, past + q), (allowed.shape, q, past)
    mask = additive_mask(allowed, model_dtype(model), device)
    pos = torch.as_tensor(np.asarray(position_ids, dtype=np.int64)).to(device)[None]
    return dict(input_ids=input_ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True)

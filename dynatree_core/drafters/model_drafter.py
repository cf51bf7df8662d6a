"""The independent draft model's drafter: a small causal LM with its own KV cache (the paper's setting)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Sequence

import torch
from transformers import DynamicCache

from dynatree_core.drafters.protocol import (DraftContext, Drafter, Proposal, level_visibility, lm_head_topk,
                                             logits_topk)
from dynatree_core.runtime.cache.dynamic import cache_length, crop, keep_selected
from dynatree_core.runtime.model import forwards as pl
from dynatree_core.runtime.static.regions import compiled
from dynatree_core.runtime.host_syncs import to_device
from dynatree_core.runtime.tree.phase import LentLevel
from dynatree_core.runtime.static.draft_forwards import DraftStaticForwards

if TYPE_CHECKING:  # pragma: no cover
    from dynatree_core.runtime.tree.tree import DeviceTree


class ModelDrafter(Drafter):
    """An independent draft causal LM (Hugging Face, KV cache + 4D-mask interface) with a KV cache
    kept across iterations; accepted nodes it already consumed stay in its cache."""

    kind = "model"

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model
        self.device = pl.model_device(model)
        #: on the fast path (the context's ``fast``): a static cache and captured level forwards
        self.fast: DraftStaticForwards | None = None
        self.start([], self.ctx)

    @property
    def fast_model(self) -> torch.nn.Module:
        return self.model

    def start(self, prompt: Sequence[int], ctx: DraftContext, target_hidden: torch.Tensor | None = None) -> None:
        self._take_context(ctx)
        self.cache = DynamicCache()
        self.pending: list[int] = list(prompt)  # committed tokens the draft has not consumed
        self.slot: torch.Tensor | None = None  # per node: cache index it was fed at (-1: not fed)
        self.base = 0  # cache length once the root is fed (root at base - 1)
        self._slots: torch.Tensor | None = None  # the buffer a lent level 0 fills (_tree_slots)

    def prefill(self) -> None:
        if len(self.pending) > 1:
            pl.forward(self.model, to_device(self.pending[:-1], self.device)[None], self.cache, clock=self.ctx.clock)
            self.forwards += 1
            self.pending = self.pending[-1:]

    def fork(self, ctx: DraftContext | None = None) -> "ModelDrafter":
        new = super().fork(ctx)
        new.cache = copy.deepcopy(self.cache)
        new.pending = list(self.pending)
        new.slot = None if self.slot is None else self.slot.clone()
        new._slots = None  # its own buffer, were it to lend a level 0
        return new

    def propose(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> Proposal:
        logits = self._forward_level(tree, ids, level)
        if self.ctx.sampler is not None:
            return self._sampled(tree, ids, level, logits[-1:] if level == 0 else logits)
        if self.fast is not None and level:  # one compiled region
            return Proposal(*compiled(logits_topk, self.fast.path.runtime, self.device)(logits, self.ctx.top_k))
        return self._greedy(self._topk(logits), level)

    def lend_level(self, tree: "DeviceTree", level: int) -> LentLevel | None:
        """On the fast path, greedy: the level's static forward and the logits' top-k, run whole by
        the draft phase (under sampling the candidates are draws: :meth:`propose`). Level 0 lends its
        chain when a bucket holds it and no chain view is asked for (a trace's: :meth:`propose`)."""
        if self.fast is None or self.ctx.sampler is not None:
            return None
        if level == 0:
            if self.ctx.keep_chain or not self.fast.bucketed(len(self.pending)):
                return None
            booked = self.fast.book_chain(self.pending)
            self.slot = self._tree_slots(tree.capacity)  # the whole chain fills it
            self.base = booked.committed + booked.q  # committed once the chain has run
            self.pending = []
        elif self.slot is None:
            return None
        else:
            booked = None
        self.forwards += 1
        return LentLevel(self.fast, self.slot, self.base - 1, None, lm_head_topk, (), self.ctx.top_k, self.ctx.clock,
                         booked)

    def _tree_slots(self, capacity: int) -> torch.Tensor:
        """The run's buffer of a tree's slots by node (kept: a lent level 0 writes it on the device)."""
        if self._slots is None or self._slots.shape[0] != capacity:
            self._slots = torch.full((capacity,), -1, dtype=torch.long, device=self.device)
        return self._slots

    def level_scores(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> tuple[torch.Tensor, None]:
        logits = self._forward_level(tree, ids, level)
        return (logits[-1:] if level == 0 else logits), None

    def _forward_level(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> torch.Tensor:
        """One draft forward for tree level ``ids``: its logits (level 0: one row per pending
        committed token, the root last, after the chain rows kept)."""
        if self.fast is not None:
            return self._forward_level_static(tree, ids, level)
        if level == 0:
            # Level 0: feed the pending committed tokens, the root last, as a causal chain.
            inp = to_device(self.pending, self.device)[None]
            logits = pl.forward(self.model, inp, self.cache, clock=self.ctx.clock)[self._chain_rows():]
            self.forwards += 1
            self.base = cache_length(self.cache)
            self.slot = torch.full((tree.capacity,), -1, dtype=torch.long, device=self.device)
            self.slot[:1].fill_(self.base - 1)
            self.pending = []
            return logits
        assert self.slot is not None, "propose: level 0 (the root) comes first"
        past = cache_length(self.cache)
        if self._chain_level(ids, level):  # the default causal mask and next position
            logits = pl.forward(self.model, tree.tokens[ids][None], self.cache, clock=self.ctx.clock)
        else:
            allowed, depth = level_visibility(tree, ids, self.slot, self.base, past)
            logits = pl.forward(self.model, tree.tokens[ids][None], self.cache, allowed, self.base - 1 + depth,
                                clock=self.ctx.clock)
        self.slot[ids] = past + torch.arange(ids.shape[0], device=self.device)
        self.forwards += 1
        return logits

    def _forward_level_static(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> torch.Tensor:
        """:meth:`_forward_level` on the fast path: slots instead of cache indices, committed entries
        found by the device's bookkeeping, one replayed forward per level."""
        assert self.fast is not None
        self.forwards += 1
        if level == 0:
            logits, start = self.fast.chain(self.pending, self.ctx.clock)
            self.base = self.fast.book.committed
            self.slot = torch.full((tree.capacity,), -1, dtype=torch.long, device=self.device)
            self.slot[:1].fill_(start + len(self.pending) - 1)  # the root's slot
            self.pending = []
            return logits[self._chain_rows():]
        assert self.slot is not None, "propose: level 0 (the root) comes first"
        return self.fast.level(tree, ids, self.slot, self.base - 1, self.ctx.clock)

    def commit(self, path: list[int], committed: list[int], target_hidden: torch.Tensor | None = None,
               fed: int = 0) -> None:
        """Keep the accepted nodes the draft consumed; queue the rest of ``committed``."""
        if self.slot is None:  # the root was never fed (nothing drafted this iteration)
            self.pending.extend(committed)
            return
        if self.fast is not None:  # their entries are committed where they were written
            self.fast.book.commit_slots(self.slot[to_device(path[:fed], self.device)], fed)
            self.pending = list(committed[fed:])
            self.slot = None
            return
        if fed:  # a prefix of the path: parents are fed before their children
            keep_selected(self.cache, self.base, self.slot[to_device(path[:fed], self.device)] - self.base)
        else:
            crop(self.cache, self.base)
        self.pending = list(committed[fed:])
        self.slot = None

    def settings(self) -> dict[str, Any]:
        cfg = getattr(self.model, "config", None)
        return {**super().settings(), "layers": getattr(cfg, "num_hidden_layers", None),
                "model_type": getattr(cfg, "model_type", None)}



"""The feature draft's drafter: a small head reading the target's own hidden states (the EAGLE idea)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import torch

from dynatree_core.drafters.feature_draft import FeatureDraftModel
from dynatree_core.drafters.protocol import DraftContext, Drafter, Proposal, level_visibility
from dynatree_core.runtime.model import forwards as pl
from dynatree_core.runtime.tree.phase import LentLevel
from dynatree_core.runtime.static.regions import compiled, region
from dynatree_core.runtime.host_syncs import to_device
from dynatree_core.runtime.model.linear_kernels import linear
from dynatree_core.runtime.ngram import TopKTensors

if TYPE_CHECKING:  # pragma: no cover
    from dynatree_core.runtime.tree.tree import DeviceTree


class FeatureDrafter(Drafter):
    """Drafts with a :class:`~dynatree_core.drafters.feature_draft.FeatureDraftModel`.

    Committed token ``x_j`` is fed with the target's hidden state ``f_{j-1}``; a tree node is fed
    with the feature its parent's draft step predicted. After each iteration the tree's cache
    entries are dropped (they were computed from predicted features) and the committed tokens
    are queued with the target's real features, so the next level 0 re-reads them (EAGLE does
    the same): a few tokens through the small head.
    """

    kind = "feature"
    needs_target_hidden = True

    def __init__(self, model: FeatureDraftModel):
        super().__init__()
        self.model = model
        p = model.fc_emb.weight
        self.device, self.dtype = p.device, p.dtype
        self.start([0], self.ctx)

    # --- state -----------------------------------------------------------------------------
    @property
    def fast_model(self) -> FeatureDraftModel:
        return self.model

    def start(self, prompt: Sequence[int], ctx: DraftContext, target_hidden: torch.Tensor | None = None) -> None:
        self._take_context(ctx)  # on the fast path the levels run at static slots, head top-k in a compiled region
        prompt = list(prompt)
        H = self.model.config.hidden_size
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # per layer, [1, kv_heads, n, head_dim]
        self.slot: torch.Tensor | None = None  # per node: cache index it was fed at (-1: not fed)
        self.base = 0
        self.feats: torch.Tensor | None = None  # per node: the feature its draft step predicted [cap, H]
        self._bufs: tuple[torch.Tensor, torch.Tensor] | None = None  # what a lent level 0 fills (_tree_buffers)
        if len(prompt) > 1:
            if target_hidden is None or target_hidden.shape[0] != len(prompt) - 1:
                raise ValueError("FeatureDrafter.start needs the target's hidden states of prompt[:-1] "
                                 f"({len(prompt) - 1} rows), got "
                                 f"{None if target_hidden is None else tuple(target_hidden.shape)}")
            # x_0 has no previous feature: the draft's sequence starts at x_1 (as in training)
            self.pending = prompt[1:]
            self.pending_feats = self._target_feats(target_hidden)
            self.pos0 = 1
        else:  # a one-token prompt: no feature exists yet, a zero vector stands in once
            self.pending = prompt
            self.pending_feats = torch.zeros((len(prompt), H), device=self.device, dtype=self.dtype)
            self.pos0 = 0
        self.root_pos = self.pos0 + len(self.pending) - 1

    @property
    def target_layers(self) -> tuple[int, ...]:
        """The target layers whose hidden states the draft reads besides the final one (``()``: none)."""
        return self.model.config.target_layers

    def _target_feats(self, hidden: torch.Tensor) -> torch.Tensor:
        return target_feats(self.model, hidden, self.device, self.dtype)

    def fork(self, ctx: DraftContext | None = None) -> "FeatureDrafter":
        new = super().fork(ctx)
        new.pending = list(self.pending)
        new.slot = None if self.slot is None else self.slot.clone()
        new.feats = None if self.feats is None else self.feats.clone()
        new._bufs = None  # its own buffers, were it to lend a level 0
        return new

    def cache_length(self) -> int:
        return 0 if self.kv is None else int(self.kv[0][0].shape[2])

    def _run(self, tokens: torch.Tensor, feats: torch.Tensor, positions: torch.Tensor,
             allowed: torch.Tensor | None) -> torch.Tensor:
        past = self.cache_length()
        q = tokens.shape[0]
        if allowed is None:
            allowed = pl.causal_allowed(q, past, self.device)
        mask = pl.additive_mask(allowed, self.dtype, self.device)
        with pl.timed(self.ctx.clock):
            out, new = self.model(tokens[None], feats[None], positions[None], mask, self.kv)
        self.kv = new if self.kv is None else [(torch.cat([k0, k], dim=2), torch.cat([v0, v], dim=2))
                                               for (k0, v0), (k, v) in zip(self.kv, new)]
        self.forwards += 1
        return out[0]

    def _positions(self, start: int, n: int) -> torch.Tensor:
        return torch.arange(start, start + n, device=self.device)

    def prefill(self) -> None:
        if len(self.pending) > 1:
            n = len(self.pending) - 1
            self._run(to_device(self.pending[:-1], self.device), self.pending_feats[:-1],
                      self._positions(self.pos0, n), None)
            self.pending, self.pending_feats = self.pending[-1:], self.pending_feats[-1:]
            self.pos0 += n

    # --- the protocol ----------------------------------------------------------------------
    @torch.inference_mode()
    def propose(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> Proposal:
        out = self._forward_level(tree, ids, level)
        if self.ctx.sampler is not None:
            return self._sampled(tree, ids, level, *self._head_logits(self._kept(ids, out, level)))
        if self.fast is not None and level:  # one compiled region: the features kept, the head's top-k
            logits, vocab_ids = self._head_logits(out)
            return Proposal(*compiled(head_topk, self.fast.path.runtime, self.device)(
                logits, vocab_ids, min(self.ctx.top_k, vocab_ids.shape[0]), self.feats, ids, out))
        return self._greedy(self._head_topk(out), level)

    def lend_level(self, tree: "DeviceTree", level: int) -> LentLevel | None:
        """On the fast path, greedy: the level's static forward, the features kept for the children and
        the head's top-k, run whole by the draft phase (sampling: :meth:`propose`). Level 0 lends its
        chain (the pending tokens with their features) when a bucket holds it and no chain view is
        asked for (a trace's: :meth:`propose`)."""
        if self.fast is None or self.ctx.sampler is not None:
            return None
        booked = None
        if level == 0:
            if self.ctx.keep_chain or not self.fast.bucketed(len(self.pending)):
                return None
            booked = self.fast.book_chain(self.pending, self.pending_feats, self.pos0)
            self.base = booked.start + booked.q  # the tree writes after the chain (as _root_fed)
            self.slot, self.feats = self._tree_buffers(tree.capacity)  # the whole chain fills them
            self.root_pos = self.pos0 + booked.q - 1
            self.pending, self.pending_feats = [], self.pending_feats[:0]
        elif self.slot is None:
            return None
        self.forwards += 1
        head = self.model.head
        return LentLevel(self.fast, self.slot, self.root_pos, self.feats, feature_head_topk,
                         (head.weight, head.vocab_ids), min(self.ctx.top_k, head.num_head_ids), self.ctx.clock,
                         booked)

    def _tree_buffers(self, capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The run's buffers of a tree's slots and predicted features by node (kept: a lent level 0
        writes them on the device; the features start at zero, so a padding row never reads garbage)."""
        if self._bufs is None or self._bufs[0].shape[0] != capacity:
            self._bufs = (torch.full((capacity,), -1, dtype=torch.long, device=self.device),
                          torch.zeros((capacity, self.model.config.hidden_size), device=self.device,
                                      dtype=self.dtype))
        return self._bufs

    def level_scores(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> tuple[torch.Tensor, torch.Tensor]:
        out = self._forward_level(tree, ids, level)
        return self._head_logits(self._kept(ids, out, level))

    def _kept(self, ids: torch.Tensor, out: torch.Tensor, level: int) -> torch.Tensor:
        """The rows whose scores a level asks for (level 0: the root's), each fast-path node's
        predicted feature kept for its children (the eager path keeps them as it runs)."""
        if level == 0:
            return out[-1:]
        if self.fast is not None:
            self.feats.index_copy_(0, ids, out)  # type: ignore[union-attr]
        return out

    def _forward_level(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> torch.Tensor:
        """One draft forward for tree level ``ids``: the predicted features (level 0: one row per
        pending committed token, the root last, after the chain rows kept)."""
        if self.fast is not None:
            return self._forward_level_static(tree, ids, level)
        if level == 0:
            out = self._run(to_device(self.pending, self.device), self.pending_feats,
                            self._positions(self.pos0, len(self.pending)), None)[self._chain_rows():]
            return self._root_fed(tree, ids, out, self.cache_length())
        assert self.slot is not None and self.feats is not None, "propose: level 0 (the root) comes first"
        past = self.cache_length()
        if self._chain_level(ids, level):  # causal: the node at depth = level, right after the cache
            allowed, positions = None, self._positions(self.root_pos + level, 1)
        else:
            allowed, depth = level_visibility(tree, ids, self.slot, self.base, past)
            positions = self.root_pos + depth
        out = self._run(tree.tokens[ids], self.feats[tree.parents[ids]], positions, allowed)
        self.slot[ids] = past + torch.arange(ids.shape[0], device=self.device)
        self.feats[ids] = out
        return out

    def _forward_level_static(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> torch.Tensor:
        """:meth:`_forward_level` on the fast path: the pending chain and each tree level written at
        static slots (the tree's slots are freed again at commit, as the eager cache is cropped)."""
        self.forwards += 1
        if level > 0:
            assert self.slot is not None and self.feats is not None, "propose: level 0 (the root) comes first"
            # the features each node's child reads are kept by the caller (:func:`head_topk`, :meth:`_kept`)
            return self.fast.level(tree, ids, self.slot, self.root_pos, self.ctx.clock, self.feats)
        out, start = self.fast.chain(self.pending, self.ctx.clock, self.pending_feats, self.pos0)
        return self._root_fed(tree, ids, out[self._chain_rows():], start + len(self.pending))

    def _root_fed(self, tree: "DeviceTree", ids: torch.Tensor, out: torch.Tensor, base: int) -> torch.Tensor:
        """After level 0 fed the pending chain (the root last, its entry ending at ``base``): the tree's
        slots and predicted features start at the root, and nothing is pending any more."""
        n = len(self.pending)
        self.base = base  # the tree writes after the chain
        self.slot = torch.full((tree.capacity,), -1, dtype=torch.long, device=self.device)
        self.slot[:1].fill_(self.base - 1)
        self.feats = torch.zeros((tree.capacity, out.shape[-1]), device=self.device, dtype=out.dtype)
        self.root_pos = self.pos0 + n - 1
        self.pending, self.pending_feats = [], self.pending_feats[:0]
        self.feats[ids] = out[-1:]
        return out

    def _head_logits(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The head's logits over its ids only (compact) and the token id of each column."""
        with pl.timed(self.ctx.clock):  # the head is part of the draft model's forward
            return self.model.head.forward_compact(out), self.model.head.vocab_ids

    def _head_topk(self, out: torch.Tensor) -> TopKTensors:
        # Top-k over the head ids only: ids outside the head have logit dtype-min (probability 0).
        logits, vocab_ids = self._head_logits(out)
        compact = torch.log_softmax(logits.float(), dim=-1)
        k = min(self.ctx.top_k, compact.shape[-1])
        top = compact.topk(k, dim=-1)
        return vocab_ids[top.indices], top.values

    def commit(self, path: list[int], committed: list[int], target_hidden: torch.Tensor | None = None,
               fed: int = 0) -> None:
        if target_hidden is None or target_hidden.shape[0] < len(committed):
            raise ValueError("FeatureDrafter.commit needs one target hidden state per committed token")
        new_feats = self._target_feats(target_hidden[: len(committed)])
        if self.slot is None:  # the root was never fed: queue behind the pending tokens
            self.pending = self.pending + list(committed)
            self.pending_feats = torch.cat([self.pending_feats, new_feats])
            return
        # Drop the tree's entries (made from predicted features); the root's entry stays.
        if self.fast is not None:
            self.fast.book.physical = self.base  # the tree's slots are free again
        else:
            self.kv = [(k[:, :, : self.base], v[:, :, : self.base]) for k, v in self.kv]
        self.pending, self.pending_feats = list(committed), new_feats
        self.pos0 = self.root_pos + 1
        self.slot, self.feats = None, None

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), **self.model.settings()}


@torch.no_grad()
def target_feats(model: FeatureDraftModel, hidden: torch.Tensor, device: torch.device, dtype: torch.dtype
                 ) -> torch.Tensor:
    """The target's hidden states ``[n, feature_width]`` -> the draft's input features ``[n, H]``."""
    width = model.config.feature_width
    if hidden.shape[-1] != width:
        raise ValueError(f"this feature draft reads the target's states after layers {list(model.config.target_layers)}"
                         f" and its final state ({width} wide); got {hidden.shape[-1]}-wide states")
    return model.reduce(hidden.to(device, dtype))


@region
def head_topk(logits: torch.Tensor, vocab_ids: torch.Tensor, k: int, feats: torch.Tensor, ids: torch.Tensor,
              out: torch.Tensor) -> TopKTensors:
    """A fast-path tree level after the feature draft's forward and head (``logits`` [q, head ids]):
    each node's predicted feature ``out`` kept (``feats`` [cap, H], row by node id: its children
    read it) and the head's top-k (token ids, log-probabilities), as one compiled region."""
    feats.index_copy_(0, ids, out)
    top = torch.log_softmax(logits.float(), dim=-1).topk(k, dim=-1)
    return vocab_ids[top.indices], top.values


def feature_head_topk(out: torch.Tensor, ids: torch.Tensor, feats: torch.Tensor, k: int, weight: torch.Tensor,
                      vocab_ids: torch.Tensor) -> TopKTensors:
    """The feature draft's head in a whole draft level (:func:`~dynatree_core.runtime.tree.phase.whole_level`):
    each node's predicted feature ``out`` kept for its children, then the head's logits over its ids
    (``weight`` [H, F]; :func:`~dynatree_core.runtime.model.linear_kernels.linear` is ``F.linear`` in a
    compiled graph) and their top-k as full-vocabulary ids (:func:`head_topk` on those logits)."""
    return head_topk(linear(out, weight, None, None), vocab_ids, k, feats, ids, out)

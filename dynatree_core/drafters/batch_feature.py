"""The feature draft drafting for several rows at once: ONE draft forward per tree level.

:class:`BatchFeatureDraft` runs :class:`~dynatree_core.drafters.batch_model.BatchModelDraft`'s levels
with a feature beside each token, as :class:`~dynatree_core.drafters.feature_drafter.FeatureDrafter`
does at batch 1: a committed token ``x_j`` reads the target's hidden state ``f_{j-1}`` (from the
batch's verify or prefill), a tree node reads the feature its parent's draft step predicted. After
each iteration a row keeps none of its tree's entries (they were computed from predicted features):
its committed tokens wait with the target's real features for the next level 0. The head runs once
per level over every asking row's rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import torch

from dynatree_core.drafters.batch_model import BatchModelDraft
from dynatree_core.drafters.feature_draft import FeatureDraftModel
from dynatree_core.drafters.feature_drafter import target_feats
from dynatree_core.runtime.cache.rows import RowsCache, gather_layers, select_layer_rows

if TYPE_CHECKING:  # pragma: no cover
    from dynatree_core.runtime.tree.tree import DeviceTree


class _Layer:
    """One decoder layer's keys and values [B, kv_heads, S, head_dim] (what a store's ``layers`` hold)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys, self.values = keys, values


class FeatureKV:
    """A :class:`~dynatree_core.drafters.feature_draft.FeatureDraftModel` over its per-layer keys and
    values (a :class:`~dynatree_core.runtime.cache.rows.RowsCache` store): predicted features out."""

    def __init__(self, model: FeatureDraftModel):
        self.model = model
        self.layers: list[_Layer] = []

    def crop(self, length: int) -> None:
        for layer in self.layers:
            layer.keys, layer.values = layer.keys[:, :, :length], layer.values[:, :, :length]

    def run(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, hidden: bool,
            feats: torch.Tensor | None) -> tuple[torch.Tensor, None]:
        if feats is None:
            raise ValueError("a feature draft's forward reads a feature beside each token (feats [B, q, H])")
        past = [(x.keys, x.values) for x in self.layers] or None
        out, new = self.model(ids, feats, positions, mask, past)
        if not self.layers:
            self.layers = [_Layer(k, v) for k, v in new]
        else:
            for layer, (k, v) in zip(self.layers, new):
                layer.keys = torch.cat([layer.keys, k], dim=2)
                layer.values = torch.cat([layer.values, v], dim=2)
        return out, None

    def gather(self, order: torch.Tensor, width: int) -> None:
        gather_layers(self.layers, order, width)

    def keep_rows(self, idx: torch.Tensor) -> None:
        select_layer_rows(self.layers, idx)


class BatchFeatureDraft(BatchModelDraft):
    """A feature draft's cache and level forwards for B rows.

    ``hidden[b]``: the target's final hidden states of prompt b but its last token ([L_b - 1, H];
    None for a one-token prompt, whose first token reads a zero feature once, as at batch 1)."""

    kind = "feature"

    def __init__(self, model: FeatureDraftModel, prompts: Sequence[Sequence[int]],
                 hidden: Sequence[torch.Tensor | None]):
        self.vocab_ids = model.head.vocab_ids
        self.dtype = model.fc_emb.weight.dtype
        self._first = [1 if len(p) > 1 else 0 for p in prompts]  # x_0 has no previous feature
        super().__init__(model, [list(p)[f:] for p, f in zip(prompts, self._first)])
        width = model.config.hidden_size
        #: per row: the features of its pending tokens [len(pending), H]
        self.pending_feats = [target_feats(model, h, self.device, self.dtype) if f else
                              torch.zeros((1, width), device=self.device, dtype=self.dtype)
                              for h, f in zip(hidden, self._first)]
        #: per row: each tree node's predicted feature [capacity, H] (its children read it)
        self.feats: list[torch.Tensor | None] = [None] * len(prompts)

    def _cache(self, rows: int) -> RowsCache:
        return RowsCache(self.model, rows, self.device, kv=FeatureKV(self.model), first=self._first)

    def settings(self) -> dict[str, Any]:
        return self.model.settings()

    def _chain_feats(self, fed: list[int]) -> list[torch.Tensor | None]:
        return [self.pending_feats[b][:n] if n else None for b, n in enumerate(fed)]

    def _consumed(self, b: int, n: int) -> None:
        super()._consumed(b, n)
        self.pending_feats[b] = self.pending_feats[b][n:]

    def _node_feats(self, asks: dict[int, tuple["DeviceTree", torch.Tensor]], q: int) -> torch.Tensor:
        parents: list[torch.Tensor | None] = [None] * self.cache.rows
        for b, (tree, ids) in asks.items():
            parents[b] = self.feats[b][tree.parents[ids]]  # type: ignore[index]
        return self.cache.features(parents, q)

    def _root_fed(self, b: int, tree: "DeviceTree", out: torch.Tensor) -> None:
        feats = torch.zeros((tree.capacity, out.shape[-1]), device=self.device, dtype=out.dtype)
        feats[0] = out[-1]
        self.feats[b] = feats

    def _nodes_fed(self, b: int, ids: torch.Tensor, out: torch.Tensor) -> None:
        self.feats[b][ids] = out  # type: ignore[index]

    def _scores(self, rows: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """The head over every asking row's rows at once (its ids only: :attr:`vocab_ids` names them)."""
        if not rows:
            return {}
        logits = self.model.head.forward_compact(torch.cat(list(rows.values())))
        return dict(zip(rows, logits.split([r.shape[0] for r in rows.values()])))

    def _kept_columns(self, slot: torch.Tensor, path: list[int], fed: int) -> list:
        return []  # the tree's entries were computed from predicted features: the root's entry stays alone

    def _queue(self, b: int, tokens: list[int], hidden: torch.Tensor | None, extend: bool) -> None:
        if hidden is None or hidden.shape[0] < len(tokens):
            raise ValueError("a batched feature draft needs one target hidden state per committed token")
        new = target_feats(self.model, hidden[:len(tokens)], self.device, self.dtype)
        self.pending_feats[b] = torch.cat([self.pending_feats[b], new]) if extend else new
        super()._queue(b, tokens, hidden, extend)
        if not extend:
            self.feats[b] = None

    def keep_rows(self, rows: Sequence[int]) -> None:
        super().keep_rows(rows)
        self.pending_feats = [self.pending_feats[r] for r in rows]
        self.feats = [self.feats[r] for r in rows]

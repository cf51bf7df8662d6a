"""EAGLE-2's rerank on the device: keep the most probable drafted nodes, compacting every array.

A mixin of :class:`~dynatree_core.runtime.tree.tree.DeviceTree`; the torch-free reference is
:func:`~dynatree_core.policy.growth.rerank_tree`.
"""

from __future__ import annotations

import torch

from dynatree_core.runtime.tree.codes import CODE, PRUNED_BATCH, PRUNED_RERANK


class Rerank:
    """EAGLE-2's final step (:meth:`_rerank`), run by :meth:`DeviceTree.grow` when the rule asks."""

    def _rerank(self, keep: int, reason: str = "rerank") -> None:
        """EAGLE-2's final step on the device (:func:`~dynatree_core.policy.growth.rerank_tree`): keep the
        ``keep`` most probable drafted nodes, compacting every array; ``orig`` maps back to the tree
        as grown. ``reason="batch"``: the same cut made by a batch's shared node budget."""
        n, dev = self.n, self.device
        keep = min(keep, n - 1)
        key = self.cum_logps[1:n]
        live = self._ar[:n] < self._n_dev if self.resident else None  # a resident tree's real nodes
        if live is not None:
            key = key.masked_fill(~live[1:], -torch.inf)
        order = torch.argsort(key, descending=True, stable=True)[:keep] + 1
        keep_ids = torch.sort(torch.cat([torch.zeros(1, dtype=torch.long, device=dev), order])).values
        new_id = torch.full((self.capacity,), -1, dtype=torch.long, device=dev)
        new_id[keep_ids] = torch.arange(keep + 1, device=dev)
        kept_mask = new_id[:n] >= 0
        # a dropped child of a kept parent: its candidate slot at the parent becomes "rerank"
        parents = self.parents[:n]
        dropped = ~kept_mask & (new_id[parents.clamp(min=0)] >= 0)
        dropped[:1].fill_(False)
        if live is not None:
            dropped &= live
        rank = (self.topk_tokens[parents.clamp(min=0)] == self.tokens[:n, None]).to(torch.int8).argmax(1)
        # no boolean-mask indexing (its size is data: a device read) and no scalar writes through
        # an index: the nodes that do not take part write to one spare slot past the end
        width = self.cand_status.shape[1]
        spare = self.capacity * width
        hit = torch.zeros(spare + 1, dtype=torch.bool, device=dev)
        hit.index_fill_(0, torch.where(dropped, parents.clamp(min=0) * width + rank, spare), True)
        self.cand_status.masked_fill_(hit[:spare].view(self.capacity, width),
                                      PRUNED_BATCH if reason == "batch" else PRUNED_RERANK)
        has_child = torch.zeros(self.capacity + 1, dtype=torch.bool, device=dev)
        kept_child = kept_mask & (self._ar[:n] > 0)
        has_child.index_fill_(0, torch.where(kept_child, parents.clamp(min=0), self.capacity), True)
        lost = (self.stop[:n] == 0) & self.fed[:n] & ~has_child[:n] & kept_mask
        self.stop[:n] = self.stop[:n] + lost * CODE[reason]
        m = keep + 1
        ints = self._ints[:, keep_ids]
        ints[1] = torch.where(ints[1] >= 0, new_id[ints[1].clamp(min=0)], ints[1])
        self._ints[:, :m] = ints
        self._floats[:, :m] = self._floats[:, keep_ids]
        for buf in (self.fed, self.stop, self.topk_tokens, self.topk_logps, self.cand_status,
                    *([self.confidence] if self.confidence is not None else [])):
            buf[:m] = buf[keep_ids]
        self.ancestors[:m, :m] = self.ancestors[keep_ids][:, keep_ids]
        self.orig = keep_ids if self.orig is None else self.orig[keep_ids]  # a second cut composes
        self.n = m
        if live is not None:
            self._n_dev = torch.clamp(self._n_dev, max=m)


"""Cost-aware growth on the device: the levels and the final fill priced by the verify-cost curve.

A mixin of :class:`~dynatree_core.runtime.tree.tree.DeviceTree` (it reads the tree's buffers):
the device twin of :class:`~dynatree_core.policy.growth.CostState`, with the same additions in the
same order, so both trees agree to the bit (``tests/test_device_tree.py``).
"""

from __future__ import annotations

import math

import torch

from dynatree_core.runtime.tree.codes import BEYOND_B, CODE, KEPT, PRUNED_COST, PRUNED_TAU
from dynatree_core.runtime.host_syncs import to_device


class CostAwareGrowth:
    """The cost-aware rule's part of the device tree (its state is made by :meth:`_init_cost`)."""

    def _init_cost(self, cap: int) -> None:
        """The cost-aware rule's device state: c(n) by n (index 0 and past the curve: inf), s_d by
        depth, and the running E, n on the device: they change with each level's kept count, which
        the host learns only at the level's sync (the draft time so far is known on the host)."""
        rule, device = self.rule, self.device
        plan = rule.planning_cost()
        curve = [math.inf] + [plan[n - 1] if n <= len(plan) else math.inf for n in range(1, cap + 2)]
        self._curve = to_device(curve, device, torch.float64)
        # the measured curve, for the final fill (which pays what the tree really costs)
        self._real = to_device([math.inf] + [rule.cost(n) for n in range(1, cap + 2)], device, torch.float64)
        self._scale = to_device([rule.scale(d) for d in range(rule.d_max + 2)], device, torch.float64)
        self._expected = torch.ones(1, dtype=torch.float64, device=device)
        self._verified = torch.ones(1, dtype=torch.long, device=device)
        self._draft_s = 0.0

    def _cost_level(self, keys: torch.Tensor, valid: torch.Tensor, depth: int) -> torch.Tensor:
        """:meth:`CostState.add_level` on the device: pay one draft level, keep the prefix of the
        sorted candidates that maximises E / T; returns its length (a [1] tensor)."""
        rule = self.rule
        self._draft_s += rule.draft_cost
        v = (torch.exp(keys) * rule.scale(depth)).clamp(max=1.0).masked_fill(~valid, 0.0)
        acc, j = self._best_prefix(v, self._curve, valid.sum())
        self._expected = acc.index_select(0, j)
        self._verified = self._verified + j
        return j

    def _best_prefix(self, v: torch.Tensor, curve: torch.Tensor, limit: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`CostState._take` on the device: the running E + v1, (E + v1) + v2, ... (the same
        additions in the same order as the reference) and the length j <= ``limit`` of the prefix
        with the best rate E / (draft time + curve[n + j]), the first best (a [1] tensor)."""
        steps = torch.arange(v.shape[0] + 1, device=self.device)
        acc = torch.cumsum(torch.cat([self._expected, v]), 0)
        idx = (self._verified + steps).clamp(max=curve.shape[0] - 1)  # the last entry is inf
        rate = (acc / (self._draft_s + curve.index_select(0, idx))).masked_fill(steps > limit, -math.inf)
        return acc, torch.argmax(rate).view(1)

    def _fill_order(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The final fill's candidates (:func:`~dynatree_core.policy.growth._fill`), flat over (fed node,
        rank), sorted by value (ties: parent, then rank): (order, sorted values with -inf past the
        eligible ones, each candidate's depth)."""
        n, k = self.n, self.k_used
        st = self.cand_status[:n, :k]
        cum = self.cum_logps[:n, None] + self.topk_logps[:n, :k].double()
        elig = self.fed[:n, None] & ((st == BEYOND_B) | (st == PRUNED_COST) | (st == PRUNED_TAU))
        depth = (self.depths[:n, None] + 1).expand(n, k)
        scale = self._scale.index_select(0, depth.reshape(-1).clamp(max=self._scale.shape[0] - 1)).view(n, k)
        v = (torch.exp(cum) * scale).clamp(max=1.0).masked_fill(~elig, -math.inf).reshape(-1)
        order = torch.argsort(v, descending=True, stable=True)
        return order, v[order], depth.reshape(-1)[order]

    def _fill_count(self, budget_left: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`CostState.fill` on the device, for the tree as it stands: how many leaves to add
        and the deepest of them (0-dim tensors, fetched with the level's counts)."""
        order, v, depth = self._fill_order()
        limit = torch.minimum((v > -math.inf).sum(), budget_left)
        _, j = self._best_prefix(v.clamp(min=0.0), self._real, limit)
        j = j[0]
        ranks = torch.arange(1, v.shape[0] + 1, device=self.device)
        deepest = (depth * (ranks <= j)).max() if v.shape[0] else j * 0
        return j, deepest

    def _fill(self, f: int) -> None:
        """Append the fill's first ``f`` candidates as leaves (in parent, then rank order)."""
        order, _, _ = self._fill_order()
        k = self.k_used
        flat = torch.sort(order[:f]).values
        rows, ranks = flat // k, flat % k
        lo, hi = self.n, self.n + f
        lp = self.topk_logps[rows, ranks].double()
        self._ints[:3, lo:hi] = torch.stack([self.topk_tokens[rows, ranks], rows, self.depths[rows] + 1])
        self._floats[:, lo:hi] = torch.stack([lp, self.cum_logps[rows] + lp])
        # fill_ / index_fill_ rather than t[idx] = scalar: the latter copies the host scalar to
        # the device and waits for it (two uncounted syncs per iteration on the GPU's audit)
        self.stop[lo:hi].fill_(CODE["cost"])
        self.stop.index_fill_(0, rows, 0)  # a parent whose children the cost had cut has one now
        self.cand_status.view(-1).index_fill_(0, rows * self.cand_status.shape[1] + ranks, KEPT)
        anc = self.ancestors[rows]
        anc[:, lo:hi] |= torch.eye(f, dtype=torch.bool, device=self.device)
        self.ancestors[lo:hi] = anc
        self.n = hi


"""One draft level of tree growth as tensor operations: the step every policy and runtime shares.

:func:`level_step` takes a frontier of ``W`` node ids (``valid``: which of them the rule expands;
the others are padding) and the drafter's ``k`` candidates after each, and does everything the
rule decides about that level on the device: B(u) from the confidence c(u) (or Sequoia's static
shape), τ pruning, the N_max budget by path probability (ties: parent, then rank), the stop codes
of parents left childless, the children appended in BFS order at the device-side node count ``n``,
their stop codes (D_max, ρ_stop, the D0/ρ_deep gate, the static shape, the spent budget, EAGLE-2's
expand-top-k) and the next frontier, compacted to the front of ``width`` slots. Shapes depend only
on ``W``, ``k`` and ``width``, decisions are masks, sorts and scatters: no host read, so one level
compiles with ``torch.compile(fullgraph=True)`` and captures in a CUDA graph. The eager CPU path
feeds it the live frontier (``W`` = the nodes it expands, all valid) and reads the two counts it
returns; the device-resident path feeds a fixed ``W`` and reads nothing until the verification.

Writes that belong to no node (padding rows, candidates not kept) go to the tree's spare last slot
(:attr:`TreeBuffers.scratch`), which no node ever is, so no data-dependent size is ever needed.
The torch-free reference is :func:`dynatree_core.policy.growth.grow_tree`; ``tests/test_device_tree.py``
checks the two node for node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from dynatree_core.policy.growth_rule import GrowthRule
from dynatree_core.runtime.tree.codes import CODE, breadth_table
from dynatree_core.runtime.static.regions import region
from dynatree_core.runtime.host_syncs import to_device

#: the rule's numbers a level reads, in the order of :meth:`StepRule.values` (one host -> device
#: copy per iteration: the history adapter moves D0 and τ_h between iterations)
PARAMS = ("tau_l", "tau_h", "log_tau", "rho_stop", "rho_deep", "d0", "d_max")


@dataclass(frozen=True)
class CostHooks:
    """The cost-aware rule's two questions of a level, answered from the tree's E / T state (so the
    step reads no tree): ``keep(keys, in_top, depth)``, how many of the level's candidates in
    probability order raise E / T, and ``reasons(cum, depth)``, a "cost" stop code per kept child
    whose own child could not."""

    keep: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]
    reasons: Callable[[torch.Tensor, int], torch.Tensor]


@dataclass(frozen=True)
class StepRule:
    """What of a :class:`GrowthRule` shapes the level step's *code* (fixed for a run: a compiled or
    captured step is built once per value) and, in ``params``, its numbers on the device
    (:data:`PARAMS`, float64; they change between iterations without a rebuild).

    ``breadth``: (B_max, B_mid, B_min), the breadth of an unsure, middling and confident node;
    ``dynamic``: whether they differ (else c(u) is not read); ``sequoia``: breadth from the static
    shape; ``gate``: whether the D0/ρ_deep gate can apply; ``expand_top``: EAGLE-2's expand-top-k (0: off);
    ``cost``: the cost-aware rule's hooks are called (the tree's mixin)."""

    breadth: tuple[int, int, int]
    dynamic: bool
    sequoia: bool
    gate: bool
    rho: bool
    expand_top: int
    cost: bool
    params: torch.Tensor
    table: torch.Tensor  # [3] long: B_max, B_mid, B_min by the confidence's bucket
    #: ``params`` as 0-dim views by name (one unbind per iteration, not a select per level and use)
    p: dict[str, torch.Tensor] | None = None

    def __post_init__(self) -> None:
        if self.p is None:
            object.__setattr__(self, "p", dict(zip(PARAMS, self.params.unbind(0))))

    @staticmethod
    def of(rule: GrowthRule, device: torch.device) -> "StepRule":
        values = [min(rule.tau_l, rule.tau_h), rule.tau_h, math.log(rule.tau) if rule.tau > 0 else -math.inf,
                  rule.rho_stop, rule.rho_deep, float(rule.d0), float(rule.d_max)]
        return StepRule((rule.b_max, rule.b_mid, rule.b_min), not rule.b_min == rule.b_mid == rule.b_max,
                        bool(rule.shape), rule.rho_deep > 0 and not rule.cost_aware, rule.rho_stop > 0,
                        rule.expand_top, rule.cost_aware, to_device(values, device, torch.float64),
                        breadth_table(device, rule.b_min, rule.b_mid, rule.b_max, rule.max_breadth))

    def param(self, name: str) -> torch.Tensor:
        return self.p[name]


@dataclass
class TreeBuffers:
    """The device tree's node arrays, as the level step writes them (views of
    :class:`~dynatree_core.runtime.tree.tree.DeviceTree`'s buffers; row ``scratch`` is the spare slot)."""

    ints: torch.Tensor  # [4, cap + 1]: tokens, parents, depths, branching
    floats: torch.Tensor  # [2, cap + 1] float64: logps, cum_logps
    fed: torch.Tensor  # [cap + 1] bool
    stop: torch.Tensor  # [cap + 1] int8 stop codes
    topk_tokens: torch.Tensor  # [cap + 1, K]
    topk_logps: torch.Tensor  # [cap + 1, K] float32
    cand_status: torch.Tensor  # [cap + 1, K] int8
    ancestors: torch.Tensor  # [cap + 1, cap + 1] bool
    ar: torch.Tensor  # arange, at least max(cap + 1, W * K)
    shape: torch.Tensor | None  # [cap + 1] Sequoia's branching by BFS index
    weight: torch.Tensor  # stop_tables: weight by candidate status
    code: torch.Tensor  # stop_tables: stop code by weight

    @property
    def scratch(self) -> int:
        return self.fed.shape[0] - 1


@dataclass
class Level:
    """What one level leaves for the next: the new node count and budget, the next frontier and its
    validity, how many children were kept and how many of them are expanded (all on the device)."""

    n: torch.Tensor  # [] long
    budget: torch.Tensor  # [] long
    ids: torch.Tensor  # [width] long (padding: the scratch slot)
    valid: torch.Tensor  # [width] bool
    kept: torch.Tensor  # [] long
    expand: torch.Tensor  # [] long (may exceed width only if the width bound were wrong: checked)
    more: torch.Tensor  # [1] bool: whether the next frontier has a node (what an early exit reads)


@region
def resident_step(t: "TreeBuffers", r: "StepRule", ids: torch.Tensor, valid: torch.Tensor, top_ids: torch.Tensor,
                  top_lps: torch.Tensor, conf: torch.Tensor | None, depth: torch.Tensor, n: torch.Tensor,
                  budget: torch.Tensor, width: int, calls: torch.Tensor, overflow: torch.Tensor
                  ) -> tuple["Level", torch.Tensor, torch.Tensor]:
    """:func:`level_step` on a device-resident tree, with its counters kept on the device in the same
    region: ``calls`` (levels that expanded a node) and ``overflow`` (a next frontier wider than
    ``width``: never, by :func:`~dynatree_core.runtime.tree.tree.resident_shape`'s bound; checked)."""
    lv = level_step(t, r, ids, valid, top_ids, top_lps, conf, depth, n, budget, width)
    return lv, calls + valid.any().long(), overflow | (lv.expand > width)


def breadth(t: TreeBuffers, r: StepRule, ids: torch.Tensor, conf: torch.Tensor, k: int) -> torch.Tensor:
    """B(u) per frontier row, at most ``k``: Sequoia's shape, one breadth, or by c(u) against τ_ℓ, τ_h."""
    if r.sequoia:
        return t.shape.index_select(0, ids).clamp(max=k)
    if not r.dynamic:
        return torch.full_like(ids, min(r.breadth[1], k))
    # bucket 0: c < τ_ℓ (B_max), 1: τ_ℓ <= c < τ_h (B_mid), 2: c >= τ_h (B_min)
    bucket = (conf >= r.param("tau_l")).long() + (conf >= r.param("tau_h")).long()
    return r.table.index_select(0, bucket).clamp(max=k)


def stop_codes(r: StepRule, t: TreeBuffers, cum: torch.Tensor, depth: "int | torch.Tensor", node: torch.Tensor,
               cost_reasons=None) -> torch.Tensor:
    """Why nodes at ``depth`` with path log-probability ``cum`` stop (0: expand), the first failing
    check naming the reason as in :meth:`GrowthRule.stop_reason` (D_max, ρ_stop, the gate), then
    Sequoia's shape (``node``: their BFS index) or the cost rule."""
    d_max = r.param("d_max")
    out = torch.zeros_like(node).masked_fill(d_max <= depth, CODE["d_max"])
    if r.cost:
        out = torch.where(out == 0, cost_reasons(cum, depth), out)
    p = torch.exp(cum)
    if r.gate:
        gated = (depth >= r.param("d0")) & (p < r.param("rho_deep"))
        out = torch.where((out == 0) & gated, CODE["depth_gate"], out)
    if r.rho:  # checked before the gate: it names the reason
        out = torch.where((depth < d_max) & (p < r.param("rho_stop")), CODE["rho_stop"], out)
    if r.sequoia:
        out = torch.where((out == 0) & (t.shape.index_select(0, node) == 0), CODE["static"], out)
    return out.to(torch.int8)


@region
def level_step(t: TreeBuffers, r: StepRule, ids: torch.Tensor, valid: torch.Tensor, top_ids: torch.Tensor,
               top_lps: torch.Tensor, conf: torch.Tensor | None, depth: "int | torch.Tensor", n: torch.Tensor,
               budget: torch.Tensor, width: int, cost: CostHooks | None = None) -> Level:
    """Grow one level (see the module docstring): frontier ``ids`` [W] at ``depth`` - 1 (``valid``:
    expanded), their candidates ``top_ids`` / ``top_lps`` [W, k] in rank order, c(u) ``conf`` [W]
    when the drafter states it (else the first candidate's q). ``cost``: the cost-aware rule's
    :class:`CostHooks`, None otherwise."""
    w, k = top_ids.shape
    rows = torch.where(valid, ids, t.scratch)  # per-node writes of padding rows go to the spare slot
    lp = top_lps.float()
    c = torch.exp(lp[:, 0].double()) if conf is None else conf.double()
    b = breadth(t, r, ids, c, k)
    t.fed.index_copy_(0, rows, valid)
    t.topk_tokens[:, :k].index_copy_(0, rows, top_ids)
    t.topk_logps[:, :k].index_copy_(0, rows, lp)
    t.ints[3].index_copy_(0, rows, b)
    cum = t.floats[1].index_select(0, ids)[:, None] + lp.double()  # float64, as the reference adds
    offered = (t.ar[:k][None, :] < b[:, None]) & valid[:, None]
    ok = (offered & (cum >= r.param("log_tau"))).reshape(-1)
    kept, cost_cut = _budget(t, r, cum.reshape(-1), ok, budget, depth, cost)
    # beyond B(u) 0, kept 1, pruned by tau 2, by the budget 3, by the cost 4
    status = torch.where(kept, 1, torch.where(ok, 3, torch.where(offered.reshape(-1), 2, 0)))
    if r.cost:
        status = torch.where(cost_cut, 4, status)
    t.cand_status[:, :k].index_copy_(0, rows, status.view(w, k).to(torch.int8))
    # an expanded node: 0 if a child was kept, else "cost", "n_max" or "tau" (its strongest status)
    t.stop.index_copy_(0, rows, t.code.index_select(0, t.weight.index_select(0, status).view(w, k).amax(1)))
    return _append(t, r, ids, kept, top_ids.reshape(-1), lp.reshape(-1), cum.reshape(-1), depth, n, budget,
                   width, cost)


def _budget(t: TreeBuffers, r: StepRule, cum: torch.Tensor, ok: torch.Tensor, budget: torch.Tensor, depth: int,
            cost: CostHooks | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The N_max budget (and the cost rule) over a level's valid candidates, most probable first
    (ties: flat = parent, then rank order): the kept mask and the cost rule's cut (None without it)."""
    m = cum.shape[0]
    # invalid ones last (a valid -inf path probability, possible only with tau = 0, still ranks above them)
    key = cum.clamp(min=-torch.finfo(torch.float64).max).masked_fill(~ok, -math.inf)
    order = torch.argsort(key, descending=True, stable=True)
    place = torch.empty_like(order).scatter_(0, order, t.ar[:m])  # each candidate's place in that order
    kept = ok & (place < budget)
    if not r.cost:
        return kept, None
    in_top = (ok.index_select(0, order)) & (t.ar[:m] < budget)
    j = cost.keep(key.index_select(0, order), in_top, depth)
    within = kept & (place < j)
    return within, kept & ~within


def _append(t: TreeBuffers, r: StepRule, ids: torch.Tensor, kept: torch.Tensor, tokens: torch.Tensor,
            lp: torch.Tensor, cum: torch.Tensor, depth: int, n: torch.Tensor, budget: torch.Tensor, width: int,
            cost: CostHooks | None) -> Level:
    """Append the kept children in BFS order (by parent, then rank: the flat order) at node ``n``,
    with their stop codes, and compact the ones to expand into the next frontier."""
    k = tokens.shape[0] // ids.shape[0]
    count = kept.long().cumsum(0)
    got = count[-1]
    dest = torch.where(kept, n + count - 1, t.scratch)
    parent = ids[:, None].expand(-1, k).reshape(-1)
    new_depth = torch.zeros_like(parent) + depth
    t.ints[:3].index_copy_(1, dest, torch.stack([tokens, parent, new_depth]))
    t.floats.index_copy_(1, dest, torch.stack([lp.double(), cum]))
    own = t.ar[:t.ancestors.shape[0]][None, :] == dest[:, None]
    t.ancestors.index_copy_(0, dest, t.ancestors.index_select(0, parent) | own)
    left = budget - got
    codes = stop_codes(r, t, cum, depth, dest, cost.reasons if cost is not None else None)
    expand = kept & (codes == 0)
    # the budget is spent: a child the rule would expand stops with "n_max"
    codes = torch.where(expand & (left <= 0), CODE["n_max"], codes).to(torch.int8)
    expand = expand & (left > 0)
    if r.expand_top:  # EAGLE-2: only the most probable expand_top (ties: BFS order) are expanded
        key = cum.masked_fill(~expand, -math.inf)
        order = torch.argsort(key, descending=True, stable=True)
        chosen = torch.empty_like(order).scatter_(0, order, t.ar[:key.shape[0]]) < r.expand_top
        codes = torch.where(expand & ~chosen, CODE["top_k"], codes).to(torch.int8)
        expand = expand & chosen
    t.stop.index_copy_(0, dest, codes)
    # the next frontier: the children to expand, in BFS order, at the front of `width` slots
    front = torch.argsort((~expand).to(torch.int8), stable=True)[:width]
    valid = expand.index_select(0, front)
    nxt = torch.where(valid, dest.index_select(0, front), t.scratch)
    if nxt.shape[0] < width:  # fewer candidates than slots (the first level): pad
        pad = width - nxt.shape[0]
        nxt = torch.cat([nxt, torch.full((pad,), t.scratch, dtype=nxt.dtype, device=nxt.device)])
        valid = torch.cat([valid, torch.zeros(pad, dtype=torch.bool, device=valid.device)])
    n_expand = expand.long().sum()
    return Level(n + got, left, nxt, valid, got, n_expand, (n_expand > 0).view(1))

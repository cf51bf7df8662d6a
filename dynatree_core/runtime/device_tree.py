"""The draft tree as tensors on the model's device: growth, the tree mask, positions and selection.

:class:`DeviceTree` grows what a :class:`~dynatree_core.policy.growth_rule.GrowthRule` describes
with the breadth, depth gate, τ pruning, N_max budget and tie-breaking of the torch-free reference
:func:`dynatree_core.policy.growth.grow_tree` (``tests/test_device_tree.py`` checks them node for
node), one batched ``propose`` per level (:class:`Proposer`), and waits for the device only where a
size depends on data: one host sync per level (none when :attr:`GrowthRule.static_counts`) and one
per verification (:meth:`DeviceTree.select`, the tree fetched with the target's choices). The
cost-aware fill, EAGLE-2's rerank and the lookup tail are mixins (``device_cost``, ``device_rerank``,
``device_tail``).
"""


from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from dynatree_core.policy.growth_rule import GrowthRule
from dynatree_core.policy.growth import CostState
from dynatree_core.runtime.device_cost import CostAwareGrowth
from dynatree_core.runtime.device_rerank import Rerank
from dynatree_core.runtime.device_tables import CODE, arange_on, breadth_edges, breadth_table, status_row, stop_tables
from dynatree_core.runtime.device_tail import TailGrowth
from dynatree_core.runtime.host_syncs import HostSyncs, read_counts, to_device
from dynatree_core.runtime.host_tree import unpack


class Proposed(Protocol):
    """What a drafter's proposal for one level carries (:class:`~dynatree_core.drafters.Proposal`)."""

    tokens: torch.Tensor  # [q, k] candidates in rank order
    logps: torch.Tensor  # [q, k] their log q
    confidence: torch.Tensor | None  # [q] c(u) when the first candidate is not the maximum
    chain: tuple[torch.Tensor, torch.Tensor] | None  # level 0: the chain view (the oracle's)


class Proposer(Protocol):
    """What :meth:`DeviceTree.grow` asks of a drafter (:class:`~dynatree_core.drafters.Drafter`
    implements it): the draft's candidates after each node of one tree level."""

    def propose(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> Proposed:
        """One row per node of ``ids``, on the tree's device."""


@dataclass
class Selection:
    """What one verification decided, on the host: the accepted node ids (root excluded), the
    bonus token (the target's choice after the last of them) and the tree as fetched."""

    path: list[int]
    bonus: int
    arrays: dict[str, np.ndarray]


class DeviceTree(CostAwareGrowth, Rerank, TailGrowth):
    """A draft tree grown on ``device`` under a :class:`GrowthRule` (node 0 is the root).

    Node arrays are preallocated for N_max + 1 nodes; ``n`` (on the host) says how many are
    real. Nodes are in BFS order exactly as in :class:`~dynatree_core.policy.tree.DraftTree`, so the
    two can be compared element by element.
    """

    def __init__(self, root_token: int, rule: GrowthRule, top_k: int, device: torch.device,
                 position: int | None = None):
        self.rule, self.top_k, self.device = rule, max(1, int(top_k)), device
        #: the root's absolute position (its index in prompt + output; node u's child fills
        #: position + depth(u) + 1): what shared draft noise is keyed by. None: not known (greedy)
        self.position = position
        cap = max(0, rule.n_max) + 1
        if rule.lookup_tail:  # room for the prompt-lookup tail below the drafted tree
            cap += rule.tail_n_max
        self.capacity = cap
        long = dict(dtype=torch.long, device=device)
        # One buffer per dtype, the fields are views of it: a level writes a new node's integer
        # fields with one op and its log-probs with another (each op costs a launch on a GPU and
        # microseconds of dispatch on a CPU).
        self._ints = torch.zeros((4, cap), **long)
        self.tokens, self.parents, self.depths, self.branching = self._ints.unbind(0)
        # Writes of host scalars use fill_ on a slice: ``t[0] = x`` copies x from pageable host
        # memory, which synchronises the stream (CUDA's sync debug mode flags it).
        self.tokens[:1].fill_(root_token)
        self.parents[:1].fill_(-1)
        self._floats = torch.zeros((2, cap), dtype=torch.float64, device=device)
        self.logps, self.cum_logps = self._floats.unbind(0)
        self.fed = torch.zeros(cap, dtype=torch.bool, device=device)  # given to the draft (expanded)
        self.stop = torch.zeros(cap, dtype=torch.int8, device=device)
        self.topk_tokens = torch.zeros((cap, self.top_k), **long)
        self.topk_logps = torch.zeros((cap, self.top_k), dtype=torch.float32, device=device)
        self.cand_status = torch.zeros((cap, self.top_k), dtype=torch.int8, device=device)
        #: c(u) of each expanded node when the drafter states it (under rejection sampling its
        #: candidates are draws, so the first is not the maximum); None: c(u) is the first candidate's
        self.confidence: torch.Tensor | None = None
        #: ancestor matrix: row u is True at u and at every ancestor of u (root included)
        self.ancestors = torch.zeros((cap, cap), dtype=torch.bool, device=device)
        self.ancestors[:1, :1].fill_(True)
        self.n = 1
        self.k_used = self.top_k  # top-k columns the drafter filled (fewer only for a tiny vocabulary)
        self.depth = 0  # deepest drafted level (host; the lookup tail may reach deeper)
        self.draft_calls = 0
        self.tail_nodes = 0  # prompt-lookup tail nodes (host)
        self.tail_reads = 0  # host reads the tail took (one when it ran)
        #: the draft's top-k after each committed token its level 0 fed before the root, when the
        #: run keeps that chain view (the oracle's; :attr:`~dynatree_core.drafters.Proposal.chain`)
        self.chain: tuple[torch.Tensor, torch.Tensor] | None = None
        #: after an EAGLE-2 rerank: each node's index in the tree as grown (what the drafter's
        #: cache slots refer to); None while the two are the same
        self.orig: torch.Tensor | None = None
        # node ids and flat candidate indices (slices of it are views: no op per level)
        self._ar = arange_on(device, max(cap + 1, cap * self.top_k))
        if rule.shape:  # Sequoia: branching by BFS index (0 past the shape)
            shape = list(rule.shape[:cap]) + [0] * max(0, cap - len(rule.shape))
            self._shape = to_device(shape, device)
        if rule.cost_aware:
            self._init_cost(cap)

    # --- growth ------------------------------------------------------------------------------
    def grow(self, drafter: Proposer, syncs: HostSyncs) -> "DeviceTree":
        """Grow the whole tree: one batched ``drafter.propose`` per level, and one host sync per
        level unless the rule fixes the level's sizes (:attr:`GrowthRule.static_counts`: then none)."""
        rule = self.rule
        budget = rule.n_max
        lo, hi = 0, 1  # the frontier: the last level's nodes (contiguous in BFS order)
        codes = self._reasons(lo, hi, 0)  # why each frontier node stops (0: it is expanded; None: all are)
        # the root (depth 0, p = 1) is decided on the host: AR and N_max = 0 never touch the device
        n_expand = 1 if self._root_expands() else 0
        log_tau = math.log(rule.tau) if rule.tau > 0 else -math.inf
        while n_expand:
            if rule.expand_top and n_expand > rule.expand_top:
                codes, n_expand = self._expand_top(codes, lo, hi), rule.expand_top
            if codes is None:  # every frontier node is expanded: they are the frontier itself
                ids = self._ar[lo:lo + n_expand]
            else:
                self.stop[lo:hi] = codes  # the expanded ones are overwritten by _add_children
                # expanded frontier nodes, in BFS order (a stable compaction with a size known on the host)
                ids = lo + torch.argsort((codes != 0).to(torch.int8), stable=True)[:n_expand]
            prop = drafter.propose(self, ids, level=self.draft_calls)
            if self.draft_calls == 0:
                self.chain = prop.chain
            self.draft_calls += 1
            if prop.confidence is not None:  # the drafter states c(u) (sampled candidates): for B(u), the trace
                self._confidence().index_copy_(0, ids, prop.confidence.double())
            kept, expandable, codes = self._add_children(ids, prop.tokens, prop.logps, budget, log_tau)
            counts = {"kept": kept, "expand": expandable}
            if rule.cost_aware:  # should growth end here: how many leaves the final fill would add
                counts.update(zip(("fill", "fill_depth"), self._fill_count(budget - kept)))
            got = read_counts(syncs, counts)
            c, n_expand = got["kept"], got["expand"]
            lo, hi = self.n, self.n + c
            self.n, budget = hi, budget - c
            if c == 0:  # nothing kept: no new frontier
                break
            self.depth += 1
            codes = codes[:c] if codes is not None else None
            if budget <= 0:
                n_expand = 0
        else:  # the last frontier: nodes the rule would still expand stop at the spent budget
            if budget <= 0:
                if codes is None:
                    self.stop[lo:hi].fill_(CODE["n_max"])
                else:
                    self.stop[lo:hi] = codes + (codes == 0) * CODE["n_max"]
            elif codes is not None:
                self.stop[lo:hi] = codes
        if rule.cost_aware and self.draft_calls and budget > 0 and got["fill"]:
            self._fill(got["fill"])
            self.depth = max(self.depth, got["fill_depth"])
        if rule.rerank and self.n - 1 > rule.rerank:
            self._rerank(rule.rerank)
        return self

    def _expand_top(self, codes: torch.Tensor | None, lo: int, hi: int) -> torch.Tensor:
        """EAGLE-2: only the most probable expandable frontier nodes [lo, hi) (ties: BFS order) stay
        expandable, the others stop with "top_k"; returns the frontier's new codes."""
        if codes is None:
            codes = torch.zeros(hi - lo, dtype=torch.int8, device=self.device)
        key = self.cum_logps[lo:hi].masked_fill(codes != 0, -math.inf)
        top = torch.argsort(key, descending=True, stable=True)[:self.rule.expand_top]
        # index_fill_, not chosen[top] = True: a host scalar written through an index
        # tensor is copied to the device and waits for it (the GPU's sync audit)
        chosen = torch.zeros(hi - lo, dtype=torch.bool, device=self.device).index_fill_(0, top, True)
        return (codes + ((codes == 0) & ~chosen) * CODE["top_k"]).to(torch.int8)

    def _root_expands(self) -> bool:
        """Whether the root is expanded (host arithmetic, as in :func:`~dynatree_core.policy.growth.grow_tree`)."""
        rule = self.rule
        if rule.stop_reason(0, 1.0) is not None or (rule.shape and rule.shape[0] == 0):
            return False
        if rule.cost_aware and not CostState(rule).worth_expanding(0, 0.0):
            return False
        return rule.n_max > 0

    def _reasons(self, lo: int, hi: int, depth: int) -> torch.Tensor | None:
        """Stop-reason codes of nodes [lo, hi), all at ``depth`` (0: expand), from path probability;
        the first failing check names the reason, as in :meth:`GrowthRule.stop_reason`. None when
        the host can tell that every one of them is expanded (what depends on the depth alone is
        decided on the host; python scalars in comparisons: a scalar tensor made on the host would
        be a host -> device copy)."""
        rule = self.rule
        if depth >= rule.d_max:
            return torch.full((hi - lo,), CODE["d_max"], dtype=torch.int8, device=self.device)
        gate = depth >= rule.d0 and rule.rho_deep > 0 and not rule.cost_aware
        if not (rule.cost_aware or gate or rule.rho_stop > 0 or rule.shape):
            return None
        p = torch.exp(self.cum_logps[lo:hi])
        if rule.cost_aware:
            # expand u only if a child as likely as u could raise E / T (CostState.worth_expanding)
            n = self._verified
            c_n = self._curve.index_select(0, n)
            extra = rule.draft_cost + self._curve.index_select(0, n + 1) - c_n
            v = (p * rule.scale(depth + 1)).clamp(max=1.0)
            stop = ~(v * (self._draft_s + c_n) > self._expected * extra)
            return (stop * CODE["cost"]).to(torch.int8)
        codes = torch.zeros(hi - lo, dtype=torch.int8, device=self.device)
        if gate:
            codes.masked_fill_(p < rule.rho_deep, CODE["depth_gate"])
        if rule.rho_stop > 0:  # checked before the gate: it names the reason
            codes.masked_fill_(p < rule.rho_stop, CODE["rho_stop"])
        if rule.shape:
            codes.masked_fill_((codes == 0) & (self._shape[lo:hi] == 0), CODE["static"])
        return codes

    def _confidence(self) -> torch.Tensor:
        if self.confidence is None:
            self.confidence = torch.zeros(self.capacity, dtype=torch.float64, device=self.device)
        return self.confidence

    def _breadth(self, ids: torch.Tensor, lp: torch.Tensor, k: int) -> int | torch.Tensor:
        """B(u) of the expanded nodes ``ids`` (at most k): one int when the rule has one breadth
        everywhere, else per node from the confidence c(u) = max q(.|u) (or the static shape)."""
        rule = self.rule
        if rule.shape:  # Sequoia: the static tree's branching, whatever the confidence
            return self._shape[ids].clamp(max=k)
        if rule.b_min == rule.b_mid == rule.b_max:
            return min(rule.b_mid, k)
        edges = breadth_edges(self.device, rule.tau_l, rule.tau_h)
        table = breadth_table(self.device, rule.b_min, rule.b_mid, rule.b_max, k)
        conf = torch.exp(lp[:, 0]) if self.confidence is None else self.confidence.index_select(0, ids)
        return table[torch.bucketize(conf, edges, right=True)]

    def _add_children(self, ids: torch.Tensor, top_ids: torch.Tensor, top_lps: torch.Tensor, budget: int,
                      log_tau: float) -> tuple[torch.Tensor | int, torch.Tensor | int, torch.Tensor | None]:
        """Children of the expanded nodes ``ids`` from their draft top-k: B(u) by confidence, τ pruning,
        the N_max budget by path probability (ties: parent, then rank), appended in BFS order.

        Returns how many children were kept, how many of them the rule will expand (device
        tensors, or host ints under :attr:`GrowthRule.static_counts`), and the stop-reason codes of the slots
        written (the first ``kept`` are real; None: all of them are expanded)."""
        e, k = top_ids.shape
        k = min(k, self.top_k)
        self.k_used = k
        top_ids, lp32 = top_ids[:, :k], top_lps[:, :k].float()
        self.fed.index_fill_(0, ids, True)
        self._rows(self.topk_tokens, ids, top_ids)
        self._rows(self.topk_logps, ids, lp32)
        lp = lp32.double()  # float64 from here, as the reference adds Python floats
        b = self._breadth(ids, lp, k)
        if isinstance(b, int):
            self.branching.index_fill_(0, ids, b)
        else:
            self.branching.index_copy_(0, ids, b)
        cum = self.cum_logps.index_select(0, ids)[:, None] + lp
        lo, depth = self.n, self.depth + 1
        if isinstance(b, int) and log_tau == -math.inf and budget >= e * b and not self.rule.cost_aware:
            # every offered candidate is kept (no τ, the budget is not reached): the first b ranks
            # of each node, already in BFS order - no sort, no compaction
            self.cand_status[ids, :k] = status_row(self.device, k, b)
            m = count = e * b
            self._write_children(lo, ids if b == 1 else ids.repeat_interleave(b), top_ids[:, :b].reshape(-1),
                                 lp[:, :b].reshape(-1), cum[:, :b].reshape(-1), depth)
        else:
            m, count = self._select_children(ids, top_ids, lp, cum, b, budget, log_tau, depth)
        codes = self._reasons(lo, lo + m, depth)
        if self.rule.static_counts:  # one breadth, no τ, no ρ or gate: the counts follow from the rule
            kept = min(budget, e * b)
            return kept, (kept if codes is None else 0), codes
        if codes is None:
            return count, count, None
        expandable = ((codes == 0) & (self._ar[:m] < count)).sum()
        return count, expandable, codes

    def _select_children(self, ids: torch.Tensor, top_ids: torch.Tensor, lp: torch.Tensor, cum: torch.Tensor,
                         b: int | torch.Tensor, budget: int, log_tau: float, depth: int) -> tuple[int, torch.Tensor]:
        """The general level: τ pruning, then the budget by path probability (a sort, only where the
        budget can bind), candidate status and the stop code of parents left childless; appends the
        kept children in BFS order. Returns the slots written and (on the device) how many are real."""
        rule, dev = self.rule, self.device
        e, k = top_ids.shape
        offered = (self._ar[:k][None, :] < (b[:, None] if isinstance(b, torch.Tensor) else b)).expand(e, k)
        valid = (offered & (cum >= log_tau)).reshape(-1)
        offered = offered.reshape(-1)
        most = e * (b if isinstance(b, int) else min(rule.max_breadth, k))  # valid candidates at most
        if budget >= most and not rule.cost_aware:
            # the budget cannot bind: every valid candidate is kept, no sort
            m, kept = most, valid
            status = offered.long().mul_(2).sub_(valid.long())  # beyond B(u) 0, kept 1, pruned by tau 2
        else:
            m, kept, status = self._budget_cut(valid, offered, cum, budget, depth)
        self._rows(self.cand_status, ids, status.view(e, k).to(torch.int8))
        # an expanded node none of whose candidates survived: "cost" if the cost cut one, else
        # "n_max" if the budget did, else "tau" (the strongest status of its row decides)
        weight, code = stop_tables(dev)
        self.stop.index_copy_(0, ids, code[weight[status].view(e, k).amax(1)])
        # append the kept children in BFS order (by parent, then rank): the first c of m slots
        flat = torch.sort(self._ar[:e * k].masked_fill(~kept, e * k)).values[:m].clamp(max=e * k - 1)
        self._write_children(self.n, ids.index_select(0, flat // k), top_ids.reshape(-1).index_select(0, flat),
                             lp.reshape(-1).index_select(0, flat), cum.reshape(-1).index_select(0, flat), depth)
        return m, kept.sum()

    def _budget_cut(self, valid: torch.Tensor, offered: torch.Tensor, cum: torch.Tensor, budget: int, depth: int
                    ) -> tuple[int, torch.Tensor, torch.Tensor]:
        """The N_max budget (and the cost rule) over a level's valid candidates, most probable first
        (ties in flat = parent, then rank order): (slots, kept mask, status per candidate)."""
        dev = self.device
        n = valid.shape[0]
        # invalid ones last (a valid -inf path probability, possible only with tau = 0, still ranks above them)
        key = cum.reshape(-1).clamp(min=-torch.finfo(torch.float64).max).masked_fill(~valid, -math.inf)
        m = min(budget, n)
        top = torch.argsort(key, descending=True, stable=True)[:m]
        kept = torch.zeros(n, dtype=torch.bool, device=dev)
        in_top = valid.index_select(0, top)
        cost_cut = None
        if self.rule.cost_aware:
            valid_top = in_top
            in_top = in_top & (self._ar[:m] < self._cost_level(key.index_select(0, top), in_top, depth))
            cost_cut = torch.zeros(n, dtype=torch.bool, device=dev)
            cost_cut.index_copy_(0, top, valid_top & ~in_top)
        kept.index_copy_(0, top, in_top)
        # beyond B(u) 0, kept 1, pruned by tau 2, by the budget 3, by the cost 4 (a kept one is valid: 3 - 2)
        status = offered.long().mul_(2).add_(valid).sub_(kept.long(), alpha=2)
        if cost_cut is not None:
            status.add_(cost_cut)
        return m, kept, status

    def _rows(self, buf: torch.Tensor, ids: torch.Tensor, rows: torch.Tensor) -> None:
        """``buf[ids, :k] = rows``: a row copy when the rows fill the buffer's width (cheaper)."""
        if rows.shape[1] == buf.shape[1]:
            buf.index_copy_(0, ids, rows)
        else:
            buf[ids, :rows.shape[1]] = rows

    def _write_children(self, lo: int, parent: torch.Tensor, tokens: torch.Tensor, lp: torch.Tensor,
                        cum: torch.Tensor, depth: int) -> None:
        """Node slots [lo, lo + m) get these children (all at ``depth``) and their ancestor rows."""
        hi = lo + parent.shape[0]
        self.tokens[lo:hi] = tokens
        self.parents[lo:hi] = parent
        self.depths[lo:hi].fill_(depth)
        self._floats[:, lo:hi] = torch.stack([lp, cum])
        self.ancestors[lo:hi] = self.ancestors.index_select(0, parent)
        self.ancestors[lo:hi, lo:hi].diagonal().fill_(True)

    # --- verification inputs -----------------------------------------------------------------
    def position_offsets(self) -> torch.Tensor:
        """Each node's position relative to the root: its depth (not its BFS index)."""
        return self.depths[:self.n]

    def tree_mask(self) -> torch.Tensor:
        """Bool [n, n]: node i may attend to node j (j is i or an ancestor of i)."""
        return self.ancestors[:self.n, :self.n]

    # --- selection -----------------------------------------------------------------------------
    def select(self, argmax: torch.Tensor, syncs: HostSyncs, extra: dict[str, torch.Tensor] | None = None
               ) -> Selection:
        """The longest path the target agrees with (vectorised), fetched with the tree in ONE transfer.

        Node u is *consistent* when its token is the target's choice after its parent; it is
        *accepted* when it and all its ancestors are consistent. Siblings carry distinct tokens,
        so at most one node per depth is accepted and the deepest one ends the path.
        """
        n = self.n
        tok, par, anc = self.tokens[:n], self.parents[:n], self.ancestors[:n, :n]
        consistent = tok == argmax[par.clamp(min=0)]
        consistent[:1].fill_(True)
        accepted = ~(anc & ~consistent[None, :]).any(1)
        # a 0-dim index tensor would be read on the host: index_select keeps it on the device
        best = torch.argmax(torch.where(accepted, self.depths[:n], -1)).view(1)
        arrays = unpack(syncs.fetch(best=best, bonus=argmax.index_select(0, best),
                                     on_path=anc.index_select(0, best)[0], argmax=argmax,
                                     **self._arrays(), **(extra or {})))
        if self.orig is not None:  # a rerank may have dropped the deepest level
            self.depth = int(arrays["depths"].max())
        on_path = arrays["on_path"]
        path = np.flatnonzero(on_path[1:]) + 1  # BFS order is depth order along a path
        return Selection(path.tolist(), int(arrays["bonus"][0]), arrays)

    def _arrays(self) -> dict[str, torch.Tensor]:
        """The node arrays to fetch; the integer and float fields travel as their shared buffers
        (two tensors instead of six: each costs ops to pack) and :func:`unpack` splits them."""
        n, k = self.n, self.k_used
        out = dict(ints=self._ints[:, :n], floats=self._floats[:, :n], fed=self.fed[:n], stop=self.stop[:n],
                   topk_tokens=self.topk_tokens[:n, :k], topk_logps=self.topk_logps[:n, :k],
                   cand_status=self.cand_status[:n, :k])
        if self.orig is not None:
            out["orig"] = self.orig
        if self.confidence is not None:
            out["confidence"] = self.confidence[:n]
        return out

    def fetch(self, syncs: HostSyncs) -> dict[str, np.ndarray]:
        """The tree's arrays on the host (one transfer; for callers that do not verify)."""
        return unpack(syncs.fetch(**self._arrays()))



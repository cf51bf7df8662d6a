"""The draft tree as tensors on the model's device: growth, masks, positions and selection.

:func:`dynatree_core.tree.grow_tree` is the reference: torch-free, readable, and what replays
and viewers use. This module runs the *same policy* (same breadth, depth gate, τ pruning, N_max
budget, same tie-breaking) as vectorised tensor operations, so that the decode loop does no
per-node Python work and waits for the device only where a shape depends on data:

* at most one host synchronisation per draft level: the number of children the level kept
  (the next level's size) and how many of them the growth rule will expand. None at all when
  the rule fixes every level's size (:attr:`GrowthRule.static_counts`: linear, a fixed tree or EAGLE-2
  with τ = 0), and none for a count the host can tell (a level past D_max expands nothing);
* one per verification: the target's choices and the tree, fetched in a single transfer, from
  which the accepted path and the bonus token are read.

On a GPU this matters because a target forward of a small or mid-size model takes milliseconds
(EAGLE and Medusa keep their tree buffers on the device for the same reason). Every
device -> host read goes through :meth:`HostSyncs.fetch`, which packs its tensors into one
buffer and counts the transfer (on a CPU, where there is nothing to transfer, it reads the
arrays where they are); host -> device copies go through :func:`to_device`, which never
waits for the device (pinned memory, ``non_blocking``). ``tests/test_device_tree.py`` checks that
this module and :mod:`dynatree_core.tree` build identical trees, masks and paths.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from .config import GrowthRule
from .tree import LOOKUP_TAIL, STOP_REASONS, TAIL_MIN_NGRAM, CostState, DraftTree, PrunedCandidate

if TYPE_CHECKING:  # pragma: no cover
    from .drafters import Drafter, LookupDrafter, PromptLookup

#: stop reasons by code, as stored on the device (code 0 = "expanded")
_CODE = {r: i for i, r in enumerate(STOP_REASONS)}
#: draft candidate status per (expanded node, rank), for rebuilding the trace's pruned list
_BEYOND_B, _KEPT, _PRUNED_TAU, _PRUNED_NMAX, _PRUNED_COST, _PRUNED_RERANK = 0, 1, 2, 3, 4, 5
_PRUNE_REASON = {_PRUNED_TAU: "tau", _PRUNED_NMAX: "n_max", _PRUNED_COST: "cost", _PRUNED_RERANK: "rerank"}


class HostSyncs:
    """Counts device -> host transfers; :meth:`fetch` is the only way the loop reads the device."""

    def __init__(self, pack: bool | None = None) -> None:
        self.count = 0
        #: pack tensors into one transfer: None = unless they are on the CPU already (True: always,
        #: what tests use to run the GPU's path on a CPU)
        self.pack = pack

    def fetch(self, **tensors: torch.Tensor) -> dict[str, np.ndarray]:
        """Copy several device tensors to the host in ONE transfer (one synchronisation).

        They are flattened into one int64 buffer (floats travel as float64 bit patterns, so
        nothing is rounded) and split again on the host.
        """
        self.count += 1
        if not self.pack and all(t.device.type == "cpu" for t in tensors.values()):
            # the device is the host: nothing to transfer, each array is read where it is (same
            # dtypes as the packed path: floats as float64, integers as int64, bools as bool)
            return {name: _host_array(t) for name, t in tensors.items()}
        if all(t.dim() == 0 and not t.is_floating_point() for t in tensors.values()):
            # the per-level case (two counts): one stack and one read, no packing
            values = torch.stack([t.to(torch.int64) for t in tensors.values()]).tolist()
            return {name: np.int64(v) for name, v in zip(tensors, values)}
        parts, meta = [], []
        for name, t in tensors.items():
            flat = t.reshape(-1)
            if flat.is_floating_point():
                parts.append(flat.to(torch.float64).view(torch.int64))
                meta.append((name, t.shape, np.float64))
            else:
                parts.append(flat.to(torch.int64))
                meta.append((name, t.shape, t.dtype))
        buf = torch.cat(parts).cpu().numpy() if parts else np.zeros(0, np.int64)
        out, at = {}, 0
        for (name, shape, kind), p in zip(meta, parts):
            chunk = buf[at:at + p.numel()]
            at += p.numel()
            if kind is np.float64:
                arr = chunk.view(np.float64)
            elif kind == torch.bool:
                arr = chunk.astype(bool)
            else:
                arr = chunk
            out[name] = arr.reshape(tuple(shape))
        return out


def _host_array(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor as the numpy array :meth:`HostSyncs.fetch` returns (a copy, so later in-place
    writes to the tensor's buffer do not show through)."""
    a = t.numpy()
    if t.is_floating_point():
        return a.astype(np.float64)
    return a.copy() if a.dtype == np.bool_ else a.astype(np.int64)


def to_device(values: Sequence[int] | np.ndarray, device: torch.device, dtype: torch.dtype = torch.long
              ) -> torch.Tensor:
    """Host values -> a device tensor without waiting for the device.

    A plain ``torch.tensor(..., device="cuda")`` copies from pageable memory and synchronises
    the stream; a pinned buffer copied with ``non_blocking`` just queues the copy (the caching
    host allocator keeps the buffer alive until it has run).
    """
    t = torch.as_tensor(np.asarray(values), dtype=dtype)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def _read_counts(syncs: HostSyncs, counts: dict[str, torch.Tensor | int]) -> dict[str, int]:
    """A level's counts as host ints: those still on the device travel in one read, and there is
    no read at all when the host knows every one (static counts)."""
    on_device = {name: v for name, v in counts.items() if isinstance(v, torch.Tensor)}
    got = syncs.fetch(**on_device) if on_device else {}
    return {name: int(got[name]) if name in got else v for name, v in counts.items()}


# Small constant tensors the growth reads every level, made once per device (under inference mode
# they would be inference tensors, which tests that grow trees outside it could not index with).
@functools.lru_cache(maxsize=64)
def _arange(device: torch.device, n: int) -> torch.Tensor:
    with torch.inference_mode(False):
        return torch.arange(n, device=device)


@functools.lru_cache(maxsize=256)
def _breadth_edges(device: torch.device, tau_l: float, tau_h: float) -> torch.Tensor:
    """``bucketize`` edges over the confidence c(u): c < tau_l -> bucket 0, tau_l <= c < tau_h -> 1,
    c >= tau_h -> 2 (c >= tau_h wins should tau_l exceed tau_h, as in GrowthRule.branching).

    Apart from :func:`_breadth_table`: the history adapter moves tau_h every iteration, so these
    are made mid-loop, on the host and queued with to_device (a ``torch.tensor(..., device="cuda")``
    copies from pageable memory and waits for the device: the GPU's sync audit caught it)."""
    with torch.inference_mode(False):
        return to_device([min(tau_l, tau_h), tau_h], device, torch.float64)


@functools.lru_cache(maxsize=64)
def _breadth_table(device: torch.device, b_min: int, b_mid: int, b_max: int, k: int) -> torch.Tensor:
    """B(u) by :func:`_breadth_edges` bucket: b_max, b_mid, b_min (at most k)."""
    with torch.inference_mode(False):
        return to_device([min(b, k) for b in (b_max, b_mid, b_min)], device)


@functools.lru_cache(maxsize=64)
def _status_row(device: torch.device, k: int, b: int) -> torch.Tensor:
    """Candidate status of a node whose first b ranks were all kept: kept, then beyond B(u)."""
    with torch.inference_mode(False):
        return to_device([_KEPT] * b + [_BEYOND_B] * (k - b), device, torch.int8)


@functools.lru_cache(maxsize=16)
def _stop_tables(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The stop code of an expanded node from its candidates' statuses: each status gets a weight
    (kept 4 > cut by the cost 3 > by the budget 2 > by tau 1 > beyond B(u) 0), and the row's
    strongest weight names the code (kept: 0, still expanded; else "cost", "n_max" or "tau")."""
    with torch.inference_mode(False):
        rank = {_BEYOND_B: 0, _PRUNED_TAU: 1, _PRUNED_NMAX: 2, _PRUNED_COST: 3, _KEPT: 4}
        weight = to_device([rank[s] for s in range(len(rank))], device)  # by status
        code = to_device([_CODE["tau"], _CODE["tau"], _CODE["n_max"], _CODE["cost"], 0], device, torch.int8)  # by weight
    return weight, code


@functools.lru_cache(maxsize=8)
def _tail_source(source: "PromptLookup") -> "PromptLookup":
    """``source`` with n-grams of at least :data:`TAIL_MIN_NGRAM` tokens."""
    return dataclasses.replace(source, min_ngram=max(source.min_ngram, TAIL_MIN_NGRAM),
                               max_ngram=max(source.max_ngram, TAIL_MIN_NGRAM))


@dataclass
class Selection:
    """What one verification decided, on the host: the accepted node ids (root excluded), the
    bonus token (the target's choice after the last of them) and the tree as fetched."""

    path: list[int]
    bonus: int
    arrays: dict[str, np.ndarray]


class DeviceTree:
    """A draft tree grown on ``device`` under a :class:`GrowthRule` (node 0 is the root).

    Node arrays are preallocated for N_max + 1 nodes; ``n`` (on the host) says how many are
    real. Nodes are in BFS order exactly as in :class:`~dynatree_core.tree.DraftTree`, so the
    two can be compared element by element.
    """

    def __init__(self, root_token: int, rule: GrowthRule, top_k: int, device: torch.device):
        self.rule, self.top_k, self.device = rule, max(1, int(top_k)), device
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
        #: ancestor matrix: row u is True at u and at every ancestor of u (root included)
        self.ancestors = torch.zeros((cap, cap), dtype=torch.bool, device=device)
        self.ancestors[:1, :1].fill_(True)
        self.n = 1
        self.k_used = self.top_k  # top-k columns the drafter filled (fewer only for a tiny vocabulary)
        self.depth = 0  # deepest drafted level (host; the lookup tail may reach deeper)
        self.draft_calls = 0
        self.tail_nodes = 0  # prompt-lookup tail nodes (host)
        self.tail_reads = 0  # host reads the tail took (one when it ran)
        #: after an EAGLE-2 rerank: each node's index in the tree as grown (what the drafter's
        #: cache slots refer to); None while the two are the same
        self.orig: torch.Tensor | None = None
        # node ids and flat candidate indices (slices of it are views: no op per level)
        self._ar = _arange(device, max(cap + 1, cap * self.top_k))
        if rule.shape:  # Sequoia: branching by BFS index (0 past the shape)
            shape = list(rule.shape[:cap]) + [0] * max(0, cap - len(rule.shape))
            self._shape = to_device(shape, device)
        if rule.cost_aware:
            # c(n) by n (index 0 and past the curve: inf), s_d by depth, and the running E, n on the
            # device: they change with each level's kept count, which the host learns only at the
            # level's sync (the draft time so far is known on the host)
            plan = rule.planning_cost()
            curve = [math.inf] + [plan[n - 1] if n <= len(plan) else math.inf for n in range(1, cap + 2)]
            self._curve = to_device(curve, device, torch.float64)
            # the measured curve, for the final fill (which pays what the tree really costs)
            self._real = to_device([math.inf] + [rule.cost(n) for n in range(1, cap + 2)], device, torch.float64)
            self._scale = to_device([rule.scale(d) for d in range(rule.d_max + 2)], device, torch.float64)
            self._expected = torch.ones(1, dtype=torch.float64, device=device)
            self._verified = torch.ones(1, dtype=torch.long, device=device)
            self._draft_s = 0.0

    # --- growth ------------------------------------------------------------------------------
    def grow(self, drafter: "Drafter", syncs: HostSyncs) -> "DeviceTree":
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
                # EAGLE-2: only the most probable expandable nodes (ties: BFS order), fed in BFS order
                if codes is None:
                    codes = torch.zeros(hi - lo, dtype=torch.int8, device=self.device)
                key = self.cum_logps[lo:hi].masked_fill(codes != 0, -math.inf)
                top = torch.argsort(key, descending=True, stable=True)[:rule.expand_top]
                # index_fill_, not chosen[top] = True: a host scalar written through an index
                # tensor is copied to the device and waits for it (the GPU's sync audit)
                chosen = torch.zeros(hi - lo, dtype=torch.bool, device=self.device).index_fill_(0, top, True)
                codes = codes + ((codes == 0) & ~chosen) * _CODE["top_k"]
                codes = codes.to(torch.int8)
                n_expand = rule.expand_top
            if codes is None:  # every frontier node is expanded: they are the frontier itself
                ids = self._ar[lo:lo + n_expand]
            else:
                self.stop[lo:hi] = codes  # the expanded ones are overwritten by _add_children
                # expanded frontier nodes, in BFS order (a stable compaction with a size known on the host)
                ids = lo + torch.argsort((codes != 0).to(torch.int8), stable=True)[:n_expand]
            top_ids, top_lps = drafter.propose(self, ids, level=self.draft_calls)
            self.draft_calls += 1
            kept, expandable, codes = self._add_children(ids, top_ids, top_lps, budget, log_tau)
            counts = {"kept": kept, "expand": expandable}
            if rule.cost_aware:  # should growth end here: how many leaves the final fill would add
                counts.update(zip(("fill", "fill_depth"), self._fill_count(budget - kept)))
            got = _read_counts(syncs, counts)
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
                    self.stop[lo:hi].fill_(_CODE["n_max"])
                else:
                    self.stop[lo:hi] = codes + (codes == 0) * _CODE["n_max"]
            elif codes is not None:
                self.stop[lo:hi] = codes
        if rule.cost_aware and self.draft_calls and budget > 0 and got["fill"]:
            self._fill(got["fill"])
            self.depth = max(self.depth, got["fill_depth"])
        if rule.rerank and self.n - 1 > rule.rerank:
            self._rerank(rule.rerank)
        return self

    def _root_expands(self) -> bool:
        """Whether the root is expanded (host arithmetic, as in :func:`~dynatree_core.tree.grow_tree`)."""
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
            return torch.full((hi - lo,), _CODE["d_max"], dtype=torch.int8, device=self.device)
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
            return (stop * _CODE["cost"]).to(torch.int8)
        codes = torch.zeros(hi - lo, dtype=torch.int8, device=self.device)
        if gate:
            codes.masked_fill_(p < rule.rho_deep, _CODE["depth_gate"])
        if rule.rho_stop > 0:  # checked before the gate: it names the reason
            codes.masked_fill_(p < rule.rho_stop, _CODE["rho_stop"])
        if rule.shape:
            codes.masked_fill_((codes == 0) & (self._shape[lo:hi] == 0), _CODE["static"])
        return codes

    def _breadth(self, ids: torch.Tensor, lp: torch.Tensor, k: int) -> int | torch.Tensor:
        """B(u) of the expanded nodes ``ids`` (at most k): one int when the rule has one breadth
        everywhere, else per node from the confidence c(u) = max q(.|u) (or the static shape)."""
        rule = self.rule
        if rule.shape:  # Sequoia: the static tree's branching, whatever the confidence
            return self._shape[ids].clamp(max=k)
        if rule.b_min == rule.b_mid == rule.b_max:
            return min(rule.b_mid, k)
        edges = _breadth_edges(self.device, rule.tau_l, rule.tau_h)
        table = _breadth_table(self.device, rule.b_min, rule.b_mid, rule.b_max, k)
        return table[torch.bucketize(torch.exp(lp[:, 0]), edges, right=True)]

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
            self.cand_status[ids, :k] = _status_row(self.device, k, b)
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
        weight, code = _stop_tables(dev)
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
        """The final fill's candidates (:func:`~dynatree_core.tree._fill`), flat over (fed node,
        rank), sorted by value (ties: parent, then rank): (order, sorted values with -inf past the
        eligible ones, each candidate's depth)."""
        n, k = self.n, self.k_used
        st = self.cand_status[:n, :k]
        cum = self.cum_logps[:n, None] + self.topk_logps[:n, :k].double()
        elig = self.fed[:n, None] & ((st == _BEYOND_B) | (st == _PRUNED_COST) | (st == _PRUNED_TAU))
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
        self.stop[lo:hi].fill_(_CODE["cost"])
        self.stop.index_fill_(0, rows, 0)  # a parent whose children the cost had cut has one now
        self.cand_status.view(-1).index_fill_(0, rows * self.cand_status.shape[1] + ranks, _KEPT)
        anc = self.ancestors[rows]
        anc[:, lo:hi] |= torch.eye(f, dtype=torch.bool, device=self.device)
        self.ancestors[lo:hi] = anc
        self.n = hi

    def _rerank(self, keep: int) -> None:
        """EAGLE-2's final step on the device (:func:`~dynatree_core.tree.rerank_tree`): keep the
        ``keep`` most probable drafted nodes, compacting every array; ``orig`` maps back."""
        n, dev = self.n, self.device
        order = torch.argsort(self.cum_logps[1:n], descending=True, stable=True)[:keep] + 1
        keep_ids = torch.sort(torch.cat([torch.zeros(1, dtype=torch.long, device=dev), order])).values
        new_id = torch.full((self.capacity,), -1, dtype=torch.long, device=dev)
        new_id[keep_ids] = torch.arange(keep + 1, device=dev)
        kept_mask = new_id[:n] >= 0
        # a dropped child of a kept parent: its candidate slot at the parent becomes "rerank"
        parents = self.parents[:n]
        dropped = ~kept_mask & (new_id[parents.clamp(min=0)] >= 0)
        dropped[:1].fill_(False)
        rank = (self.topk_tokens[parents.clamp(min=0)] == self.tokens[:n, None]).to(torch.int8).argmax(1)
        # no boolean-mask indexing (its size is data: a device read) and no scalar writes through
        # an index: the nodes that do not take part write to one spare slot past the end
        width = self.cand_status.shape[1]
        spare = self.capacity * width
        hit = torch.zeros(spare + 1, dtype=torch.bool, device=dev)
        hit.index_fill_(0, torch.where(dropped, parents.clamp(min=0) * width + rank, spare), True)
        self.cand_status.masked_fill_(hit[:spare].view(self.capacity, width), _PRUNED_RERANK)
        has_child = torch.zeros(self.capacity + 1, dtype=torch.bool, device=dev)
        kept_child = kept_mask & (self._ar[:n] > 0)
        has_child.index_fill_(0, torch.where(kept_child, parents.clamp(min=0), self.capacity), True)
        lost = (self.stop[:n] == 0) & self.fed[:n] & ~has_child[:n] & kept_mask
        self.stop[:n] = self.stop[:n] + lost * _CODE["rerank"]
        m = keep + 1
        ints = self._ints[:, keep_ids]
        ints[1] = torch.where(ints[1] >= 0, new_id[ints[1].clamp(min=0)], ints[1])
        self._ints[:, :m] = ints
        self._floats[:, :m] = self._floats[:, keep_ids]
        for buf in (self.fed, self.stop, self.topk_tokens, self.topk_logps, self.cand_status):
            buf[:m] = buf[keep_ids]
        self.ancestors[:m, :m] = self.ancestors[keep_ids][:, keep_ids]
        self.orig = keep_ids
        self.n = m

    # --- the prompt-lookup tail ----------------------------------------------------------------
    def add_tail(self, lookup: "LookupDrafter", syncs: HostSyncs, max_depth: int) -> "DeviceTree":
        """Below the drafted tree's leaves, the spans prompt lookup copies (:attr:`GrowthRule.lookup_tail`
        tokens each: what followed the latest earlier occurrence of the longest n-gram, of at least
        :data:`TAIL_MIN_NGRAM` tokens, ending the leaf's context), most probable leaves first,
        :attr:`GrowthRule.tail_n_max` nodes in all, none deeper than ``max_depth``. One lookup for
        all leaves and one host read (the spans' lengths); no draft forward. Tail nodes are
        appended after the drafted ones, each span in path order, so a path still has increasing
        indices (what :meth:`select` reads) though the array is no longer in BFS order; the draft
        never reads them (an accepted one reaches it as a committed token)."""
        rule, dev = self.rule, self.device
        n = self.n
        budget = min(rule.tail_n_max, self.capacity - n)
        if not rule.lookup_tail or budget <= 0:
            return self
        from .drafters import lookup_spans  # drafters builds on this module

        seq, _ = lookup._on(dev)
        source = _tail_source(lookup.source)
        # the leaves (no child), most probable first (ties: BFS order); at most `budget` of them
        has_child = torch.zeros(n, dtype=torch.bool, device=dev)
        has_child.index_fill_(0, self.parents[1:n], True)
        key = self.cum_logps[:n].masked_fill(has_child, -math.inf)
        ids = torch.argsort(key, descending=True, stable=True)[:budget]
        depth = self.depths.index_select(0, ids)
        span, lps, length = lookup_spans(seq, self._tail_contexts(seq, ids, depth, self.depth, source.max_ngram),
                                         source, rule.lookup_tail)
        room = (max_depth - depth).clamp(min=0)
        length = torch.minimum(length, room).masked_fill(has_child.index_select(0, ids), 0)
        got = syncs.fetch(length=length)["length"]
        self.tail_reads = 1
        # the budget, leaf by leaf in order of probability: a span cut short keeps its first tokens
        take = np.minimum(got, np.maximum(0, budget - (np.cumsum(got) - got)))
        c = int(take.sum())
        if c == 0:
            return self
        row = np.repeat(np.arange(len(take)), take)  # each tail node's leaf (its row in ids)
        step = np.arange(c) - np.repeat(np.cumsum(take) - take, take)  # its place in the span
        lo, hi = self.n, self.n + c
        # parent: the leaf for a span's first node, else the node before it
        par_tail = np.where(step == 0, -1, lo + np.arange(c) - 1)
        r, st, pt = to_device(row, dev), to_device(step, dev), to_device(par_tail, dev)
        parent = torch.where(pt >= 0, pt, ids.index_select(0, r))
        lp = lps[r, st].double()
        self.tokens[lo:hi] = span[r, st]
        self.parents[lo:hi] = parent
        self.depths[lo:hi] = depth.index_select(0, r) + st + 1
        # p(u) along a span: the leaf's times the span's share per token (cum = leaf + (step + 1) lp,
        # the reference's arithmetic, so both trees agree to the bit)
        self._floats[:, lo:hi] = torch.stack([lp, self.cum_logps.index_select(0, ids.index_select(0, r))
                                              + (st + 1).double() * lp])
        self.stop[lo:hi].fill_(_CODE[LOOKUP_TAIL])
        # slots past an EAGLE-2 rerank still hold the grown tree's nodes: clear what a tail node lacks
        self.branching[lo:hi].fill_(0)
        self.fed[lo:hi].fill_(False)
        for buf in (self.topk_tokens, self.topk_logps, self.cand_status):
            buf[lo:hi].fill_(0)
        # ancestors: the leaf's row, then every earlier node of the same span, then itself
        self.ancestors[lo:hi] = self.ancestors.index_select(0, ids.index_select(0, r))
        same = (r[:, None] == r[None, :]) & (st[None, :] <= st[:, None])
        self.ancestors[lo:hi, lo:hi] = same
        if self.orig is not None:  # after an EAGLE-2 rerank: tail nodes were never in the grown tree
            self.orig = torch.cat([self.orig, self._ar[lo:hi]])
        self.n, self.tail_nodes = hi, c
        return self

    def _tail_contexts(self, seq: torch.Tensor, ids: torch.Tensor, depth: torch.Tensor, deepest: int,
                       width: int) -> torch.Tensor:
        """[q, width]: the last ``width`` tokens of each node's context (the committed tokens, the
        root last, then the node's path), right-aligned whatever the node's depth (-1 before the
        start); ``deepest`` bounds the nodes' depths."""
        q, n = ids.shape[0], self.n
        # the path's tokens by depth (column 0 unused: the root is the last committed token)
        anc = self.ancestors.index_select(0, ids)[:, :n]
        col = torch.where(anc, self.depths[None, :n], deepest + 1)
        path = torch.full((q, deepest + 2), -1, dtype=torch.long, device=self.device)
        path.scatter_(1, col, self.tokens[None, :n].expand(q, n))
        # the token `back` places before the row's last one sits at depth depth - back
        back = torch.arange(width - 1, -1, -1, device=self.device)[None, :]
        d = depth[:, None] - back
        in_seq = seq.shape[0] - 1 + d  # at or above the root: a committed token
        from_seq = torch.where(in_seq >= 0, seq[in_seq.clamp(min=0, max=seq.shape[0] - 1)], -1)
        return torch.where(d >= 1, path.gather(1, d.clamp(min=0, max=deepest + 1)), from_seq)

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
        arrays = _unpack(syncs.fetch(best=best, bonus=argmax.index_select(0, best),
                                     on_path=anc.index_select(0, best)[0], argmax=argmax,
                                     **self._arrays(), **(extra or {})))
        if self.orig is not None:  # a rerank may have dropped the deepest level
            self.depth = int(arrays["depths"].max())
        on_path = arrays["on_path"]
        path = np.flatnonzero(on_path[1:]) + 1  # BFS order is depth order along a path
        return Selection(path.tolist(), int(arrays["bonus"][0]), arrays)

    def _arrays(self) -> dict[str, torch.Tensor]:
        """The node arrays to fetch; the integer and float fields travel as their shared buffers
        (two tensors instead of six: each costs ops to pack) and :func:`_unpack` splits them."""
        n, k = self.n, self.k_used
        out = dict(ints=self._ints[:, :n], floats=self._floats[:, :n], fed=self.fed[:n], stop=self.stop[:n],
                   topk_tokens=self.topk_tokens[:n, :k], topk_logps=self.topk_logps[:n, :k],
                   cand_status=self.cand_status[:n, :k])
        if self.orig is not None:
            out["orig"] = self.orig
        return out

    def fetch(self, syncs: HostSyncs) -> dict[str, np.ndarray]:
        """The tree's arrays on the host (one transfer; for callers that do not verify)."""
        return _unpack(syncs.fetch(**self._arrays()))


def _unpack(a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Fetched arrays with the node buffers split into their fields (tokens, parents, depths,
    branching; logps, cum_logps)."""
    a["tokens"], a["parents"], a["depths"], a["branching"] = a.pop("ints")
    a["logps"], a["cum_logps"] = a.pop("floats")
    return a


def host_tree(a: dict[str, np.ndarray], draft_calls: int, pruned: bool = True) -> DraftTree:
    """The :class:`DraftTree` of fetched device arrays (what traces, viewers and replays read).

    ``pruned``: also rebuild the list of pruned candidates (per level: τ-pruned ones by parent and
    rank, then budget-pruned ones by decreasing path probability, as :func:`grow_tree` records them).
    """
    n = len(a["tokens"])
    fed = a["fed"].astype(bool)
    top_t, top_l = a["topk_tokens"].tolist(), a["topk_logps"].astype(np.float32).tolist()
    tree = DraftTree(
        tokens=a["tokens"].tolist(), parents=a["parents"].tolist(), depths=a["depths"].tolist(),
        logps=a["logps"].tolist(), cum_logps=a["cum_logps"].tolist(),
        confidences=[math.exp(top_l[i][0]) if fed[i] else None for i in range(n)],
        branching=a["branching"].tolist(), stop_reasons=[STOP_REASONS[c] for c in a["stop"].tolist()],
        topk_tokens=[top_t[i] if fed[i] else None for i in range(n)],
        topk_logps=[top_l[i] if fed[i] else None for i in range(n)])
    tree.draft_calls = draft_calls
    if pruned:
        tree.pruned = _pruned(tree, a["cand_status"], fed)
    return tree


def _pruned(tree: DraftTree, status: np.ndarray, fed: np.ndarray) -> list[PrunedCandidate]:
    """The pruned candidates in :func:`~dynatree_core.tree.grow_tree`'s order: per level the τ-pruned
    (by parent and rank), then the budget's and the cost's cuts (most probable first); the
    EAGLE-2 rerank's drops last (by parent and rank)."""
    out: list[PrunedCandidate] = []
    reranked: list[PrunedCandidate] = []
    fed_ids = np.flatnonzero(fed).tolist()
    for depth in sorted({tree.depths[i] for i in fed_ids}):
        cuts: dict[int, list[PrunedCandidate]] = {_PRUNED_NMAX: [], _PRUNED_COST: []}
        for i in (i for i in fed_ids if tree.depths[i] == depth):
            for r, s in enumerate(status[i].tolist()):
                if s in _PRUNE_REASON:
                    lp = tree.topk_logps[i][r]
                    cand = PrunedCandidate(i, tree.topk_tokens[i][r], lp, tree.cum_logps[i] + lp, r, _PRUNE_REASON[s])
                    (out if s == _PRUNED_TAU else reranked if s == _PRUNED_RERANK else cuts[s]).append(cand)
        for s in (_PRUNED_NMAX, _PRUNED_COST):
            out.extend(sorted(cuts[s], key=lambda c: (-c.cum_logp, c.parent, c.rank)))
    return out + sorted(reranked, key=lambda c: (c.parent, c.rank))

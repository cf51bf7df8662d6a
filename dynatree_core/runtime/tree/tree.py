"""The draft tree as tensors on the model's device: growth, the tree mask, positions and selection.

:class:`DeviceTree` grows what a :class:`~dynatree_core.policy.growth_rule.GrowthRule` describes
with the breadth, depth gate, τ pruning, N_max budget and tie-breaking of the torch-free reference
:func:`dynatree_core.policy.growth.grow_tree` (``tests/test_device_tree.py`` checks them node for
node), one batched ``propose`` per level (:class:`Proposer`), and waits for the device only where a
size depends on data: one host sync per level (none when :attr:`GrowthRule.static_counts`) and one
per verification (:meth:`DeviceTree.select`, the tree fetched with the target's choices). The
cost-aware fill, EAGLE-2's rerank and the lookup tail are mixins (``cost``, ``rerank``,
``tail``).
"""


from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generator, Protocol

import numpy as np
import torch

from dynatree_core.policy.growth_rule import GrowthRule
from dynatree_core.policy.growth import CostState
from dynatree_core.runtime.tree.cost import CostAwareGrowth
from dynatree_core.runtime.tree.rerank import Rerank
from dynatree_core.runtime.tree.codes import CODE, arange_on, stop_tables, true_on
from dynatree_core.runtime.tree.tail import TailGrowth
from dynatree_core.runtime.host_syncs import HostSyncs, Peek, read_counts, to_device
from dynatree_core.runtime.tree.to_host import unpack
from dynatree_core.runtime.tree.level_step import CostHooks, Level, StepRule, TreeBuffers, level_step, resident_step

if TYPE_CHECKING:  # pragma: no cover
    from dynatree_core.runtime.tree.phase import DraftPhase, LentLevel


def resident_shape(rule: GrowthRule, top_k: int) -> tuple[int, int, int]:
    """(levels, width, slots) of the device-resident draft phase under ``rule``: the draft levels
    it runs (D_max, at most N_max: each level adds a node or ends growth), the frontier's width
    and the node slots the verification reads (root, N_max or EAGLE-2's rerank, the lookup tail).

    The width bounds the nodes one level expands: at most N_max (each was kept), EAGLE-2's
    expand-top-k, B^(levels - 1) (breadth B), and ⌊1/ρ_stop⌋: an expanded node has p(u) >= ρ_stop
    and the path probabilities of one depth's nodes sum to at most 1 (siblings carry distinct
    tokens of one distribution), so the bound is exact, not a guess (the growth still checks it)."""
    levels = max(1, min(rule.d_max, rule.n_max))
    width = max(1, rule.n_max)
    if rule.rho_stop > 0 and not rule.cost_aware:
        width = min(width, max(1, math.floor(1.0 / rule.rho_stop * (1 + 1e-9))))
    if rule.expand_top:
        width = min(width, rule.expand_top)
    b, reach = min(rule.max_breadth, top_k), 1
    for _ in range(levels - 1):
        reach = min(reach * b, width)
    width = min(width, reach)
    kept = min(rule.n_max, rule.rerank) if rule.rerank else rule.n_max
    slots = max(0, kept) + 1 + (rule.tail_n_max if rule.lookup_tail else 0)
    return levels, width, slots


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

    def lend_level(self, tree: "DeviceTree", level: int) -> "LentLevel | None":
        """Level ``level`` as the parts a :class:`DraftPhase` runs in one call (counted as the
        drafter's forward), or None: :meth:`propose` it."""


@dataclass
class Selection:
    """What one verification decided, on the host: the accepted node ids (root excluded), the
    bonus token (the target's choice after the last of them) and the tree as fetched."""

    path: list[int]
    bonus: int
    arrays: dict[str, np.ndarray]


def root_selection(root: int, token: int, top_k: int, stop: int = 0) -> Selection:
    """What :meth:`DeviceTree.select` returns for a tree that is its root alone (an AR step), built on the host
    from ``token``, the target's choice after ``root``: the same arrays, dtypes and shapes, with no op on the
    device. A batch whose every row takes an AR step reads all their tokens in one read
    (:mod:`dynatree_core.engine.batch`). ``top_k``: the tree's candidate columns (:attr:`DeviceTree.k_used`);
    ``stop``: the root's stop code (0 as built; a sat-out root's is ``CODE["batch"]``)."""
    one = dict(dtype=np.int64)
    arrays = dict(best=np.zeros(1, **one), bonus=np.array([token], **one), on_path=np.ones(1, dtype=bool),
                  argmax=np.array([token], **one), tokens=np.array([root], **one), parents=np.array([-1], **one),
                  depths=np.zeros(1, **one), branching=np.zeros(1, **one), logps=np.zeros(1), cum_logps=np.zeros(1),
                  fed=np.zeros(1, dtype=bool), stop=np.array([stop], **one), topk_tokens=np.zeros((1, top_k), **one),
                  topk_logps=np.zeros((1, top_k)), cand_status=np.zeros((1, top_k), **one))
    return Selection([], int(token), arrays)


class DeviceTree(CostAwareGrowth, Rerank, TailGrowth):
    """A draft tree grown on ``device`` under a :class:`GrowthRule` (node 0 is the root).

    Node arrays are preallocated for N_max + 1 nodes; ``n`` (on the host) says how many are
    real. Nodes are in BFS order exactly as in :class:`~dynatree_core.policy.tree.DraftTree`, so the
    two can be compared element by element.
    """

    def __init__(self, root_token: int, rule: GrowthRule, top_k: int, device: torch.device,
                 position: int | None = None, resident: bool = False, phase: "DraftPhase | None" = None,
                 shape_rule: GrowthRule | None = None, early_exit: bool = False):
        self.rule, self.top_k, self.device = rule, max(1, int(top_k)), device
        #: the root's absolute position (its index in prompt + output; node u's child fills
        #: position + depth(u) + 1): what shared draft noise is keyed by. None: not known (greedy)
        self.position = position
        #: grow without reading the device (a fixed frontier of :attr:`width` over :attr:`levels`
        #: levels) and verify every node slot (:attr:`slots`): the fast path's draft phase
        self.resident = resident
        #: the run's resident draft phase (its level step as the runtime runs it, whole levels where
        #: the drafter lends them); None: :func:`resident_step` as written, level by level
        self.phase = phase if resident else None
        #: resident growth stops launching levels once the device has posted an empty frontier (a
        #: :class:`Peek`: no wait); off where a padding level must run (its draws feed a seeded stream)
        self.peek = Peek(device) if resident and early_exit else None
        # the resident shape follows the run's rule (``shape_rule``), not this iteration's: the shapes stay
        # fixed while the history adapter or the tokens left move D0, τ_h and D_max (device parameters)
        self.levels, self.width, self.slots = resident_shape(shape_rule or rule, self.top_k)
        base = shape_rule or rule
        cap = max(0, base.n_max) + 1 + (base.tail_n_max if base.lookup_tail else 0)
        # one spare slot past the nodes (TreeBuffers.scratch): the level step's writes that belong
        # to no node land there, so no write ever needs a size read from the device
        self.capacity = cap + 1
        self.scratch = cap
        self._allocate(cap, root_token)
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
        self._ar = arange_on(device, max(cap + 2, (cap + 1) * self.top_k))
        self._true = true_on(device)
        self._level_t: dict[int, torch.Tensor] = {}
        # the resident path's counters, read with the selection: levels that expanded a node, a
        # frontier wider than its bound (never, by the bound's proof: checked), the nodes grown
        self._calls = torch.zeros((), dtype=torch.long, device=device)
        self._overflow = torch.zeros((), dtype=torch.bool, device=device)
        self._n_dev = self._grown = torch.ones((), dtype=torch.long, device=device)
        self._tail_dev = torch.zeros((), dtype=torch.long, device=device)
        self._shape = None
        if rule.shape:  # Sequoia: branching by BFS index (0 past the shape)
            shape = list(rule.shape[:cap + 1]) + [0] * max(0, cap + 1 - len(rule.shape))
            self._shape = to_device(shape, device)
        if rule.cost_aware:
            self._init_cost(cap)

    def _allocate(self, cap: int, root_token: int) -> None:
        """The node arrays: ``cap`` node slots and the spare one."""
        device = self.device
        long = dict(dtype=torch.long, device=device)
        # One buffer per dtype, the fields are views of it: a level writes a new node's integer
        # fields with one op and its log-probs with another (each op costs a launch on a GPU and
        # microseconds of dispatch on a CPU).
        self._ints = torch.zeros((4, cap + 1), **long)
        self.tokens, self.parents, self.depths, self.branching = self._ints.unbind(0)
        # Writes of host scalars use fill_ on a slice: ``t[0] = x`` copies x from pageable host
        # memory, which synchronises the stream (CUDA's sync debug mode flags it).
        self.tokens[:1].fill_(root_token)
        self.parents[:1].fill_(-1)
        self._floats = torch.zeros((2, cap + 1), dtype=torch.float64, device=device)
        self.logps, self.cum_logps = self._floats.unbind(0)
        self.fed = torch.zeros(cap + 1, dtype=torch.bool, device=device)  # given to the draft (expanded)
        self.stop = torch.zeros(cap + 1, dtype=torch.int8, device=device)
        self.topk_tokens = torch.zeros((cap + 1, self.top_k), **long)
        self.topk_logps = torch.zeros((cap + 1, self.top_k), dtype=torch.float32, device=device)
        self.cand_status = torch.zeros((cap + 1, self.top_k), dtype=torch.int8, device=device)
        #: c(u) of each expanded node when the drafter states it (under rejection sampling its
        #: candidates are draws, so the first is not the maximum); None: c(u) is the first candidate's
        self.confidence: torch.Tensor | None = None
        #: ancestor matrix: row u is True at u and at every ancestor of u (root included); a slot
        #: no node fills sees only itself (the fast path verifies every slot)
        self.ancestors = torch.eye(cap + 1, dtype=torch.bool, device=device)

    # --- growth ------------------------------------------------------------------------------
    def grow(self, drafter: Proposer, syncs: HostSyncs) -> "DeviceTree":
        """Grow the whole tree: one batched ``drafter.propose`` and one :func:`level_step` per level.

        Eager (the CPU's path): the frontier is the nodes expanded, compacted to their number, which
        costs one host read per level (none when :attr:`GrowthRule.static_counts` fixes the sizes).
        Device-resident (:attr:`resident`): a frontier of fixed width and :attr:`levels` levels,
        padding where the rule expands nothing; no read at all (:meth:`select` fetches the counts)."""
        steps = self.growth(drafter, syncs)
        try:
            ids, level = next(steps)
            while True:
                ids, level = steps.send(drafter.propose(self, ids, level=level))
        except StopIteration as done:
            return done.value

    def cut_to(self, keep: int) -> "DeviceTree":
        """Keep the ``keep`` most probable drafted nodes (a batch's shared budget: their ancestors are
        more probable, so they stay a tree), compacting every array as EAGLE-2's rerank does."""
        self._rerank(keep, "batch")
        return self

    def sit_out(self) -> "DeviceTree":
        """No draft this iteration (a batch's shared budget chose an AR step): the root alone, its
        stop reason "batch"."""
        self.stop[:1].fill_(CODE["batch"])
        return self

    def growth(self, drafter: Proposer, syncs: HostSyncs) -> Generator[tuple[torch.Tensor, int], Proposed,
                                                                          "DeviceTree"]:
        """:meth:`grow` as steps: it yields ``(ids, level)`` where it needs the draft's proposal for a
        level's nodes and takes that proposal back (``send``); it returns the tree. A batched run
        drives one of these per row and answers a level of every row with ONE draft forward
        (:mod:`dynatree_core.engine.batch`); :meth:`grow` answers each with ``drafter.propose``.
        The levels run on one of two paths: :meth:`_resident_levels` (a fixed frontier, no read) or
        :meth:`_eager_levels` (the frontier compacted to its size, one read a level)."""
        if not self._root_expands():
            self.stop[:1].fill_(self._root_code())
            return self
        rule = self.rule
        step = StepRule.of(rule, self.device)  # the run's numbers: one host -> device copy
        t = self._buffers()
        frontier = self._ar[:1], self._true[:1]
        n = torch.ones((), dtype=torch.long, device=self.device)
        budget = torch.full((), rule.n_max, dtype=torch.long, device=self.device)
        if self.resident:
            n = yield from self._resident_levels(drafter, t, step, frontier, n, budget)
            return self._finish(n, rule.n_max, {})
        n, host_budget, got = yield from self._eager_levels(t, step, frontier, n, budget, syncs)
        return self._finish(n, host_budget, got)

    def _resident_levels(self, drafter: Proposer, t: TreeBuffers, step: StepRule,
                         frontier: tuple[torch.Tensor, torch.Tensor], n: torch.Tensor, budget: torch.Tensor
                         ) -> Generator[tuple[torch.Tensor, int], Proposed, torch.Tensor]:
        """The device-resident levels: :attr:`levels` of them over a frontier of :attr:`width`, no
        host read (the depth a device scalar: one compiled graph for every level). A level the
        drafter lends runs as ONE call of the run's :class:`DraftPhase` (inputs, forward, head,
        step); the others are proposed and stepped. Stops early only where the device has already
        posted an empty frontier (:meth:`_empty_next`). Returns the node count (on the device)."""
        ids, valid = frontier
        step_fn = self.phase.step if self.phase is not None else resident_step
        for level in range(self.levels):
            self.depth = level  # the level's nodes' depth: where a sampled child's noise is keyed
            lent = drafter.lend_level(self, level) if self.phase is not None else None
            if lent is not None:  # the whole level in one call: inputs, forward, head, step
                self.k_used = min(lent.k, self.top_k)
                lv, self._calls, self._overflow = self.phase.level(
                    lent, self, t, step, ids, valid, level, n, budget, self.width, self._calls, self._overflow)
            else:
                prop = yield ids, level
                if level == 0:
                    self.chain = prop.chain
                tokens, logps, conf = self._candidates(prop, ids, valid)
                lv, self._calls, self._overflow = step_fn(t, step, ids, valid, tokens, logps, conf,
                                                          self.level_tensor(level + 1), n, budget, self.width,
                                                          self._calls, self._overflow)
            ids, valid, n, budget = lv.ids, lv.valid, lv.n, lv.budget
            if self._empty_next(lv):
                break
        return n

    def _eager_levels(self, t: TreeBuffers, step: StepRule, frontier: tuple[torch.Tensor, torch.Tensor],
                      n: torch.Tensor, budget: torch.Tensor, syncs: HostSyncs
                      ) -> Generator[tuple[torch.Tensor, int], Proposed, tuple[torch.Tensor, int, dict[str, int]]]:
        """The eager levels: the frontier is the nodes expanded, compacted to their number, which
        costs one host read a level (none when :attr:`GrowthRule.static_counts` fixes the sizes);
        the cost-aware rule prices each level here. Returns the node count (on the device), the
        budget left (on the host) and the last level's counts."""
        rule = self.rule
        ids, valid = frontier
        cost = CostHooks(self.cost_keep, self.cost_reasons) if rule.cost_aware else None
        host_budget, got = rule.n_max, {}
        for level in range(rule.n_max):
            self.depth = level
            prop = yield ids, level
            if level == 0:
                self.chain = prop.chain
            tokens, logps, conf = self._candidates(prop, ids, valid)
            lv = level_step(t, step, ids, valid, tokens, logps, conf, level + 1, n, budget,
                            ids.shape[0] * self.k_used, cost)
            self.draft_calls += 1
            got = self._counts(syncs, lv, ids.shape[0], level + 1, host_budget)
            kept, n_expand = got["kept"], got["expand"]
            self.n, host_budget = self.n + kept, host_budget - kept
            if kept == 0:
                break
            self.depth = level + 1
            if not n_expand:
                break
            ids, valid, n, budget = lv.ids[:n_expand], lv.valid[:n_expand], lv.n, lv.budget
        return n, host_budget, got

    def _candidates(self, prop: Proposed, ids: torch.Tensor, valid: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """A proposal's candidates cut to the tree's top-k (kept as :attr:`k_used`), and c(u) where the
        drafter states it (sampled candidates: for B(u), recorded for the trace)."""
        k = self.k_used = min(prop.tokens.shape[1], self.top_k)
        conf = prop.confidence
        if conf is not None:
            self._confidence().index_copy_(0, torch.where(valid, ids, self.scratch), conf.double())
        if prop.tokens.shape[1] == k:
            return prop.tokens, prop.logps, conf
        return prop.tokens[:, :k], prop.logps[:, :k], conf

    def _empty_next(self, lv: Level) -> bool:
        """Whether the device has already said that a resident level's next frontier is empty (then
        growth stops; never a wait: a :class:`Peek`)."""
        if self.peek is None:
            return False
        self.peek.post(lv.more)
        return self.peek.false()

    def _finish(self, n: torch.Tensor, host_budget: int, got: dict[str, int]) -> "DeviceTree":
        """After the levels: the cost-aware fill, EAGLE-2's rerank; a resident tree's host counts
        become bounds (every slot is verified) until :meth:`select` reads the real ones."""
        rule = self.rule
        if self.resident:
            self._n_dev = self._grown = n
            self.n = self.scratch  # every node slot until select() reads how many are real
            self.depth = self.levels  # a bound until select() reads the deepest drafted level
            self.draft_calls = self.levels
        if rule.cost_aware and self.draft_calls and host_budget > 0 and got.get("fill"):
            self._fill(got["fill"])
            self.depth = max(self.depth, got["fill_depth"])
        if rule.rerank and (self.resident or self.n - 1 > rule.rerank):
            self._rerank(rule.rerank)
        if self.resident:  # the drafted slots: the verification reads them all
            self.n = self.slots - (rule.tail_n_max if rule.lookup_tail else 0)
        return self

    def _counts(self, syncs: HostSyncs, lv: Level, expanded: int, depth: int, budget: int) -> dict[str, int]:
        """The eager path's read of a level: how many children were kept and how many will be
        expanded (host arithmetic, no read, when the rule fixes every level's size: ``expanded``
        nodes of one breadth, no τ, no ρ)."""
        rule = self.rule
        if rule.static_counts:
            kept = min(budget, expanded * min(rule.b_mid, self.k_used))
            expand = 0 if depth >= rule.d_max or budget - kept <= 0 else kept
            return {"kept": kept, "expand": min(expand, rule.expand_top) if rule.expand_top else expand}
        counts = {"kept": lv.kept, "expand": lv.expand}
        if rule.cost_aware:  # should growth end here: how many leaves the final fill would add
            counts.update(zip(("fill", "fill_depth"), self._fill_count(lv.budget)))
        return read_counts(syncs, counts)

    def _buffers(self) -> TreeBuffers:
        weight, code = stop_tables(self.device)
        return TreeBuffers(self._ints, self._floats, self.fed, self.stop, self.topk_tokens, self.topk_logps,
                           self.cand_status, self.ancestors, self._ar, self._shape, weight, code)

    def _root_expands(self) -> bool:
        """Whether the root is expanded (host arithmetic, as in :func:`~dynatree_core.policy.growth.grow_tree`)."""
        return self._root_code() == 0

    def _root_code(self) -> int:
        """The root's stop code (0: expanded), decided on the host: depth 0, p = 1."""
        rule = self.rule
        reason = rule.stop_reason(0, 1.0)
        if reason is None and rule.shape and rule.shape[0] == 0:
            reason = "static"
        if reason is None and rule.cost_aware and not CostState(rule).worth_expanding(0, 0.0):
            reason = "cost"
        if reason is None and rule.n_max <= 0:
            reason = "n_max"
        return 0 if reason is None else CODE[reason]

    def _confidence(self) -> torch.Tensor:
        if self.confidence is None:
            self.confidence = torch.zeros(self.capacity, dtype=torch.float64, device=self.device)
        return self.confidence

    # cost-aware hooks of the level step (the rule's E / T state lives in the CostAwareGrowth mixin)
    def cost_keep(self, keys: torch.Tensor, in_top: torch.Tensor, depth: int) -> torch.Tensor:
        return self._cost_level(keys, in_top, depth)[0]

    def cost_reasons(self, cum: torch.Tensor, depth: int) -> torch.Tensor:
        """"cost" where a child as likely as the node could not raise E / T (CostState.worth_expanding)."""
        rule = self.rule
        n = self._verified
        c_n = self._curve.index_select(0, n)
        extra = rule.draft_cost + self._curve.index_select(0, n + 1) - c_n
        v = (torch.exp(cum) * rule.scale(depth + 1)).clamp(max=1.0)
        return (~(v * (self._draft_s + c_n) > self._expected * extra) * CODE["cost"]).to(torch.int8)

    def level_tensor(self, level: int) -> torch.Tensor:
        """``level`` as a device scalar (a view: no op that launches), for compiled code whose shapes
        must not depend on the level: the run's :meth:`DraftPhase.depth` (made once per run), else
        made once per tree and level."""
        if self.phase is not None:
            return self.phase.depth(level)
        if level not in self._level_t:
            self._level_t[level] = self._ar[level]
        return self._level_t[level]

    def deepest(self) -> int:
        """The deepest a node can be (exact on the eager path; a bound on the resident one until
        :meth:`select` reads it): the sampled target's noise is drawn down to it."""
        tail = self.rule.lookup_tail if (self.tail_nodes or (self.resident and self.rule.lookup_tail)) else 0
        return self.depth + tail

    # --- verification inputs -----------------------------------------------------------------
    def position_offsets(self) -> torch.Tensor:
        """Each node's position relative to the root: its depth (not its BFS index)."""
        return self.depths[:self.n]

    def tree_mask(self) -> torch.Tensor:
        """Bool [n, n]: node i may attend to node j (j is i or an ancestor of i)."""
        return self.ancestors[:self.n, :self.n]

    def read_size(self, syncs: HostSyncs) -> None:
        """A resident tree's real node count (root, drafted nodes and lookup tail: its first slots) read now,
        one host read, so that its verify runs at the bucket of its nodes rather than of every slot
        (:class:`~dynatree_core.runtime.static.size_read.SizeRead` decides where that pays)."""
        self.n = int(syncs.fetch(n=self._n_dev)["n"])

    # --- selection -----------------------------------------------------------------------------
    def select(self, argmax: torch.Tensor, syncs: HostSyncs, extra: dict[str, torch.Tensor] | None = None
               ) -> Selection:
        """The longest path the target agrees with (vectorised), fetched with the tree in ONE transfer.

        Node u is *consistent* when its token is the target's choice after its parent; it is
        *accepted* when it and all its ancestors are consistent. Siblings carry distinct tokens,
        so at most one node per depth is accepted and the deepest one ends the path. A resident
        tree's slots past its nodes are never accepted; its counts travel in the same transfer.
        """
        n = self.n
        tok, par, anc = self.tokens[:n], self.parents[:n], self.ancestors[:n, :n]
        consistent = tok == argmax[par.clamp(min=0)]
        consistent[:1].fill_(True)
        accepted = ~(anc & ~consistent[None, :]).any(1)
        counts = {}
        if self.resident:
            accepted &= self._ar[:n] < self._n_dev
            # one array for the five counts: each fetched array costs ops to pack and unpack
            counts = dict(counts=torch.stack([self._n_dev, self._calls, self._overflow.long(), self._tail_dev,
                                              self._grown]))
        # a 0-dim index tensor would be read on the host: index_select keeps it on the device
        best = torch.argmax(torch.where(accepted, self.depths[:n], -1)).view(1)
        arrays = unpack(syncs.fetch(best=best, bonus=argmax.index_select(0, best),
                                     on_path=anc.index_select(0, best)[0], argmax=argmax,
                                     **self._arrays(), **(extra or {}), **counts))
        if self.resident:
            arrays = self._resident_counts(arrays)
        if self.orig is not None:  # a rerank may have dropped the deepest level
            self.depth = int(arrays["depths"].max())
        on_path = arrays["on_path"]
        path = np.flatnonzero(on_path[1:]) + 1  # BFS order is depth order along a path
        return Selection(path.tolist(), int(arrays["bonus"][0]), arrays)

    def _resident_counts(self, a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A resident tree's fetched arrays cut to its nodes, and the host's counts set from them."""
        n, calls, overflow, tail, grown = (int(v) for v in a.pop("counts"))
        if overflow:
            raise RuntimeError(f"a draft level expanded more nodes than the frontier's width {self.width} "
                               f"(resident_shape's bound under {self.rule}): please report this")
        self.draft_calls, self.tail_nodes = calls, tail
        slots = self.n
        for name, arr in a.items():
            if name in ("best", "bonus") or name.startswith("chain_"):
                continue
            if name in ("tokens", "parents", "depths", "branching", "logps", "cum_logps"):
                a[name] = arr[:n]
            elif arr.ndim and arr.shape[0] == slots - 1 and name == "target_prob":
                a[name] = arr[:n - 1]
            elif arr.ndim and arr.shape[0] == slots:
                a[name] = arr[:n]
        self.n = n
        drafted = a["depths"][:n - self.tail_nodes] if self.tail_nodes else a["depths"]
        self.depth = int(drafted.max())
        if self.rule.rerank and grown - 1 <= self.rule.rerank:
            self.orig = None  # as the eager path: no rerank where the tree was small enough
        return a

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



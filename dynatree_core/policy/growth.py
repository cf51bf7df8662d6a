"""Growing a draft tree under a :class:`~dynatree_core.policy.growth_rule.GrowthRule`: the reference
implementation (torch-free, readable; replays and viewers use it, and the device tree is tested
against it node for node).

The growth loop asks a ``propose`` callback for the draft's top-k distribution of a whole tree
level at once: the engine answers with one batched draft forward, a replay answers from a saved
trace. Everything else (breadth, depth gate, pruning, budget, the cost-aware rule, EAGLE-2's rerank)
is decided here.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from dynatree_core.policy.growth_rule import GrowthRule
from dynatree_core.policy.tail import Tail, add_tail
from dynatree_core.policy.tree import ARRAY_FIELDS, UNRECORDED, DraftTree, PrunedCandidate

#: draft top-k per node: (token ids, log-probs), sorted by decreasing probability
TopK = tuple[Sequence[int], Sequence[float]]
#: ``propose(tree, node_ids)`` -> the draft top-k after each of those nodes (one batched call);
#: None for a node whose distribution is unknown (only replays answer that: growth stops there)
Propose = Callable[["DraftTree", list[int]], "list[TopK | None]"]



def grow_tree(root_token: int, rule: GrowthRule, propose: Propose, tail: "Tail | None" = None,
              tail_max_depth: int | None = None) -> DraftTree:
    """Grow a draft tree level by level under ``rule`` (one ``propose`` call per level).

    Per level: every frontier node that passes the depth gate (:meth:`GrowthRule.stop_reason`)
    while budget remains is expanded; its top-B(u) draft candidates become children unless their
    cumulative probability falls below τ. If the level offers more children than the remaining
    N_max budget, the most probable ones (by p(child)) are kept, so the budget goes where the
    draft is most confident rather than to whichever parent happened to come first.
    A node ``propose`` answers None for (unknown distribution, replays only) grows nothing and
    gets the stop reason :data:`UNRECORDED`; a level where every answer is None costs no call.
    The Sequoia, EAGLE-2, cost-aware and lookup-tail variants of the rule are described on
    :class:`~dynatree_core.policy.config.GrowthRule`; this function is their reference implementation.
    ``tail`` gives the lookup spans (:func:`add_tail`; none without it), no tail node deeper than
    ``tail_max_depth``.
    """
    tree = DraftTree.with_root(root_token)
    budget = rule.n_max
    frontier = [0]
    log_tau = math.log(rule.tau) if rule.tau > 0 else -math.inf
    cost = CostState(rule) if rule.cost_aware else None
    while frontier:
        expand = _expanded(tree, rule, frontier, cost, budget)
        if not expand:
            break
        dists = propose(tree, expand)
        cands = _candidates(tree, rule, log_tau, expand, dists)
        # most probable first (ties: parent, then rank): the budget and the cost keep a prefix
        cands.sort(key=lambda c: (-c[0], c[1], c[2]))
        for cum, i, rank, tok, lp in cands[budget:]:
            tree.pruned.append(PrunedCandidate(i, tok, lp, cum, rank, "n_max"))
        cands = cands[:budget]
        if cost is not None and any(d is not None for d in dists):
            keep = cost.add_level([c[0] for c in cands], tree.depths[expand[0]] + 1)
            for cum, i, rank, tok, lp in cands[keep:]:
                tree.pruned.append(PrunedCandidate(i, tok, lp, cum, rank, "cost"))
            cands = cands[:keep]
        frontier = _append_level(tree, expand, cands)
        budget -= len(cands)
    if cost is not None and budget > 0 and tree.draft_calls:
        _fill(tree, cost, budget)
    if rule.rerank and tree.num_drafted > rule.rerank:
        tree = rerank_tree(tree, rule.rerank)
    if rule.lookup_tail and tail is not None:
        add_tail(tree, rule, tail, tail_max_depth)
    return tree



def _expanded(tree: DraftTree, rule: GrowthRule, frontier: list[int], cost: "CostState | None", budget: int
              ) -> list[int]:
    """The frontier nodes the rule expands (the others get their stop reason): the depth gate,
    Sequoia's static shape, the cost criterion and the budget, then EAGLE-2's top-k by p(u)."""
    expand: list[int] = []
    for i in frontier:
        reason = rule.stop_reason(tree.depths[i], math.exp(tree.cum_logps[i]))
        if reason is None and rule.shape and rule.branching(0.0, i) == 0:
            reason = "static"
        if reason is None and cost is not None and not cost.worth_expanding(tree.depths[i], tree.cum_logps[i]):
            reason = "cost"
        if reason is None and budget <= 0:
            reason = "n_max"
        if reason is None:
            expand.append(i)
        else:
            tree.stop_reasons[i] = reason
    if rule.expand_top and len(expand) > rule.expand_top:
        chosen = set(sorted(expand, key=lambda i: (-tree.cum_logps[i], i))[:rule.expand_top])
        for i in expand:
            if i not in chosen:
                tree.stop_reasons[i] = "top_k"
        expand = [i for i in expand if i in chosen]
    return expand


def _append_level(tree: DraftTree, expand: list[int], cands: list[tuple]) -> list[int]:
    """Append the kept candidates in BFS order (by parent, then rank); an expanded node left
    childless records which rule stopped it. Returns the new frontier."""
    cands.sort(key=lambda c: (c[1], c[2]))
    frontier = []
    kept_parents = set()
    for cum, i, rank, tok, lp in cands:
        frontier.append(tree._append(tok, i, tree.depths[i] + 1, lp, cum))
        kept_parents.add(i)
    for i in expand:
        if i not in kept_parents and tree.stop_reasons[i] != UNRECORDED:
            # expanded, but every child was pruned: record which rule stopped the growth
            reasons = {p.reason for p in tree.pruned if p.parent == i}
            tree.stop_reasons[i] = next((r for r in ("cost", "n_max") if r in reasons), "tau")
    return frontier


def _fill(tree: DraftTree, cost: "CostState", budget: int) -> None:
    """The cost-aware rule's last step: add already-drafted candidates as leaves while that raises
    E / T on the *measured* curve (growth planned with ĉ; the tree pays c). Where a larger verify
    forward is cheaper than the tree's own size (a non-monotone curve), this fills the tree up to
    it with the most valuable candidates it left out: ones the cost or τ cut, and ranks beyond
    B(u) of fed nodes (τ saves verification cost, which the measured curve already prices). No
    draft forward is spent; the leaves get stop reason ``"cost"``."""
    cut = {(p.parent, p.rank) for p in tree.pruned if p.reason in ("cost", "tau")}
    cands = []
    for i in range(len(tree)):
        toks = tree.topk_tokens[i]
        if toks is None:
            continue
        for r in range(len(toks)):
            if r < tree.branching[i] and (i, r) not in cut:
                continue  # a child already, or cut by the budget
            lp = tree.topk_logps[i][r]
            cum = tree.cum_logps[i] + lp
            cands.append((cost.value(tree.depths[i] + 1, cum), i, r, toks[r], lp, cum))
    cands.sort(key=lambda c: (-c[0], c[1], c[2]))
    keep = cost.fill([c[0] for c in cands[:budget]])
    chosen = sorted(cands[:keep], key=lambda c: (c[1], c[2]))
    for v, i, r, tok, lp, cum in chosen:
        tree.stop_reasons[tree._append(tok, i, tree.depths[i] + 1, lp, cum)] = "cost"
        tree.stop_reasons[i] = "expanded"
    taken = {(c[1], c[2]) for c in chosen}
    tree.pruned = [p for p in tree.pruned if (p.parent, p.rank) not in taken]


class CostState:
    """The cost-aware rule's running estimate of one iteration (see :class:`GrowthRule`).

    ``expected`` E = 1 + Σ v(u) over kept nodes (the 1 is the bonus token), ``draft_s`` the draft
    time of the levels so far, ``n`` the tokens the target will verify (root included); the
    iteration's rate is E / (draft_s + c(n)). The device tree does the same arithmetic in the
    same order (``runtime.tree``), so both build identical trees.
    """

    def __init__(self, rule: GrowthRule):
        self.rule = rule
        self.expected, self.draft_s, self.n = 1.0, 0.0, 1
        self.plan = rule.planning_cost()

    def cost(self, n: int) -> float:
        """ĉ(n), the planning cost (:meth:`GrowthRule.planning_cost`; inf past the curve)."""
        return self.plan[n - 1] if 1 <= n <= len(self.plan) else math.inf

    def value(self, depth: int, cum_logp: float) -> float:
        """v(u) = min(1, s_d p(u)): the calibrated chance that node u is accepted."""
        return min(1.0, self.rule.scale(depth) * math.exp(cum_logp))

    def worth_expanding(self, depth: int, cum_logp: float) -> bool:
        """Could one child of this node (at most as likely as the node) raise E / T, paying for a
        draft level and one more verified token?  v_child T > E (draft_cost + c(n+1) - c(n))."""
        rule, n = self.rule, self.n
        extra = rule.draft_cost + self.cost(n + 1) - self.cost(n)
        if not math.isfinite(extra):
            return False
        return self.value(depth + 1, cum_logp) * (self.draft_s + self.cost(n)) > self.expected * extra

    def add_level(self, cums: Sequence[float], depth: int) -> int:
        """Pay for one draft level and keep the prefix of ``cums`` (sorted, most probable first)
        that maximises E / T on the planning cost ĉ; returns its length (0: the level is not worth
        verifying)."""
        self.draft_s += self.rule.draft_cost
        return self._take([self.value(depth, cum) for cum in cums], self.cost)

    def fill(self, values: Sequence[float]) -> int:
        """How many of ``values`` (sorted, largest first) to add as leaves: the prefix that
        maximises E / T on the measured curve c (no draft level is paid)."""
        return self._take(values, self.rule.cost)

    def _take(self, values: Sequence[float], cost: Callable[[int], float]) -> int:
        """Keep the prefix of ``values`` with the best rate E / (draft_s + cost(n)) (the first
        best: a strict ">"), add it to E and n, and return its length. E grows by the same
        additions in the same order as the device tree's cumulative sum."""
        best_j, best_acc, acc = 0, self.expected, self.expected
        best = acc / (self.draft_s + cost(self.n))
        for j, v in enumerate(values, start=1):
            acc += v
            rate = acc / (self.draft_s + cost(self.n + j))
            if rate > best:
                best_j, best, best_acc = j, rate, acc
        self.expected, self.n = best_acc, self.n + best_j
        return best_j


def rerank_tree(tree: DraftTree, keep: int) -> DraftTree:
    """EAGLE-2's final step: only the ``keep`` most probable drafted nodes are verified.

    Nodes are ranked by p(u) (ties: BFS order); since p(child) <= p(parent) and a parent comes
    first in BFS order, every kept node's parent is kept. Dropped children of kept nodes become
    pruned candidates with reason ``"rerank"``; kept nodes that were expanded but lost all their
    children get the stop reason ``"rerank"``.
    """
    order = sorted(range(1, len(tree)), key=lambda i: (-tree.cum_logps[i], i))
    kept = [0] + sorted(order[:keep])
    new_id = {old: new for new, old in enumerate(kept)}
    out = DraftTree()
    for f in ARRAY_FIELDS:
        vals = getattr(tree, f)
        setattr(out, f, [vals[i] for i in kept])
    out.parents = [new_id[p] if p >= 0 else -1 for p in out.parents]
    out.draft_calls = tree.draft_calls
    out.pruned = [PrunedCandidate(new_id[p.parent], p.token, p.logp, p.cum_logp, p.rank, p.reason)
                  for p in tree.pruned if p.parent in new_id]
    has_child = set(out.parents)
    for old in range(1, len(tree)):
        parent = tree.parents[old]
        if old in new_id or parent not in new_id:
            continue
        rank = (tree.topk_tokens[parent] or []).index(tree.tokens[old])
        out.pruned.append(PrunedCandidate(new_id[parent], tree.tokens[old], tree.logps[old], tree.cum_logps[old],
                                          rank, "rerank"))
    for new, old in enumerate(kept):
        if out.stop_reasons[new] == "expanded" and new not in has_child:
            out.stop_reasons[new] = "rerank"
    return out


def _candidates(tree: DraftTree, rule: GrowthRule, log_tau: float, expand: list[int],
                dists: "list[TopK | None]") -> list[tuple[float, int, int, int, float]]:
    """Record the draft top-k of one expanded level and return its children that survive τ,
    as (cum_logp, parent, rank, token, logp); the ones below τ go to ``tree.pruned``."""
    cands: list[tuple[float, int, int, int, float]] = []
    for i, dist in zip(expand, dists):
        if dist is None:
            tree.stop_reasons[i] = UNRECORDED
            continue
        toks = [int(t) for t in dist[0]]
        lps = [float(x) for x in dist[1]]
        conf = math.exp(lps[0])
        b = min(rule.branching(conf, i), len(toks))
        tree.confidences[i] = conf
        tree.branching[i] = b
        tree.topk_tokens[i] = toks
        tree.topk_logps[i] = lps
        for rank in range(b):
            cum = tree.cum_logps[i] + lps[rank]
            if cum < log_tau:
                tree.pruned.append(PrunedCandidate(i, toks[rank], lps[rank], cum, rank, "tau"))
            else:
                cands.append((cum, i, rank, toks[rank], lps[rank]))
    if any(d is not None for d in dists):
        tree.draft_calls += 1
    return cands



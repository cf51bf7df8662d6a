"""The draft token tree and the policy that grows it (torch-free, so traces can be replayed).

Node 0 is the *root*: the last committed token, which the target has not yet consumed. Its
children (depth 1) are candidates for the next token, and so on. Nodes are stored in BFS order
(level by level, siblings by parent then rank), which is also the order they are verified in, so
every ancestor precedes its descendants.

The growth loop asks a ``propose`` callback for the draft's top-k distribution of a whole tree
level at once: the engine answers with one batched draft forward, a replay answers from a saved
trace. Everything else (breadth, depth gate, pruning, budget) is decided here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Sequence

import numpy as np

from .config import GrowthRule

#: why a node did not grow children (``"expanded"`` if it did)
STOP_REASONS: tuple[str, ...] = ("expanded", "tau", "rho_stop", "depth_gate", "d_max", "n_max",
                                 "static", "top_k", "cost", "rerank", "lookup_tail")
#: stop reason of a prompt-lookup tail node (:attr:`GrowthRule.lookup_tail`): proposed by lookup
#: below a drafted leaf, never fed to the draft
LOOKUP_TAIL = "lookup_tail"
#: stop reason of a node the growth rule wanted to expand but whose draft top-k is unknown
#: (``propose`` answered None: a replay reached a node the recording never fed to the draft)
UNRECORDED = "unrecorded"

#: the shortest n-gram a lookup tail follows: a one-token match is mostly chance (the fitted
#: :class:`~dynatree_core.drafters.LookupMix` gives it a weight of about 1/257)
TAIL_MIN_NGRAM = 2
#: ``tail(tree, leaves)`` -> the prompt-lookup span below each of those leaves, as (token, log-prob)
#: pairs (empty: none), at most ``GrowthRule.lookup_tail`` long (:attr:`GrowthRule.lookup_tail`)
Tail = Callable[["DraftTree", list[int]], "list[list[tuple[int, float]]]"]

#: draft top-k per node: (token ids, log-probs), sorted by decreasing probability
TopK = tuple[Sequence[int], Sequence[float]]
#: ``propose(tree, node_ids)`` -> the draft top-k after each of those nodes (one batched call);
#: None for a node whose distribution is unknown (only replays answer that: growth stops there)
Propose = Callable[["DraftTree", list[int]], "list[TopK | None]"]


class NodeView(NamedTuple):
    """One node of a :class:`DraftTree` (a read-only row view)."""

    index: int
    token: int
    parent: int
    depth: int
    logp: float
    cum_logp: float
    confidence: float | None
    branching: int
    stop_reason: str
    topk_tokens: list[int] | None
    topk_logps: list[float] | None

    @property
    def cum_prob(self) -> float:
        """p(u) = exp(cumulative log-prob)."""
        return math.exp(self.cum_logp)


@dataclass
class PrunedCandidate:
    """A draft candidate that was considered but not verified (``reason``: ``tau`` or ``n_max``)."""

    parent: int
    token: int
    logp: float
    cum_logp: float
    rank: int
    reason: str


@dataclass
class DraftTree:
    """A draft token tree in BFS order (structure of arrays; node 0 is the root).

    Fields per node u: token z_u, parent π(u) (-1 for the root), depth d(u), draft log-prob ℓ_u,
    cumulative log-prob ℓ̄_u, confidence c(u) = max q_D(.|u) (None if u was never fed to the
    draft), branching B(u) (0 if not expanded), stop reason, and the draft's top-k at u.
    """

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    cum_logps: list[float] = field(default_factory=list)
    confidences: list[float | None] = field(default_factory=list)
    branching: list[int] = field(default_factory=list)
    stop_reasons: list[str] = field(default_factory=list)
    topk_tokens: list[list[int] | None] = field(default_factory=list)
    topk_logps: list[list[float] | None] = field(default_factory=list)
    pruned: list[PrunedCandidate] = field(default_factory=list)
    #: number of batched draft forwards spent growing this tree (one per expanded level); a
    #: factory, not a class-level default, so that a :meth:`deferred` tree builds on reading it too
    draft_calls: int = field(default_factory=int)

    # --- construction ------------------------------------------------------------------
    @classmethod
    def with_root(cls, root_token: int) -> "DraftTree":
        t = cls()
        t._append(root_token, -1, 0, 0.0, 0.0)
        return t

    @classmethod
    def deferred(cls, build: Callable[[], "DraftTree"]) -> "DraftTree":
        """A tree built by ``build()`` the first time any of its fields is read.

        The decode loop keeps its trees on the device and reads each one back in its single
        per-iteration transfer; turning those arrays into Python lists is per-node work that only
        a reader of the record needs, so it is left to the first reader.
        """
        t = cls.__new__(cls)
        t.__dict__["_build"] = build
        return t

    def __getattr__(self, name: str):
        # only reached for attributes not set yet: those of a deferred tree before its first read
        build = self.__dict__.pop("_build", None)
        if build is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.__dict__.update(build().__dict__)
        return getattr(self, name)

    @classmethod
    def empty(cls, root_token: int) -> "DraftTree":
        """The root alone, never expanded: AR's "tree" (the target verifies just the root)."""
        t = cls.with_root(root_token)
        t.stop_reasons[0] = "d_max"
        return t

    def _append(self, token: int, parent: int, depth: int, logp: float, cum_logp: float) -> int:
        self.tokens.append(int(token))
        self.parents.append(int(parent))
        self.depths.append(int(depth))
        self.logps.append(float(logp))
        self.cum_logps.append(float(cum_logp))
        self.confidences.append(None)
        self.branching.append(0)
        self.stop_reasons.append("expanded")
        self.topk_tokens.append(None)
        self.topk_logps.append(None)
        return len(self.tokens) - 1

    # --- queries -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def num_drafted(self) -> int:
        """Nodes drafted and verified, the root excluded (what N_max bounds)."""
        return len(self.tokens) - 1

    @property
    def depth(self) -> int:
        """Depth of the deepest node (0 for a root-only tree)."""
        return max(self.depths) if self.depths else 0

    def node(self, i: int) -> NodeView:
        return NodeView(i, self.tokens[i], self.parents[i], self.depths[i], self.logps[i],
                        self.cum_logps[i], self.confidences[i], self.branching[i],
                        self.stop_reasons[i], self.topk_tokens[i], self.topk_logps[i])

    def nodes(self) -> list[NodeView]:
        return [self.node(i) for i in range(len(self))]

    def children(self, i: int) -> list[int]:
        return [j for j, p in enumerate(self.parents) if p == i]

    def path_to(self, i: int) -> list[int]:
        """Node ids from the root's child down to ``i`` (the root itself excluded)."""
        path = []
        while i > 0:
            path.append(i)
            i = self.parents[i]
        return path[::-1]

    def ancestor_mask(self) -> np.ndarray:
        """Boolean [n, n] matrix: row i is True at i and at every ancestor of i (root included).

        This is the tree part of the verification attention mask; every row additionally sees
        the whole committed prefix in the KV cache.
        """
        n = len(self)
        m = np.zeros((n, n), dtype=bool)
        for i in range(n):
            p = self.parents[i]
            if p >= 0:
                m[i] = m[p]  # BFS order: the parent's row is complete already
            m[i, i] = True
        return m

    def position_offsets(self) -> np.ndarray:
        """Position of each node relative to the root: its depth (not its BFS index)."""
        return np.asarray(self.depths, dtype=np.int64)

    # --- selection -----------------------------------------------------------------------
    def greedy_path(self, target_argmax: Sequence[int]) -> tuple[list[int], int]:
        """The longest root-to-node path whose tokens equal the target's greedy choices.

        ``target_argmax[i]`` is the target's argmax *after* node i (its next-token prediction).
        Returns (accepted node ids without the root, bonus token = argmax after the last one).
        Every node the walk reaches needs a known choice (see :meth:`greedy_walk` otherwise).
        """
        path, bonus, complete = self.greedy_walk(target_argmax)
        if not complete:
            at = path[-1] if path else 0
            raise ValueError(f"greedy_path needs the target's choice after node {at}; "
                             "use greedy_walk where it may be unknown")
        return path, bonus

    def greedy_walk(self, target_argmax: Sequence[int | None]) -> tuple[list[int], int | None, bool]:
        """:meth:`greedy_path` where the target's choice may be unknown at some nodes.

        ``target_argmax[i]`` is the target's argmax after node i, or None (or missing: the
        sequence may be shorter than the tree) where unknown. Returns (accepted node ids, bonus
        token or None, complete). The walk stops at the first node whose choice is unknown; the
        path is then a lower bound, the bonus None and ``complete`` False.
        """
        child_of: dict[tuple[int, int], int] = {
            (p, t): j for j, (p, t) in enumerate(zip(self.parents, self.tokens)) if p >= 0}
        cur, path = 0, []
        while True:
            choice = target_argmax[cur] if cur < len(target_argmax) else None
            if choice is None:
                return path, None, False
            nxt = child_of.get((cur, int(choice)))
            if nxt is None:
                return path, int(choice), True
            path.append(nxt)
            cur = nxt

    def token_path(self, i: int) -> tuple[int, ...]:
        """Tokens from the root (included) down to node i: the key that matches nodes across
        trees grown from the same root (e.g. a recorded tree and its replay)."""
        return tuple(self.tokens[j] for j in [0] + self.path_to(i))

    # --- (de)serialisation ---------------------------------------------------------------
    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in _ARRAY_FIELDS}
        d["pruned"] = [vars(p).copy() for p in self.pruned]
        d["draft_calls"] = self.draft_calls
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "DraftTree":
        t = cls(**{k: list(d[k]) for k in _ARRAY_FIELDS})
        t.pruned = [PrunedCandidate(**p) for p in d.get("pruned", [])]
        t.draft_calls = int(d.get("draft_calls", 0))
        return t


_ARRAY_FIELDS = ("tokens", "parents", "depths", "logps", "cum_logps", "confidences", "branching",
                 "stop_reasons", "topk_tokens", "topk_logps")


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
    :class:`~dynatree_core.config.GrowthRule`; this function is their reference implementation.
    ``tail`` gives the lookup spans (:func:`add_tail`; none without it), no tail node deeper than
    ``tail_max_depth``.
    """
    tree = DraftTree.with_root(root_token)
    budget = rule.n_max
    frontier = [0]
    log_tau = math.log(rule.tau) if rule.tau > 0 else -math.inf
    cost = CostState(rule) if rule.cost_aware else None
    while frontier:
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
        cands.sort(key=lambda c: (c[1], c[2]))  # BFS order: by parent, then by rank
        frontier = []
        kept_parents = set()
        for cum, i, rank, tok, lp in cands:
            frontier.append(tree._append(tok, i, tree.depths[i] + 1, lp, cum))
            kept_parents.add(i)
        budget -= len(cands)
        for i in expand:
            if i not in kept_parents and tree.stop_reasons[i] != UNRECORDED:
                # expanded, but every child was pruned: record which rule stopped the growth
                reasons = {p.reason for p in tree.pruned if p.parent == i}
                tree.stop_reasons[i] = next((r for r in ("cost", "n_max") if r in reasons), "tau")
    if cost is not None and budget > 0 and tree.draft_calls:
        _fill(tree, cost, budget)
    if rule.rerank and tree.num_drafted > rule.rerank:
        tree = rerank_tree(tree, rule.rerank)
    if rule.lookup_tail and tail is not None:
        add_tail(tree, rule, tail, tail_max_depth)
    return tree


def tail_leaves(tree: DraftTree, n: int) -> list[int]:
    """The ``n`` most probable leaves (nodes without children; ties: lower index first): where a
    lookup tail goes."""
    parents = set(tree.parents[1:])
    leaves = [i for i in range(len(tree)) if i not in parents]
    return sorted(leaves, key=lambda i: (-tree.cum_logps[i], i))[:n]


def add_tail(tree: DraftTree, rule: GrowthRule, tail: "Tail", max_depth: int | None = None) -> None:
    """Append the prompt-lookup tail (:attr:`GrowthRule.lookup_tail`) below the grown tree's leaves,
    most probable leaf first, each span in path order, at most ``tail_n_max`` nodes; a span token
    of log-probability lp at step k below a leaf u has p = p(u) exp((k + 1) lp) (the spans of
    :func:`lookup_span` repeat one lp)."""
    budget = rule.tail_n_max
    leaves = tail_leaves(tree, budget)
    for leaf, span in zip(leaves, tail(tree, leaves)):
        room = rule.lookup_tail if max_depth is None else max(0, max_depth - tree.depths[leaf])
        parent = leaf
        for k, (tok, lp) in enumerate(span[:min(room, rule.lookup_tail, budget)]):
            parent = tree._append(tok, parent, tree.depths[parent] + 1, lp, tree.cum_logps[leaf] + (k + 1) * lp)
            tree.stop_reasons[parent] = LOOKUP_TAIL
            budget -= 1
        if budget <= 0:
            break


def lookup_span(seq: Sequence[int], context: Sequence[int], m: int, max_ngram: int = 5,
                min_ngram: int = TAIL_MIN_NGRAM) -> list[tuple[int, float]]:
    """Prompt lookup as a copy, in plain Python (the reference of the device's
    :func:`~dynatree_core.drafters.lookup_spans`): the longest n-gram (``max_ngram`` down to
    ``min_ngram`` tokens) ending ``context`` that occurs earlier in ``seq`` with a token after it;
    the ``m`` tokens after its latest occurrence that has ``m`` after it (else its latest), each
    scored log(C / (C + 1)) for C occurrences. Empty when nothing matches."""
    seq, ctx = list(seq), list(context)
    for n in range(min(max_ngram, len(ctx)), min_ngram - 1, -1):
        pat = ctx[len(ctx) - n:]
        hits = [j for j in range(n, len(seq)) if seq[j - n:j] == pat]  # j: the position after it
        if hits:
            full = [j for j in hits if j + m <= len(seq)]
            j = max(full) if full else max(hits)
            lp = math.log(len(hits) / (len(hits) + 1))
            return [(t, lp) for t in seq[j:j + m]]
    return []


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
    same order (``device_tree``), so both build identical trees.
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
    for f in _ARRAY_FIELDS:
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


def replay_tree(tree: DraftTree, rule: GrowthRule) -> DraftTree:
    """Re-grow a recorded tree under another rule using only its saved draft top-k lists.

    Works wherever the new tree only expands nodes the recorded tree expanded (same or smaller
    trees); a node the recording never fed to the draft raises :class:`KeyError`, naming it.
    """
    return _replay(tree, rule, strict=True)[0]


def replay_partial(recorded: DraftTree, rule: GrowthRule) -> tuple[DraftTree, list[int]]:
    """:func:`replay_tree`, but growth stops where the recorded draft top-k lists run out.

    A node the new rule wants to expand but the recording never fed to the draft grows no
    children and gets the stop reason :data:`UNRECORDED`. Returns (tree, ids of those nodes in
    BFS order); with none of them the tree is exactly ``replay_tree(recorded, rule)``.
    """
    return _replay(recorded, rule, strict=False)


def recorded_tails(tree: DraftTree) -> dict[tuple[int, ...], list[tuple[int, float]]]:
    """The prompt-lookup spans a recorded tree holds, by the token path of the leaf they hang from."""
    spans: dict[tuple[int, ...], list[tuple[int, float]]] = {}
    for i in range(len(tree)):
        if tree.stop_reasons[i] == LOOKUP_TAIL and tree.stop_reasons[tree.parents[i]] != LOOKUP_TAIL:
            span, j = [], i
            while True:
                span.append((tree.tokens[j], tree.logps[j]))
                nxt = [c for c in tree.children(j) if tree.stop_reasons[c] == LOOKUP_TAIL]
                if not nxt:
                    break
                j = nxt[0]
            spans[tree.token_path(tree.parents[i])] = span
    return spans


def _replay(tree: DraftTree, rule: GrowthRule, strict: bool) -> tuple[DraftTree, list[int]]:
    by_path: dict[tuple[int, ...], TopK] = {}
    for i in range(len(tree)):
        if tree.topk_tokens[i] is not None:
            by_path[tree.token_path(i)] = (tree.topk_tokens[i], tree.topk_logps[i])
    stopped: list[int] = []
    # a lookup tail is known where the recording placed one (same leaf path): replays have no text
    spans = recorded_tails(tree)

    def tail(new: DraftTree, leaves: list[int]) -> list[list[tuple[int, float]]]:
        return [spans.get(new.token_path(i), []) for i in leaves]

    def propose(new: DraftTree, ids: list[int]) -> "list[TopK | None]":
        out: "list[TopK | None]" = []
        for i in ids:
            key = new.token_path(i)
            if key not in by_path:
                if strict:
                    raise KeyError(f"replay needs the draft distribution after tokens {list(key)}, "
                                   "which the recorded iteration never computed")
                stopped.append(i)
            out.append(by_path.get(key))
        return out

    return grow_tree(tree.tokens[0], rule, propose, tail), stopped

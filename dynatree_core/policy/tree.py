"""The draft token tree as plain data (torch-free, so traces can be saved, replayed and drawn).

Node 0 is the *root*: the last committed token, which the target has not yet consumed. Its
children (depth 1) are candidates for the next token, and so on. Nodes are stored in BFS order
(level by level, siblings by parent then rank), which is also the order they are verified in, so
every ancestor precedes its descendants. :func:`~dynatree_core.policy.growth.grow_tree` grows one;
:data:`STOP_REASONS` names why a node was not expanded.
"""


from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Sequence

import numpy as np

#: why a node did not grow children (``"expanded"`` if it did)
STOP_REASONS: tuple[str, ...] = ("expanded", "tau", "rho_stop", "depth_gate", "d_max", "n_max",
                                 "static", "top_k", "cost", "rerank", "lookup_tail", "batch")
#: stop reason of a prompt-lookup tail node (:attr:`GrowthRule.lookup_tail`): proposed by lookup
#: below a drafted leaf, never fed to the draft
LOOKUP_TAIL = "lookup_tail"
#: stop reason of a node the growth rule wanted to expand but whose draft top-k is unknown
#: (``propose`` answered None: a replay reached a node the recording never fed to the draft)
UNRECORDED = "unrecorded"

#: the shortest n-gram a lookup tail follows: a one-token match is mostly chance (the fitted
#: :class:`~dynatree_core.drafters.LookupMix` gives it a weight of about 1/257)
TAIL_MIN_NGRAM = 2


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
        d = {k: getattr(self, k) for k in ARRAY_FIELDS}
        d["pruned"] = [vars(p).copy() for p in self.pruned]
        d["draft_calls"] = self.draft_calls
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "DraftTree":
        t = cls(**{k: list(d[k]) for k in ARRAY_FIELDS})
        t.pruned = [PrunedCandidate(**p) for p in d.get("pruned", [])]
        t.draft_calls = int(d.get("draft_calls", 0))
        return t


ARRAY_FIELDS = ("tokens", "parents", "depths", "logps", "cum_logps", "confidences", "branching",
                 "stop_reasons", "topk_tokens", "topk_logps")



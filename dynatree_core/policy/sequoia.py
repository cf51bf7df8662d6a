"""Sequoia's static tree (Chen et al. 2024), torch-free: the tree of n drafted nodes that maximises the
expected accepted length under the positional acceptance assumption, built once from an
acceptance vector (:func:`sequoia_shape`) and grown every iteration as
:attr:`~dynatree_core.policy.growth_rule.GrowthRule.shape`; :func:`expected_accepted` scores a tree.
"""

from __future__ import annotations

import math
from collections import deque
from numbers import Integral, Real
from typing import Sequence

import numpy as np

from dynatree_core.policy.checks import check_sequence, int_at_least

__all__ = ["sequoia_shape", "expected_accepted", "shape_tree", "max_nodes"]

#: slack on Σ a_k <= 1: a vector measured in float32 may overshoot 1 by rounding
_SUM_SLACK = 1e-9


# --- validation ---------------------------------------------------------------------------
def _check_acceptance(acceptance: Sequence[float]) -> np.ndarray:
    """``acceptance`` as a float64 array; raises naming the parameter and its allowed range."""
    vals = check_sequence("acceptance", acceptance, "probabilities", "one probability per draft rank 0..K-1")
    for k, a in enumerate(vals):
        if isinstance(a, bool) or not isinstance(a, Real):
            raise TypeError(f"acceptance[{k}] must be a real number in [0, 1], got {type(a).__name__}")
        if not (0.0 <= float(a) <= 1.0):  # also rejects NaN
            raise ValueError(f"acceptance[{k}] must be in [0, 1], got {a!r}")
    arr = np.asarray(vals, dtype=np.float64)
    if arr.sum() > 1.0 + _SUM_SLACK:
        raise ValueError("acceptance must sum to at most 1 (the draft's ranks are disjoint events), "
                         f"got sum {arr.sum():.6g} for {vals}")
    return arr


def max_nodes(k: int, d_max: int) -> int:
    """The most drafted nodes a tree of depth <= ``d_max`` with <= ``k`` children per node holds:
    Σ_{l=1}^{d_max} k^l (a chain of d_max nodes when k = 1)."""
    k = int_at_least("k", k, 1)
    d_max = int_at_least("d_max", d_max, 0)
    return d_max if k == 1 else (k ** (d_max + 1) - k) // (k - 1)


# --- the dynamic program ------------------------------------------------------------------
def sequoia_shape(acceptance: Sequence[float], n: int, d_max: int | None = None) -> tuple[int, ...]:
    """The static tree of ``n`` drafted nodes and depth <= ``d_max`` that maximises E[ℓ].

    **The model.** Under the positional acceptance assumption the chance that the target's greedy
    token is the draft's rank-k candidate is a fixed ``acceptance[k]`` = a_k (k = 0..K-1), whatever the
    node's depth or context. The ranks are disjoint events, so Σ_k a_k <= 1, and a drafted node u is
    accepted iff every node on its path is, so (root and bonus excluded)::

        E[ℓ](T) = Σ_{u in T, u != root} Π_{v in path(u)} a_{rank(v)}

    **The program.** The engine gives a node with branching b the draft's ranks 0..b-1 (never
    skipping one), so only contiguous rank prefixes are considered, the child of rank i getting a
    subtree of m_i >= 1 nodes::

        G(m, d) = max_{b, m_0..m_{b-1} >= 1, Σ m_i = m} Σ_i a_i (1 + G(m_i - 1, d - 1))

    G(m, d): the best value of m descendants of a node that may reach d levels below it (G(0, d) = 0,
    G(m > 0, 0) infeasible); the inner maximisation is a knapsack over the ranks in order
    (:func:`_solve`). With a non-increasing ``acceptance`` this is also the unrestricted optimum, as
    Sequoia assumes; otherwise (a noisy measurement) it is the best tree the engine can run.

    Returns the branching B(u) of every node in the BFS order of the tree (root first, leaves 0),
    a tuple of length n + 1: node u's children are the draft's ranks 0..B(u)-1, appended in BFS
    order (by parent, then rank) — exactly how :func:`dynatree_core.policy.growth.grow_tree` reads
    :attr:`~dynatree_core.policy.growth_rule.GrowthRule.shape`. ``d_max=None`` puts no limit on the depth.

    ``n`` is a node budget (the engine's N_max): when more nodes are asked for than a tree of
    depth <= d_max with K = len(acceptance) children per node holds (:func:`max_nodes`), the
    result is that complete tree, the best one within the budget since E[ℓ] never decreases
    with a node added (its shape then has max_nodes(K, d_max) + 1 entries). Ties between equally
    good trees go to the first rank allocation found (smallest subtree for rank 0 first), so the
    result is deterministic.
    """
    a = _check_acceptance(acceptance)
    n = int_at_least("n", n, 0)
    if d_max is not None:
        d_max = int_at_least("d_max", d_max, 1)
    K = len(a)
    if d_max is not None:
        n = min(n, max_nodes(K, d_max))  # a budget past the complete tree buys nothing more
    # a tree of n nodes is never deeper than n: a larger limit changes nothing (and costs time)
    depth = n if d_max is None else min(d_max, n)
    if n == 0:
        return (0,)
    choice = _solve(a, n, depth)
    return _build_shape(choice, n, depth)


def _solve(a: np.ndarray, n: int, depth: int) -> np.ndarray:
    """Fill the DP; returns ``choice[d, i, m]``: with ``m`` nodes left for ranks i, i+1, ... of a
    node that may reach ``d`` levels below it, the subtree size given to rank i (0: none left).

    Per depth budget d (1..depth) and rank i (K-1 down to 0)::

        H_i(m) = max_{s=1..m} c_i(s) + H_{i+1}(m - s),   H_i(0) = 0,   H_K(m > 0) = -inf
        c_i(s) = a_i (1 + G(s - 1, d - 1)),              G(., d) = H_0

    Each max-plus convolution is one vectorised [m, s] table (O(K n^2) per level).
    """
    K = len(a)
    ms = np.arange(n + 1)
    m_grid, s_grid = np.meshgrid(ms, ms, indexing="ij")  # rows m, columns s
    valid = (s_grid >= 1) & (s_grid <= m_grid)
    rest = np.where(valid, m_grid - s_grid, 0)
    choice = np.zeros((depth + 1, K, n + 1), dtype=np.int64)
    g_prev = np.full(n + 1, -np.inf)
    g_prev[0] = 0.0  # G(., 0): nothing may hang below a node at the depth limit
    for d in range(1, depth + 1):
        h_next = np.full(n + 1, -np.inf)
        h_next[0] = 0.0  # H_K: no rank left, so only m = 0 is feasible
        for i in range(K - 1, -1, -1):
            # c_i(s) for s = 0..n (s = 0 unused); -inf stays -inf even when a_i = 0 (0 * -inf = nan)
            c = np.full(n + 1, -np.inf)
            feasible = np.isfinite(g_prev[:-1])
            c[1:][feasible] = a[i] * (1.0 + g_prev[:-1][feasible])
            table = np.where(valid, c[s_grid] + h_next[rest], -np.inf)
            best_s = np.argmax(table, axis=1)  # first maximum: deterministic ties
            h = table[ms, best_s]
            h[0] = 0.0
            best_s[0] = 0
            best_s[~np.isfinite(h)] = 0
            choice[d, i] = best_s
            h_next = h
        if np.array_equal(h_next, g_prev):
            # G(., d) == G(., d-1): every deeper level repeats this one (the recursion only reads
            # the level above), so the remaining choices are copies; saves O(K n^2) per level
            choice[d + 1:] = choice[d]
            break
        g_prev = h_next
    return choice


def _build_shape(choice: np.ndarray, n: int, depth: int) -> tuple[int, ...]:
    """Unfold the DP's choices into the BFS branching list (root first)."""
    K = choice.shape[1]
    branching: list[int] = []
    queue: deque[tuple[int, int]] = deque([(n, depth)])  # (descendants, depth budget) per node
    while queue:
        m, d = queue.popleft()
        sizes = []
        for i in range(K):
            if m == 0:
                break
            s = int(choice[d, i, m])
            if s == 0:  # unreachable for a feasible (m, d); guards against a silent bad tree
                raise AssertionError(f"sequoia DP: no allocation for {m} nodes at depth budget {d}")
            sizes.append(s)
            m -= s
        if m:
            raise AssertionError("sequoia DP: ranks exhausted before the nodes were placed")
        branching.append(len(sizes))
        queue.extend((s - 1, d - 1) for s in sizes)
    assert len(branching) == n + 1
    return tuple(branching)


# --- reading a shape ----------------------------------------------------------------------
def shape_tree(shape: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    """The static tree of a BFS branching list: (parents, ranks, depths), one entry per node.

    Node 0 is the root (parent -1, rank -1, depth 0); node u's children are its ranks
    0..shape[u]-1, numbered in BFS order. Raises ValueError unless ``shape`` describes exactly one
    tree: non-negative ints, 1 + Σ shape == len(shape), every listed node reachable from the root.
    """
    b = check_sequence("shape", shape, "non-negative ints", "its first entry is the root's branching")
    for u, x in enumerate(b):
        if isinstance(x, bool) or not isinstance(x, Integral):
            raise TypeError(f"shape[{u}] must be a non-negative int, got {type(x).__name__}")
        if x < 0:
            raise ValueError(f"shape[{u}] must be a non-negative int, got {x}")
    if 1 + sum(b) != len(b):
        raise ValueError(f"shape must list one branching per node: 1 + sum(shape) = {1 + sum(b)} nodes "
                         f"but len(shape) = {len(b)}")
    parents, ranks, depths = [-1], [-1], [0]
    for u, bu in enumerate(b):
        if u >= len(parents):  # node u was never created: an earlier leaf cut the tree short
            raise ValueError(f"shape: node {u} is not reachable from the root (the nodes before it "
                             f"create only {len(parents)} nodes)")
        for r in range(int(bu)):
            parents.append(u)
            ranks.append(r)
            depths.append(depths[u] + 1)
    return parents, ranks, depths


def expected_accepted(shape: Sequence[int], acceptance: Sequence[float]) -> float:
    """E[ℓ] of a static tree: Σ over drafted nodes of Π a_{rank} along the node's path.

    ``shape`` as returned by :func:`sequoia_shape` (see :func:`shape_tree`); every branching must
    be <= len(acceptance), the ranks the vector covers.
    """
    a = _check_acceptance(acceptance)
    parents, ranks, _ = shape_tree(shape)
    widest = max(shape)
    if widest > len(a):
        raise ValueError(f"shape has a node with {widest} children but acceptance covers only ranks "
                         f"0..{len(a) - 1}: every shape entry must be <= len(acceptance) = {len(a)}")
    reach = [1.0] * len(parents)  # P(node accepted); BFS order: a parent is computed first
    for u in range(1, len(parents)):
        reach[u] = reach[parents[u]] * float(a[ranks[u]])
    return math.fsum(reach[1:])

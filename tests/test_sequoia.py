"""Sequoia's dynamic program against brute force over every small tree (torch-free module)."""

from __future__ import annotations

import functools
import itertools
import math
from collections import deque

import pytest
from hypothesis import given, settings, strategies as st

from dynatree_core.policy.config import GrowthRule
from dynatree_core.policy.sequoia import expected_accepted, max_nodes, sequoia_shape, shape_tree
from dynatree_core.policy.growth import grow_tree

# --- brute force -----------------------------------------------------------------------------
# A tree is a tuple of (rank, subtree) pairs: the children of its root, by increasing rank.


@functools.lru_cache(maxsize=None)
def all_trees(m: int, depth: int, k: int, contiguous: bool) -> tuple:
    """Every tree with exactly m nodes below its root, at most ``depth`` levels deep, children
    drawn from ranks 0..k-1: as a prefix 0..b-1 (``contiguous``, what the engine runs) or any
    subset of them."""
    if m == 0:
        return ((),)
    if depth == 0:
        return ()
    out = []
    subsets = ([tuple(range(b)) for b in range(1, k + 1)] if contiguous else
               [c for b in range(1, k + 1) for c in itertools.combinations(range(k), b)])
    for ranks in subsets:
        for sizes in _compositions(m, len(ranks)):
            options = [all_trees(s - 1, depth - 1, k, contiguous) for s in sizes]
            for subs in itertools.product(*options):
                out.append(tuple(zip(ranks, subs)))
    return tuple(out)


def _compositions(m: int, parts: int):
    """Ordered ways to write m as a sum of ``parts`` positive ints."""
    if parts == 1:
        yield (m,)
        return
    for first in range(1, m - parts + 2):
        for rest in _compositions(m - first, parts - 1):
            yield (first,) + rest


def value(tree: tuple, acc) -> float:
    """Expected accepted length: Σ over nodes of Π acceptance[rank] along its path."""
    return sum(acc[r] * (1 + value(sub, acc)) for r, sub in tree)


def brute_best(acc, n: int, d_max: int | None, contiguous: bool = True) -> float | None:
    trees = all_trees(n, n if d_max is None else d_max, len(acc), contiguous)
    return max((value(t, acc) for t in trees), default=None)


def to_shape(tree: tuple) -> tuple[int, ...]:
    """BFS branching list of a contiguous-rank tree."""
    out, queue = [], deque([tree])
    while queue:
        t = queue.popleft()
        out.append(len(t))
        queue.extend(sub for _, sub in t)
    return tuple(out)


def depth_of(shape) -> int:
    return max(shape_tree(shape)[2])


# --- strategies --------------------------------------------------------------------------------
@st.composite
def acceptance_vectors(draw, max_k: int = 3):
    """1..max_k probabilities summing to at most 1 (zeros included, order arbitrary)."""
    k = draw(st.integers(1, max_k))
    weights = draw(st.lists(st.sampled_from([0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.0]) | st.floats(0, 1),
                            min_size=k, max_size=k))
    mass = draw(st.floats(0, 1))
    total = sum(weights)
    return [w * mass / total if total > 0 else 0.0 for w in weights]


# --- the DP is optimal ---------------------------------------------------------------------------
@settings(max_examples=120, deadline=None)
@given(acc=acceptance_vectors(), n=st.integers(0, 6), d_max=st.none() | st.integers(1, 6))
def test_dp_equals_brute_force(acc, n, d_max):
    shape = sequoia_shape(acc, n, d_max)
    best = brute_best(acc, n, d_max)
    if best is None:  # no tree of n nodes fits: the budget buys the complete tree
        assert d_max is not None and n > max_nodes(len(acc), d_max)
        n = max_nodes(len(acc), d_max)
        best = brute_best(acc, n, d_max)
    assert len(shape) == n + 1
    assert expected_accepted(shape, acc) == pytest.approx(best, abs=1e-12)
    if d_max is not None:
        assert n == 0 or depth_of(shape) <= d_max
    assert max(shape) <= len(acc)


@settings(max_examples=60, deadline=None)
@given(acc=acceptance_vectors(), n=st.integers(1, 6), d_max=st.none() | st.integers(1, 4))
def test_sorted_acceptance_loses_nothing_to_contiguous_ranks(acc, n, d_max):
    # Sequoia's own setting (non-increasing acceptance): the best tree over *any* rank subsets
    # uses a prefix of ranks, so the executable DP is also the unrestricted optimum
    acc = sorted(acc, reverse=True)
    free = brute_best(acc, n, d_max, contiguous=False)
    if free is None:
        return
    assert brute_best(acc, n, d_max) == pytest.approx(free, abs=1e-12)
    assert expected_accepted(sequoia_shape(acc, n, d_max), acc) == pytest.approx(free, abs=1e-12)


def test_unsorted_acceptance_still_takes_ranks_in_draft_order():
    # rank 1 is the better rank, but a node can only get rank 1 together with rank 0
    acc = [0.1, 0.6]
    assert sequoia_shape(acc, 1) == (1, 0)
    assert expected_accepted((1, 0), acc) == pytest.approx(0.1)
    assert brute_best(acc, 1, None, contiguous=False) == pytest.approx(0.6)  # not executable
    two = sequoia_shape(acc, 2, 1)
    assert two == (2, 0, 0)
    assert expected_accepted(two, acc) == pytest.approx(0.7)


# --- structure ---------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(acc=acceptance_vectors(max_k=4), d_max=st.none() | st.integers(2, 5))
def test_expected_length_is_monotone_in_n(acc, d_max):
    values = [expected_accepted(sequoia_shape(acc, n, d_max), acc) for n in range(0, 12)]
    assert values[0] == 0.0
    assert all(b >= a - 1e-12 for a, b in zip(values, values[1:]))


@pytest.mark.parametrize("a", [0.0, 0.3, 0.9, 1.0])
@pytest.mark.parametrize("n", [0, 1, 5])
def test_single_rank_gives_a_chain(a, n):
    shape = sequoia_shape([a], n)
    assert shape == (1,) * n + (0,)
    assert shape_tree(shape)[2] == list(range(n + 1))
    assert expected_accepted(shape, [a]) == pytest.approx(sum(a ** k for k in range(1, n + 1)))


@pytest.mark.parametrize("d_max", [1, 2, 3])
def test_depth_limit_is_respected(d_max):
    acc = [0.9, 0.05, 0.03]  # unlimited, the best tree is a deep chain
    assert depth_of(sequoia_shape(acc, 6)) > 3
    shape = sequoia_shape(acc, 6 if d_max > 1 else 3, d_max)
    assert depth_of(shape) <= d_max
    if d_max == 1:
        assert shape == (3, 0, 0, 0)  # a star: every rank under the root


@settings(max_examples=60, deadline=None)
@given(acc=acceptance_vectors(max_k=4), n=st.integers(0, 20))
def test_shape_is_a_bfs_tree_with_contiguous_ranks(acc, n):
    shape = sequoia_shape(acc, n, 6)
    parents, ranks, depths = shape_tree(shape)
    assert len(shape) == len(parents) == min(n, max_nodes(len(acc), 6)) + 1 and (shape[0] > 0) == (n > 0)
    assert parents[0] == -1 and depths[0] == 0
    assert parents[1:] == sorted(parents[1:])  # BFS: children listed by parent
    assert depths == sorted(depths)  # BFS: level by level
    for u in range(len(shape)):
        kids = [v for v in range(len(parents)) if parents[v] == u]
        assert [ranks[v] for v in kids] == list(range(shape[u]))
        assert all(depths[v] == depths[u] + 1 for v in kids)


def test_grow_tree_builds_the_shape_it_is_given():
    # the contract with the engine: GrowthRule.shape is read as this module's BFS branching list
    acc = [0.55, 0.2, 0.1]
    shape = sequoia_shape(acc, 9, 4)
    parents, ranks, depths = shape_tree(shape)
    rule = GrowthRule(d0=4, d_max=4, b_min=1, b_mid=1, b_max=1, tau_h=0.5, tau_l=0.5, rho_stop=0.0,
                      rho_deep=0.0, tau=0.0, n_max=9, shape=shape)

    def propose(tree, ids):  # distinct tokens per node, ranks readable from the token id
        return [([100 * (i + 1) + r for r in range(3)], [math.log(p) for p in (0.6, 0.3, 0.1)]) for i in ids]

    tree = grow_tree(7, rule, propose)
    assert tree.parents == parents and tree.depths == depths
    assert [t % 100 for t in tree.tokens[1:]] == ranks[1:]
    assert tree.branching == list(shape)


def test_expected_accepted_by_hand():
    # root -> (rank 0 -> rank 0), rank 1: 0.5 + 0.3 + 0.5 * 0.5
    assert expected_accepted((2, 1, 0, 0), [0.5, 0.3]) == pytest.approx(1.05)
    assert shape_tree((2, 1, 0, 0)) == ([-1, 0, 0, 1], [-1, 0, 1, 0], [0, 1, 1, 2])
    assert to_shape(((0, ((0, ()),)), (1, ()))) == (2, 1, 0, 0)


def test_max_nodes():
    assert max_nodes(1, 4) == 4
    assert max_nodes(2, 3) == 2 + 4 + 8
    assert max_nodes(3, 2) == 3 + 9
    assert all(len(all_trees(max_nodes(k, d), d, k, True)) > 0 for k in (1, 2) for d in (1, 2))
    assert all(len(all_trees(max_nodes(k, d) + 1, d, k, True)) == 0 for k in (1, 2) for d in (1, 2))


# --- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize("acc,err", [([], ValueError), ([1.2], ValueError), ([-0.1], ValueError),
                                     ([0.6, 0.5], ValueError), ([float("nan")], ValueError),
                                     ("0.5", TypeError), ([True], TypeError), (None, TypeError),
                                     (["a"], TypeError)])
def test_bad_acceptance(acc, err):
    with pytest.raises(err, match="acceptance"):
        sequoia_shape(acc, 3)
    with pytest.raises(err, match="acceptance"):
        expected_accepted((1, 0), acc)


@pytest.mark.parametrize("n,err", [(-1, ValueError), (1.5, TypeError), (True, TypeError), ("3", TypeError)])
def test_bad_n(n, err):
    with pytest.raises(err, match="n must be"):
        sequoia_shape([0.5], n)


@pytest.mark.parametrize("d_max,err", [(0, ValueError), (-2, ValueError), (2.0, TypeError)])
def test_bad_d_max(d_max, err):
    with pytest.raises(err, match="d_max"):
        sequoia_shape([0.5], 3, d_max)


def test_a_budget_past_the_complete_tree_gives_the_complete_tree():
    assert sequoia_shape([0.7], 4, 3) == sequoia_shape([0.7], 3, 3) == (1, 1, 1, 0)
    assert sequoia_shape([0.5, 0.2], 100, 2) == (2, 2, 2, 0, 0, 0, 0)
    assert sequoia_shape([0.0, 0.0], 9, 1) == (2, 0, 0)  # worthless ranks still fill the budget


@pytest.mark.parametrize("shape,err", [((), ValueError), ((-1,), ValueError), ((1,), ValueError),
                                       ((0, 1), ValueError), ((2, 0, 0, 0), ValueError),
                                       ((1, 0, 1), ValueError), ((1.0, 0), TypeError), ("10", TypeError)])
def test_bad_shape(shape, err):
    with pytest.raises(err, match="shape"):
        shape_tree(shape)


def test_shape_wider_than_acceptance():
    with pytest.raises(ValueError, match="shape .*acceptance"):
        expected_accepted((3, 0, 0, 0), [0.5, 0.2])

"""Deterministic top-down layered layout of a draft tree (no graphviz).

Leaves get consecutive integer x positions in depth-first order (children by rank, i.e. by BFS
index, which is the engine's rank order), and every inner node sits midway between its first and
last child. y is the depth. This is the classic "tidy" layered layout: edges never cross, the
same tree always gets the same picture, and the width is exactly the number of leaves.
"""

from __future__ import annotations

from typing import Sequence

import networkx as nx

from dynatree_core.policy.tree import DraftTree


def tree_graph(parents: Sequence[int], order: Sequence[float] | None = None) -> nx.DiGraph:
    """A rooted DiGraph from a parent array (node 0 = root, parent -1).

    ``order`` (default: the node index) sorts siblings left to right; it is stored on every node
    as the ``order`` attribute.
    """
    g = nx.DiGraph()
    for i, p in enumerate(parents):
        g.add_node(i, order=(order[i] if order is not None else i))
        if p >= 0:
            g.add_edge(int(p), i)
    return g


def draft_tree_graph(tree: DraftTree) -> nx.DiGraph:
    """The tree as a DiGraph whose nodes carry the per-node fields (token, depth, ...)."""
    g = tree_graph(tree.parents)
    for v in tree.nodes():
        g.nodes[v.index].update(token=v.token, depth=v.depth, logp=v.logp, cum_logp=v.cum_logp,
                                confidence=v.confidence, branching=v.branching,
                                stop_reason=v.stop_reason)
    return g


def layered_layout(graph: nx.DiGraph, root: int = 0) -> dict[int, tuple[float, int]]:
    """{node: (x, depth)} for a rooted tree; see the module docstring for the rule."""
    pos: dict[int, tuple[float, int]] = {}
    next_leaf = 0
    # Iterative post-order so that 256-node chains cannot hit the recursion limit.
    stack: list[tuple[int, int, bool]] = [(root, 0, False)]
    while stack:
        node, depth, done = stack.pop()
        kids = sorted(graph.successors(node), key=lambda k: (graph.nodes[k].get("order", k), k))
        if not kids:
            pos[node] = (float(next_leaf), depth)
            next_leaf += 1
        elif done:
            pos[node] = ((pos[kids[0]][0] + pos[kids[-1]][0]) / 2.0, depth)
        else:
            stack.append((node, depth, True))
            stack.extend((k, depth + 1, False) for k in reversed(kids))
    return pos

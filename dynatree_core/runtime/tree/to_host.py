"""Device tree arrays -> the torch-free :class:`~dynatree_core.policy.tree.DraftTree` traces and viewers read.

:meth:`DeviceTree.select` fetches the tree's arrays with the target's choices in one transfer;
:func:`host_tree` turns them into the reference tree type, rebuilding the list of pruned candidates
from the per-candidate statuses in the order :func:`~dynatree_core.policy.growth.grow_tree` records them.
"""

from __future__ import annotations

import math

import numpy as np

from dynatree_core.policy.tree import STOP_REASONS, DraftTree, PrunedCandidate
from dynatree_core.runtime.tree.codes import (PRUNE_REASON, PRUNED_BATCH, PRUNED_COST, PRUNED_NMAX, PRUNED_RERANK,
                                              PRUNED_TAU)


def unpack(a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
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
        confidences=_confidences(a, fed, top_l),
        branching=a["branching"].tolist(), stop_reasons=[STOP_REASONS[c] for c in a["stop"].tolist()],
        topk_tokens=[top_t[i] if fed[i] else None for i in range(n)],
        topk_logps=[top_l[i] if fed[i] else None for i in range(n)])
    tree.draft_calls = draft_calls
    if pruned:
        tree.pruned = _pruned(tree, a["cand_status"], fed)
    return tree


def _confidences(a: dict[str, np.ndarray], fed: np.ndarray, top_l: list[list[float]]) -> list[float | None]:
    """c(u) of the expanded nodes: as the drafter stated it, else its first candidate's probability."""
    if "confidence" in a:
        return [float(c) if f else None for c, f in zip(a["confidence"].tolist(), fed)]
    return [math.exp(top_l[i][0]) if fed[i] else None for i in range(len(fed))]


def _pruned(tree: DraftTree, status: np.ndarray, fed: np.ndarray) -> list[PrunedCandidate]:
    """The pruned candidates in :func:`~dynatree_core.policy.growth.grow_tree`'s order: per level the τ-pruned
    (by parent and rank), then the budget's and the cost's cuts (most probable first); the
    EAGLE-2 rerank's and the batch budget's drops last (by parent and rank)."""
    out: list[PrunedCandidate] = []
    reranked: list[PrunedCandidate] = []
    fed_ids = np.flatnonzero(fed).tolist()
    for depth in sorted({tree.depths[i] for i in fed_ids}):
        cuts: dict[int, list[PrunedCandidate]] = {PRUNED_NMAX: [], PRUNED_COST: []}
        for i in (i for i in fed_ids if tree.depths[i] == depth):
            for r, s in enumerate(status[i].tolist()):
                if s in PRUNE_REASON:
                    lp = tree.topk_logps[i][r]
                    cand = PrunedCandidate(i, tree.topk_tokens[i][r], lp, tree.cum_logps[i] + lp, r, PRUNE_REASON[s])
                    (out if s == PRUNED_TAU else reranked if s in (PRUNED_RERANK, PRUNED_BATCH) else cuts[s]).append(cand)
        for s in (PRUNED_NMAX, PRUNED_COST):
            out.extend(sorted(cuts[s], key=lambda c: (-c.cum_logp, c.parent, c.rank)))
    return out + sorted(reranked, key=lambda c: (c.parent, c.rank))

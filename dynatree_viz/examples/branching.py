"""Picking the iteration that shows what a tree buys: a wide tree whose accepted path took a
draft candidate that was *not* its parent's first choice (where a chain would have stopped).

Notebook 02 and the README's pictures pick their worked example with :func:`branching_example`,
so the example stays true when the pair, the draft or the preset changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from dynatree_core.records.trace import IterationRecord, Trace


#: prompts whose continuations the default pair's draft is less sure of than of a repeated
#: sentence (stories): where its trees grow wide enough to branch (tried after one's own prompt)
EXAMPLE_PROMPTS: tuple[str, ...] = (
    "The old man looked at the sky and said",
    "Once upon a time, in a small village by the sea, there lived",
)


@dataclass
class OffTop1:
    """An accepted node the draft did not rank first among its parent's candidates.

    ``rank`` counts from 1 (2 = the draft's second choice); ``q`` is the draft's probability of
    the node's token, ``top1_q`` that of the first choice it passed over."""

    node: int
    parent: int
    rank: int
    q: float
    top1_token: int
    top1_q: float


#: how much less probable than the first choice an accepted candidate must be to count as the
#: draft's second (or later) choice: q = 0.33 against 0.33 is a tie that the sort order broke, not
#: a choice a chain would have missed
TIE_MARGIN = 0.05


def off_top1(rec: IterationRecord, margin: float = TIE_MARGIN) -> list[OffTop1]:
    """The accepted nodes that were not their parent's top-1 draft candidate, and were clearly
    less probable: q at least ``margin`` below the top-1's q (a near tie is no second choice).
    Empty where the trace kept no top-k at the parent."""
    if not 0 <= margin < 1:
        raise ValueError(f"margin must be in [0, 1), got {margin!r}")
    tree = rec.tree
    out = []
    for i in rec.accepted_path:
        p = tree.parents[i]
        top = tree.topk_tokens[p] if p < len(tree.topk_tokens) else None
        logps = tree.topk_logps[p] if p < len(tree.topk_logps) else None
        if not top or tree.tokens[i] == top[0]:
            continue
        q, top1_q = math.exp(tree.logps[i]), math.exp(logps[0]) if logps else float("nan")
        if not top1_q - q >= margin:  # a near tie (or no recorded q): not a clear second choice
            continue
        rank = top.index(tree.tokens[i]) + 1 if tree.tokens[i] in top else len(top) + 1
        out.append(OffTop1(i, p, rank, q, top[0], top1_q))
    return out


def branching_example(source: Trace | Iterable[IterationRecord], min_nodes: int = 15,
                      margin: float = TIE_MARGIN) -> IterationRecord | None:
    """The iteration (of a trace, or among some records) that best shows a tree at work: at
    least ``min_nodes`` drafted nodes and an accepted node that was clearly not its parent's
    top-1 (:func:`off_top1` with ``margin``: never a tie); among those the longest accepted
    path, then the biggest tree, then the earliest. None if no iteration qualifies."""
    records = source.iterations if isinstance(source, Trace) else list(source)
    fits = [r for r in records if r.num_nodes >= min_nodes and off_top1(r, margin)]
    if not fits:
        return None
    return max(fits, key=lambda r: (r.accepted_length, r.num_nodes, -r.index))


__all__ = ["EXAMPLE_PROMPTS", "OffTop1", "TIE_MARGIN", "branching_example", "off_top1"]

"""The prompt-lookup tail, torch-free: copied spans below a drafted tree's most probable leaves
(:attr:`~dynatree_core.policy.growth_rule.GrowthRule.lookup_tail`; the reference of
:class:`~dynatree_core.runtime.tree.tail.TailGrowth`).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from dynatree_core.policy.growth_rule import GrowthRule
from dynatree_core.policy.tree import LOOKUP_TAIL, TAIL_MIN_NGRAM, DraftTree

#: ``tail(tree, leaves)`` -> the prompt-lookup span below each of those leaves, as (token, log-prob)
#: pairs (empty: none), at most ``GrowthRule.lookup_tail`` long (:attr:`GrowthRule.lookup_tail`)
Tail = Callable[["DraftTree", list[int]], "list[list[tuple[int, float]]]"]


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
    :func:`~dynatree_core.runtime.ngram.lookup_spans`): the longest n-gram (``max_ngram`` down to
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



"""Replaying recorded trees under another rule (torch-free): what the parameter explorer and the
oracle do with a trace, with no model at hand."""

from __future__ import annotations

from dynatree_core.policy.growth import TopK, grow_tree
from dynatree_core.policy.growth_rule import GrowthRule
from dynatree_core.policy.tree import LOOKUP_TAIL, DraftTree


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

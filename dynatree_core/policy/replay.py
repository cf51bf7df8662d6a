"""Replaying recorded trees under another rule (torch-free): what the parameter explorer, the
offline explorer page and the oracle do with a trace, with no model at hand; and the envelope a
recording made for replay drafts (:func:`envelope_rule`, :func:`committed_path`)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

from dynatree_core.policy.dynatree_config import DynaTreeConfig
from dynatree_core.policy.growth import TopK, grow_tree
from dynatree_core.policy.growth_rule import GrowthRule
from dynatree_core.policy.knobs import page_envelope
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


# --- recordings made for replay (the offline explorer page) ------------------------------------
#: the envelope's gates sit this far (relative) below the ranges' lowest thresholds, so an
#: arithmetic difference in the last bit between the device's growth and a host replay can never
#: leave out a node some setting expands
ENVELOPE_MARGIN = 1e-9
#: the most nodes an envelope may hold (its N_max): a recording that reaches it says so
ENVELOPE_N_MAX = 4096


def envelope_rule(d_max_cap: int, ranges: dict[str, tuple[float, float]] | None = None) -> GrowthRule:
    """The rule whose tree holds every tree a setting inside ``ranges`` (the page's by default,
    :func:`dynatree_core.policy.knobs.page_envelope`) grows, with D_max capped at ``d_max_cap``
    (the tokens still wanted, less the bonus): all gates at their loosest, one breadth, no budget."""
    env = page_envelope(ranges)
    low = 1.0 - ENVELOPE_MARGIN
    return GrowthRule(d0=env["d0"], d_max=max(0, min(env["d_max"], d_max_cap)), b_min=env["b"], b_mid=env["b"],
                      b_max=env["b"], tau_h=0.5, tau_l=0.5, rho_stop=env["rho_stop"] * low,
                      rho_deep=env["rho_deep"] * low, tau=env["tau"] * low, n_max=ENVELOPE_N_MAX)


def committed_path(recorded: DraftTree, rule: GrowthRule, target: Sequence[int]) -> tuple[list[int], int, DraftTree]:
    """The accepted path of ``rule``'s own tree inside a recorded envelope: ``target[i]`` is the
    target's token after recorded node i. Returns (the path as recorded node ids, the bonus token,
    the rule's tree); the path is what the rule itself would have committed, so a run that drafts
    the envelope and commits this stays exact."""
    own = replay_tree(recorded, rule)
    index = {recorded.token_path(i): i for i in range(len(recorded))}
    path: list[int] = []
    node, at = 0, 0  # own tree's node, its recorded id
    while True:
        nxt = [c for c in own.children(node) if own.tokens[c] == target[at]]
        if not nxt:
            return path, int(target[at]), own
        node = nxt[0]
        at = index[own.token_path(node)]
        path.append(at)


def setting_rule(values: dict[str, float], d_max_cap: int) -> GrowthRule:
    """The growth rule of a knob setting (DynaTree, both dynamic switches on) at an iteration
    whose D_max is capped at ``d_max_cap``: what the offline page regrows with."""
    cfg = DynaTreeConfig(**values)
    rule = cfg.growth_rule()
    return dataclasses.replace(rule, d_max=max(0, min(rule.d_max, d_max_cap)), lookup_tail=0, tail_n_max=0)

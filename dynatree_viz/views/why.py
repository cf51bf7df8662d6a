"""View 6: why a node was (not) accepted, as a static panel.

One decision point u of one iteration (the parent of the node asked about): the draft's top-k at
u as bars of q(token | u), each marked with what became of it (accepted, rejected, pruned by τ,
pruned by N_max, beyond the breadth B(u)), against the token the target chose after u. When the
target's token was one the draft proposed but pruning removed, a callout says which rule did it;
that is the case where a wider τ or N_max would have bought a longer accepted path.

Everything comes from the trace: the top-k at expanded nodes, the pruned candidates and the
target's argmax per node. :func:`why_data` returns the facts (:class:`WhyPanel`), :func:`why` the
figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go

from dynatree_core.records.trace import IterationRecord, Trace

from dynatree_viz.core import style
from dynatree_viz.core.scene import TreeScene
from dynatree_viz.core.tokens import TokenNamer, resolve_namer

#: what became of one top-k candidate at the decision point
FATES: dict[str, str] = {
    "accepted": "drafted, accepted",
    "rejected": "drafted, rejected by the target",
    "verified": "drafted (its parent was not on the accepted path)",
    "unknown": "drafted, target's choice unknown",
    "pruned_tau": "pruned by τ (never verified)",
    "pruned_n_max": "pruned by N_max (never verified)",
    "beyond_breadth": "beyond B(u): not drafted",
    "not_drafted": "not drafted",
}
_FATE_STYLE: dict[str, tuple[str, str]] = {  # fate -> (colour, bar pattern): never colour alone
    "accepted": (style.ACCEPTED, ""),
    "rejected": (style.REJECTED, ""),
    "verified": ("#999999", ""),
    "unknown": ("#bbbbbb", ""),
    "pruned_tau": (style.GHOST, "/"),
    "pruned_n_max": (style.GHOST, "x"),
    "beyond_breadth": ("#dddddd", "."),
    "not_drafted": ("#dddddd", "."),
}
CALLOUT = "why callout"  # name of the callout annotation (tests look it up)
TARGET_MARK = "target's choice"


@dataclass
class Candidate:
    """One entry of the draft's top-k at the decision point."""

    token: int
    text: str
    rank: int
    q: float            # draft probability q(token | u)
    fate: str           # a key of FATES
    node: int | None    # the child node, when it was drafted
    is_target: bool     # the target chose this token after u


@dataclass
class WhyPanel:
    """The facts behind one decision: the draft's top-k at node ``at`` and the target's choice.

    ``target_fate`` is a key of :data:`FATES`, or ``"not_in_top_k"`` (the draft did not propose
    it), or ``"not_expanded"`` (the draft never ran at ``at``: see ``stop_reason``).
    ``callout`` is set when the target's token was pruned (by τ or N_max).
    """

    iteration: int
    at: int
    at_text: str
    node: int | None
    candidates: list[Candidate]
    target_token: int | None
    target_text: str
    target_fate: str
    branching: int
    stop_reason: str
    on_accepted_path: bool
    p_at: float                       # path probability p(u) of the decision point
    tau: float | None = None
    n_max: int | None = None
    method: str | None = None         # the decoding method, when known: what set B(u)
    callout: str | None = None
    explanation: str = ""
    notes: list[str] = field(default_factory=list)


def _record(source: Trace | IterationRecord, iteration: int) -> IterationRecord:
    if isinstance(source, IterationRecord):
        return source
    if not source.iterations:
        raise ValueError("the trace has no iterations")
    if not -len(source.iterations) <= iteration < len(source.iterations):
        raise ValueError(f"iteration must be a position in [0, {len(source.iterations) - 1}], "
                         f"got {iteration}")
    return source.iterations[iteration]


def _decision_point(rec: IterationRecord, node: int | None, at: int | None) -> int:
    n = len(rec.tree)
    if at is not None:
        if not 0 <= at < n:
            raise ValueError(f"at must be a node in [0, {n - 1}], got {at}")
        return at
    if node is None:  # where the accepted walk ended: the rejection / bonus decision
        return rec.accepted_path[-1] if rec.accepted_path else 0
    if not 0 <= node < n:
        raise ValueError(f"node must be in [0, {n - 1}], got {node}")
    if node == 0:
        raise ValueError("node 0 is the root (the last committed token) and has no parent: "
                         "pass at=0 for the decision after the root, or node=None for the "
                         "decision where the accepted path ended")
    return rec.tree.parents[node]


def why_data(source: Trace | IterationRecord, iteration: int = 0, node: int | None = None, *,
             at: int | None = None, namer: TokenNamer | None = None,
             tokenizer: Any = None, method: str | None = None) -> WhyPanel:
    """The facts of :func:`why` (same arguments), without drawing."""
    rec = _record(source, iteration)
    trace = source if isinstance(source, Trace) else None
    namer = resolve_namer(trace or rec, namer, tokenizer)
    scene = TreeScene.from_record(rec, namer)
    tree = rec.tree
    u = _decision_point(rec, node, at)
    status = scene.statuses()
    on_path = u == 0 or u in set(rec.accepted_path)
    cfg = (trace.config if trace is not None else None) or {}
    tau = cfg.get("tau")
    n_max = cfg.get("n_max")
    target = int(rec.target_argmax[u]) if u < len(rec.target_argmax) else None
    children = {tree.tokens[c]: c for c in tree.children(u)}
    pruned = {p.token: p for p in tree.pruned if p.parent == u}
    toks = tree.topk_tokens[u] or []
    lps = tree.topk_logps[u] or []
    b = tree.branching[u]
    cands = []
    for r, (t, lp) in enumerate(zip(toks, lps)):
        t = int(t)
        c = children.get(t)
        if c is not None:
            fate = status[c] if status[c] in ("accepted", "rejected", "unknown") else "verified"
        elif t in pruned:
            fate = f"pruned_{pruned[t].reason}"
        else:
            fate = "beyond_breadth" if r >= b else "not_drafted"
        cands.append(Candidate(t, namer(t), r, math.exp(lp), fate, c, t == target))
    panel = WhyPanel(
        iteration=rec.index, at=u, at_text=scene.texts[u], node=node, candidates=cands,
        target_token=target, target_text=namer(target) if target is not None else "?",
        target_fate="not_expanded", branching=b, stop_reason=tree.stop_reasons[u],
        on_accepted_path=on_path, p_at=math.exp(tree.cum_logps[u]), tau=tau, n_max=n_max,
        method=method or (trace.method if trace is not None else None))
    if toks:
        hit = next((c for c in cands if c.is_target), None)
        panel.target_fate = hit.fate if hit is not None else "not_in_top_k"
    panel.explanation = _explain(panel, pruned.get(target) if target is not None else None)
    if panel.target_fate in ("pruned_tau", "pruned_n_max"):
        panel.callout = panel.explanation
    if node is not None:  # say first what happened to the node asked about
        panel.notes.append(_node_line(scene, status, node))
    return panel


#: methods whose breadth is fixed by construction, not read from the draft's confidence c(u)
FIXED_BREADTH = {"linear": "a chain: B = 1 by construction", "fixed_tree": "a fixed tree: B is set, not read from c(u)"}


def breadth_source(p: WhyPanel) -> str:
    """What decided B(u): c(u) for DynaTree (and an unknown method), the construction otherwise."""
    if p.method in FIXED_BREADTH:
        return FIXED_BREADTH[p.method]
    if p.method in (None, "dynatree"):
        return "c(u) decided B(u)"
    return f"the {p.method} policy set B(u)"


def breadth_short(p: WhyPanel) -> str:
    """The title's breadth note: ``c(u) → B(u) = 2`` or ``B(u) = 1: a chain, by construction``."""
    if p.method == "linear":
        return f"B(u) = {p.branching}: a chain, by construction"
    if p.method in (None, "dynatree"):
        return f"c(u) → B(u) = {p.branching}"
    return f"B(u) = {p.branching}, set by the {p.method.replace('_', ' ')} rule"


def _node_line(scene: TreeScene, status: list[str], v: int) -> str:
    tree = scene.tree
    what = {"accepted": "accepted", "rejected": "rejected: the target chose another token",
            "below_rejection": "not accepted: it lies under a rejected node",
            "unknown": "target's choice at its parent unknown"}.get(status[v], status[v])
    return (f"Node #{v} {_q(scene.texts[v])} (draft q = {math.exp(tree.logps[v]):.3f}, "
            f"rank {tree.children(tree.parents[v]).index(v) + 1} of its siblings): {what}.")


def _q(tok: str) -> str:
    return f"'{style.visible_token(tok)}'"


def _nth(k: int) -> str:
    """The English ordinal suffix of ``k`` (1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st)."""
    return "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")


def _explain(p: WhyPanel, pruned: Any) -> str:
    """One or two sentences: what happened to the target's token at the decision point."""
    tgt = _q(p.target_text)
    rank = next((c.rank for c in p.candidates if c.is_target), None)
    q = next((c.q for c in p.candidates if c.is_target), None)
    where = f"after #{p.at} {_q(p.at_text)}"
    gain = (" Verified, it would have been accepted and the path would have gone on."
            if p.on_accepted_path else "")
    if p.target_fate == "pruned_tau":
        cut = f" τ = {p.tau:g}" if p.tau is not None else " τ"
        return (f"✂ Pruned by τ: the target chose {tgt} {where}. The draft ranked it "
                f"{rank + 1}{_nth(rank + 1)} (q = {q:.3f}), but its path probability p = p(u)·q = "
                f"{math.exp(pruned.cum_logp):.4f} fell below{cut}, so it was never verified."
                + gain)
    if p.target_fate == "pruned_n_max":
        budget = f" N_max = {p.n_max}" if p.n_max is not None else " N_max"
        return (f"✂ Pruned by N_max: the target chose {tgt} {where}. The draft ranked it "
                f"{rank + 1}{_nth(rank + 1)} (q = {q:.3f}, p = {math.exp(pruned.cum_logp):.4f}), but the node "
                f"budget{budget} went to more probable candidates first, so it was never "
                "verified." + gain)
    if p.target_fate == "accepted":
        return f"✓ The target chose {tgt} {where}: the draft's {rank + 1}{_nth(rank + 1)} choice, drafted and accepted."
    if p.target_fate == "verified":
        return (f"The target would choose {tgt} {where} (the draft's {rank + 1}{_nth(rank + 1)} choice, drafted), "
                "but the path never got here: an ancestor was rejected.")
    if p.target_fate == "beyond_breadth":
        return (f"✗ The target chose {tgt} {where}: the draft ranked it {rank + 1}{_nth(rank + 1)}, but the "
                f"breadth rule kept only the top B(u) = {p.branching} ({breadth_source(p)}).")
    if p.target_fate == "not_in_top_k":
        return (f"✗ The target chose {tgt} {where}, which is not in the draft's top-"
                f"{len(p.candidates)}: no tree shape could have drafted it.")
    if p.target_fate == "not_expanded":
        return (f"The draft never ran at #{p.at} {_q(p.at_text)} (stop: "
                f"{style.stop_label(p.stop_reason)}), so it proposed nothing after it: there are "
                f"no draft probabilities to show. The target chose {tgt} there.")
    return f"The target chose {tgt} {where} ({FATES.get(p.target_fate, p.target_fate)})."


def why(source: Trace | IterationRecord, iteration: int = 0, node: int | None = None, *,
        at: int | None = None, namer: TokenNamer | None = None, tokenizer: Any = None,
        title: str | None = None, width: int = 760, method: str | None = None) -> go.Figure:
    """Why node ``node`` (BFS index) of iteration position ``iteration`` was or was not accepted.

    Shows the draft's top-k at the node's parent (bars of q, marked by fate: colour *and*
    pattern) against the target's choice there (outlined, "◀ target"), with a callout when
    the target's token was pruned by τ or N_max. ``node=None`` explains the decision where the
    accepted path ended (the bonus token); ``at=u`` explains the decision after node u directly
    (``at=0``: after the root). ``source`` may also be an :class:`IterationRecord`.
    ``tokenizer`` names top-k tokens the trace stores no text for; ``method`` (default: the
    trace's) says what set the breadth B(u): DynaTree's confidence c(u), a linear chain's B = 1 or
    a fixed tree's B.
    """
    p = why_data(source, iteration, node, at=at, namer=namer, tokenizer=tokenizer, method=method)
    if p.target_fate == "not_expanded":
        return _never_ran_figure(p, title, width)
    fig = go.Figure()
    # "#" names a node everywhere (#4 is BFS node 4); a rank is an ordinal
    labels = [f"{c.rank + 1}{_nth(c.rank + 1)} {_q(c.text)}" for c in p.candidates]
    extra = p.target_fate in ("not_in_top_k",)
    if extra:
        labels.append(f"target {_q(p.target_text)}")
    for fate in FATES:
        # the target's bar last in its trace: a legend swatch takes the first bar's outline, and the
        # target's black frame made "beyond B(u): not drafted" look like the target (the y order is
        # fixed by categoryarray, so the bars do not move)
        rows = sorted(((lab, c) for lab, c in zip(labels, p.candidates) if c.fate == fate),
                      key=lambda r: r[1].is_target)
        if not rows:
            continue
        color, pattern = _FATE_STYLE[fate]
        fig.add_trace(go.Bar(
            y=[lab for lab, _ in rows], x=[c.q for _, c in rows], orientation="h",
            name=FATES[fate], legendgroup=fate,
            marker=dict(color=color, pattern=dict(shape=pattern, fgcolor="#555555"),
                        line=dict(color=["#000000" if c.is_target else color for _, c in rows],
                                  width=[3 if c.is_target else 0.5 for _, c in rows])),
            text=["◀ target" if c.is_target else "" for _, c in rows], textposition="outside",
            customdata=[c.token for _, c in rows],
            hovertemplate="%{y} (id %{customdata})<br>q = %{x:.4f}<extra>" + FATES[fate]
                          + "</extra>"))
    if extra:
        fig.add_trace(go.Bar(y=[labels[-1]], x=[0.0], orientation="h", name=TARGET_MARK,
                             marker=dict(color="#000000"), text=["◀ target: not in top-k"],
                             textposition="outside", hoverinfo="skip"))
    _decorate(fig, p, labels, title, width)
    return fig


def _never_ran_figure(p: WhyPanel, title: str | None, width: int) -> go.Figure:
    """The decision point the draft never ran at: its words alone (no top-k, so no chart; an
    empty 0-1 axis under "the draft's top-0" would only look like a missing picture)."""
    box = " ".join(p.notes + [p.explanation])
    head = title if title is not None else (
        f"Iteration {p.iteration}: why? The draft never ran at #{p.at} {_q(p.at_text)} "
        f"(p(u) = {p.p_at:.3f}); the target chose {_q(p.target_text)}")
    fig = go.Figure()
    text = style.wrap(box, 95)
    fig.add_annotation(name="why explanation", xref="paper", yref="paper", x=0, y=1,
                       xanchor="left", yanchor="top", align="left", showarrow=False, text=text,
                       font=dict(size=12, color="#222"), bgcolor="#f4f4f4", bordercolor="#bbbbbb",
                       borderwidth=1, borderpad=6)
    fig.update_layout(title=dict(text=style.wrap(head, 90), x=0.01, font=dict(size=13)),
                      template="plotly_white", width=width,
                      height=150 + 16 * (text.count("<br>") + head.count("<br>")),
                      margin=dict(l=20, r=20, t=70, b=10), showlegend=False,
                      xaxis=dict(visible=False), yaxis=dict(visible=False))
    return fig


def _decorate(fig: go.Figure, p: WhyPanel, labels: list[str], title: str | None,
              width: int) -> None:
    shapes, annotations = [], []
    b = p.branching
    if p.candidates and 0 < b < len(p.candidates):  # the breadth cut between ranks b and b+1
        shapes.append(dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=b - 0.5,
                           y1=b - 0.5, line=dict(color="#555555", dash="dash", width=1),
                           name="breadth"))
        annotations.append(dict(xref="paper", x=1, y=b - 0.5, yref="y", xanchor="right",
                                yanchor="bottom", showarrow=False, font=dict(size=10),
                                text=f"B(u) = {b}: ranks above were drafted"))
    if p.tau and p.candidates and p.p_at > 0:  # τ as a threshold on q: q < τ / p(u) is pruned
        q_cut = p.tau / p.p_at
        if q_cut <= 1:
            shapes.append(dict(type="line", x0=q_cut, x1=q_cut, yref="paper", y0=0, y1=1,
                               line=dict(color=style.REJECTED, dash="dot", width=1.5),
                               name="tau"))
            annotations.append(dict(x=q_cut, y=1, yref="paper", yanchor="bottom",
                                    showarrow=False, font=dict(size=10, color=style.REJECTED),
                                    text=f"τ / p(u) = {q_cut:.3f}"))
    box = " ".join(p.notes + [p.callout or p.explanation])
    annotations.append(dict(
        name=CALLOUT if p.callout else "why explanation", xref="paper", yref="paper", x=0,
        y=-0.18, xanchor="left", yanchor="top", align="left", showarrow=False,
        text=style.wrap(box, 95), font=dict(size=12, color="#222"),
        bgcolor="#fff3e0" if p.callout else "#f4f4f4",
        bordercolor=style.REJECTED if p.callout else "#bbbbbb", borderwidth=2 if p.callout else 1,
        borderpad=6))
    head = title if title is not None else (
        f"Iteration {p.iteration}: why? The draft's top-{len(p.candidates)} after "
        f"#{p.at} {_q(p.at_text)} (p(u) = {p.p_at:.3f}, {breadth_short(p)}) vs the target's "
        f"choice {_q(p.target_text)}")
    rows = max(len(labels), 1)
    bottom = 150 + 16 * style.wrap(box, 95).count("<br>")
    fig.update_layout(
        title=dict(text=style.wrap(head, 90), x=0.01, font=dict(size=13)), template="plotly_white",
        width=width, height=int(80 + bottom + 40 * rows + 60), barmode="overlay",
        margin=dict(l=150, r=40, t=80, b=bottom),
        xaxis=dict(title="draft probability q(token | u)", range=[0, 1.15], zeroline=True),
        yaxis=dict(categoryorder="array", categoryarray=labels, autorange="reversed"),
        legend=dict(font=dict(size=10), title=dict(text="fate of each top-k token")),
        shapes=shapes, annotations=annotations, showlegend=True)

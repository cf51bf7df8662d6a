"""View 1: one iteration's draft tree as a top-down layered Plotly figure.

Fill colour = draft confidence c(u) or cumulative probability p(u) (switchable with the buttons
in the figure), outline = verification outcome (green accepted path, red where the target
disagreed), marker symbol = stop reason, a gold star = the target's bonus token, grey ghosts =
pruned candidates (optional). Labels are one ``markers+text`` trace, not annotations, so a
256-node tree stays responsive.
"""

from __future__ import annotations

import math
from typing import Sequence

import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from dynatree_core.trace import IterationRecord

from . import style
from .layout import layered_layout, tree_graph
from .scene import TreeScene
from .tokens import TokenNamer

#: trace names (tests and widgets look traces up by name)
NODES, EDGES, ACCEPTED_EDGES, PRUNED, PRUNED_EDGES, BONUS, COLORBAR = (
    "nodes", "edges", "accepted path", "pruned", "pruned edges", "bonus", "colour scale")
NO_VALUE_COLOR = "#f0f0f0"  # c(u) of a leaf the draft never ran on


def node_values(scene: TreeScene, color_by: str) -> list[float | None]:
    """c(u) (None where the draft never ran) or p(u) per node."""
    if color_by == "confidence":
        return list(scene.tree.confidences)
    if color_by == "cum_prob":
        return [math.exp(x) for x in scene.tree.cum_logps]
    raise ValueError(f"color_by must be one of {style.COLOR_BY_CHOICES}, got {color_by!r}")


def node_colors(scene: TreeScene, color_by: str) -> list[str]:
    """Explicit fill colours: computed here rather than by plotly so that a node without a value
    gets a neutral colour instead of plotly's undefined NaN handling."""
    vals = node_values(scene, color_by)
    known = [min(max(v, 0.0), 1.0) for v in vals if v is not None]
    sampled = iter(sample_colorscale(style.COLORSCALE, known) if known else [])
    return [next(sampled) if v is not None else NO_VALUE_COLOR for v in vals]


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "—" if x is None else format(x, spec)


def _hover(scene: TreeScene, i: int, status: str) -> str:
    t = scene.tree
    v = t.node(i)
    lines = [f"<b>{style.hover_escape(scene.texts[i])}</b>  (id {v.token})",
             f"BFS #{i} · depth {v.depth}"]
    if i == 0:
        lines.append("root = last committed token")
    else:
        lines.append(f"log q(token) = {v.logp:.3f} · p(u) = {math.exp(v.cum_logp):.4f}")
    lines.append(f"c(u) = {_fmt(v.confidence)} · B(u) = {v.branching}")
    lines.append(f"stop: {v.stop_reason} ({style.STOP_DESCRIPTIONS.get(v.stop_reason, '')})")
    if status == "rejected":
        choice = scene.target_argmax[v.parent]
        lines.append(f"<span style='color:{style.REJECTED}'>✗ rejected: target chose "
                     f"'{style.hover_escape(scene.namer(choice))}'</span>")
    elif status == "accepted":
        lines.append(f"<span style='color:{style.ACCEPTED}'>✓ accepted</span>")
    elif status == "below_rejection":
        lines.append("under a rejected node (not accepted)")
    elif status == "unknown":
        lines.append("target's choice here unknown")
    if i < len(scene.target_prob) and scene.target_prob[i] is not None:
        lines.append(f"target p(token) = {scene.target_prob[i]:.3f}")
    return "<br>".join(lines)


def _edge_xy(pairs: Sequence[tuple[int, int]], pos: dict) -> tuple[list, list]:
    xs: list = []
    ys: list = []
    for a, b in pairs:
        xs += [pos[a][0], pos[b][0], None]
        ys += [pos[a][1], pos[b][1], None]
    return xs, ys


def tree_figure(source: IterationRecord | TreeScene, *, color_by: str = "confidence",
                show_pruned: bool = False, namer: TokenNamer | None = None,
                max_label_chars: int | None = None, title: str | None = None,
                highlight: int | None = None, width: int | None = None,
                height: int | None = None, drafter: str | None = None) -> go.Figure:
    """The draft tree of one iteration.

    ``color_by``: ``"confidence"`` (c(u)) or ``"cum_prob"`` (p(u)); ``show_pruned`` adds the
    candidates pruned by τ / N_max as ghost nodes; ``highlight`` rings one node (BFS index).
    Trace names: see the module constants (``NODES`` holds one point per tree node in BFS order,
    with ``customdata`` = BFS index).
    """
    scene = source if isinstance(source, TreeScene) else TreeScene.from_record(source, namer)
    tree = scene.tree
    n = len(tree)
    status = scene.statuses()
    # Extra nodes laid out with the tree: ghosts (children of their parent, after the real
    # children by rank) and the bonus token (child of the last accepted node, rightmost).
    parents = list(tree.parents)
    order: list[float] = list(range(n))
    pruned = list(tree.pruned) if show_pruned else []
    for k, p in enumerate(pruned):
        parents.append(p.parent)
        order.append(n + 1000 * p.rank + k)
    bonus_parent = scene.accepted[-1] if scene.accepted else 0
    has_bonus = scene.bonus is not None
    if has_bonus:
        parents.append(bonus_parent)
        order.append(10 ** 9)
    pos = layered_layout(tree_graph(parents, order))
    has_child = set(parents)
    n_leaves = sum(1 for i in range(len(parents)) if i not in has_child)
    dense = n_leaves > 40
    chars = max_label_chars or (6 if dense else 10)
    font_size = 9 if dense else 11

    fig = go.Figure()
    acc = set(scene.accepted)
    path_edges = list(zip([0] + scene.accepted[:-1], scene.accepted))
    other_edges = [(tree.parents[i], i) for i in range(1, n) if i not in acc]
    ex, ey = _edge_xy(other_edges, pos)
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", name=EDGES, hoverinfo="skip",
                             line=dict(color=style.EDGE, width=1), showlegend=False))
    if pruned:
        gx, gy = _edge_xy([(p.parent, n + k) for k, p in enumerate(pruned)], pos)
        fig.add_trace(go.Scatter(x=gx, y=gy, mode="lines", name=PRUNED_EDGES, hoverinfo="skip",
                                 line=dict(color=style.GHOST, width=1, dash="dot"),
                                 showlegend=False))
    bx, by = _edge_xy(path_edges + ([(bonus_parent, len(parents) - 1)] if has_bonus else []), pos)
    fig.add_trace(go.Scatter(x=bx, y=by, mode="lines", name=ACCEPTED_EDGES, hoverinfo="skip",
                             line=dict(color=style.ACCEPTED, width=3.5), showlegend=True))
    if pruned:
        fig.add_trace(go.Scatter(
            x=[pos[n + k][0] for k in range(len(pruned))],
            y=[pos[n + k][1] for k in range(len(pruned))],
            mode="markers+text", name=PRUNED, textposition="bottom center",
            text=[style.short_label(scene.namer(p.token), chars) for p in pruned],
            textfont=dict(size=font_size - 1, color="#9a9a9a"),
            marker=dict(symbol="circle-open", size=9, color=style.GHOST, line=dict(width=1.5)),
            hovertext=[f"<b>{style.hover_escape(scene.namer(p.token))}</b> (id {p.token})<br>"
                       f"pruned by {p.reason} (never verified)<br>rank {p.rank} under "
                       f"#{p.parent} · log q = {p.logp:.3f} · p = {math.exp(p.cum_logp):.4f}"
                       for p in pruned],
            hovertemplate="%{hovertext}<extra></extra>"))
    line_color = [style.ACCEPTED if s in ("accepted", "root") else
                  style.REJECTED if s == "rejected" else "#707070" for s in status]
    line_width = [3 if s in ("accepted", "rejected", "root") else 1 for s in status]
    if highlight is not None and 0 <= highlight < n:
        line_color[highlight], line_width[highlight] = style.HIGHLIGHT, 5
    text_pos = ["bottom center"] * n
    if dense:  # alternate leaf labels above/below so neighbours do not overlap
        leaves = sorted((i for i in range(n) if not tree.children(i)), key=lambda i: pos[i][0])
        for k, i in enumerate(leaves):
            text_pos[i] = "top center" if k % 2 else "bottom center"
    fig.add_trace(go.Scatter(
        x=[pos[i][0] for i in range(n)], y=[pos[i][1] for i in range(n)],
        mode="markers+text", name=NODES, customdata=list(range(n)),
        text=[style.short_label(t, chars) for t in scene.texts], textposition=text_pos,
        textfont=dict(size=font_size),
        marker=dict(size=[18 if i == 0 else 14 if not dense else 11 for i in range(n)],
                    color=node_colors(scene, color_by),
                    symbol=[style.STOP_SYMBOLS.get(s, "circle") for s in tree.stop_reasons],
                    opacity=[0.45 if s == "below_rejection" else 1.0 for s in status],
                    line=dict(color=line_color, width=line_width)),
        hovertext=[_hover(scene, i, status[i]) for i in range(n)],
        hovertemplate="%{hovertext}<extra></extra>", showlegend=False))
    node_idx = len(fig.data) - 1
    if has_bonus:
        bpos = pos[len(parents) - 1]
        btext = scene.namer(scene.bonus)
        fig.add_trace(go.Scatter(
            x=[bpos[0]], y=[bpos[1]], mode="markers+text", name=BONUS, text=[
                style.short_label(btext, chars)], textposition="bottom center",
            textfont=dict(size=font_size, color="#8a5a00"),
            marker=dict(symbol="star", size=20, color=style.BONUS,
                        line=dict(color="#8a5a00", width=1)),
            hovertext=[f"<b>{style.hover_escape(btext)}</b> (id {scene.bonus})<br>bonus token: "
                       f"the target's own choice after "
                       f"{'#' + str(bonus_parent) if scene.accepted else 'the root'}"],
            hovertemplate="%{hovertext}<extra></extra>"))
    for reason in dict.fromkeys(tree.stop_reasons):  # legend key for the symbols in use
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=f"stop: {reason}",
                                 marker=dict(symbol=style.STOP_SYMBOLS.get(reason, "circle"),
                                             size=10, color="#888888"),
                                 legendgroup="stop", hoverinfo="skip"))
    fig.add_trace(go.Scatter(  # carries the colour bar (node colours are explicit strings)
        x=[None], y=[None], mode="markers", name=COLORBAR, showlegend=False, hoverinfo="skip",
        marker=dict(color=[0.0, 1.0], cmin=0, cmax=1, colorscale=style.COLORSCALE, showscale=True,
                    colorbar=dict(title=dict(text=style.COLOR_BY_TITLES[color_by]),
                                  thickness=12, len=0.6, x=1.02, y=0.5))))
    cbar_idx = len(fig.data) - 1

    def button(key: str) -> dict:
        return dict(label=style.COLOR_BY_TITLES[key], method="restyle",
                    args=[{"marker.color": [node_colors(scene, key), [0.0, 1.0]],
                           "marker.colorbar.title.text": [None, style.COLOR_BY_TITLES[key]]},
                          [node_idx, cbar_idx]])

    depth = max(pos[i][1] for i in pos)
    fig.update_layout(
        title=dict(text=title if title is not None else default_title(scene, drafter), x=0.01,
                   font=dict(size=14)),
        template="plotly_white",
        width=width if width is not None else int(min(max(220 + 26 * n_leaves, 700), 7000)),
        height=height if height is not None else int(220 + 95 * (depth + 1)),
        margin=dict(l=50, r=40, t=80, b=60),
        xaxis=dict(visible=False, range=[-1, max(n_leaves, 2)]),
        yaxis=dict(autorange="reversed", tickmode="array", tickvals=list(range(depth + 1)),
                   ticktext=[f"d={d}" for d in range(depth + 1)], zeroline=False,
                   showgrid=False),
        legend=dict(orientation="h", yanchor="top", y=-0.02, xanchor="left", x=0.0,
                    font=dict(size=10)),
        updatemenus=[dict(type="buttons", direction="right", x=0.0, y=1.0, xanchor="left",
                          yanchor="bottom", pad=dict(t=2, b=2), showactive=True,
                          active=style.COLOR_BY_CHOICES.index(color_by),
                          buttons=[button(k) for k in style.COLOR_BY_CHOICES])],
        hovermode="closest", dragmode="pan",
    )
    return fig


def default_title(scene: TreeScene, drafter: str | None = None) -> str:
    """The tree's summary line; ``drafter`` (e.g. ``trace.drafter_kind``) names who drafted it."""
    t = scene.tree
    it = f"Iteration {scene.index}: " if scene.index is not None else ""
    bonus = (f" + bonus '{style.hover_escape(scene.namer(scene.bonus))}'"
             if scene.bonus is not None else "")
    bound = "≥ " if not scene.complete else ""
    by = f" ({drafter} drafter)" if drafter else ""
    return (f"{it}{t.num_drafted} drafted nodes{by}, depth {t.depth}, "
            f"accepted ℓ = {bound}{len(scene.accepted)}{bonus}")


def trace_index(fig: go.Figure, name: str) -> int:
    """Index of the trace called ``name`` (ValueError if absent)."""
    for i, tr in enumerate(fig.data):
        if tr.name == name:
            return i
    raise ValueError(f"no trace named {name!r}")

"""View 1: one iteration's draft tree as a top-down layered Plotly figure.

Fill colour = draft confidence c(u) or cumulative probability p(u) (switchable with the buttons
in the figure; a pale, hollow-looking fill = a leaf the draft never ran on), verification outcome
= colour *and* shape (accepted: blue thick edge and a ring; rejected: a vermillion cross; the
Okabe-Ito colours stay distinct for colour-blind readers), marker symbol = stop reason, an orange
star = the target's bonus token, grey ghosts = pruned candidates (optional). Every encoding in
use has a legend entry. Labels are one ``markers+text`` trace, not annotations, so a 256-node
tree stays responsive; they are drawn after every edge, with a white halo, so no edge hides one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from dynatree_core.records.trace import IterationRecord

from dynatree_viz import style
from dynatree_viz.layout import layered_layout, tree_graph
from dynatree_viz.scene import STATUSES, TreeScene
from dynatree_viz.tokens import TokenNamer, resolve_namer

#: trace names (tests and widgets look traces up by name)
NODES, EDGES, ACCEPTED_EDGES, PRUNED, PRUNED_EDGES, BONUS, COLORBAR = (
    "nodes", "edges", "accepted path", "pruned", "pruned edges", "bonus", "colour scale")
ACCEPTED_MARKS, REJECTED_MARKS = "accepted marks", "rejected marks"
NO_VALUE_COLOR = "#f0f0f0"  # c(u) of a leaf the draft never ran on: looks hollow
FADED_OPACITY = 0.45        # nodes under a rejected node

#: legend entries (one per encoding; see :func:`_legend_keys`)
LEGEND_ACCEPTED = "accepted: thick edge + ring"
LEGEND_REJECTED = "rejected: ✗, the target chose another token"
LEGEND_BONUS = "★ bonus: the target's own next token"
LEGEND_FADED = "faded: under a rejected node"
LEGEND_UNKNOWN = "no ring, no ✗: target's choice here unknown (replay)"
LEGEND_HOLLOW = "hollow (pale fill): leaf, draft never ran on it, no c(u)"
LEGEND_PRUNED = "grey ring, dotted: pruned by τ / N_max, never verified"
LEGEND_SELECTED = "purple outline: selected node"
STOP_PREFIX = "stop: "  # marker shape = why the node stopped growing


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


@dataclass
class _Layout:
    """Where everything goes: tree nodes, then ghosts (pruned), then the bonus star."""

    pos: dict[int, tuple[float, int]]
    pruned: list
    bonus_parent: int
    bonus_node: int | None
    n_leaves: int


def _layout(scene: TreeScene, show_pruned: bool) -> _Layout:
    # Extra nodes laid out with the tree: ghosts (children of their parent, after the real
    # children by rank) and the bonus token (child of the last accepted node, rightmost).
    tree = scene.tree
    n = len(tree)
    parents = list(tree.parents)
    order: list[float] = list(range(n))
    pruned = list(tree.pruned) if show_pruned else []
    for k, p in enumerate(pruned):
        parents.append(p.parent)
        order.append(n + 1000 * p.rank + k)
    bonus_parent = scene.accepted[-1] if scene.accepted else 0
    bonus_node = None
    if scene.bonus is not None:
        parents.append(bonus_parent)
        order.append(10 ** 9)
        bonus_node = len(parents) - 1
    has_child = set(parents)
    n_leaves = sum(1 for i in range(len(parents)) if i not in has_child)
    return _Layout(layered_layout(tree_graph(parents, order)), pruned, bonus_parent, bonus_node,
                   n_leaves)


def _lines(pairs: Sequence[tuple[int, int]], pos: dict, name: str, **line: Any) -> go.Scatter:
    x, y = _edge_xy(pairs, pos)
    return go.Scatter(x=x, y=y, mode="lines", name=name, hoverinfo="skip", line=line,
                      showlegend=False)


def _marks(ids: Sequence[int], pos: dict, name: str, symbol: str, color: str,
           group: str) -> go.Scatter:
    """Outcome marks drawn *under* the node markers: only the part outside the node shows."""
    return go.Scatter(x=[pos[i][0] for i in ids], y=[pos[i][1] for i in ids], mode="markers",
                      name=name, hoverinfo="skip", showlegend=False, legendgroup=group,
                      marker=dict(symbol=symbol, size=26, color=color, line=dict(width=3, color=color)))


def _legend_key(name: str, group: str, *, mode: str = "markers", **kw: Any) -> go.Scatter:
    """A legend entry with no data: says what an encoding means (clicking it toggles its group)."""
    return go.Scatter(x=[None], y=[None], mode=mode, name=name, legendgroup=group,
                      hoverinfo="skip", **kw)


def tree_figure(source: IterationRecord | TreeScene, *, color_by: str = "confidence",
                show_pruned: bool = False, namer: TokenNamer | None = None,
                tokenizer: Any = None, max_label_chars: int | None = None,
                title: str | None = None, highlight: int | None = None,
                width: int | None = None, height: int | None = None,
                drafter: str | None = None, color_buttons: bool = True) -> go.Figure:
    """The draft tree of one iteration.

    ``color_by``: ``"confidence"`` (c(u)) or ``"cum_prob"`` (p(u)); ``show_pruned`` adds the
    candidates pruned by τ / N_max as ghost nodes; ``highlight`` rings one node (BFS index);
    ``tokenizer`` (``.decode(list[int])`` or ``decode(id)``) names tokens the trace stores no
    text for (pruned candidates, the target's choices); ``color_buttons=False`` leaves out the
    in-figure c(u)/p(u) buttons (widgets have their own toggle).
    Trace names: see the module constants (``NODES`` holds one point per tree node in BFS order,
    with ``customdata`` = BFS index). Every encoding has a legend entry (``LEGEND_GROUP``).
    """
    if isinstance(source, TreeScene):
        scene = source
        if tokenizer is not None:
            resolve_namer(None, scene.namer, tokenizer)
    else:
        scene = TreeScene.from_record(source, resolve_namer(source, namer, tokenizer))
    tree = scene.tree
    n = len(tree)
    status = scene.statuses()
    lay = _layout(scene, show_pruned)
    pos, pruned = lay.pos, lay.pruned
    dense = lay.n_leaves > 40
    chars = max_label_chars or (6 if dense else 10)
    font_size = 9 if dense else 11
    text_font = dict(size=font_size, shadow=style.LABEL_HALO)
    ids = {s: [i for i in range(n) if status[i] == s] for s in STATUSES}

    fig = go.Figure()
    # Drawing order matters (plotly paints traces in order): every line and outcome mark first,
    # then the labelled markers, so that no edge is ever painted over a label.
    acc = set(scene.accepted)
    fig.add_trace(_lines([(tree.parents[i], i) for i in range(1, n) if i not in acc], pos, EDGES,
                         color=style.EDGE, width=1))
    if pruned:
        fig.add_trace(_lines([(p.parent, n + k) for k, p in enumerate(pruned)], pos,
                             PRUNED_EDGES, color=style.GHOST, width=1, dash="dot"))
    path_edges = list(zip([0] + scene.accepted[:-1], scene.accepted))
    if lay.bonus_node is not None:
        path_edges.append((lay.bonus_parent, lay.bonus_node))
    fig.add_trace(_lines(path_edges, pos, ACCEPTED_EDGES, color=style.ACCEPTED, width=3.5))
    fig.data[-1].legendgroup = "accepted"
    fig.add_trace(_marks(ids["accepted"], pos, ACCEPTED_MARKS, style.ACCEPTED_MARK,
                         style.ACCEPTED, "accepted"))
    fig.add_trace(_marks(ids["rejected"], pos, REJECTED_MARKS, style.REJECTED_MARK,
                         style.REJECTED, "rejected"))
    if pruned:
        fig.add_trace(_pruned_trace(scene, pruned, pos, n, chars, font_size))
    node_idx = len(fig.data)
    fig.add_trace(_node_trace(scene, status, pos, color_by, highlight, dense, chars, text_font))
    if lay.bonus_node is not None:
        fig.add_trace(_bonus_trace(scene, pos[lay.bonus_node], lay.bonus_parent, chars,
                                   font_size))
    for key in _legend_keys(scene, status, color_by, bool(pruned), highlight):
        fig.add_trace(key)
    fig.add_trace(go.Scatter(  # carries the colour bar (node colours are explicit strings)
        x=[None], y=[None], mode="markers", name=COLORBAR, showlegend=False, hoverinfo="skip",
        marker=dict(color=[0.0, 1.0], cmin=0, cmax=1, colorscale=style.COLORSCALE, showscale=True,
                    colorbar=dict(title=dict(text=style.COLOR_BY_CAPTIONS[color_by]),
                                  thickness=12, len=0.6, x=1.02, y=0.5))))
    cbar_idx = len(fig.data) - 1

    def button(key: str) -> dict:
        return dict(label=style.COLOR_BY_TITLES[key], method="restyle",
                    args=[{"marker.color": [node_colors(scene, key), [0.0, 1.0]],
                           "marker.colorbar.title.text": [None, style.COLOR_BY_CAPTIONS[key]]},
                          [node_idx, cbar_idx]])

    depth = max(pos[i][1] for i in pos)
    menus = [dict(type="buttons", direction="right", x=0.0, y=1.0, xanchor="left",
                  yanchor="bottom", pad=dict(t=2, b=2), showactive=True,
                  active=style.COLOR_BY_CHOICES.index(color_by),
                  buttons=[button(k) for k in style.COLOR_BY_CHOICES])] if color_buttons else []
    fig.update_layout(
        title=dict(text=title if title is not None else default_title(scene, drafter), x=0.01,
                   font=dict(size=14)),
        template="plotly_white",
        width=width if width is not None else int(min(max(220 + 26 * lay.n_leaves, 700), 7000)),
        height=height if height is not None else int(300 + 95 * (depth + 1)),
        margin=dict(l=50, r=40, t=80, b=60),
        xaxis=dict(visible=False, range=[-1, max(lay.n_leaves, 2)]),
        yaxis=dict(autorange="reversed", tickmode="array", tickvals=list(range(depth + 1)),
                   ticktext=[f"d={d}" for d in range(depth + 1)], zeroline=False,
                   showgrid=False),
        legend=dict(orientation="h", yanchor="top", y=-0.02, xanchor="left", x=0.0,
                    font=dict(size=10)),
        updatemenus=menus, hovermode="closest", dragmode="pan",
    )
    return fig


def _pruned_trace(scene: TreeScene, pruned: list, pos: dict, n: int, chars: int,
                  font_size: int) -> go.Scatter:
    return go.Scatter(
        x=[pos[n + k][0] for k in range(len(pruned))],
        y=[pos[n + k][1] for k in range(len(pruned))],
        mode="markers+text", name=PRUNED, textposition="bottom center", showlegend=False,
        legendgroup="pruned",
        text=[style.short_label(scene.namer(p.token), chars) for p in pruned],
        textfont=dict(size=font_size - 1, color="#707070", shadow=style.LABEL_HALO),
        marker=dict(symbol="circle-open", size=9, color=style.GHOST, line=dict(width=1.5)),
        hovertext=[f"<b>{style.hover_escape(scene.namer(p.token))}</b> (id {p.token})<br>"
                   f"pruned by {p.reason} (never verified)<br>rank {p.rank} under "
                   f"#{p.parent} · log q = {p.logp:.3f} · p = {math.exp(p.cum_logp):.4f}"
                   for p in pruned],
        hovertemplate="%{hovertext}<extra></extra>")


def _node_trace(scene: TreeScene, status: list[str], pos: dict, color_by: str,
                highlight: int | None, dense: bool, chars: int, text_font: dict) -> go.Scatter:
    tree = scene.tree
    n = len(tree)
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
    return go.Scatter(
        x=[pos[i][0] for i in range(n)], y=[pos[i][1] for i in range(n)],
        mode="markers+text", name=NODES, customdata=list(range(n)),
        text=[style.short_label(t, chars) for t in scene.texts], textposition=text_pos,
        textfont=text_font,
        marker=dict(size=[18 if i == 0 else 14 if not dense else 11 for i in range(n)],
                    color=node_colors(scene, color_by),
                    symbol=[style.STOP_SYMBOLS.get(s, "circle") for s in tree.stop_reasons],
                    opacity=[FADED_OPACITY if s == "below_rejection" else 1.0 for s in status],
                    line=dict(color=line_color, width=line_width)),
        hovertext=[_hover(scene, i, status[i]) for i in range(n)],
        hovertemplate="%{hovertext}<extra></extra>", showlegend=False)


def _bonus_trace(scene: TreeScene, bpos: tuple[float, int], bonus_parent: int, chars: int,
                 font_size: int) -> go.Scatter:
    btext = scene.namer(scene.bonus)
    return go.Scatter(
        x=[bpos[0]], y=[bpos[1]], mode="markers+text", name=BONUS, showlegend=False,
        legendgroup="bonus", text=[style.short_label(btext, chars)], textposition="bottom center",
        textfont=dict(size=font_size, color="#7a4a00", shadow=style.LABEL_HALO),
        marker=dict(symbol="star", size=20, color=style.BONUS, line=dict(color="#7a4a00", width=1)),
        hovertext=[f"<b>{style.hover_escape(btext)}</b> (id {scene.bonus})<br>bonus token: "
                   f"the target's own choice after "
                   f"{'#' + str(bonus_parent) if scene.accepted else 'the root'}"],
        hovertemplate="%{hovertext}<extra></extra>")


def _legend_keys(scene: TreeScene, status: list[str], color_by: str, pruned: bool,
                 highlight: int | None) -> list[go.Scatter]:
    """One legend entry per encoding that appears in this figure (and only those)."""
    keys: list[go.Scatter] = []
    used = set(status)
    if "accepted" in used or scene.bonus is not None:
        keys.append(_legend_key(LEGEND_ACCEPTED, "accepted", mode="lines+markers",
                                line=dict(color=style.ACCEPTED, width=3.5),
                                marker=dict(symbol=style.ACCEPTED_MARK, size=14,
                                            color=style.ACCEPTED, line=dict(width=2.5))))
    if "rejected" in used:
        keys.append(_legend_key(LEGEND_REJECTED, "rejected",
                                marker=dict(symbol=style.REJECTED_MARK, size=14,
                                            color=style.REJECTED, line=dict(width=2.5,
                                                                            color=style.REJECTED))))
    if scene.bonus is not None:
        keys.append(_legend_key(LEGEND_BONUS, "bonus", marker=dict(
            symbol="star", size=14, color=style.BONUS, line=dict(color="#7a4a00", width=1))))
    if "below_rejection" in used:
        keys.append(_legend_key(LEGEND_FADED, "faded", marker=dict(
            symbol="circle", size=11, color="#888888", opacity=FADED_OPACITY)))
    if "unknown" in used:
        keys.append(_legend_key(LEGEND_UNKNOWN, "unknown", marker=dict(
            symbol="circle", size=11, color="#bbbbbb", line=dict(color="#707070", width=1))))
    if color_by == "confidence" and any(c is None for c in scene.tree.confidences):
        keys.append(_legend_key(LEGEND_HOLLOW, "hollow", marker=dict(
            symbol="circle", size=11, color=NO_VALUE_COLOR, line=dict(color="#707070", width=1))))
    if pruned:
        keys.append(_legend_key(LEGEND_PRUNED, "pruned", mode="lines+markers",
                                line=dict(color=style.GHOST, width=1, dash="dot"),
                                marker=dict(symbol="circle-open", size=9, color=style.GHOST)))
    if highlight is not None and 0 <= highlight < len(scene.tree):
        keys.append(_legend_key(LEGEND_SELECTED, "selected", marker=dict(
            symbol="circle", size=11, color="#ffffff", line=dict(color=style.HIGHLIGHT, width=4))))
    for reason in dict.fromkeys(scene.tree.stop_reasons):  # the shapes in use
        keys.append(_legend_key(f"{STOP_PREFIX}{reason} ({style.STOP_DESCRIPTIONS.get(reason, '')})",
                                "stop", marker=dict(symbol=style.STOP_SYMBOLS.get(reason, "circle"),
                                                    size=10, color="#888888")))
    return keys


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

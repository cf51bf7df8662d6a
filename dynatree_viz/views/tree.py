"""View 1: one iteration's draft tree as a top-down layered Plotly figure.

Fill colour = draft confidence c(u), cumulative probability p(u) or the target's p(token) (its
probability of the node's token at the parent, warped by temperature / top-k / top-p under
sampling; the default for sampled trees), switchable with the buttons in the figure; a pale,
hollow-looking fill = no value there (a leaf the draft never ran on, the root's p(token)), verification outcome
= colour *and* shape (accepted: blue thick edge and a ring; rejected: a vermillion cross; the
Okabe-Ito colours stay distinct for colour-blind readers), marker symbol = stop reason, an orange
star = the target's bonus token, grey ghosts = pruned candidates (optional). Every encoding in
use has a legend entry. Labels are one ``markers+text`` trace, not annotations, so a 256-node
tree stays responsive; each hangs below its point, clear of the marks and of its neighbours, and
edges start below their parent's labels (:mod:`dynatree_viz.core.labels`), so no edge or marker
covers a label; accepted labels are in the accepted colour.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from dynatree_core.records.trace import IterationRecord

from dynatree_viz.core import style
from dynatree_viz.core.labels import (GAP, Label, LabelPlan, clipped_edges, marker_size_for_offset,
                                 plan_labels, text_height, text_width, unit_for)
from dynatree_viz.core.layout import layered_layout, tree_graph
from dynatree_viz.core.scene import TreeScene, sampling_active
from dynatree_viz.core.tokens import TokenNamer, resolve_namer

#: trace names (tests and widgets look traces up by name)
NODES, EDGES, ACCEPTED_EDGES, PRUNED, PRUNED_EDGES, BONUS, COLORBAR = (
    "nodes", "edges", "accepted path", "pruned", "pruned edges", "bonus", "colour scale")
ACCEPTED_MARKS, REJECTED_MARKS = "accepted marks", "rejected marks"
LABELS = "labels"           # every label of the picture, one markers+text trace drawn last
LEADERS = "label leaders"   # a line from a node down to its label where the label dropped a row
LABEL_COLOR = "#222222"
NO_VALUE_COLOR = "#f0f0f0"  # c(u) of a leaf the draft never ran on: looks hollow
FADED_OPACITY = 0.45        # nodes under a rejected node

#: legend entries (one per encoding; see :func:`_legend_keys`)
LEGEND_ACCEPTED = "accepted: thick edge + ring"
LEGEND_REJECTED = "rejected: ✗, the target chose another token"
LEGEND_BONUS = "★ bonus: the target's own next token"
LEGEND_FADED = "faded: under a rejected node"
LEGEND_UNKNOWN = "no ring, no ✗: target's choice here unknown (replay)"
LEGEND_HOLLOW = "hollow (pale fill): leaf, draft never ran on it, no c(u)"
LEGEND_NO_TARGET_P = "hollow (pale fill): no p(token) here (the root, or not recorded)"
LEGEND_PRUNED = "grey ring, dotted: pruned by τ / N_max, never verified"
LEGEND_SELECTED = "purple outline: selected node"
STOP_PREFIX = "stop: "  # marker shape = why the node stopped growing
_PRUNE_RULES = {"tau": "τ (p(u) < τ)", "n_max": "N_max", "cost": "the cost model"}


def node_values(scene: TreeScene, color_by: str) -> list[float | None]:
    """c(u) (None where the draft never ran), p(u), or the target's p(token) (None where unknown)
    per node."""
    if color_by == "confidence":
        return list(scene.tree.confidences)
    if color_by == "cum_prob":
        return [math.exp(x) for x in scene.tree.cum_logps]
    if color_by == "target_p":
        probs = list(scene.target_prob)[: len(scene.tree)]
        return probs + [None] * (len(scene.tree) - len(probs))  # a re-grown tree may know none
    raise ValueError(f"color_by must be {style.COLOR_BY_AUTO!r} or one of {style.COLOR_BY_CHOICES}, "
                     f"got {color_by!r}")


def resolve_color_by(color_by: str, sampled: bool) -> str:
    """``color_by`` itself, or for ``"auto"``: ``"target_p"`` for a tree decoded under sampling
    (``sampled``), else ``"confidence"``, so greedy pictures look as they always did."""
    if color_by == style.COLOR_BY_AUTO:
        return "target_p" if sampled else "confidence"
    if color_by not in style.COLOR_BY_CHOICES:
        raise ValueError(f"color_by must be {style.COLOR_BY_AUTO!r} or one of {style.COLOR_BY_CHOICES}, "
                         f"got {color_by!r}")
    return color_by


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
    lines.append(f"{STOP_PREFIX}{style.stop_label(v.stop_reason)}")
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


@dataclass
class _Layout:
    """Where everything goes: tree nodes, then ghosts (pruned), then the bonus star."""

    pos: dict[int, tuple[float, int]]
    pruned: list
    bonus_parent: int
    bonus_node: int | None
    n_leaves: int

    @property
    def depth(self) -> int:
        return max(p[1] for p in self.pos.values())


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


@dataclass
class _Look:
    """Label size: a dense tree (more than 40 leaves) gets shorter labels in a smaller font."""

    dense: bool
    chars: int
    font_size: int


def _look(lay: _Layout, max_label_chars: int | None = None) -> _Look:
    dense = lay.n_leaves > 40
    return _Look(dense, max_label_chars or (6 if dense else 10), 9 if dense else 11)


def label_texts(scene: TreeScene, lay: _Layout, chars: int) -> dict[int, str]:
    """Each labelled point's text by layout key: tree nodes, ghosts (``n + k``), the bonus star."""
    n = len(scene.tree)
    out = {i: style.short_label(t, chars) for i, t in enumerate(scene.texts)}
    for k, p in enumerate(lay.pruned):
        out[n + k] = style.short_label(scene.namer(p.token), chars)
    if lay.bonus_node is not None:
        out[lay.bonus_node] = style.short_label(scene.namer(scene.bonus), chars)
    return out


def legend_height(names: Sequence[str], plot_w: float, size: int = 10) -> float:
    """A generous estimate of a horizontal legend's px height when it wraps at ``plot_w``."""
    rows, used = 1, 0.0
    for name in names:
        w = 46 + text_width(name, size)
        if used and used + w > plot_w:
            rows, used = rows + 1, 0.0
        used += w
    return 24.0 * rows + 16


@dataclass
class _Geometry:
    """The picture's scale (px), axis ranges and margins, and where labels hang."""

    plan: LabelPlan
    x_range: list[float]
    y_range: list[float]
    width: int
    height: int
    margin: dict

    @property
    def start(self) -> dict[int, float]:
        """Per level: where its edges start, in levels below its centre (under its labels)."""
        return {lv: b / self.plan.level_px for lv, b in self.plan.bottom.items()}


def _geometry(lay: _Layout, texts: dict, font_size: int, legend: Sequence[str], *,
              width: int | None = None, height: int | None = None, top: int = 80,
              min_width: int = 700) -> _Geometry:
    """Size the figure for its labels (see :mod:`dynatree_viz.core.labels`): margins hold the title,
    the legend below and the colour bar right, so plotly never moves the plot area."""
    labels = [Label(k, lay.pos[k][0], lay.pos[k][1], text_width(t, style.label_font_size(t, font_size)),
                    text_height(t, style.label_font_size(t, font_size))) for k, t in texts.items()]
    x_range = [-1.0, float(max(lay.n_leaves, 2))]
    span = x_range[1] - x_range[0]
    left, right = 50, 136  # the colour bar sits right of the plot, at x = 1.02 of its width
    if width is None:
        plot_w = min(max(unit_for(labels) * span, min_width - left - right), 7000 - left - right)
    else:
        plot_w = (width - left - right) / 1.02
    right = int(math.ceil(right + 0.02 * plot_w))
    plan = plan_labels(labels, plot_w / span)
    deepest = lay.depth
    below = max(plan.bottom.get(deepest, 0.0) + GAP, 0.5 * plan.level_px)
    bottom = int(math.ceil(legend_height(legend, plot_w) + 0.02 * plan.level_px * (deepest + 1) + 12))
    if height is not None:
        plot_h = height - top - bottom
        plan.level_px = (plot_h - below) / (deepest + 0.5)
    plot_h = plan.level_px * (deepest + 0.5) + below
    return _Geometry(plan, x_range, [deepest + below / plan.level_px, -0.5],
                     int(math.ceil(left + plot_w + right)), int(math.ceil(top + plot_h + bottom)),
                     dict(l=left, r=right, t=top, b=bottom))


def _axes(geo: _Geometry, depth: int) -> dict:
    """The layout's axes (fixed ranges: labels and edges are placed in their px) and legend."""
    return dict(
        width=geo.width, height=geo.height, margin=geo.margin,
        xaxis=dict(visible=False, range=geo.x_range),
        yaxis=dict(range=geo.y_range, tickmode="array", tickvals=list(range(depth + 1)),
                   ticktext=[f"d={d}" for d in range(depth + 1)], zeroline=False, showgrid=False),
        legend=dict(orientation="h", yanchor="top", y=-0.02, xanchor="left", x=0.0,
                    font=dict(size=10)))


def _lines(pairs: Sequence[tuple[int, int]], pos: dict, name: str, start: dict | None = None,
           **line: Any) -> go.Scatter:
    """Edges parent → child, each starting under its parent's labels (``start``, in levels).
    ``customdata`` keeps each segment's keys (parent, child, None), so a picture drawn at another
    scale (:func:`dynatree_viz.views.strip.animation_strip`) clips the same edges again."""
    x, y = clipped_edges(pairs, pos, start or {})
    return go.Scatter(x=x, y=y, mode="lines", name=name, hoverinfo="skip", line=line,
                      showlegend=False, customdata=[k for a, b in pairs for k in (a, b, None)])


def _marks(ids: Sequence[int], pos: dict, name: str, symbol: str, color: str,
           group: str) -> go.Scatter:
    """Outcome marks drawn *under* the node markers: only the part outside the node shows."""
    return go.Scatter(x=[pos[i][0] for i in ids], y=[pos[i][1] for i in ids], mode="markers",
                      name=name, hoverinfo="skip", showlegend=False, legendgroup=group,
                      marker=dict(symbol=symbol, size=26, color=color, line=dict(width=3, color=color)))


def _outcome_marks(status: Sequence[str], pos: dict) -> list[go.Scatter]:
    """The accepted rings and the rejected crosses (empty where ``status`` is)."""
    return [_marks([i for i, s in enumerate(status) if s == kind], pos, name, symbol, color, kind)
            for kind, name, symbol, color in (
                ("accepted", ACCEPTED_MARKS, style.ACCEPTED_MARK, style.ACCEPTED),
                ("rejected", REJECTED_MARKS, style.REJECTED_MARK, style.REJECTED))]


def _leader_trace(plan: LabelPlan, pos: dict) -> go.Scatter:
    """A thin line from each node whose label dropped to a lower row down to that label: side by side,
    'man' over 'king' read as one node's label or the other's (02's tree). The line runs at the node's
    x, between the first row's neighbours (a label is at most two units wide, nodes one apart), above
    every edge out of the level (they start below its lowest label)."""
    first = min(plan.offset.values(), default=0.0)
    xs: list = []
    ys: list = []
    for k, off in plan.offset.items():
        if off > first + GAP / 2:
            x, y = pos[k]
            xs += [x, x, None]
            ys += [y + first / plan.level_px, y + (off - 1) / plan.level_px, None]
    return go.Scatter(x=xs, y=ys, mode="lines", name=LEADERS, line=dict(color="#9a9a9a", width=1),
                      hoverinfo="skip", showlegend=False)


def _label_trace(keys: Sequence[int], texts: dict, offsets: dict, pos: dict, font_size: int,
                 colors: dict, name: str = LABELS) -> go.Scatter:
    """Labels hung below their points (transparent markers push each text ``offsets[key]`` px
    down, clear of the marks and of the labels beside it); drawn last, with a white halo."""
    return go.Scatter(
        x=[pos[k][0] for k in keys], y=[pos[k][1] for k in keys], mode="markers+text", name=name,
        customdata=list(keys), text=[texts[k] for k in keys], textposition="bottom center",
        marker=dict(size=[marker_size_for_offset(offsets[k]) for k in keys], color="rgba(0,0,0,0)"),
        textfont=dict(size=[style.label_font_size(texts[k], font_size) for k in keys],
                      color=[colors.get(k, LABEL_COLOR) for k in keys],
                      shadow=style.LABEL_HALO),
        hoverinfo="skip", showlegend=False, cliponaxis=False)


def label_colors(scene: TreeScene, lay: _Layout) -> dict[int, str]:
    """Accepted labels in the accepted colour, ghosts grey, the bonus brown; others default."""
    n = len(scene.tree)
    out = {i: style.ACCEPTED for i in scene.accepted}
    out.update({n + k: "#707070" for k in range(len(lay.pruned))})
    if lay.bonus_node is not None:
        out[lay.bonus_node] = "#7a4a00"
    return out


def _legend_key(name: str, group: str, *, mode: str = "markers", **kw: Any) -> go.Scatter:
    """A legend entry with no data: says what an encoding means (clicking it toggles its group)."""
    return go.Scatter(x=[None], y=[None], mode=mode, name=name, legendgroup=group,
                      hoverinfo="skip", **kw)


def _colorbar(color_by: str) -> go.Scatter:
    """A trace that only carries the colour bar (node colours are explicit strings)."""
    return go.Scatter(
        x=[None], y=[None], mode="markers", name=COLORBAR, showlegend=False, hoverinfo="skip",
        marker=dict(color=[0.0, 1.0], cmin=0, cmax=1, colorscale=style.COLORSCALE, showscale=True,
                    colorbar=dict(title=dict(text=style.COLOR_BY_CAPTIONS[color_by]),
                                  # pixels from the plot's top (into the legend's margin): a shallow tree
                                  # gets a bar, not a 40 px stub under its caption
                                  thickness=12, lenmode="pixels", len=280, x=1.02, y=1.0, yanchor="top")))


def _scene(source: IterationRecord | TreeScene, namer: TokenNamer | None,
           tokenizer: Any) -> TreeScene:
    if isinstance(source, TreeScene):
        if tokenizer is not None:
            resolve_namer(None, source.namer, tokenizer)
        return source
    return TreeScene.from_record(source, resolve_namer(source, namer, tokenizer))


def tree_figure(source: IterationRecord | TreeScene, *, color_by: str = "auto",
                show_pruned: bool = False, namer: TokenNamer | None = None,
                tokenizer: Any = None, max_label_chars: int | None = None,
                title: str | None = None, highlight: int | None = None,
                width: int | None = None, height: int | None = None,
                drafter: str | None = None, color_buttons: bool = True,
                sampling: Any = None) -> go.Figure:
    """The draft tree of one iteration.

    ``color_by``: ``"confidence"`` (c(u)), ``"cum_prob"`` (p(u)), ``"target_p"`` (the target's
    p(token), warped under sampling) or ``"auto"`` (``"target_p"`` for a tree decoded under
    sampling, else ``"confidence"``; ``sampling`` = ``Trace.sampling`` or a ``SamplingConfig``
    says so for a scene that does not know it itself); ``show_pruned`` adds the
    candidates pruned by τ / N_max as ghost nodes; ``highlight`` rings one node (BFS index);
    ``tokenizer`` (``.decode(list[int])`` or ``decode(id)``) names tokens the trace stores no
    text for (pruned candidates, the target's choices); ``color_buttons=False`` leaves out the
    in-figure colour buttons (widgets have their own toggle).
    Trace names: see the module constants (``NODES`` holds one point per tree node in BFS order,
    with ``customdata`` = BFS index and ``text`` = its label; ``LABELS`` draws every label).
    Every encoding has a legend entry (``LEGEND_GROUP``).
    """
    scene = _scene(source, namer, tokenizer)
    color_by = resolve_color_by(color_by, scene.sampled or sampling_active(sampling))
    status = scene.statuses()
    lay = _layout(scene, show_pruned)
    look = _look(lay, max_label_chars)
    texts = label_texts(scene, lay, look.chars)
    legend = _legend_keys(scene, status, color_by, bool(lay.pruned), highlight)
    geo = _geometry(lay, texts, look.font_size, [k.name for k in legend], width=width,
                    height=height)
    traces = _tree_traces(scene, status, lay, geo, look, color_by, highlight)
    traces.append(_leader_trace(geo.plan, lay.pos))
    traces.append(_label_trace(sorted(texts), texts, geo.plan.offset, lay.pos, look.font_size,
                               label_colors(scene, lay)))
    fig = go.Figure(data=traces + legend + [_colorbar(color_by)])
    fig.update_layout(
        title=dict(text=title if title is not None else default_title(scene, drafter), x=0.01,
                   font=dict(size=14)),
        template="plotly_white", hovermode="closest", dragmode="pan", **_axes(geo, lay.depth),
        updatemenus=[_color_menu(scene, color_by, trace_index(fig, NODES), len(fig.data) - 1)]
        if color_buttons else [])
    return fig


def _tree_traces(scene: TreeScene, status: list[str], lay: _Layout, geo: _Geometry, look: _Look,
                 color_by: str, highlight: int | None) -> list[go.Scatter]:
    """Every line and outcome mark first, then the markers (plotly paints traces in order; the
    labels come last, so nothing is painted over them)."""
    tree, pos, n = scene.tree, lay.pos, len(scene.tree)
    acc = set(scene.accepted)
    out = [_lines([(tree.parents[i], i) for i in range(1, n) if i not in acc], pos, EDGES,
                  geo.start, color=style.EDGE, width=1)]
    if lay.pruned:
        out.append(_lines([(p.parent, n + k) for k, p in enumerate(lay.pruned)], pos,
                          PRUNED_EDGES, geo.start, color=style.GHOST, width=1, dash="dot"))
    out.append(_lines(_path_edges(scene, lay), pos, ACCEPTED_EDGES, geo.start,
                      color=style.ACCEPTED, width=3.5))
    out[-1].legendgroup = "accepted"
    out += _outcome_marks(status, pos)
    if lay.pruned:
        out.append(_pruned_trace(scene, lay.pruned, pos, n, look.chars))
    out.append(_node_trace(scene, status, pos, color_by, highlight, look))
    if lay.bonus_node is not None:
        out.append(_bonus_trace(scene, pos[lay.bonus_node], lay.bonus_parent, look.chars))
    return out


def _path_edges(scene: TreeScene, lay: _Layout) -> list[tuple[int, int]]:
    """The accepted path's edges, then the edge to the bonus star."""
    edges = list(zip([0] + scene.accepted[:-1], scene.accepted))
    if lay.bonus_node is not None:
        edges.append((lay.bonus_parent, lay.bonus_node))
    return edges


def _color_menu(scene: TreeScene, color_by: str, node_idx: int, cbar_idx: int) -> dict:
    """The c(u) / p(u) / p(token) buttons: restyle the node colours and the colour bar's caption."""
    def button(key: str) -> dict:
        return dict(label=style.COLOR_BY_TITLES[key], method="restyle",
                    args=[{"marker.color": [node_colors(scene, key), [0.0, 1.0]],
                           "marker.colorbar.title.text": [None, style.COLOR_BY_CAPTIONS[key]]},
                          [node_idx, cbar_idx]])

    return dict(type="buttons", direction="right", x=0.0, y=1.0, xanchor="left",
                yanchor="bottom", pad=dict(t=2, b=2), showactive=True,
                active=style.COLOR_BY_CHOICES.index(color_by),
                buttons=[button(k) for k in style.COLOR_BY_CHOICES])


def _pruned_trace(scene: TreeScene, pruned: list, pos: dict, n: int, chars: int) -> go.Scatter:
    """Ghosts of the candidates τ / N_max pruned (``text``: their labels, drawn by ``LABELS``)."""
    return go.Scatter(
        x=[pos[n + k][0] for k in range(len(pruned))],
        y=[pos[n + k][1] for k in range(len(pruned))],
        mode="markers", name=PRUNED, showlegend=False, legendgroup="pruned",
        text=[style.short_label(scene.namer(p.token), chars) for p in pruned],
        marker=dict(symbol="circle-open", size=9, color=style.GHOST, line=dict(width=1.5)),
        hovertext=[f"<b>{style.hover_escape(scene.namer(p.token))}</b> (id {p.token})<br>"
                   f"pruned by {_PRUNE_RULES.get(p.reason, p.reason)} (never verified)<br>rank "
                   f"{p.rank} under #{p.parent} · log q = {p.logp:.3f} · p(u) = "
                   f"{math.exp(p.cum_logp):.4f}"
                   for p in pruned],
        hovertemplate="%{hovertext}<extra></extra>")


def _node_trace(scene: TreeScene, status: list[str], pos: dict, color_by: str,
                highlight: int | None, look: _Look) -> go.Scatter:
    """One marker per tree node (``customdata`` = BFS index, ``text`` = its label)."""
    tree = scene.tree
    n = len(tree)
    line_color = [style.ACCEPTED if s in ("accepted", "root") else
                  style.REJECTED if s == "rejected" else "#707070" for s in status]
    line_width = [3 if s in ("accepted", "rejected", "root") else 1 for s in status]
    if highlight is not None and 0 <= highlight < n:
        line_color[highlight], line_width[highlight] = style.HIGHLIGHT, 5
    return go.Scatter(
        x=[pos[i][0] for i in range(n)], y=[pos[i][1] for i in range(n)],
        mode="markers", name=NODES, customdata=list(range(n)),
        text=[style.short_label(t, look.chars) for t in scene.texts],
        marker=dict(size=[18 if i == 0 else 14 if not look.dense else 11 for i in range(n)],
                    color=node_colors(scene, color_by),
                    symbol=[style.STOP_SYMBOLS.get(s, "circle") for s in tree.stop_reasons],
                    opacity=[FADED_OPACITY if s == "below_rejection" else 1.0 for s in status],
                    line=dict(color=line_color, width=line_width)),
        hovertext=[_hover(scene, i, status[i]) for i in range(n)],
        hovertemplate="%{hovertext}<extra></extra>", showlegend=False)


def _bonus_trace(scene: TreeScene, bpos: tuple[float, int], bonus_parent: int,
                 chars: int) -> go.Scatter:
    """The target's bonus token as an orange star (``text``: its label, drawn by ``LABELS``)."""
    btext = scene.namer(scene.bonus)
    return go.Scatter(
        x=[bpos[0]], y=[bpos[1]], mode="markers", name=BONUS, showlegend=False,
        legendgroup="bonus", text=[style.short_label(btext, chars)],
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
    if color_by == "target_p" and None in node_values(scene, color_by):
        keys.append(_legend_key(LEGEND_NO_TARGET_P, "hollow", marker=dict(
            symbol="circle", size=11, color=NO_VALUE_COLOR, line=dict(color="#707070", width=1))))
    if pruned:
        keys.append(_legend_key(LEGEND_PRUNED, "pruned", mode="lines+markers",
                                line=dict(color=style.GHOST, width=1, dash="dot"),
                                marker=dict(symbol="circle-open", size=9, color=style.GHOST)))
    if highlight is not None and 0 <= highlight < len(scene.tree):
        keys.append(_legend_key(LEGEND_SELECTED, "selected", marker=dict(
            symbol="circle", size=11, color="#ffffff", line=dict(color=style.HIGHLIGHT, width=4))))
    for reason in dict.fromkeys(scene.tree.stop_reasons):  # the shapes in use
        keys.append(_legend_key(f"{STOP_PREFIX}{stop_label(reason)}",
                                "stop", marker=dict(symbol=style.STOP_SYMBOLS.get(reason, "circle"),
                                                    size=10, color="#888888")))
    return keys


stop_label = style.stop_label  # re-exported: the legend's and the hover's wording of a stop reason


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

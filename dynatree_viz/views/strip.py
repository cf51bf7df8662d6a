"""What a reader without a kernel sees of a figure: an animation as one picture of every step.

:func:`animation_strip` draws each frame of an :func:`~dynatree_viz.views.animation.animate`
figure as a small panel. The panels' labels are planned again at the strip's scale (one line each,
with the tree view's rules from :mod:`dynatree_viz.core.labels`). A label drops to a further row
where it would touch a neighbour, and every edge starts below its parent's labels. A row of panels
is only as tall as its deepest tree. :func:`static_figure` picks the picture for any figure.
"""

from __future__ import annotations

import html
import math
from typing import Any, Sequence

import plotly.graph_objects as go

from dynatree_viz.core import style
from dynatree_viz.core.labels import (GAP, MARK_RADIUS, Label, LabelPlan, clipped_edges,
                                      marker_size_for_offset, plan_labels, text_height, text_lines, text_width)
from dynatree_viz.views import tree as tv
from dynatree_viz.views.animation import (LEGEND_Q, LEGEND_TARGET, TARGET_CHOICES, frame_figures,
                                          is_animation)

_STRIP_LEFT, _STRIP_GAP_X, _STRIP_GAP_Y, _STRIP_TOP, _STRIP_RIGHT = 30, 36, 56, 40, 120
#: token labels in the strip: a 1200 px image shows at about 0.8 in a notebook, and 10 px labels
#: read as 8 px there
STRIP_LABEL_FONT = 13
#: the fewest vertical pixels per tree level in a strip panel (a node and one row of labels); a
#: level whose labels need more rows gets more. The animation's own spacing (~140 px, for two-line
#: labels and the target's choices) made 02's strip 3,183 px tall, mostly white
STRIP_LEVEL_PX = 56
#: px of edge left visible between a level's lowest label and the mark of the next level
STRIP_EDGE_PX = 12
#: the smallest scale of a panel against the animation (markers of 7 px)
STRIP_MIN_SCALE = 0.5
_EDGE_TRACES = (tv.EDGES, tv.PRUNED_EDGES, tv.ACCEPTED_EDGES)


def static_figure(fig: go.Figure) -> go.Figure:
    """What a reader without a kernel should see of ``fig``: an animation as
    :func:`animation_strip` (every step), any other animated figure (e.g. :func:`race`) as its
    last frame (the whole story told), a still figure as itself without its buttons (a picture
    cannot press them: the tree view's c(u) / p(u) switch did nothing in a PNG)."""
    if fig.frames:
        return animation_strip(fig) if is_animation(fig) else frame_figures(fig)[-1]
    if not fig.layout.updatemenus:
        return fig
    out = go.Figure(fig)
    out.layout.updatemenus = []
    return out


def strip_frames(fig: go.Figure) -> list[go.Figure]:
    """The frames :func:`animation_strip` draws: all but a first draft step with the root alone
    (d = 0), when other steps follow."""
    figs = frame_figures(fig)
    rest = [f for f in figs if not (isinstance(f.layout.meta, dict) and f.layout.meta.get("phase") == "draft"
                                    and f.layout.meta.get("level") == 0)]
    return rest or figs


def _labels_of(f: go.Figure) -> go.Scatter:
    return next(t for t in f.data if t.name == tv.LABELS)


def _points(figs: Sequence[go.Figure]) -> tuple[dict, dict]:
    """Every labelled point drawn in any panel: ``pos[key] = (x, level)`` and its one-line text
    (the keys are the animation's: node ids, then ghosts, then the bonus, the same in every frame)."""
    pos: dict = {}
    texts: dict = {}
    for f in figs:
        lab = _labels_of(f)
        for k, x, y, t in zip(lab.customdata or [], lab.x or [], lab.y or [], lab.text or []):
            pos[k], texts[k] = (x, int(round(y))), text_lines(t)[0]
    return pos, texts


def _plan(pos: dict, texts: dict, unit_px: float, s: float) -> LabelPlan:
    """One plan for every panel (a label keeps its row from step to step): labels at
    :data:`STRIP_LABEL_FONT`, clear of the marks scaled by ``s``, and a level tall enough for
    its rows of labels and :data:`STRIP_EDGE_PX` of edge."""
    labels = [Label(k, pos[k][0], pos[k][1], text_width(t, style.label_font_size(t, STRIP_LABEL_FONT)),
                    text_height(t, style.label_font_size(t, STRIP_LABEL_FONT))) for k, t in texts.items()]
    plan = plan_labels(labels, unit_px, clear_px=s * MARK_RADIUS + GAP / 2, min_level_px=0.0)
    deepest = max(plan.bottom.values(), default=0.0)
    plan.level_px = max(STRIP_LEVEL_PX, math.ceil(deepest + STRIP_EDGE_PX + s * MARK_RADIUS))
    return plan


def _reclip(t: go.Scatter, pos: dict, start: dict) -> None:
    """Clip the edges of ``t`` again for the strip's level height (the animation clipped them for
    its own): each starts ``start[level]`` levels below its parent, on the line parent → child.
    The edge trace names its segments' keys in ``customdata`` (``tree._lines``)."""
    keys = list(t.customdata or [])
    if len(keys) != len(t.x or []):  # saved before edges named their keys: kept as the animation drew them
        return
    x, y = clipped_edges(list(zip(keys[0::3], keys[1::3])), pos, start)
    t.update(x=x, y=y)


def animation_strip(fig: go.Figure, *, columns: int | None = None, scale: float | None = None,
                    max_width: int = 1250) -> go.Figure:
    """Every step of an :func:`animate` figure in one picture (small multiples): one panel per
    frame, the tree scaled by ``scale`` across (default: :func:`_default_scale`), ``columns``
    panels a row (default: as many as fit in ``max_width``). Down, a level takes what its labels
    need (one line each, at least :data:`STRIP_LEVEL_PX`), and a row of panels reaches the
    deepest level drawn in it. Each panel is titled with its step; one legend for all. This is
    the image notebooks store for an animation. The first draft step (the root alone) is left
    out where later steps follow: every panel draws the root, so it showed an empty-looking tree."""
    figs = strip_frames(fig)
    lay0 = figs[0].layout
    plot_w = lay0.width - lay0.margin.l - lay0.margin.r
    s = scale or _default_scale(plot_w, len(figs), max_width)
    pw = plot_w * s
    x_range = list(lay0.xaxis.range)
    pos, texts = _points(figs)
    plan = _plan(pos, texts, pw / abs(x_range[1] - x_range[0]), s)
    start = {lv: b / plan.level_px for lv, b in plan.bottom.items()}
    cols = columns or max(1, min(len(figs), int((max_width - _STRIP_LEFT) // (pw + _STRIP_GAP_X))))
    rows = [figs[r:r + cols] for r in range(0, len(figs), cols)]
    # a row reaches the deepest level any of its panels draws, and the labels hanging below it
    depth = [max(int(round(y)) for f in row for y in (_labels_of(f).y or [0])) for row in rows]
    below = [plan.bottom.get(d, 0.0) + GAP for d in depth]
    heights = [plan.level_px * (d + 0.5) + b for d, b in zip(depth, below)]
    legend = [t for t in figs[0].data if t.showlegend is not False and t.x == (None,)
              and t.name not in (LEGEND_Q, LEGEND_TARGET)]  # the panels carry no such labels
    bottom = int(tv.legend_height([t.name for t in legend], cols * pw) + 20)
    width = int(_STRIP_LEFT * 2 + cols * pw + (cols - 1) * _STRIP_GAP_X)
    height = int(math.ceil(_STRIP_TOP + sum(h + _STRIP_GAP_Y for h in heights) + bottom))
    out = go.Figure()
    y0 = _STRIP_TOP
    for r, row in enumerate(rows):
        y0 += _STRIP_GAP_Y
        y_range = [depth[r] + below[r] / plan.level_px, -0.5]
        for c, f in enumerate(row):
            x0 = _STRIP_LEFT + c * (pw + _STRIP_GAP_X)
            _add_panel(out, f, r * cols + c + 1, s, plan, start, pos,
                       [x0 / (width + _STRIP_RIGHT), (x0 + pw) / (width + _STRIP_RIGHT)],
                       [1 - (y0 + heights[r]) / height, 1 - y0 / height], x_range, y_range)
        y0 += heights[r]
    out.add_traces(legend)
    out.add_trace(_strip_colorbar(figs[0], (width + 14) / (width + _STRIP_RIGHT)))
    head = (lay0.title.text or "").split(" · ")[0]
    levels = [f.layout.meta.get("level") for f in figs if f.layout.meta.get("phase") == "draft"]
    drafts = f"draft d={min(levels)}…{max(levels)}, " if levels else ""
    out.update_layout(
        title=dict(text=f"{head} · every step: {drafts}verify, select, commit",
                   x=0.01, y=1 - 16 / height, yanchor="top", yref="container", font=dict(size=15)),
        template="plotly_white", width=width + _STRIP_RIGHT, height=height, showlegend=True,
        margin=dict(l=0, r=0, t=0, b=0), hovermode="closest",
        legend=dict(orientation="h", yanchor="top", y=bottom / height - 10 / height,
                    xanchor="left", x=_STRIP_LEFT / (width + _STRIP_RIGHT),
                    font=dict(size=STRIP_LABEL_FONT - 1)))
    return out


def _default_scale(plot_w: float, panels: int, max_width: int) -> float:
    """Panels about 460 px wide, at least 0.7 of the animation (labels as in the GIF); but where
    that leaves one panel a row, as small as two a row need, down to :data:`STRIP_MIN_SCALE`
    (a wide tree's strip was one column 3,500 px tall; its labels take more rows instead)."""
    s = min(max(460 / plot_w, 0.7), 1.0)
    two = ((max_width - _STRIP_LEFT) / 2 - _STRIP_GAP_X) / plot_w * 0.999  # as animation_strip counts
    return max(min(s, two), STRIP_MIN_SCALE) if panels > 1 else s


def _strip_colorbar(f: go.Figure, x: float) -> go.Scatter:
    """The animation's colour bar (what the fill means), right of the panels."""
    bar = go.Scatter(next(t for t in f.data if t.name == tv.COLORBAR))
    # a fraction of the whole strip (the tree view sizes its bar in pixels, for one panel)
    bar.marker.colorbar.update(x=x, xanchor="left", y=0.5, yanchor="middle", len=0.4, lenmode="fraction")
    return bar


def _strip_name(meta: dict) -> str:
    level = meta.get("level")
    return f"draft d={level}" if meta.get("phase") == "draft" else str(meta.get("phase"))


def _add_panel(out: go.Figure, f: go.Figure, k: int, s: float, plan: LabelPlan, start: dict,
               pos: dict, xdom: list, ydom: list, x_range: list, y_range: list) -> None:
    """One step of the strip on axes ``k``: the frame's tree scaled by ``s``, its labels where
    ``plan`` hangs them, its edges starting at ``start``, its title above."""
    meta = f.layout.meta if isinstance(f.layout.meta, dict) else {}
    ax = "" if k == 1 else str(k)  # plotly's names: x, x2, x3 …
    for tr in f.data:
        if tr.x == (None,) or tr.name in (TARGET_CHOICES, tv.COLORBAR):
            continue
        t = _scaled(go.Scatter(tr), s)
        if tr.name == tv.LABELS:  # every node named by its token, as in the GIF
            keys = list(t.customdata or [])
            lines = [text_lines(v)[0] for v in t.text or []]
            t.update(text=lines, textfont_size=[style.label_font_size(v, STRIP_LABEL_FONT) for v in lines],
                     marker_size=[marker_size_for_offset(plan.offset[key]) for key in keys])
        elif tr.name in _EDGE_TRACES:
            _reclip(t, pos, start)
        t.update(xaxis=f"x{ax}", yaxis=f"y{ax}", showlegend=False)
        out.add_trace(t)
    out.layout[f"xaxis{ax}"] = dict(domain=xdom, range=x_range, visible=False, anchor=f"y{ax}")
    out.layout[f"yaxis{ax}"] = dict(domain=ydom, range=y_range, visible=False, anchor=f"x{ax}")
    out.add_annotation(text=f"<b>{k}. {_strip_name(meta)}</b> · {html.escape(meta.get('short', ''), quote=False)}",
                       xref=f"x{ax} domain", yref=f"y{ax} domain", x=0.0, y=1.0, xanchor="left",
                       yanchor="bottom", yshift=4, showarrow=False, align="left",
                       font=dict(size=STRIP_LABEL_FONT + 1, color="#222"))


def _scaled(t: go.Scatter, s: float) -> go.Scatter:
    """A copy of ``t`` with its marker sizes and line widths times ``s``."""
    def times(v: Any) -> Any:
        return [x * s for x in v] if isinstance(v, (list, tuple)) else v * s if v is not None else v
    if t.marker is not None and t.marker.size is not None:
        t.marker.size = times(t.marker.size)
    if t.marker is not None and t.marker.line is not None and t.marker.line.width is not None:
        t.marker.line.width = times(t.marker.line.width)
    if t.line is not None and t.line.width is not None:
        t.line.width = t.line.width * s
    return t


__all__ = ["STRIP_LABEL_FONT", "STRIP_LEVEL_PX", "STRIP_MIN_SCALE", "animation_strip", "static_figure", "strip_frames"]

"""Knob sweeps: one panel per knob, each re-grown tree a point (verified nodes, accepted ℓ) labelled
with the knob's value(s) that grew it (notebook 03's trade-off figure).

A label sits straight above or below its own point and is tied to it by a short leader line, at a
place chosen so that it overlaps no other label, marker, leader or line: labels that alternated
around the line could sit between two points and be read as either's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dynatree_viz.core.style import plot_symbol

#: marker and line colour (Okabe-Ito blue)
POINT_COLOR = "#0072B2"
LEADER_COLOR = "#555555"
LABEL_SIZE = 10
#: estimated width of one label character and the height of a label line, in px at LABEL_SIZE
#: (generous: a label is placed as if a little wider than drawn, so estimates never touch)
CHAR_PX = 6.2
LINE_PX = 14.0
MARKER_PX = 8
#: where a label may sit, tried in this order: (dx, dy) px from its point (dy < 0: above)
OFFSETS: tuple[tuple[float, float], ...] = ((0, -22), (0, 22), (0, -38), (0, 38), (0, -54), (0, 54))
#: the leader line starts this many px from the point (clear of its marker)
STANDOFF = 6


@dataclass(frozen=True)
class Box:
    """An axis-aligned rectangle in px (y down)."""

    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: "Box") -> bool:
        return self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1

    def crosses(self, a: tuple[float, float], b: tuple[float, float]) -> bool:
        """Whether the segment a-b passes through the box (Liang-Barsky clipping)."""
        (x0, y0), (dx, dy) = a, (b[0] - a[0], b[1] - a[1])
        t0, t1 = 0.0, 1.0
        for p, q in ((-dx, x0 - self.x0), (dx, self.x1 - x0), (-dy, y0 - self.y0), (dy, self.y1 - y0)):
            if p == 0:
                if q < 0:
                    return False
                continue
            t = q / p
            if p < 0:
                t0 = max(t0, t)
            else:
                t1 = min(t1, t)
            if t0 > t1:
                return False
        return True


def label_box(point: tuple[float, float], text: str, offset: tuple[float, float]) -> Box:
    """The px box of ``text`` centred ``offset`` px from ``point``."""
    w, h = CHAR_PX * len(text) + 4, LINE_PX
    cx, cy = point[0] + offset[0], point[1] + offset[1]
    return Box(cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)


def place_labels(points: Sequence[tuple[float, float]], texts: Sequence[str],
                 area: Box | None = None) -> list[tuple[float, float]]:
    """One offset from :data:`OFFSETS` per label (px, y down), chosen greedily in point order:
    the first that overlaps no placed label or leader, no marker and no segment of the line
    through ``points`` (and stays in ``area`` if given); where every offset collides, the one
    with fewest collisions."""
    if len(points) != len(texts):
        raise ValueError(f"points and texts must have the same length, got {len(points)} and {len(texts)}")
    segments = list(zip(points, points[1:]))
    markers = [Box(x - MARKER_PX / 2, y - MARKER_PX / 2, x + MARKER_PX / 2, y + MARKER_PX / 2) for x, y in points]
    placed: list[Box] = []   # labels and leaders already drawn
    out = []
    for p, text in zip(points, texts):
        best, best_cost = OFFSETS[0], None
        for off in OFFSETS:
            box, lead = label_box(p, text, off), _leader(p, off)
            cost = (sum(box.overlaps(b) or lead.overlaps(b) for b in placed)
                    + sum(box.overlaps(m) for m in markers)
                    + sum(box.crosses(a, b) for a, b in segments)
                    + (area is not None and not (area.x0 <= box.x0 and box.x1 <= area.x1
                                                 and area.y0 <= box.y0 and box.y1 <= area.y1)))
            if best_cost is None or cost < best_cost:
                best, best_cost = off, cost
            if cost == 0:
                break
        placed += [label_box(p, text, best), _leader(p, best)]
        out.append(best)
    return out


def _leader(p: tuple[float, float], off: tuple[float, float]) -> Box:
    """The leader's px box: from STANDOFF off the point to the label's near edge (a thin strip)."""
    sign = 1 if off[1] > 0 else -1
    ends = sorted((p[1] + sign * STANDOFF, p[1] + off[1] - sign * LINE_PX / 2))
    return Box(p[0] - 1, ends[0], p[0] + 1, ends[1])


#: the x axis: drafted nodes, the root not counted (06's cost curve counts tokens verified, root included: n + 1)
NODES_TITLE = "drafted nodes verified (root not counted)"


def knob_sweep_figure(panels: Mapping[str, Sequence[tuple[float, float, str]]], *, cols: int = 4,
                      title: str = "", width: int = 1100, height: int = 580) -> go.Figure:
    """One panel per knob (its symbol, e.g. 'τ_h', as the title): the points (verified nodes,
    accepted ℓ, label) joined in the given order, each label above or below its point on a
    leader line (:func:`place_labels`)."""
    if not panels or not all(panels.values()):
        raise ValueError("panels must map each knob to at least one (nodes, ℓ, label) point")
    names = list(panels)
    rows = -(-len(names) // cols)
    margin = dict(l=60, r=20, t=80, b=60)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[plot_symbol(k) for k in names],
                        horizontal_spacing=0.06, vertical_spacing=0.2)
    top = max(y for pts in panels.values() for _, y, _ in pts)
    y_range = [-0.7, top + 1.3]   # room for a label above the highest point and below ℓ = 0
    # one x range for every panel, so that "top-left is good" compares panels as well as points
    lo, hi = min(x for pts in panels.values() for x, _, _ in pts), max(x for pts in panels.values() for x, _, _ in pts)
    pad = max(1.0, 0.15 * (hi - lo))
    x_range = [lo - pad, hi + pad]
    plot_w, plot_h = width - margin["l"] - margin["r"], height - margin["t"] - margin["b"]
    for k, name in enumerate(names):
        r, c = k // cols + 1, k % cols + 1
        xs, ys, texts = zip(*panels[name])
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", showlegend=False, hovertext=texts,
                                 hovertemplate=f"{plot_symbol(name)} = %{{hovertext}}: %{{x}} nodes, "
                                               "ℓ = %{y}<extra></extra>",
                                 marker=dict(size=MARKER_PX, color=POINT_COLOR), line=dict(color=POINT_COLOR)),
                      row=r, col=c)
        fig.update_xaxes(range=x_range, row=r, col=c)
        sub = fig.get_subplot(r, c)
        (xd0, xd1), (yd0, yd1) = sub.xaxis.domain, sub.yaxis.domain

        def px(x: float, y: float) -> tuple[float, float]:
            fx = xd0 + (x - x_range[0]) / (x_range[1] - x_range[0]) * (xd1 - xd0)
            fy = yd0 + (y - y_range[0]) / (y_range[1] - y_range[0]) * (yd1 - yd0)
            return margin["l"] + plot_w * fx, margin["t"] + plot_h * (1 - fy)

        area = Box(*px(x_range[0], y_range[1]), *px(x_range[1], y_range[0]))
        offsets = place_labels([px(x, y) for x, y in zip(xs, ys)], texts, area)
        for x, y, text, (dx, dy) in zip(xs, ys, texts, offsets):
            fig.add_annotation(x=x, y=y, text=text, showarrow=True, arrowhead=0, arrowwidth=1,
                               arrowcolor=LEADER_COLOR, ax=dx, ay=dy, standoff=STANDOFF,
                               font=dict(size=LABEL_SIZE), name="knob value", row=r, col=c)
    fig.update_yaxes(range=y_range, dtick=1)
    fig.update_xaxes(title_text=NODES_TITLE, row=rows)
    fig.update_yaxes(title_text="accepted ℓ", col=1)
    fig.update_layout(template="plotly_white", height=height, width=width, margin=margin,
                      title=dict(text=title, x=0.01, font=dict(size=14)))
    return fig

"""Labels legible on every node kind: on the figure's own coordinates, no label of a tree picture
sits under a marker, an outcome mark or an edge, nor under another label.

The geometry here is computed from the figure alone (layout size, margins, axis domains and
ranges, marker sizes, plotly.js's text placement), independently of :mod:`dynatree_viz.core.labels`.
"""

from __future__ import annotations

import math
import re

import plotly.graph_objects as go
import pytest

import dynatree_viz as dv
from dynatree_core.policy.config import DynaTreeConfig, FixedTreeConfig, LinearConfig
from dynatree_viz.views import tree as tv
from dynatree_viz.views.animation import animation_strip, frame_figures
from dynatree_viz.core.images import image_export_available
from dynatree_viz.views.mask import ACCEPTED_NAMES, mask_figure
from viz_fixtures import record, tiny_trace

CHAR = 0.6      # average advance of a sans-serif character, in font sizes
PITCH = 1.3     # plotly.js's line pitch, in font sizes
INVISIBLE = ("rgba(0,0,0,0)", "rgba(0, 0, 0, 0)")


def _per_point(v, n):
    return list(v) if isinstance(v, (list, tuple)) else [v] * n


def _to_px(fig: go.Figure, xaxis: str, yaxis: str):
    """Data → screen px for one pair of axes (plot area from the layout's size and margins)."""
    lay = fig.layout
    m = lay.margin
    pw, ph = lay.width - m.l - m.r, lay.height - m.t - m.b
    xa, ya = lay["xaxis" + xaxis[1:]], lay["yaxis" + yaxis[1:]]
    (xd0, xd1), (yd0, yd1) = xa.domain or (0, 1), ya.domain or (0, 1)
    left, right = m.l + xd0 * pw, m.l + xd1 * pw
    top, bottom = m.t + (1 - yd1) * ph, m.t + (1 - yd0) * ph
    (x0, x1), (y0, y1) = xa.range, ya.range  # y0 is drawn at the bottom, y1 at the top
    return (lambda x: left + (x - x0) / (x1 - x0) * (right - left),
            lambda y: bottom - (y - y0) / (y1 - y0) * (bottom - top))


def _shapes(fig: go.Figure):
    """(label boxes, marker discs, edge segments) in px: boxes (name, text, x0, y0, x1, y1),
    discs (x, y, r), segments (x0, y0, x1, y1, half width)."""
    boxes, discs, segs = [], [], []
    for t in fig.data:
        if not t.x or t.x[0] is None:
            continue
        fx, fy = _to_px(fig, t.xaxis or "x", t.yaxis or "y")
        mode, n = t.mode or "", len(t.x)
        if "lines" in mode:
            for k in range(0, n - 1):
                if None not in (t.x[k], t.x[k + 1]):
                    segs.append((fx(t.x[k]), fy(t.y[k]), fx(t.x[k + 1]), fy(t.y[k + 1]),
                                 (t.line.width or 2) / 2))
        sizes = _per_point(t.marker.size if t.marker.size is not None else 6, n)
        if "markers" in mode and t.marker.color not in INVISIBLE:
            widths = _per_point(t.marker.line.width or 0, n)
            discs += [(fx(x), fy(y), s / 2 + w / 2) for x, y, s, w in zip(t.x, t.y, sizes, widths)]
        if "text" in mode and t.text:
            assert t.textposition in ("bottom center", None) or set(t.textposition) == {"bottom center"}, t.name
            fonts = _per_point(t.textfont.size, n)
            for x, y, s, fs, text in zip(t.x, t.y, sizes, fonts, t.text):
                if not text:
                    continue
                lines = text.split("<br>")
                w = max(len(line) for line in lines) * CHAR * fs
                r = s / 2 if "markers" in mode else 0
                y_top = fy(y) + (r / 0.8 + 1 if r else 0)  # plotly.js textPointPosition
                boxes.append((t.name, text, fx(x) - w / 2, y_top, fx(x) + w / 2,
                              y_top + fs * (1 + PITCH * (len(lines) - 1))))
    return boxes, discs, segs


def _disc_hits_box(d, b):
    x, y, r = d
    dx = max(b[2] - x, 0, x - b[4])
    dy = max(b[3] - y, 0, y - b[5])
    return dx * dx + dy * dy < r * r


def _segment_hits_box(sg, b):
    """Liang-Barsky: does the segment meet the box grown by the line's half width?"""
    x0, y0, x1, y1, hw = sg
    lo, hi = 0.0, 1.0
    for p, q in ((x0 - x1, x0 - (b[2] - hw)), (x1 - x0, (b[4] + hw) - x0),
                 (y0 - y1, y0 - (b[3] - hw)), (y1 - y0, (b[5] + hw) - y0)):
        if p == 0:
            if q < 0:
                return False
        else:
            t = q / p
            if p < 0:
                lo = max(lo, t)
            else:
                hi = min(hi, t)
    return lo < hi


def assert_labels_clear(fig: go.Figure, tol: float = 0.5):
    boxes, discs, segs = _shapes(fig)
    assert boxes, "no labels drawn"
    inner = [(n, t, x0 + tol, y0 + tol, x1 - tol, y1 - tol) for n, t, x0, y0, x1, y1 in boxes]
    for b in inner:
        hit = [d for d in discs if _disc_hits_box(d, b)]
        assert not hit, f"label {b[1]!r} ({b[0]}) under a marker at {hit[0]}"
        hit = [s for s in segs if _segment_hits_box(s, b)]
        assert not hit, f"label {b[1]!r} ({b[0]}) under an edge {hit[0]}"
    for i, a in enumerate(inner):
        for b in inner[i + 1:]:
            assert a[4] <= b[2] or b[4] <= a[2] or a[5] <= b[3] or b[5] <= a[3], \
                f"labels {a[1]!r} and {b[1]!r} overlap"
    return boxes


def _dynatree_records():
    gpu = dv.synthetic.synthetic_trace(8, config=DynaTreeConfig.gpu())
    return [record()] + [r for r in gpu.iterations if r.num_nodes >= 8][:4]


@pytest.mark.parametrize("show_pruned", [False, True])
def test_tree_labels_clear_every_marker_edge_and_each_other(show_pruned):
    for rec in _dynatree_records():
        fig = dv.tree_figure(rec, show_pruned=show_pruned)
        boxes = assert_labels_clear(fig)
        n_points = len(rec.tree) + (len(rec.tree.pruned) if show_pruned else 0) + (rec.bonus is not None)
        assert len(boxes) == n_points  # every node kind: root, accepted, rejected, faded, ghosts, bonus


def test_accepted_path_labels_come_first_in_the_accepted_colour():
    rec = record()
    fig = dv.tree_figure(rec)
    labels = fig.data[tv.trace_index(fig, tv.LABELS)]
    colors = dict(zip(labels.customdata, labels.textfont.color))
    assert all(colors[i] == dv.core.style.ACCEPTED for i in rec.accepted_path)
    drawn = [k for k, t in enumerate(fig.data) if t.x and t.x[0] is not None]
    assert tv.trace_index(fig, tv.LABELS) == max(drawn)  # painted over everything else
    assert_labels_clear(fig)


def test_labels_stay_clear_on_a_chain_a_dense_tree_and_with_a_highlight():
    chain = dv.synthetic.synthetic_trace(3, config=LinearConfig(k=8)).iterations[1]
    assert_labels_clear(dv.tree_figure(chain))
    assert_labels_clear(dv.tree_figure(record(), highlight=3, color_by="cum_prob"))
    dense = dv.synthetic.synthetic_trace(1, config=FixedTreeConfig(d=5, b=4, tau=0.0, n_max=256))[0]
    assert_labels_clear(dv.tree_figure(dense))


def test_animation_labels_and_the_targets_choices_stay_clear_in_every_frame():
    for rec in _dynatree_records()[:3]:
        fig = dv.animate(rec, show_pruned=True)
        for f in frame_figures(fig):
            assert_labels_clear(f)


def test_the_static_strip_of_an_animation_keeps_its_labels_clear():
    tr = tiny_trace(3)
    strip = animation_strip(dv.animate(tr, 1))
    boxes = assert_labels_clear(strip)
    rec = tr.iterations[1]
    # every panel names every node it draws (as the GIF does), and none of the labels overlap
    frames = frame_figures(dv.animate(tr, 1))
    assert len(boxes) == sum(len(next(t for t in f.data if t.name == "labels").text or []) for f in frames)
    assert len(boxes) > 2 * (len(rec.accepted_path) + 2)  # more than the path, the root and the bonus


# --- the mask view: its axis labels on long trees -----------------------------------------------

def _ticks_px(fig, axis):
    """Tick positions (px along the axis) and texts of the mask's x or y axis."""
    fx, fy = _to_px(fig, "x", "y")
    ax = fig.layout[axis + "axis"]
    f = fx if axis == "x" else fy
    return [f(v) for v in ax.tickvals], list(ax.ticktext)


@pytest.mark.parametrize("n_nodes", [12, 40, 64, 100, 256])
def test_mask_axis_labels_never_overlap_and_fit_in_the_margins(n_nodes):
    rec = dv.synthetic.synthetic_trace(1, config=FixedTreeConfig(d=8, b=4, tau=0.0, n_max=n_nodes))[0]
    assert rec.num_nodes == n_nodes
    fig = mask_figure(rec)
    lay = fig.layout
    fs = lay.xaxis.tickfont.size
    assert fs and lay.yaxis.tickfont.size == fs
    ys, ytext = _ticks_px(fig, "y")
    gaps = sorted(b - a for a, b in zip(ys, ys[1:]))
    assert not gaps or gaps[0] >= fs * 1.15, f"y tick labels {gaps[0]:.1f} px apart at font {fs}"
    xs, xtext = _ticks_px(fig, "x")
    angle = math.radians(abs(lay.xaxis.tickangle))
    gaps = sorted(b - a for a, b in zip(xs, xs[1:]))  # the prefix block's label included
    assert gaps[0] * math.sin(angle) >= fs * 1.15, f"x tick labels {gaps[0]:.1f} px apart"
    assert len(xtext) > min(n_nodes, 12) // 2  # thinned, not emptied
    plain = [t.replace("<b>", "").replace("</b>", "") for t in ytext]
    assert max(len(t) for t in plain) * CHAR * fs <= lay.margin.l - 30  # room for the title too
    assert max(len(t) for t in xtext) * CHAR * fs * math.sin(angle) <= lay.margin.b - 30
    # the accepted path first: every accepted row is named right of the matrix, the names apart
    acc = [0] + list(rec.accepted_path)
    names = [a for a in lay.annotations if a.name == ACCEPTED_NAMES]
    assert [a.y for a in names] == acc and all(a.text.startswith("<b>") for a in names)
    fx, fy = _to_px(fig, "x", "y")
    tops = [fy(a.y) + a.ay for a in names]
    assert all(b - a >= (fs + 1) * 1.15 for a, b in zip(tops, tops[1:]))
    assert all(lay.margin.t <= y <= lay.height - lay.margin.b for y in tops)
    right = max(fx(a.x) + a.ax + len(re.sub("<[^>]+>", "", a.text)) * CHAR * a.font.size for a in names)
    bar = fig.data[0].colorbar.x * (lay.width - lay.margin.l - lay.margin.r) + lay.margin.l
    assert right <= bar  # the names end before the colour bar
    labelled = dict(zip(lay.yaxis.tickvals, ytext))  # left, the accepted rows' labels are bold
    assert all(labelled[i].startswith("<b>") for i in acc if i in labelled)


@pytest.mark.skipif(not image_export_available()[0], reason="needs kaleido and a Chromium")
def test_plotly_keeps_the_plot_area_the_label_geometry_assumes():
    """The geometry above takes the plot area from the layout's margins: plotly must not push
    them (legend, colour bar, buttons). ``layout.computed.margin`` is what it really used."""
    rec = _dynatree_records()[1]
    for fig in (dv.tree_figure(rec, show_pruned=True), frame_figures(dv.animate(rec))[-1],
                mask_figure(rec)):
        full = fig.full_figure_for_development(warn=False).to_plotly_json()["layout"]
        assert full["computed"]["margin"] == {k: fig.layout.margin[k] for k in "lrtb"}

"""Labels legible on every node kind: on the figure's own coordinates, no label of a tree picture
sits under a marker, an outcome mark or an edge, nor under another label.

The geometry here is computed from the figure alone (layout size, margins, axis domains and
ranges, marker sizes, plotly.js's text placement), independently of :mod:`dynatree_viz.core.labels`.
"""

from __future__ import annotations

import dataclasses
import math
import re

import pytest

import dynatree_viz as dv
from dynatree_core.policy.config import DynaTreeConfig, FixedTreeConfig, LinearConfig
from dynatree_viz.views import tree as tv
from dynatree_viz.views.animation import frame_figures
from dynatree_viz.views.strip import animation_strip, static_figure, strip_frames
from dynatree_viz.core.images import image_export_available
from dynatree_viz.views.mask import ACCEPTED_NAMES, mask_figure
from helpers.viz import record, tiny_trace
from helpers.viz import CHAR, _to_px, assert_labels_clear


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
    frames = strip_frames(dv.animate(tr, 1))
    assert len(boxes) == sum(len(next(t for t in f.data if t.name == "labels").text or []) for f in frames)
    assert len(boxes) > 2 * (len(rec.accepted_path) + 2)  # more than the path, the root and the bonus


def test_the_static_strip_has_no_root_only_panel_and_readable_labels():
    fig = dv.animate(tiny_trace(3), 1)
    frames, kept = frame_figures(fig), strip_frames(fig)
    assert frames[0].layout.meta["phase"] == "draft" and frames[0].layout.meta["level"] == 0
    assert len(kept) == len(frames) - 1 and kept[0].layout.meta["level"] == 1
    strip = animation_strip(fig)
    assert "draft d=1…" in strip.layout.title.text
    titles = [a.text for a in strip.layout.annotations if a.text.startswith("<b>")]
    assert len(titles) == len(kept) and titles[0].startswith("<b>1. draft d=1</b>")
    labels = [t for t in strip.data if t.name == "labels"]
    assert labels and all(min(t.textfont.size) >= 12 for t in labels)  # ~10 px in a notebook at 0.8
    (bar,) = [t for t in strip.data if t.marker.colorbar.title.text]
    cb = bar.marker.colorbar  # 40 % of the strip's height: not the tree view's pixel length
    assert cb.lenmode == "fraction" and cb.len * strip.layout.height >= 200


def _px_per_level(strip, k):
    ax = "" if k == 1 else str(k)
    dom, rng = strip.layout[f"yaxis{ax}"].domain, strip.layout[f"yaxis{ax}"].range
    return (dom[1] - dom[0]) * strip.layout.height / abs(rng[0] - rng[1]), rng


def test_the_static_strip_spends_far_less_height_per_level_than_the_animation():
    # 02's strip drew the animation's 140 px per level (two-line labels, target's choices): 3,183 px
    # tall, mostly white; its panels carry one-line labels and take what those need
    from dynatree_viz.views.strip import STRIP_LEVEL_PX
    for rec in [tiny_trace(3).iterations[1], *_dynatree_records()[1:3]]:
        fig = dv.animate(rec, show_pruned=True)
        plot_h = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
        levels = abs(fig.layout.yaxis.range[0] - fig.layout.yaxis.range[1])
        strip = animation_strip(fig)
        per_level = {round(_px_per_level(strip, k)[0], 3) for k in range(1, len(strip_frames(fig)) + 1)}
        assert len(per_level) == 1  # every panel on one vertical scale: steps compare at a glance
        (px,) = per_level
        assert STRIP_LEVEL_PX <= px < 0.7 * plot_h / levels


@pytest.mark.parametrize("show_pruned", [False, True])
def test_the_strip_replans_its_labels_on_wide_trees(show_pruned):
    # the strip used to scale the animation's label plan (two rows at 11 px) to 13 px labels at 0.7
    # of the width: sibling labels touched ("old" / "man king" in 02) and edges crossed labels on
    # every synthetic tree of 12+ nodes
    for rec in _dynatree_records()[1:]:
        fig = dv.animate(rec, show_pruned=show_pruned)
        strip = animation_strip(fig)
        boxes = assert_labels_clear(strip)
        kept = strip_frames(fig)
        assert len(boxes) == sum(len(next(t for t in f.data if t.name == "labels").text or []) for f in kept)
        from dynatree_viz.views.strip import STRIP_LABEL_FONT
        sizes = {size for t in strip.data if t.name == "labels" for size in t.textfont.size}
        assert sizes <= {STRIP_LABEL_FONT, STRIP_LABEL_FONT + dv.core.style.PUNCTUATION_BOOST}


def test_a_wide_tree_still_gets_two_panels_a_row():
    # a 22-node tree with its pruned ghosts drew one panel a row at 0.7 scale: 757 x 3,528 px
    from dynatree_viz.views.strip import STRIP_MIN_SCALE
    wide = max(_dynatree_records()[1:], key=lambda r: len(r.tree) + len(r.tree.pruned))
    fig = dv.animate(wide, show_pruned=True)
    strip = animation_strip(fig)
    assert strip.layout.xaxis.domain[1] < strip.layout.xaxis2.domain[0]  # panel 2 beside panel 1
    plot_w = fig.layout.width - fig.layout.margin.l - fig.layout.margin.r
    panel_w = (strip.layout.xaxis.domain[1] - strip.layout.xaxis.domain[0]) * strip.layout.width
    assert panel_w >= STRIP_MIN_SCALE * plot_w - 1
    assert_labels_clear(strip)


def test_a_row_of_shallow_steps_is_shorter_than_a_row_of_deep_ones():
    # the first steps draw two levels of a five-level tree: their row used to be as tall as the last
    fig = dv.animate(_dynatree_records()[1], show_pruned=True)
    strip = animation_strip(fig, columns=2)
    kept = strip_frames(fig)
    first, last = _px_per_level(strip, 1), _px_per_level(strip, len(kept))
    top_h = (strip.layout.yaxis.domain[1] - strip.layout.yaxis.domain[0])
    last_ax = strip.layout[f"yaxis{len(kept)}"]
    assert first[1][0] < last[1][0]  # the first row's range stops at its deepest level
    assert top_h < last_ax.domain[1] - last_ax.domain[0]
    deepest_first = max(max(next(t for t in f.data if t.name == "labels").y) for f in kept[:2])
    assert first[1][0] < deepest_first + 1  # and no further than its labels below it


def test_a_still_picture_drops_the_buttons_a_picture_cannot_press():
    # the tree view's c(u) / p(u) / p(token) switch showed in every static PNG and did nothing there
    fig = dv.tree_figure(record())
    assert fig.layout.updatemenus  # live, the switch recolours the nodes
    still = static_figure(fig)
    assert not still.layout.updatemenus
    assert fig.layout.updatemenus  # the live figure keeps its switch
    assert [t.name for t in still.data] == [t.name for t in fig.data]


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


@pytest.mark.parametrize("n_nodes", [2, 5, 40])
def test_mask_colour_bar_gives_each_colour_its_row_on_small_masks(n_nodes):
    # live in the stepper, a 3-row mask squeezed the bar's four labels into ~15 px each (overlapping)
    from dynatree_viz.views.mask import CODE_NAMES, COLORBAR_ROW_PX

    rec = dv.synthetic.synthetic_trace(1, config=FixedTreeConfig(d=8, b=4, tau=0.0, n_max=n_nodes))[0]
    fig = mask_figure(rec)
    cb = fig.data[0].colorbar
    plot_h = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    assert cb.lenmode == "pixels" and cb.len >= COLORBAR_ROW_PX * len(CODE_NAMES)
    assert cb.len >= 0.5 * plot_h - 1 and cb.yanchor == "top"  # the layout rounds its height up


def test_punctuation_labels_are_drawn_larger_and_still_clear():
    # ‹,› and ‹."› at a tree's 11 px were 4-7 px smudges in every notebook's trees
    from dynatree_viz.core.style import PUNCTUATION_BOOST, label_font_size, short_label
    assert short_label(",") == "‹,›" and label_font_size("‹,›", 11) == 11 + PUNCTUATION_BOOST
    assert label_font_size("‹,›<br>q=0.40", 11) == 11 + PUNCTUATION_BOOST
    assert label_font_size("and", 11) == 11 and label_font_size("‹", 11) == 11
    # a bare space: ␣ alone at 11 px was near-invisible in 06's dynatree:cpu tree; a newline's ↵ is clear
    assert short_label(" ") == "‹␣›" and label_font_size(short_label(" "), 11) == 11 + PUNCTUATION_BOOST
    assert short_label("\n") == "↵"
    marks = [",", '."', ".", ";", "!)"]
    for rec in _dynatree_records():  # every other token punctuation: the larger labels keep clear
        texts = [marks[i % len(marks)] if i % 2 else t for i, t in enumerate(rec.token_texts)]
        rec = dataclasses.replace(rec, token_texts=texts)
        fig = dv.tree_figure(rec, show_pruned=True)
        labels = fig.data[tv.trace_index(fig, tv.LABELS)]
        boosted = [size for text, size in zip(labels.text, labels.textfont.size) if text.startswith("‹")]
        assert boosted and set(boosted) == {11 + PUNCTUATION_BOOST}
        assert_labels_clear(fig)
        anim = dv.animate(rec, show_pruned=True)
        for f in frame_figures(anim)[-2:]:
            assert_labels_clear(f)
        assert_labels_clear(animation_strip(anim))

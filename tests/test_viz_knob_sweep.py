"""Notebook 03's knob-sweep figure: every label sits over its own point on a leader line and overlaps
nothing (labels that alternated above-left / below-right sat between two points: '0.1, 0.02' and
'0.3, 0.2' could be read as either's)."""

from __future__ import annotations

import itertools

import pytest

from dynatree_viz.core.style import plot_symbol
from dynatree_viz.views.knob_sweep import OFFSETS, Box, knob_sweep_figure, label_box, place_labels

#: notebook 03's sweep as it ran (nodes, ℓ, the knob values that grew that tree)
SWEEP = {"τ_h": [(2, 0, "0.5"), (8, 4, "0.7, 0.9, 0.99")], "τ_l": [(8, 4, "0.05, 0.2, 0.4, 0.6")],
         "D0": [(3, 1, "1"), (4, 2, "2"), (5, 3, "3"), (8, 4, "5")],
         "D_max": [(4, 2, "2"), (5, 3, "3"), (7, 4, "4"), (8, 4, "8")],
         "ρ_stop": [(7, 4, "0.3, 0.2"), (8, 4, "0.1, 0.02")], "ρ_deep": [(4, 2, "0.9, 0.7, 0.5"), (7, 4, "0.2")],
         "τ": [(4, 3, "0.2"), (6, 3, "0.1"), (8, 4, "0.05"), (10, 4, "0.02, 0.01")],
         "N_max": [(2, 1, "2"), (4, 2, "4"), (8, 4, "8, 16, 64")]}


def boxes_clear(points, texts, offsets):
    """No label box overlaps another, a marker, or a segment of the line through the points."""
    boxes = [label_box(p, t, o) for p, t, o in zip(points, texts, offsets)]
    markers = [Box(x - 4, y - 4, x + 4, y + 4) for x, y in points]
    segments = list(zip(points, points[1:]))
    return (not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))
            and not any(b.overlaps(m) for b in boxes for m in markers)
            and not any(b.crosses(s, e) for b in boxes for s, e in segments))


def test_close_neighbours_on_a_flat_line_each_get_a_label_over_their_own_point():
    points = [(100.0, 200.0), (150.0, 200.0)]  # ρ_stop: two points 50 px apart at the same ℓ
    texts = ["0.3, 0.2", "0.1, 0.02"]
    offsets = place_labels(points, texts)
    assert all(dx == 0 for dx, _ in offsets)  # straight above or below: never between the two points
    assert boxes_clear(points, texts, offsets)


def test_a_label_that_would_cross_a_steep_segment_moves_to_the_other_side():
    points = [(100.0, 200.0), (130.0, 150.0)]  # ρ_deep: a wide label, then a steep rise to the right
    offsets = place_labels(points, ["0.9, 0.7, 0.5", "0.2"])
    assert offsets[0][1] > 0 and offsets[1] == OFFSETS[0]  # the first below the line, the second above
    assert boxes_clear(points, ["0.9, 0.7, 0.5", "0.2"], offsets)


def test_box_crossing_a_segment():
    box = Box(0, 0, 10, 10)
    assert box.crosses((-5, 5), (15, 5)) and box.crosses((2, 2), (3, 3))
    assert not box.crosses((-5, -5), (-1, 20)) and not box.crosses((11, 0), (20, 10))


def test_knob_sweep_figure_ties_every_label_to_its_point():
    fig = knob_sweep_figure(SWEEP, title="sweep")
    labels = [a for a in fig.layout.annotations if a.name == "knob value"]
    assert len(labels) == sum(len(p) for p in SWEEP.values())
    want = [(x, y, t) for pts in SWEEP.values() for x, y, t in pts]
    assert [(a.x, a.y, a.text) for a in labels] == want  # each label's arrow ends at its own point
    assert all(a.showarrow and a.arrowhead == 0 and a.ax == 0 and a.ay != 0 for a in labels)
    titles = [a.text for a in fig.layout.annotations if a.name != "knob value"]
    assert titles == ["τ<sub>h</sub>", "τ<sub>l</sub>", "D0", "D<sub>max</sub>", "ρ<sub>stop</sub>",
                      "ρ<sub>deep</sub>", "τ", "N<sub>max</sub>"]
    assert all(not t.text for t in fig.data)  # no free-floating text labels on the traces
    ranges = {tuple(fig.layout[k].range) for k in fig.layout if k.startswith("xaxis")}
    assert len(ranges) == 1  # one x range in every panel: "top-left is good" compares panels too
    lo, hi = ranges.pop()
    assert lo < min(x for pts in SWEEP.values() for x, _, _ in pts) and hi > max(x for pts in SWEEP.values() for x, _, _ in pts)


def test_bad_input_and_symbols():
    with pytest.raises(ValueError, match="panels"):
        knob_sweep_figure({})
    with pytest.raises(ValueError, match="panels"):
        knob_sweep_figure({"τ": []})
    with pytest.raises(ValueError, match="same length"):
        place_labels([(0, 0)], [])
    assert plot_symbol("ρ_stop") == "ρ<sub>stop</sub>" and plot_symbol("D0") == "D0"

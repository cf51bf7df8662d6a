"""The timeline's τ_h axis: round ticks that bracket the data, and the paper's symbols as plot text."""

from __future__ import annotations

import math
import re

import pytest

from dynatree_viz import timeline_figure
from dynatree_viz.synthetic import synthetic_trace
from dynatree_viz.views.timeline import MAX_ROUND_TICKS, ROUND_STEPS, round_ticks


def shown_ticks(axis) -> list[tuple[float, str]]:
    """(value, label) of every tick Plotly draws on a linear axis: tick0 + k · dtick inside the range."""
    lo, hi = axis.range
    k0 = math.ceil((lo - axis.tick0) / axis.dtick - 1e-9)
    vals = []
    k = k0
    while axis.tick0 + k * axis.dtick <= hi + 1e-9:
        vals.append(round(axis.tick0 + k * axis.dtick, 10))
        k += 1
    return [(v, format(v, axis.tickformat.lstrip(":"))) for v in vals]


def with_tau_h(values: list[float]):
    """A synthetic DynaTree trace whose τ_h before each iteration is ``values`` (01's run: 0.80 up to 0.99)."""
    tr = synthetic_trace(len(values))
    for rec, v in zip(tr.iterations, values):
        rec.history_before["tau_h"] = v
    return tr


@pytest.mark.parametrize("values", [
    [0.80, 0.82, 0.89, 0.97, 0.99],  # 01's stepper: ticks 0.82 / 0.89 / 0.97, the 0.80 start below "0.82"
    [0.90, 0.93, 0.96, 0.99],        # 04: 0.89 / 0.91 / 0.94 / 0.96 / 0.99, and a top tick "0.98" under 0.99
    [0.5, 0.5, 0.5],                 # a constant τ_h: a tick either side
    [0.05, 0.6],
])
def test_tau_h_ticks_are_round_values_that_bracket_the_data(values):
    fig = timeline_figure(with_tau_h(values))
    axis = next(getattr(fig.layout, k) for k in fig.layout if k.startswith("yaxis")
                and getattr(fig.layout, k).title.text == "τ<sub>h</sub>")
    ticks = shown_ticks(axis)
    assert 2 <= len(ticks) <= MAX_ROUND_TICKS
    assert any(math.isclose(axis.dtick, s) for s in ROUND_STEPS)
    for v, label in ticks:
        assert float(label) == pytest.approx(v, abs=1e-12)  # the label is the value, not a rounding of it
        assert math.isclose(v / axis.dtick, round(v / axis.dtick), abs_tol=1e-9)  # a multiple of the step
    assert ticks[0][0] <= min(values) + 1e-12 and ticks[-1][0] >= max(values) - 1e-12
    assert axis.range[0] < min(values) and axis.range[1] > max(values)  # a line at an end tick stays off the frame


def test_round_ticks_picks_the_smallest_step_that_fits():
    assert round_ticks([0.90, 0.99])["dtick"] == 0.05  # 0.90, 0.95, 1.00: 0.02 would need 6 ticks
    wide = round_ticks([0.1, 0.9])
    assert wide["dtick"] == 0.25 and wide["tickformat"] == ".2f"  # 0.25 needs two decimals, not ".1f"
    assert round_ticks([]) == {} and round_ticks([float("nan")]) == {}


def test_timeline_plot_text_writes_symbols_not_code_names():
    """τ_h and a_r are the paper's τ<sub>h</sub> and a<sub>r</sub>: no underscore form in titles,
    axis titles or legend names."""
    fig = timeline_figure(synthetic_trace(8))
    texts = [t.name for t in fig.data] + [a.text for a in fig.layout.annotations]
    texts += [getattr(fig.layout, k).title.text for k in fig.layout if k.startswith(("xaxis", "yaxis"))]
    names = [t.name for t in fig.data]
    assert any(n.startswith("τ<sub>h</sub>:") for n in names) and any(n.startswith("a<sub>r</sub>:") for n in names)
    assert not [t for t in texts if t and re.search(r"[τa]_[hr]\b|tau_h", t)]

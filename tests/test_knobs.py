"""The knob table is the one source of every knob's name, symbol, range, step and help: the CLI's
help, the explorer's sliders, the sweep titles and the offline page's JSON all read it."""

from __future__ import annotations

import dataclasses
import json

import pytest

from dynatree_core.policy import knobs
from dynatree_core.policy.config import PARAMETER_HELP, DynaTreeConfig


def test_every_slider_knob_is_a_dynatree_config_field_with_a_valid_range():
    fields = {f.name for f in dataclasses.fields(DynaTreeConfig)}
    for k in knobs.KNOBS:
        assert k.name in fields, k.name
        assert k.lo <= k.hi and k.step > 0 and k.kind in ("int", "float")
        if k.slider:
            lo, hi = k.page
            assert k.lo <= lo <= hi <= k.hi, k.name  # the page range sits inside the live one


def test_help_titles_and_sliders_come_from_the_table():
    from dynatree_viz.views.compare import X_TITLES
    from dynatree_viz.widgets.explorer import SLIDERS

    assert PARAMETER_HELP == {k.name: k.help for k in knobs.KNOBS}
    assert X_TITLES["d0"] == knobs.knob("d0").title == "base depth D0"
    assert SLIDERS == {k.name: (k.kind, k.lo, k.hi, k.step, k.symbol) for k in knobs.slider_knobs()}
    assert set(SLIDERS) == {"tau_h", "tau_l", "b_min", "b_mid", "b_max", "d0", "d_max", "rho_stop",
                            "rho_deep", "tau", "n_max"}  # every knob of the live explorer


def test_knobs_json_carries_every_row_and_the_order_constraints():
    data = json.loads(knobs.knobs_json())
    assert [r["name"] for r in data["knobs"]] == [k.name for k in knobs.KNOBS]
    row = data["knobs"][0]
    assert {"name", "symbol", "lo", "hi", "step", "help", "page", "title", "slider"} <= set(row)
    assert [tuple(p) for p in data["ordered_pairs"]] == list(knobs.ORDERED_PAIRS)


def test_a_knob_added_to_the_table_is_a_slider_in_python_with_no_second_edit(monkeypatch):
    from dynatree_viz.widgets.explorer import ParameterExplorer
    from dynatree_viz.widgets.regrow import ReplayBackend
    import dynatree_viz as dv

    rows = tuple(dataclasses.replace(k, page=(0, 8)) if k.name == "lookup_tail" else k for k in knobs.KNOBS)
    monkeypatch.setattr(knobs, "KNOBS", rows)
    rec = dv.synthetic.synthetic_trace(3)[1]
    ex = ParameterExplorer(ReplayBackend(rec), DynaTreeConfig())
    assert "lookup_tail" in ex.sliders and ex.sliders["lookup_tail"].description == "L_tail"
    assert ex.sliders["lookup_tail"].max == 16
    assert "lookup_tail" in [r["name"] for r in json.loads(knobs.knobs_json())["knobs"] if r["slider"]]


def test_slider_bounds_keep_the_ordered_pairs_apart():
    base = {k.name: (k.lo, k.hi) for k in knobs.slider_knobs()}
    values = {k.name: getattr(DynaTreeConfig(), k.name) for k in knobs.slider_knobs()}
    b = knobs.slider_bounds(values, base)
    assert b["d0"][1] == values["d_max"] - 1 and b["tau_h"][0] == pytest.approx(values["tau_l"] + 0.01)
    assert b["b_mid"] == (values["b_min"], values["b_max"])


def test_a_setting_outside_the_page_ranges_is_refused_naming_the_knob():
    with pytest.raises(ValueError, match="b_max must be in the page's range"):
        knobs.check_in_page_ranges({"b_max": 8})

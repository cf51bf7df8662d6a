"""Sweeps are lists of run points for the one shared runner."""

from __future__ import annotations


from dynatree_core.bench.methods import dynatree_config, method_specs
from dynatree_core.bench.sweeps import fixed_tree_points, length_points, prompt_length_points, sensitivity_points
from dynatree_viz.sweeps import _series_rows, sweep_figure


def test_fixed_tree_grid_has_ar_plus_every_D_B_tau():
    points, meta = fixed_tree_points([2, 3], [1, 2, 3], [0.05, 0.1], n_max=64, max_new_tokens=8)
    assert points[0].spec.method == "ar" and len(points) == 1 + 2 * 3 * 2
    assert {(p.params["d"], p.params["b"], p.params["tau"]) for p in points[1:]} == \
        {(d, b, t) for d in (2, 3) for b in (1, 2, 3) for t in (0.05, 0.1)}
    assert all(p.spec.config.d == p.params["d"] for p in points[1:])
    assert meta["param_keys"] == ["d", "b", "tau"]


def test_sensitivity_skips_invalid_threshold_pairs_and_covers_each_group():
    base = dynatree_config("cpu")
    points, meta, skipped = sensitivity_points(base, thresholds=[(0.9, 0.3), (0.3, 0.4)],
                                               breadths=[(1, 2, 4)], depths=[(3, 6)], max_new_tokens=8)
    groups = [p.params["group"] for p in points]
    assert groups == [None, "base", "thresholds", "breadth", "depth"]
    assert len(skipped) == 1 and "tau_h=0.3,tau_l=0.4" in skipped[0]
    assert points[3].spec.config.b_max == 4 and points[4].spec.config.d_max == 6


def test_length_sweeps_add_ar_at_every_length():
    specs = method_specs(["dynatree"])
    pts, _ = length_points(specs, [16, 32])
    assert [(p.spec.label, p.max_new_tokens) for p in pts] == [("ar", 16), ("dynatree", 16), ("ar", 32),
                                                                ("dynatree", 32)]
    pts, _ = prompt_length_points(specs, [64, 128], 8)
    assert [(p.spec.label, p.max_prompt_len) for p in pts] == [("ar", 64), ("dynatree", 64), ("ar", 128),
                                                                ("dynatree", 128)]


def test_sweep_figure_plots_speedup_against_the_swept_value():
    aggs = [{"dataset": "wikitext2", "label": lab, "method": lab, "max_new_tokens": t, "speedup": s,
             "tokens_per_s": 1.0} for t in (16, 32) for lab, s in (("ar", 1.0), ("dynatree", 1.5 + t / 100))]
    fig = sweep_figure("length", aggs)
    # a line's group is the method's label (the data's id); its legend name says the method in words
    lines = [(tr.legendgroup, tr.name, list(tr.x), list(tr.y)) for tr in fig.data]
    assert ("dynatree", "DynaTree", [16, 32], [1.66, 1.82]) in lines
    assert ("ar", "AR", [16, 32], [1.0, 1.0]) in lines


def test_fixed_tree_figure_draws_one_line_per_B_and_tau_and_drops_ar():
    aggs = [{"dataset": "wikitext2", "label": "ar", "method": "ar", "d": None, "b": None, "tau": None}]
    aggs += [{"dataset": "wikitext2", "label": f"ft{d}{b}", "method": "fixed_tree", "d": d, "b": b, "tau": 0.05}
             for d in (2, 3) for b in (1, 2)]
    rows = _series_rows("fixed_tree", aggs)
    assert [r["series"] for r in rows] == ["b=1, tau=0.05", "b=2, tau=0.05"] * 2



"""Recursive rejection sampling step by step (views/rejection.py), its chooser (examples/rejection.py),
and the legend check every figure here passes (helpers/legend.py)."""

from __future__ import annotations

import functools
import json

import numpy as np
import plotly.graph_objects as go
import pytest

from dynatree_core import generate
from dynatree_core.policy.config import DynaTreeConfig
from dynatree_core.records.trace import Trace
from dynatree_viz.examples.rejection import rejection_example
from dynatree_viz.core import style
from dynatree_viz.views.rejection import (MIN_BARS, OTHER, P_BARS, Q_BARS, RESIDUAL_BARS, overlap_total,
                                          rejection_steps_data, rejection_steps_view)

from helpers import cached_pair
from helpers.legend import assert_legend_shows_what_it_names, unseen_legend_entries


@functools.lru_cache(maxsize=None)
def rejected() -> Trace:
    pair = cached_pair("llama", "sdpa", 0.1)
    res = generate(pair, [5, 9, 14, 3, 22, 7], "dynatree", DynaTreeConfig(tau=0.0, n_max=10), max_new_tokens=24,
                   ignore_eos=True, trace=True, temperature=0.9, seed=2, verify="rejection")
    return Trace.from_json(res.trace.to_json())  # the view reads what a saved trace holds


def proportional(residual: list[float], p: list[float], q: list[float]) -> bool:
    """Whether ``residual`` is (p - q)+ up to one normaliser on these tokens."""
    plus = [max(a - b, 0.0) for a, b in zip(p, q)]
    scale = [r / x for r, x in zip(residual, plus) if x > 1e-12]
    return all(abs(r) < 1e-9 for r, x in zip(residual, plus) if x <= 1e-12) and \
        bool(scale) and max(scale) - min(scale) < 1e-6 * max(scale) and min(scale) >= 1.0 - 1e-9


def test_the_sibling_example_rejects_a_candidate_then_tests_the_next_against_the_residual():
    trace = rejected()
    panel = rejection_example(trace, case="sibling", margin=0.05)
    assert panel is not None and panel.accepted_rank == 1
    data = rejection_steps_data(trace, panel.iteration, panel.node)
    first, second = data.steps
    assert not first.accepted and first.coin >= first.threshold + 0.05  # rejected, not by a tie
    assert second.accepted and second.coin <= second.threshold - 0.05
    assert proportional(first.residual, first.p, first.q)  # the residual is norm((p - q)+) ...
    assert second.p == first.residual  # ... and the sibling is tested against it
    j = data.tokens.index(first.candidate)
    scale = 1.0 / (1.0 - first.q[j])  # q without x_1, renormalised
    assert second.q[j] == 0.0 and all(abs(b - a * scale) < 1e-6 for i, (a, b) in enumerate(zip(first.q, second.q))
                                      if i != j)
    assert data.drawn == second.candidate and not data.residual_draw


def test_the_residual_example_rejects_every_candidate_and_draws_from_the_last_residual():
    trace = rejected()
    panel = rejection_example(trace, case="residual", margin=0.05)
    assert panel is not None and panel.accepted_rank == -1
    data = rejection_steps_data(trace, panel.iteration, panel.node)
    assert data.residual_draw and len(data.steps) >= 1 and not any(s.accepted for s in data.steps)
    assert all(s.coin >= s.threshold + 0.05 for s in data.steps)
    for before, after in zip(data.steps, data.steps[1:]):
        assert after.p == before.residual
    assert data.last_residual == data.steps[-1].residual
    lo, hi = data.interval
    assert lo <= data.uniform < hi and data.drawn in data.tokens
    assert data.last_residual[data.tokens.index(data.drawn)] == pytest.approx(hi - lo, abs=1e-6)


def test_the_chooser_refuses_near_ties_and_unknown_cases():
    trace = rejected()
    for case in ("first", "sibling", "residual"):
        picked = rejection_example(trace, case=case, margin=0.0)
        assert picked is not None, case  # the run has each case ...
        assert rejection_example(trace, case=case, margin=1.01) is None  # ... but no coin lies 1.01 from a threshold
    with pytest.raises(ValueError, match="case must be one of"):
        rejection_example(trace, case="second")


def test_a_node_that_rejected_nothing_has_no_steps_to_show():
    trace = rejected()
    first = rejection_example(trace, case="first", margin=0.0)
    with pytest.raises(ValueError, match="rejected no candidate"):
        rejection_steps_data(trace, first.iteration, first.node)


@pytest.mark.parametrize("case", ["sibling", "residual"])
def test_the_steps_figure_draws_every_named_bar_and_accounts_for_each_distributions_mass(case):
    """Steps on a log scale, tokens as text plus "all other tokens": p_i, q_i and the residual sum to 1 in
    every panel, min(p_i, q_i) to Σ min over the vocabulary where a residual gives it; a residual draw adds the
    residual on a linear scale and its CDF strip, the drawn token's interval and u where the data puts them."""
    trace = rejected()
    panel = rejection_example(trace, case=case, margin=0.05)
    fig = rejection_steps_view(trace, panel.iteration, panel.node)
    data = rejection_steps_data(trace, panel.iteration, panel.node)
    bars = [t for t in fig.data if t.name in (P_BARS, Q_BARS, MIN_BARS, RESIDUAL_BARS)]
    assert {t.name for t in bars} == {P_BARS, Q_BARS, MIN_BARS, RESIDUAL_BARS}
    assert_legend_shows_what_it_names(fig)
    assert sorted(t.name for t in fig.data if t.showlegend is not False) == sorted({t.name for t in bars})
    assert all(x.startswith("'") or x == OTHER for t in bars for x in t.x)  # tokens as text, then the rest
    for t in bars:
        if t.name != MIN_BARS:
            assert sum(t.customdata) == pytest.approx(1.0, abs=1e-5), (t.name, t.xaxis)
    for step in data.steps:
        total = overlap_total(step)
        assert (total is None) == step.accepted
        assert total is None or sum(min(p, q) for p, q in zip(step.p, step.q)) - 1e-6 <= total <= 1 + 1e-9
    steps_axes = {f"yaxis{i if i > 1 else ''}" for i in range(1, len(data.steps) + 1)}
    assert all(fig.layout[k].type == "log" for k in steps_axes)
    if data.residual_draw:
        draw_axis = f"yaxis{len(data.steps) + 1}"
        assert fig.layout[draw_axis].type == "linear"
        strip = {t.name: t for t in fig.data if t.xaxis == f"x{len(data.steps) + 2}"}
        drawn = strip[f"'{style.visible_token(data.drawn_text)}'"]
        assert (drawn.base[0], drawn.base[0] + drawn.x[0]) == pytest.approx(data.interval)
        assert list(strip["u"].x) == [data.uniform, data.uniform]


def test_the_legend_check_fails_on_a_planted_figure():
    fig = go.Figure([go.Bar(x=["a", "b"], y=[0.8, 0.1], name="p"),
                     go.Bar(x=["a", "b"], y=[None, None], name="q (no bars: a lookup-tail node)"),
                     go.Bar(x=["a", "b"], y=[0.0, 0.0], name="min(p, q) (zero height)"),
                     go.Bar(x=["a", "b"], y=[0.001, 0.0], name="a sliver"),
                     go.Scatter(x=[0], y=[None], mode="markers", name="no point")])
    assert unseen_legend_entries(fig) == ["q (no bars: a lookup-tail node)", "min(p, q) (zero height)", "a sliver",
                                          "no point"]
    with pytest.raises(AssertionError, match="legend names traces with no visible mark"):
        assert_legend_shows_what_it_names(fig)
    planted = go.Figure([go.Bar(x=["a", "b"], y=np.array([0.8, 0.1]), name="p"),
                         go.Bar(x=["a", "b"], y=np.array([0.0, 0.0]), name="zeros")])
    stored = go.Figure(json.loads(planted.to_json()))  # as a notebook stores it: numeric arrays as base64
    assert isinstance(stored.data[1].y, dict) and unseen_legend_entries(stored) == ["zeros"]
    fig.update_yaxes(type="log", range=[-4, 0])  # on a log axis the sliver shows; zeros never do
    assert unseen_legend_entries(fig) == ["q (no bars: a lookup-tail node)", "min(p, q) (zero height)", "no point"]
    hidden = go.Figure(fig.data[1:3]).update_traces(showlegend=False)
    assert unseen_legend_entries(hidden) == []  # not in the legend: nothing named


@pytest.mark.parametrize("verify", ["match", "rejection"])
def test_every_sampling_view_of_a_run_shows_what_its_legend_names(verify):
    """sampling_view at every iteration: no legend entry without a mark (a lookup-tail node has no q, a
    node that rejected nothing has no residual: those traces are left out, not drawn empty), p on a log
    scale (a drawn token of p = 2.5e-5 shows), and both panels name their tokens in the same order."""
    from dynatree_viz import sampling_view
    pair = cached_pair("llama", "sdpa", 0.1)
    res = generate(pair, [5, 9, 14, 3, 22, 7], "dynatree", DynaTreeConfig(tau=0.0, n_max=10), max_new_tokens=24,
                   ignore_eos=True, trace=True, temperature=0.9, seed=2, verify=verify)
    for i in range(len(res.trace.iterations)):
        fig = sampling_view(res.trace, i)
        assert_legend_shows_what_it_names(fig)
        assert fig.layout.yaxis.type == "log"
        if verify == "match":
            upper = [t for t in fig.data if t.xaxis == "x"][0].x
            assert all(tuple(t.x) == tuple(upper) for t in fig.data)

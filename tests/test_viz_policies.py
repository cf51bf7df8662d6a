"""The policy views: cost curve (views/cost.py), reliability diagram (views/reliability.py), oracle gap
(views/oracle_gap.py) and the policy table (views/policy_table.py), with what they share (views/policy_common.py)."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dynatree_core.policy.cost_model import CostModel
from dynatree_core.policy.config import LinearConfig
from dynatree_core.records.oracle import OracleIteration, OracleSummary, oracle_trace, summarize_oracle
from dynatree_core.records.reliability import Calibration, DepthCalibration, ReliabilityBin
from dynatree_core.records.reliability import calibration as measure_calibration
from dynatree_viz import calibration_figure, cost_figure, oracle_gap_figure, policy_table
from dynatree_viz.synthetic import synthetic_trace
from dynatree_viz.views.policy_table import policy_rows
from dynatree_viz.core import style
from dynatree_viz.views.cost import MARGINAL_NAME, mean_verify_size, tree_sizes
from dynatree_viz.views.oracle_gap import SIDE_BY_SIDE
from dynatree_viz.views.policy_common import CURVE_COLOR, method_styles, trace_label

ROOT = Path(__file__).resolve().parents[1]


def cost_model() -> CostModel:
    # the 2-core CPU curve of the cost_model docstring: 1/2/3/4/6/8 tokens (6 and 8 measured,
    # 5 and 7 interpolated)
    pts = {1: 0.047, 2: 0.050, 3: 0.064, 4: 0.076, 6: 0.083, 8: 0.094}
    return CostModel.from_points(pts, draft_s=0.012, device="cpu (2 cores)", target="pythia-410m",
                                 draft="pythia-70m", dtype="float32", prefix_len=128)


# --- 1. cost curve -------------------------------------------------------------------------------
def test_cost_figure_subtitle_spaces_the_drafter_from_the_draft_name():
    """The calibration keys a draft as 'NAME[drafter]'; the subtitle read '... head)[feature+lookup]'."""
    cost = dataclasses.replace(cost_model(), draft="feature draft (2 layers, 8k-token head)[feature+lookup]")
    title = cost_figure(cost).layout.title.text
    assert "draft feature draft (2 layers, 8k-token head) [feature+lookup] ·" in title and ")[" not in title
    assert "draft pythia-70m ·" in cost_figure(cost_model()).layout.title.text  # a name with no drafter as it is


def test_cost_curve_marks_measured_sizes_and_the_marginal_cost():
    cost = cost_model()
    fig = cost_figure(cost)
    assert [t.name for t in fig.data] == ["c(n), interpolated", "c(n), measured", MARGINAL_NAME]
    line, measured, marginal = fig.data
    assert list(line.x) == list(range(1, 9))
    assert list(line.y) == pytest.approx([1e3 * s for s in cost.verify_s])
    assert list(measured.x) == [1, 2, 3, 4, 6, 8]
    assert list(measured.y) == pytest.approx([1e3 * cost.verify(n) for n in measured.x])
    assert line.y[4] == pytest.approx((76 + 83) / 2)  # n = 5 lies between the measured 4 and 6
    assert list(marginal.x) == [2, 3, 4, 6, 8]  # only between measured sizes: 5 and 7 are interpolated
    assert marginal.y[0] == pytest.approx(3.0) and marginal.yaxis == "y2"
    assert marginal.y[3] == pytest.approx((1e3 * cost.verify(6) - 1e3 * cost.verify(4)) / 2)  # per extra token
    assert [s.y0 for s in fig.layout.shapes if s.yref == "y2"] == [0]  # the right axis's 0: a labelled rule
    title = fig.layout.title.text
    assert "cpu (2 cores)" in title and "pythia-410m" in title and "12.00 ms" in title
    again = cost_figure(cost.to_dict())  # the dict form draws the same figure
    assert [list(t.y) for t in again.data] == [list(t.y) for t in fig.data]
    single = cost_figure(CostModel(verify_s=(0.05,), draft_s=0.0))  # one size: no marginal
    assert len(single.data) == 1 and "unnamed device" in single.layout.title.text


def test_cost_curve_of_a_fit_to_a_trace_marks_the_recorded_sizes():
    """The explorer's cost model is the core CostModel fitted to a trace's timings: cost_figure
    draws it like a measured curve, the recorded tree sizes marked, the line near the generator's."""
    trace = synthetic_trace(30)  # verify = (21 + 0.35 n) ms x (1 + 10 % noise), draft 4.2 ms a level
    fit = CostModel.fit((len(r.tree), r.tree.draft_calls, r.timings) for r in trace.iterations)
    sizes = sorted({len(r.tree) for r in trace.iterations})
    assert fit.n_max == sizes[-1] - 1 and fit.sizes == tuple(sizes)
    line, measured, _ = cost_figure(fit).data
    assert list(measured.x) == sizes and list(line.x) == list(range(1, sizes[-1] + 1))
    for n, ms in zip(line.x, line.y):
        assert 21 + 0.35 * n <= ms * 1.02 and ms <= 1.1 * (21 + 0.35 * n) * 1.02
    assert 4.2e-3 <= fit.draft_s <= 4.2e-3 * 1.1


def test_cost_sizes_sit_in_one_lane_per_method_sized_by_frequency():
    cost = cost_model()
    sizes = {"dynatree": [3, 3, 3, 5, 1], "linear": [3, 3, 3], "eagle2": [5, 20]}
    fig = cost_figure(cost, sizes)
    assert len(fig.data) == 3 + 2 * len(sizes)
    marks = {t.legendgroup: t for t in fig.data if t.mode == "markers" and t.showlegend is not False and t.legendgroup}
    means = {t.legendgroup: t for t in fig.data if t.name.endswith("mean n̄")}
    assert set(marks) == set(means) == set(sizes)
    dt = marks["dynatree"]
    assert list(dt.x) == [2, 4, 6]  # n = drafted nodes + 1 (the root)
    # each method in a lane of its own under the curve (first on top), so that methods that chose
    # the same n (here 4: dynatree and linear; 6: dynatree and eagle2) never hide each other
    lanes = {lab: set(t.y) for lab, t in marks.items()}
    assert lanes == {"dynatree": {0}, "linear": {1}, "eagle2": {2}} and dt.yaxis == "y3"
    assert list(fig.layout.yaxis3.ticktext) == list(sizes)
    assert all(f"c(n) = {1e3 * cost.verify(n):.2f} ms" in h for n, h in zip(dt.x, dt.hovertext))
    assert dt.marker.size[1] == max(dt.marker.size) > dt.marker.size[0]  # n = 4, chosen 3 times
    assert "chosen 3 of 5 iterations (60%)" in dt.hovertext[1]
    assert list(means["dynatree"].x) == pytest.approx([3 + 1]) and list(means["dynatree"].y) == [0]
    assert "n̄ = 4.0" in dt.name and mean_verify_size(sizes["dynatree"]) == pytest.approx(4.0)
    # n = 21 is past the 8-token curve: left out and counted
    assert list(marks["eagle2"].x) == [6] and "1 past the curve" in marks["eagle2"].name
    assert "past the measured curve" in means["eagle2"].hovertemplate
    assert marks["linear"].marker.color != marks["eagle2"].marker.color
    alone = cost_figure(cost)  # no sizes: the curve alone, one panel
    assert len(alone.data) == 3 and "yaxis3" not in alone.layout


def test_cost_sizes_from_traces_use_the_method_and_preset():
    tr = synthetic_trace(6)
    cost = CostModel(verify_s=tuple(0.05 + 0.001 * n for n in range(64)), draft_s=0.01)
    fig = cost_figure(cost, tr)
    mark = next(t for t in fig.data if t.mode == "markers" and t.legendgroup)
    assert mark.legendgroup == "dynatree"
    assert set(mark.x) == {rec.num_nodes + 1 for rec in tr}
    cpu = dataclasses.replace(tr, config={**tr.config, "preset": "cpu"})
    costly = dataclasses.replace(tr, config={**tr.config, "cost_aware": True})
    assert trace_label(cpu) == "dynatree:cpu" and trace_label(costly) == "dynatree:cost"
    pooled = tree_sizes([tr, cpu, tr])
    assert list(pooled) == ["dynatree", "dynatree:cpu"]
    assert pooled["dynatree"] == [rec.num_nodes for rec in tr] * 2
    assert tree_sizes({"mine": tr}) == {"mine": [rec.num_nodes for rec in tr]}


def test_method_styles_keep_house_colours_and_give_unknown_methods_unused_ones():
    labels = ["dynatree", "linear", "eagle2", "sequoia", "medusa", "lookahead"]
    st = method_styles(labels)
    for lab in ("dynatree", "linear", "eagle2", "sequoia"):
        assert st[lab] == style.method_style(lab)
    assert len({s.color for s in st.values()}) == len(labels)  # the unknown two get free colours


# --- 2. reliability diagram ----------------------------------------------------------------------
def _depth(depth: int, bins: list[tuple[float, float, int, float | None, float | None]],
           scale: float | None = None) -> DepthCalibration:
    rb = [ReliabilityBin(lo, hi, c, p, o) for lo, hi, c, p, o in bins]
    full = [b for b in rb if b.count]
    count = sum(b.count for b in full)
    if not count:
        return DepthCalibration(depth, 0, None, None, None, None, rb)
    mean_p = sum(b.count * b.mean_predicted for b in full) / count
    obs = sum(b.count * b.observed_rate for b in full) / count
    ece = sum(b.count / count * abs(b.mean_predicted - b.observed_rate) for b in full)
    return DepthCalibration(depth, count, mean_p, obs, ece, scale, rb)


def calibration() -> Calibration:
    d1 = _depth(1, [(0.0, 0.5, 10, 0.3, 0.2), (0.5, 1.0, 30, 0.8, 0.7)], scale=0.9)
    d2 = _depth(2, [(0.0, 0.5, 20, 0.2, 0.05), (0.5, 1.0, 0, None, None)], scale=0.5)
    d3 = _depth(3, [(0.0, 0.5, 0, None, None), (0.5, 1.0, 0, None, None)])
    overall = _depth(-1, [(0.0, 0.5, 30, (10 * 0.3 + 20 * 0.2) / 30, (10 * 0.2 + 20 * 0.05) / 30),
                         (0.5, 1.0, 30, 0.8, 0.7)])
    return Calibration(kind="path", n_bins=2, depths=[d2, d1, d3], overall=overall)


def test_reliability_diagram_has_a_line_per_depth_and_labels_the_ece():
    cal = calibration()
    ece1 = (10 * 0.1 + 30 * 0.1) / 40
    ece2 = 0.15
    fig = calibration_figure(cal)
    by_rank = sorted(fig.data, key=lambda t: t.legendrank if t.legendrank is not None else 1000)
    assert [t.name for t in by_rank][1:] == [  # the legend's order; depth 3 has no data
        f"depth 1 (ECE {ece1:.2f})", f"depth 2 (ECE {ece2:.2f})", f"overall (ECE {cal.overall.ece:.2f})"]
    assert by_rank[0].name.startswith("perfectly calibrated")
    diag, d1, d2, overall = by_rank
    assert fig.data.index(overall) < fig.data.index(d1)  # the bold line is drawn under the depths
    assert list(diag.x) == [0, 1] and list(diag.y) == [0, 1]
    assert list(d1.x) == [0.3, 0.8] and list(d1.y) == [0.2, 0.7]
    assert list(d2.x) == [0.2] and list(d2.y) == [0.05]  # the empty bin is not drawn
    assert d1.marker.size[1] > d1.marker.size[0]  # 30 predictions vs 10
    assert overall.line.width > d1.line.width and overall.line.color == "#000000"
    assert "10 predictions" in d1.hovertext[0] and f"ECE {ece1:.3f}" in d1.hovertext[0]
    assert "scale s = 0.900" in d1.hovertext[0]
    assert "no data at depth 3" in fig.layout.title.text
    assert "path probability" in fig.layout.title.text
    assert f"{cal.overall.ece:.3f}" in fig.layout.title.text


def test_reliability_diagram_from_the_dict_form():
    cal = calibration()
    fig = calibration_figure(cal.to_dict())
    assert [t.name for t in fig.data] == [t.name for t in calibration_figure(cal).data]


# --- 3. oracle gap -------------------------------------------------------------------------------
def summary(n: int, accepted: float, curve: list[float], top_k: int = 4) -> OracleSummary:
    return OracleSummary(n=n, mean_accepted=accepted, mean_oracle=curve[n], gap=curve[n] - accepted,
                         mean_oracle_own=curve[n] - 0.1, gap_own=curve[n] - 0.1 - accepted,
                         truncated_fraction=0.25, curve=curve, iterations=40, top_k=top_k)


def test_oracle_gap_bars_curve_and_points():
    run = [0.0, 0.9, 1.5, 1.9, 2.2, 2.4, 2.5]
    other = [0.0, 0.95, 1.6, 2.0, 2.3, 2.5, 2.6]
    sums = {"dynatree": summary(5, 1.8, run), "linear": summary(4, 1.4, run),
            "eagle2": summary(6, 2.0, other, top_k=8)}
    fig = oracle_gap_figure(sums)
    assert len(fig.data) == 2 + 2 + 2 * len(sums)  # 2 bar series, 2 distinct curves, point + gap
    accepted, oracle = fig.data[0], fig.data[1]
    assert list(accepted.x) == list(sums) and list(accepted.y) == [1.8, 1.4, 2.0]
    assert list(oracle.y) == [run[5], run[4], other[6]]
    gaps = {a.x: a.text for a in fig.layout.annotations if a.text.startswith("gap")}
    assert gaps == {"dynatree": f"gap {run[5] - 1.8:.2f}", "linear": f"gap {run[4] - 1.4:.2f}",
                    "eagle2": f"gap {other[6] - 2.0:.2f}"}
    curves = [t for t in fig.data if t.name.startswith("oracle best")]
    assert len(curves) == 2 and "dynatree, linear" in curves[0].name and "top-8" in curves[1].name
    assert list(curves[0].x) == list(range(7)) and list(curves[0].y) == run
    point = next(t for t in fig.data if t.name == "dynatree")
    assert list(point.x) == [5] and list(point.y) == [1.8] and point.xaxis == "x2"
    seg = next(t for t in fig.data if t.name == "dynatree: gap")
    assert list(seg.y) == [1.8, run[5]]  # from ℓ̄ up to the curve at the method's size
    assert f"gap {run[5] - 1.8:.2f}" in point.hovertext[0] and "25% only a lower bound" in point.hovertext[0]
    dicts = oracle_gap_figure({k: v.to_dict() for k, v in sums.items()})
    assert [list(t.y) for t in dicts.data] == [list(t.y) for t in fig.data]
    one = oracle_gap_figure({"dynatree": sums["dynatree"]})
    assert [t.name for t in one.data if t.name.startswith("oracle best")] == ["oracle best(i), top-4"]


def test_the_oracle_hover_says_that_n_rounds_the_mean_size():
    """The oracle runs at a whole tree size n = round(n̄): its hover names n̄ and says n rounds it,
    so that a reader never takes 7 for a mean of 6.53; an n equal to the mean needs no remark."""
    rows = [OracleIteration(i, accepted=1, nodes=k, reach=3, truncated=False, top_k=4)
            for i, k in enumerate([6, 7, 7])]  # n̄ = 6.67, n = 7
    s = summarize_oracle(rows, n_curve=8)
    point = next(t for t in oracle_gap_figure({"dynatree": s}).data if t.name == "dynatree")
    assert "tree size n = 7 (the mean size 6.67, rounded)" in point.hovertext[0]
    exact = summarize_oracle([dataclasses.replace(r, nodes=7) for r in rows], n_curve=8)
    hover = next(t for t in oracle_gap_figure({"d": exact}).data if t.name == "d").hovertext[0]
    assert "tree size n = 7" in hover and "rounded" not in hover


def test_each_methods_oracle_curve_has_its_colour_and_a_dash_of_its_own():
    """Six runs, six curves: each in its method's colour (the point's) with its own dash, so that
    none is told apart by dash alone; a curve two methods share stays grey."""
    labels = ["linear", "dynatree:paper", "dynatree:cpu", "dynatree:cost", "eagle2", "sequoia"]
    sums = {lab: summary(3, 1.0, [0.0, 0.8 + 0.01 * k, 1.4, 1.8, 2.0]) for k, lab in enumerate(labels)}
    fig = oracle_gap_figure(sums)
    curves = [t for t in fig.data if t.name.startswith("oracle best")]
    points = {t.name: t for t in fig.data if t.name in sums}
    assert [c.name.split(": ")[1] for c in curves] == labels
    assert [c.line.color for c in curves] == [points[lab].marker.color for lab in labels]
    assert len({c.line.color for c in curves}) == len({c.line.dash for c in curves}) == 6
    run = [0.0, 0.9, 1.5, 1.9, 2.2]
    shared = oracle_gap_figure({"a": summary(3, 1.0, run), "b": summary(2, 0.8, run),
                                "c": summary(3, 1.0, [0.0, 1.0, 1.6, 2.0, 2.3])})
    grey = next(t for t in shared.data if t.name.startswith("oracle best") and "a, b" in t.name)
    assert grey.line.color == CURVE_COLOR
    # "a" and "c" are both at n = 3: side by side (their gap segments with them), "b" alone at n = 2
    x = {t.name: t.x[0] for t in shared.data if t.name in ("a", "b", "c")}
    assert x["b"] == 2 and x["c"] - x["a"] == pytest.approx(SIDE_BY_SIDE) and x["a"] < 3 < x["c"]
    assert next(t for t in shared.data if t.name == "c: gap").x[0] == x["c"]


def test_figures_from_a_measured_trace():
    """End to end: dynatree_core's own calibration and oracle of a synthetic trace."""
    tr, lin = synthetic_trace(10), synthetic_trace(10, config=LinearConfig(k=4))
    cal = measure_calibration(tr, "path", bins=5)
    fig = calibration_figure(cal)
    assert len(fig.data) == 1 + len(cal.depths) + 1
    assert f"overall (ECE {cal.overall.ece:.2f})" in [t.name for t in fig.data]
    sums = {"dynatree": summarize_oracle(oracle_trace(tr)), "linear": summarize_oracle(oracle_trace(lin))}
    fig = oracle_gap_figure(sums)
    for lab, s in sums.items():
        seg = next(t for t in fig.data if t.name == f"{lab}: gap")
        assert seg.x[0] == seg.x[1] and round(seg.x[0]) == s.n and seg.y[1] - seg.y[0] == pytest.approx(s.gap)
    unknown_k = dataclasses.replace(sums["linear"], top_k=0)
    assert oracle_gap_figure({"linear": unknown_k}).data[2].name == "oracle best(i)"


# --- 4. policy table -----------------------------------------------------------------------------
def aggregate(label: str, dataset: str, tps: float, std: float, lbar: float, speedup: float,
              **extra) -> dict:
    method = label.split(":")[0]
    return {"run_id": "r1", "dataset": dataset, "max_new_tokens": 64, "max_prompt_len": 128,
            "label": label, "method": method, "n": 4, "tokens_per_s": tps, "tokens_per_s_std": std,
            "tokens_per_iteration": lbar, "mean_accepted_length": lbar - 1, "speedup": speedup, **extra}


def result_doc() -> dict:
    aggs = [aggregate("ar", "wikitext2", 20.0, 0.5, 1.0, 1.0),
            aggregate("dynatree", "wikitext2", 31.0, 1.2, 3.1, 1.55, mean_tree_size=6.5,
                      oracle_gap=0.42, oracle_n=6.5),
            aggregate("eagle2", "wikitext2", 28.0, 0.9, 3.4, 1.40, mean_tree_size=24.0),
            aggregate("ar", "pg19", 19.0, 0.4, 1.0, 1.0),
            aggregate("dynatree", "pg19", 24.0, 1.0, 2.6, 24.0 / 19.0),
            aggregate("sequoia", "pg19", 26.0, 1.1, 2.9, 26.0 / 19.0, oracle_gap=0.3, oracle_n=16.0)]
    return {"schema_version": 1, "kind": "bench", "aggregates": aggs, "rows": []}


def test_policy_rows_pick_the_fastest_per_dataset_and_keep_missing_oracle_keys():
    rows = policy_rows(result_doc())
    assert [(r["dataset"], r["method"]) for r in rows] == [
        ("wikitext2", "ar"), ("wikitext2", "dynatree"), ("wikitext2", "eagle2"),
        ("pg19", "ar"), ("pg19", "dynatree"), ("pg19", "sequoia")]
    assert [r["method"] for r in rows if r["fastest"]] == ["dynatree", "sequoia"]
    dt = rows[1]
    assert dt["L_bar"] == 3.1 and dt["tokens_per_s"] == 31.0 and dt["oracle_gap"] == 0.42
    assert rows[2]["oracle_gap"] is None and rows[2]["mean_tree_size"] == 24.0
    only = policy_rows(result_doc(), dataset="pg19")
    assert {r["dataset"] for r in only} == {"pg19"} and [r["fastest"] for r in only] == [False, False, True]


def test_policy_table_html_bolds_the_fastest_and_dashes_missing_values(tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(result_doc()))
    h = policy_table(str(path))
    assert h.startswith("<table") and h.rstrip().endswith("</table>")
    body = re.findall(r"<tr.*?</tr>", h.split("<tbody>")[1])
    assert len(body) == 6
    bold = [r for r in body if "dt-fastest" in r]
    assert len(bold) == 2 and ">dynatree<" in bold[0] and ">sequoia<" in bold[1]
    assert "font-weight:bold" in bold[0]
    assert "31.0 ± 1.2" in body[1] and "1.55×" in body[1] and "0.42 (n = 6.5)" in body[1]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", body[2])  # eagle2: no oracle gap measured
    assert cells[-1] == "–" and cells[-2] == "24.0"
    assert "mean tree size" in h and "oracle gap" in h
    # the gap's n is the mean tree size rounded (6.5 beside n = 7 must not read as a second mean)
    head = re.findall(r"<th[^>]*>(.*?)</th>", h)
    assert head[-1] == "oracle gap (at n = mean size, rounded)" and "rounded to whole nodes" in h
    no_size = result_doc()
    for a in no_size["aggregates"]:
        a.pop("mean_tree_size", None)
        a.pop("oracle_gap", None)
    h2 = policy_table(no_size["aggregates"])
    assert "mean tree size" not in h2 and h2.count(">–<") == 6
    frame = pd.DataFrame(result_doc()["aggregates"])  # NaN where a row lacks a field
    assert policy_rows(frame) == policy_rows(result_doc())


def test_policy_rows_tell_apart_sweep_points_and_recompute_missing_aggregates():
    doc = result_doc()
    doc["aggregates"] = [aggregate("dynatree", "w", 30.0, 1.0, 3.0, 1.5, n_max=6),
                         aggregate("dynatree", "w", 33.0, 1.0, 3.2, 1.6, n_max=12)]
    doc["sweep"] = {"param_keys": ["n_max"]}
    rows = policy_rows(doc)
    assert [r["method"] for r in rows] == ["dynatree (n_max=6)", "dynatree (n_max=12)"]
    assert [r["fastest"] for r in rows] == [False, True]
    per_prompt = [{"run_id": "r", "dataset": "w", "label": m, "method": m, "prompt_index": i,
                   "tokens_per_s": t + i, "tokens_per_iteration": 2.0, "warmup": i == 0}
                  for m, t in (("ar", 10.0), ("linear", 14.0)) for i in range(3)]
    rows = policy_rows({"rows": per_prompt, "run_id": "r"})
    lin = next(r for r in rows if r["method"] == "linear")
    assert lin["tokens_per_s"] == pytest.approx(15.5) and lin["speedup"] == pytest.approx(15.5 / 11.5)


# --- bad input, torch-free import ------------------------------------------------------------------
@pytest.mark.parametrize("call,match", [
    (lambda: cost_figure("cpu"), r"^cost must be"),
    (lambda: cost_figure({"draft_s": 0.1}), r"^cost: not a CostModel dict"),
    (lambda: cost_figure(cost_model(), {}), r"^sizes is empty"),
    (lambda: cost_figure(cost_model(), []), r"^sizes is empty"),
    (lambda: cost_figure(cost_model(), {"dynatree": []}), r"^sizes\['dynatree'\] is empty"),
    (lambda: cost_figure(cost_model(), {"dynatree": [2, -1]}), r"^sizes\['dynatree'\] must hold"),
    (lambda: cost_figure(cost_model(), [1, 2]), r"^sizes must be a mapping"),
    (lambda: calibration_figure([0.1, 0.2]), r"^cal must be"),
    (lambda: calibration_figure({"kind": "path"}), r"^cal: not a Calibration dict"),
    (lambda: oracle_gap_figure({}), r"^summaries is empty"),
    (lambda: oracle_gap_figure([summary(1, 0.5, [0.0, 0.9])]), r"^summaries must be a mapping"),
    (lambda: oracle_gap_figure({"dynatree": 1.5}), r"^summaries\['dynatree'\] must be"),
    (lambda: policy_rows(42), r"^result must be"),
    (lambda: policy_rows({"aggregates": []}), r"^result holds no aggregate rows"),
    (lambda: policy_rows({"kind": "bench"}), r"^result: a benchmark document needs"),
    (lambda: policy_rows("/nonexistent/bench.json"), r"^result: cannot read"),
    (lambda: policy_table(result_doc(), dataset="c4"), r"^dataset 'c4' is not in the result"),
])
def test_bad_input_names_the_parameter(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_policies_import_without_torch():
    code = ("import sys, dynatree_viz.views.cost, dynatree_viz.views.reliability, dynatree_viz.views.oracle_gap, "
            "dynatree_viz.views.policy_table; assert 'torch' not in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr

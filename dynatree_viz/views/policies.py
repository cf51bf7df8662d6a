"""Views that compare tree policies (DynaTree, cost-aware DynaTree, EAGLE-2, Sequoia, linear,
fixed tree): where each operates on the verify-cost curve, how well the draft's probabilities
predict acceptance, how far each falls short of the best tree of its size, and a summary table.

* :func:`cost_figure`: the measured verify cost c(n) (:class:`dynatree_core.policy.cost_model.CostModel`)
  with the tree sizes each policy chose drawn on it;
* :func:`calibration_figure`: a reliability diagram per depth
  (:class:`dynatree_core.records.reliability.Calibration`);
* :func:`oracle_gap_figure`: accepted length against the oracle at the same tree size
  (:class:`dynatree_core.records.oracle.OracleSummary` per method);
* :func:`policy_rows` / :func:`policy_table`: one row per (dataset, method) of a benchmark
  result (L̄, tokens/s, speedup, oracle gap, mean tree size), the fastest per dataset in bold.

Everything here reads saved data (cost models, calibrations, oracle summaries, traces, result
files) and never a model, so it imports no torch. Every input may also be given as the dict its
``to_dict`` writes.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from dynatree_core.policy.cost_model import CostModel
from dynatree_core.records.oracle import OracleSummary
from dynatree_core.records.reliability import Calibration, DepthCalibration, ReliabilityBin
from dynatree_core.records.trace import Trace

from dynatree_viz.core import style
from dynatree_viz.views.compare import load_results

_OI = style.OKABE_ITO
CURVE_COLOR = "#4d4d4d"
MARGINAL_COLOR = "#9e9e9e"
ORACLE_COLOR = "#bdbdbd"
#: the right axis's trace: the slope between neighbouring measured sizes (per extra token)
MARGINAL_NAME = "marginal cost per extra token, between neighbouring measured sizes"
#: marker symbols cycled over the methods of one figure, so two methods that pick the same n
#: (same point on the curve) or share a colour family stay apart
METHOD_SYMBOLS: tuple[str, ...] = ("circle", "square", "diamond", "triangle-up", "star",
                                   "hexagon", "triangle-down", "pentagon", "cross", "x")
#: what the predicted probability of each calibration kind is (``Calibration.kind``)
KIND_TITLES: dict[str, str] = {"confidence": "draft confidence c(u)",
                               "conditional": "draft probability q(token | parent)",
                               "path": "path probability p(u)"}
MISSING = "–"
#: the policy table's oracle column: n is the mean tree size rounded (the oracle needs whole nodes)
ORACLE_GAP_HEAD = "oracle gap (at n = mean size, rounded)"
#: the label of cost-aware DynaTree (``dynatree_core.bench.methods.COST_LABEL``)
COST_LABEL = "dynatree:cost"
#: keys of one :func:`policy_rows` row
ROW_KEYS: tuple[str, ...] = ("dataset", "method", "family", "n", "L_bar", "accepted_length",
                             "tokens_per_s", "tokens_per_s_std", "speedup", "mean_tree_size",
                             "oracle_gap", "oracle_n", "oracle_mean", "oracle_gap_own", "fastest")


# --- shared helpers --------------------------------------------------------------------------
#: colours for labels that are not known methods (EAGLE-2, Sequoia, ...), in order of preference:
#: first those of the ablation variants (rarely in the same figure as new policies), then the
#: base methods', yellow last (faint on white)
_NEW_METHOD_COLORS: tuple[str, ...] = tuple(_OI[k] for k in (
    "bluish_green", "reddish_purple", "vermillion", "orange", "sky_blue", "black", "blue", "yellow"))


def method_styles(labels: Sequence[str]) -> dict[str, style.MethodStyle]:
    """{label: MethodStyle}: known methods keep their fixed colour (:func:`style.method_style`);
    any other label (``eagle2``, ``sequoia``) gets a colour that no known method in this figure
    uses, so that no two families of one figure look alike."""
    out: dict[str, style.MethodStyle] = {}
    for lab in labels:
        st = style.method_style(lab)
        if st is not None:
            out[lab] = st
    used = {st.color for st in out.values()}
    free = [c for c in _NEW_METHOD_COLORS if c not in used] or list(_NEW_METHOD_COLORS)
    for k, lab in enumerate(sorted((lab for lab in labels if lab not in out), key=str)):
        out[lab] = style.MethodStyle(free[k % len(free)])
    return out


def _symbols(labels: Sequence[str]) -> dict[str, str]:
    return {lab: METHOD_SYMBOLS[k % len(METHOD_SYMBOLS)] for k, lab in enumerate(labels)}


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return MISSING
    return f"{float(v):.{digits}f}"


def _check_labels(mapping: Any, name: str) -> None:
    if not isinstance(mapping, Mapping):
        raise ValueError(f"{name} must be a mapping label -> value, got {type(mapping).__name__}")
    if not mapping:
        raise ValueError(f"{name} is empty: give at least one method")


# --- 1. the verify-cost curve ------------------------------------------------------------------
def _coerce(value: Any, cls: type, where: str) -> Any:
    """``value`` as a ``cls`` (an instance, or the dict its ``to_dict`` wrote), else a ValueError
    naming ``where``; the cost curve, the calibration and the oracle summaries all arrive so."""
    if isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        try:
            return cls.from_dict(dict(value))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{where}: not a {cls.__name__} dict ({e!r})") from e
    raise ValueError(f"{where} must be a {cls.__module__}.{cls.__name__} or its to_dict(), got "
                     f"{type(value).__name__}")


def _as_cost(cost: Any) -> CostModel:
    return _coerce(cost, CostModel, "cost")


def _is_count(v: Any) -> bool:
    try:
        return not isinstance(v, bool) and float(v).is_integer() and v >= 0
    except (TypeError, ValueError):
        return False


def trace_label(trace: Trace) -> str:
    """A trace's method label, as ``dynatree bench`` labels its rows: ``dynatree:cost`` for a
    cost-aware DynaTree run (same method, another policy), else the method plus ``:<preset>``
    when its config names a preset (``dynatree:cpu``)."""
    cfg = trace.config or {}
    if trace.method == "dynatree" and cfg.get("cost_aware"):
        return COST_LABEL
    preset = cfg.get("preset")
    return f"{trace.method}:{preset}" if preset else str(trace.method)


def tree_sizes(sizes: Any) -> dict[str, list[int]]:
    """``sizes`` of :func:`cost_figure` as {label: per-iteration drafted nodes (root excluded)}.

    Accepts a mapping label -> sizes (or label -> Trace), a :class:`~dynatree_core.records.trace.Trace`
    or a list of traces (labelled by :func:`trace_label`; traces with the same label are pooled)."""
    if isinstance(sizes, Trace):
        sizes = [sizes]
    if isinstance(sizes, (list, tuple)) and sizes and all(isinstance(t, Trace) for t in sizes):
        pooled: dict[str, list[int]] = {}
        for tr in sizes:
            pooled.setdefault(trace_label(tr), []).extend(rec.num_nodes for rec in tr)
        sizes = pooled
    if isinstance(sizes, (list, tuple)):
        if not sizes:
            raise ValueError("sizes is empty: give at least one method's tree sizes or trace")
        raise ValueError("sizes must be a mapping label -> tree sizes, a Trace or a list of Traces; "
                         f"got a {type(sizes).__name__} of {sorted({type(t).__name__ for t in sizes})}")
    _check_labels(sizes, "sizes")
    out: dict[str, list[int]] = {}
    for label, vals in sizes.items():
        if isinstance(vals, Trace):  # a trace under a label of the caller's choosing
            vals = [rec.num_nodes for rec in vals]
        if isinstance(vals, (str, bytes)) or not hasattr(vals, "__iter__"):
            raise ValueError(f"sizes[{label!r}] must be a list of tree sizes, got {type(vals).__name__}")
        vals = list(vals)
        if not vals:
            raise ValueError(f"sizes[{label!r}] is empty (a trace with no iterations?)")
        if not all(_is_count(v) for v in vals):
            raise ValueError(f"sizes[{label!r}] must hold drafted-node counts >= 0, got {vals[:8]}")
        out[str(label)] = [int(v) for v in vals]
    return out


def _cost_at(cost: CostModel, n: float) -> float:
    """c(n) in seconds at a fractional n (a mean tree size), linear between whole sizes; inf
    past the curve."""
    top = len(cost.verify_s)
    if n > top:
        return math.inf
    lo = max(1, min(math.floor(n), top))
    if lo >= n or lo == top:
        return cost.verify(lo)
    return cost.verify(lo) + (cost.verify(lo + 1) - cost.verify(lo)) * (n - lo)


def cost_figure(cost: CostModel | Mapping[str, Any], sizes: Any = None, *,
                title: str | None = None, height: int | None = None) -> go.Figure:
    """The verify-cost curve c(n) and where each policy operates on it.

    Top: x = tokens verified n (root included), y = ms of one target forward. The measured sizes
    (``cost.sizes``) are markers, the interpolated curve a line; the marginal cost c(n) − c(n−1)
    per extra token between neighbouring measured sizes is a dashed line on the right axis (its 0
    a dotted rule). ``sizes`` (see :func:`tree_sizes`) adds a panel below on
    the same n axis, one lane per method: a marker at each n = size + 1 it chose, its area by how
    often, and a bar at its mean n̄ (a lane each, so that no method's marks hide another's where
    several chose the same n; the hover gives c(n)). Sizes past the curve's end are left out and
    counted in the legend.
    """
    cost = _as_cost(cost)
    per_method = tree_sizes(sizes) if sizes is not None else {}
    lanes = bool(per_method)
    fig = make_subplots(rows=2 if lanes else 1, cols=1, shared_xaxes=True, vertical_spacing=0.05,
                        row_heights=[0.6, 0.4] if lanes else None,
                        specs=[[{"secondary_y": True}]] + ([[{}]] if lanes else []))
    ms = _add_curve(fig, cost)
    styles, symbols = method_styles(list(per_method)), _symbols(list(per_method))
    for k, (label, vals) in enumerate(per_method.items()):
        _add_sizes(fig, cost, label, vals, styles[label], symbols[label], k)
    fig.update_xaxes(rangemode="tozero")
    fig.update_xaxes(title_text="tokens verified n (root included)", row=2 if lanes else 1, col=1)
    fig.update_yaxes(title_text="ms per target forward", rangemode="tozero", row=1, col=1, secondary_y=False)
    if len(ms) > 1:
        fig.update_yaxes(title_text="ms per extra token", zeroline=False, rangemode="tozero", showgrid=False,
                         tickmode="auto", nticks=6, tickformat=".1f", row=1, col=1, secondary_y=True)
    if lanes:  # first method on top, each lane named by its method
        fig.update_yaxes(tickmode="array", tickvals=list(range(len(per_method))), ticktext=list(per_method),
                         range=[len(per_method) - 0.4, -0.6], showgrid=False, row=2, col=1)
    info = " · ".join(x for x in (f"draft {draft_label(cost.draft)}" if cost.draft else "", cost.dtype,
                                  f"prefix {cost.prefix_len} tokens" if cost.prefix_len else "",
                                  f"one draft level {1e3 * cost.draft_s:.2f} ms") if x)
    head = title if title is not None else (
        f"verify cost c(n) on {cost.device or 'an unnamed device'} · target "
        f"{cost.target or 'unnamed'}")
    fig.update_layout(template="plotly_white", height=height or (540 + 28 * len(per_method) if lanes else 540),
                      title=dict(text=f"{head}<br><span style='font-size:11px;color:#666'>{info}</span>",
                                 x=0.01, font=dict(size=14)),
                      # the legend below the plot: beside it, it collides with the right axis title
                      margin=dict(l=110 if lanes else 60, r=60, t=90, b=120), width=900,
                      legend=dict(font=dict(size=10), orientation="h", yanchor="top", y=-0.12 if lanes else -0.18,
                                  x=0))
    return fig


def draft_label(draft: str) -> str:
    """A cost model's draft as plot text: the calibration's key 'NAME[drafter]' (one string, as
    the cache names it) reads 'NAME [drafter]', not 'head)[feature+lookup]'."""
    return re.sub(r"(?<=\S)\[([^\[\]]+)\]$", r" [\1]", draft)


def _add_curve(fig: go.Figure, cost: CostModel) -> list[float]:
    """c(n) as a line, its measured sizes as rings and the marginal cost on the right axis (top
    panel); returns c(n) in ms."""
    n_all = list(range(1, len(cost.verify_s) + 1))
    ms = [1e3 * s for s in cost.verify_s]
    fig.add_trace(go.Scatter(
        x=n_all, y=ms, mode="lines", name="c(n), interpolated", line=dict(color=CURVE_COLOR, width=2),
        hovertemplate="n = %{x} tokens<br>c(n) = %{y:.2f} ms<extra>verify cost</extra>"), row=1, col=1)
    measured = [n for n in sorted(set(cost.sizes)) if 1 <= n <= len(ms)]
    if measured:
        fig.add_trace(go.Scatter(
            x=measured, y=[ms[n - 1] for n in measured], mode="markers", name="c(n), measured",
            marker=dict(color=CURVE_COLOR, size=9, symbol="circle-open", line=dict(width=2)),
            hovertemplate="n = %{x} tokens<br>c(n) = %{y:.2f} ms<extra>measured</extra>"), row=1, col=1)
    timed = measured or n_all  # a fitted curve names no sizes: every n is on its line
    if len(timed) > 1:  # per token between neighbouring measured sizes: an interpolated size adds no fact
        slope = [(ms[b - 1] - ms[a - 1]) / (b - a) for a, b in zip(timed, timed[1:])]
        fig.add_trace(go.Scatter(
            x=timed[1:], y=slope, mode="lines+markers", name=MARGINAL_NAME,
            line=dict(color=MARGINAL_COLOR, dash="dash", width=1.5), marker=dict(color=MARGINAL_COLOR, size=5),
            customdata=timed[:-1],
            hovertemplate="n = %{customdata} → %{x}: %{y:+.2f} ms per extra token<extra>marginal</extra>"),
            row=1, col=1, secondary_y=True)
        # the right axis's 0 as a labelled dotted rule, not a gridline: below it a larger tree is cheaper
        fig.add_shape(type="line", xref="x domain", x0=0, x1=1, yref="y2", y0=0, y1=0,
                      line=dict(color=MARGINAL_COLOR, dash="dot", width=1))
        fig.add_annotation(xref="x domain", x=1, yref="y2", y=0, xanchor="right", yanchor="bottom", showarrow=False,
                           text="0 ms per extra token: below it, a larger tree is cheaper",
                           font=dict(size=10, color="#666"))
    return ms


def mean_verify_size(vals: Sequence[int]) -> float:
    """n̄, the mean tokens verified per iteration (drafted nodes + the root) over every iteration:
    the number :func:`cost_figure`'s legend shows (to one decimal)."""
    return sum(vals) / len(vals) + 1


def _add_sizes(fig: go.Figure, cost: CostModel, label: str, vals: list[int],
               st: style.MethodStyle, symbol: str, lane: int) -> None:
    """One method's chosen sizes as markers in its lane (y = ``lane`` of the lower panel) plus a
    bar at its mean n̄."""
    counts = Counter(v + 1 for v in vals)  # drafted nodes -> tokens verified (the root too)
    on = sorted(n for n in counts if n <= len(cost.verify_s))
    past = sum(c for n, c in counts.items() if n > len(cost.verify_s))
    total = len(vals)
    most = max(counts.values())
    mean_n = mean_verify_size(vals)
    name = f"{label} (n̄ = {mean_n:.1f}, {total} iterations" + (
        f", {past} past the curve)" if past else ")")
    fig.add_trace(go.Scatter(
        x=on, y=[lane] * len(on), mode="markers", name=name, legendgroup=label,
        # area ∝ how often n was chosen, so a rarely used size does not look like the usual one
        marker=dict(color=st.color, symbol=symbol, opacity=0.85, line=dict(color=CURVE_COLOR, width=1),
                    size=[6 + 16 * math.sqrt(counts[n] / most) for n in on]),
        hovertext=[f"{html.escape(label)}<br>n = {n} tokens ({n - 1} drafted)<br>chosen "
                   f"{counts[n]} of {total} iterations ({100 * counts[n] / total:.0f}%)<br>"
                   f"c(n) = {1e3 * cost.verify(n):.2f} ms" for n in on],
        hovertemplate="%{hovertext}<extra></extra>"), row=2, col=1)
    c_mean = _cost_at(cost, mean_n)
    at = f"c(n̄) ≈ {1e3 * c_mean:.2f} ms" if math.isfinite(c_mean) else "past the measured curve"
    fig.add_trace(go.Scatter(
        x=[mean_n], y=[lane], mode="markers", name=f"{label}: mean n̄", legendgroup=label, showlegend=False,
        marker=dict(symbol="line-ns", size=24, line=dict(color=CURVE_COLOR, width=2.5)),
        hovertemplate=f"{html.escape(label)}: mean n̄ = {mean_n:.2f}, {at}<extra></extra>"), row=2, col=1)


# --- 2. reliability diagram --------------------------------------------------------------------
def _as_calibration(cal: Any) -> Calibration:
    return _coerce(cal, Calibration, "cal")


def _points(dc: DepthCalibration) -> list[ReliabilityBin]:
    """The bins of one depth that have a point to draw (non-empty, both rates known)."""
    return [b for b in dc.bins if b.count > 0 and b.mean_predicted is not None
            and b.observed_rate is not None]


def calibration_figure(cal: Calibration | Mapping[str, Any], *, title: str | None = None,
                       height: int | None = None) -> go.Figure:
    """Reliability diagram: mean predicted probability against observed acceptance per bin.

    The diagonal y = x is perfect calibration; one line per depth (colour by depth), the overall
    line bold and black; marker area ∝ the bin's count. Legend: ``depth d (ECE x.xx)``; hover gives
    the bin, its count, the depth's ECE and its scale s_d. Depths with no non-empty bin are left
    out and named under the title."""
    cal = _as_calibration(cal)
    depths = sorted(cal.depths, key=lambda dc: dc.depth)
    drawn = [dc for dc in depths if _points(dc)]
    counts = [b.count for dc in [*drawn, cal.overall] for b in _points(dc)]
    most = max(counts, default=1)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfectly calibrated (y = x)",
                             line=dict(color="#aaaaaa", dash="dot", width=1), hoverinfo="skip"))
    colors = sample_colorscale(style.COLORSCALE, [0.8 * k / max(len(drawn) - 1, 1)
                                                  for k in range(len(drawn))]) if drawn else []
    if _points(cal.overall):
        # drawn first, so the thin depth lines stay visible on top of it; listed last
        _add_reliability(fig, cal.overall, "overall", _OI["black"], 4, most, rank=2000)
    for dc, color in zip(drawn, colors):
        _add_reliability(fig, dc, f"depth {dc.depth}", color, 1.5, most, rank=1000 + dc.depth)
    kind = KIND_TITLES.get(cal.kind, str(cal.kind))
    empty = [dc.depth for dc in depths if dc not in drawn]
    note = (f"<br><span style='font-size:11px;color:#666'>{cal.n_bins} bins · marker area ∝ count"
            + (f" · no data at depth {', '.join(map(str, empty))}" if empty else "") + "</span>")
    head = title if title is not None else (
        f"reliability of the {kind}: overall ECE {_fmt(cal.overall.ece, 3)}")
    fig.update_layout(template="plotly_white", height=height or 520,
                      title=dict(text=head + note, x=0.01, font=dict(size=14)),
                      margin=dict(l=60, r=20, t=80, b=50), legend=dict(font=dict(size=10)))
    fig.update_xaxes(title_text=f"predicted ({kind})", range=[-0.02, 1.02], constrain="domain")
    fig.update_yaxes(title_text="observed acceptance rate", range=[-0.02, 1.02],
                     scaleanchor="x", scaleratio=1)
    return fig


def _add_reliability(fig: go.Figure, dc: DepthCalibration, what: str, color: str, width: float,
                     most: int, rank: int) -> None:
    pts = _points(dc)
    name = f"{what} (ECE {_fmt(dc.ece)})"
    scale = "" if dc.scale is None else f", scale s = {dc.scale:.3f}"
    about = (f"{what}: {dc.count} predictions, ECE {_fmt(dc.ece, 3)}{scale}<br>mean predicted "
             f"{_fmt(dc.mean_predicted, 3)}, observed {_fmt(dc.observed_rate, 3)}")
    fig.add_trace(go.Scatter(
        x=[b.mean_predicted for b in pts], y=[b.observed_rate for b in pts], mode="lines+markers",
        name=name, legendrank=rank, line=dict(color=color, width=width),
        marker=dict(color=color, size=[6 + 16 * math.sqrt(b.count / most) for b in pts],
                    line=dict(color="white", width=1)),
        hovertext=[f"bin [{b.lo:.2f}, {b.hi:.2f}): {b.count} predictions<br>predicted "
                   f"{b.mean_predicted:.3f}, observed {b.observed_rate:.3f}<br>{about}" for b in pts],
        hovertemplate="%{hovertext}<extra></extra>"))


# --- 3. oracle gap -----------------------------------------------------------------------------
def _as_summary(label: str, s: Any) -> OracleSummary:
    return _coerce(s, OracleSummary, f"summaries[{label!r}]")


def oracle_gap_figure(summaries: Mapping[str, Any], *, title: str | None = None,
                      height: int | None = None) -> go.Figure:
    """How far each policy's accepted length falls short of the best tree of its size.

    Left: per method, grouped bars of its mean accepted length ℓ̄ and the oracle's at the
    method's own tree size, the gap written above. Right: the oracle curve best(i) (mean best
    accepted length with i nodes; one curve per distinct run / top-k, shared by the methods that
    have it) with each method as a point (n, ℓ̄) and a dotted segment up to the oracle: its length
    is the gap."""
    _check_labels(summaries, "summaries")
    sums = {str(k): _as_summary(str(k), v) for k, v in summaries.items()}
    labels = list(sums)
    styles, symbols = method_styles(labels), _symbols(labels)
    fig = make_subplots(rows=1, cols=2, column_widths=[0.42, 0.58], horizontal_spacing=0.1,
                        subplot_titles=("accepted ℓ̄ vs the oracle at the same tree size",
                                        "oracle: best accepted length with i nodes"))
    hover = {lab: _summary_hover(lab, s) for lab, s in sums.items()}
    fig.add_trace(go.Bar(x=labels, y=[s.mean_accepted for s in sums.values()], name="ℓ̄ accepted (policy)",
                         marker_color=style.ACCEPTED, hovertext=[hover[lab] for lab in labels],
                         hovertemplate="%{hovertext}<extra>policy</extra>"), row=1, col=1)
    fig.add_trace(go.Bar(x=labels, y=[s.mean_oracle for s in sums.values()], name="oracle at its size",
                         marker=dict(color=ORACLE_COLOR, line=dict(color=CURVE_COLOR, width=1)),
                         hovertext=[hover[lab] for lab in labels],
                         hovertemplate="%{hovertext}<extra>oracle</extra>"), row=1, col=1)
    for lab, s in sums.items():
        fig.add_annotation(x=lab, y=max(s.mean_accepted, s.mean_oracle), text=f"gap {s.gap:.2f}",
                           showarrow=False, yshift=10, font=dict(size=11), row=1, col=1)
    _add_curves(fig, sums, styles)
    shift = _side_by_side({lab: s.n for lab, s in sums.items()})
    for lab, s in sums.items():
        st, x = styles[lab], s.n + shift[lab]
        fig.add_trace(go.Scatter(
            x=[x], y=[s.mean_accepted], mode="markers", name=lab, legendgroup=lab,
            marker=dict(color=st.color, symbol=symbols[lab], size=12, line=dict(color=CURVE_COLOR, width=1)),
            hovertext=[hover[lab]], hovertemplate="%{hovertext}<extra></extra>"), row=1, col=2)
        fig.add_trace(go.Scatter(
            x=[x, x], y=[s.mean_accepted, s.mean_oracle], mode="lines", name=f"{lab}: gap",
            legendgroup=lab, showlegend=False, line=dict(color=st.color, dash="dot", width=2),
            hovertemplate=f"{html.escape(lab)}: gap {s.gap:.2f}<extra></extra>"), row=1, col=2)
    top = max([s.mean_oracle for s in sums.values()] + [s.mean_accepted for s in sums.values()])
    fig.update_yaxes(title_text="accepted tokens per iteration", rangemode="tozero",
                     range=[0, top * 1.18 if top > 0 else 1], row=1, col=1)
    fig.update_yaxes(title_text="accepted tokens per iteration", rangemode="tozero", row=1, col=2)
    fig.update_xaxes(title_text="tree size i (drafted nodes)", rangemode="tozero", row=1, col=2)
    fig.update_layout(template="plotly_white", barmode="group", height=height or 520,
                      title=dict(text=title or "oracle gap: accepted length vs the best tree of the same size",
                                 x=0.01, font=dict(size=14)),
                      margin=dict(l=60, r=20, t=100, b=120), width=1000,
                      legend=dict(font=dict(size=10), orientation="h", yanchor="top", y=-0.2, x=0))
    return fig


#: tree sizes between the points (and gap segments) of methods at the same n
SIDE_BY_SIDE = 0.3


def _side_by_side(sizes: Mapping[str, int]) -> dict[str, float]:
    """{label: x offset}: methods at the same tree size n sit SIDE_BY_SIDE apart around n (in
    label order), so that one's marker does not hide another's; a size of one method stays at n."""
    at: dict[int, list[str]] = {}
    for lab, n in sizes.items():
        at.setdefault(n, []).append(lab)
    return {lab: (k - (len(labs) - 1) / 2) * SIDE_BY_SIDE for labs in at.values() for k, lab in enumerate(labs)}


def _rounded_from(s: OracleSummary) -> str:
    """' (the mean size 6.53, rounded)' where n rounds a known mean size; '' where they agree or
    the mean is unknown: a rounded n is never shown as though it were the mean."""
    if s.mean_nodes is None or math.isclose(s.mean_nodes, s.n):
        return ""
    return f" (the mean size {s.mean_nodes:.2f}, rounded)"


def _summary_hover(label: str, s: OracleSummary) -> str:
    top_k = f"top-{s.top_k}" if s.top_k else "top-K unknown"
    return "<br>".join([
        f"<b>{html.escape(label)}</b>: tree size n = {s.n}" + _rounded_from(s),
        f"ℓ̄ accepted {s.mean_accepted:.2f}, oracle at n {s.mean_oracle:.2f}: gap {s.gap:.2f}",
        f"oracle at each iteration's own size {s.mean_oracle_own:.2f}: gap {s.gap_own:.2f}",
        f"{s.iterations} iterations, oracle {top_k}"
        + (f", {100 * s.truncated_fraction:.0f}% only a lower bound (truncated)" if s.truncated_fraction else "")])


def _add_curves(fig: go.Figure, sums: dict[str, OracleSummary], styles: Mapping[str, style.MethodStyle]) -> None:
    """One oracle curve per distinct (top_k, curve): methods measured on the same run share it.
    A curve of one method takes that method's colour (and its own dash), so that six runs' curves
    are told apart by colour as well as by dash; a shared curve stays grey."""
    groups: dict[tuple, list[str]] = {}
    for lab, s in sums.items():
        groups.setdefault((s.top_k, tuple(round(float(v), 9) for v in s.curve)), []).append(lab)
    for k, ((top_k, curve), labs) in enumerate(groups.items()):
        name = "oracle best(i)" + (f", top-{top_k}" if top_k else "") + (
            f": {', '.join(labs)}" if len(groups) > 1 else "")
        color = styles[labs[0]].color if len(labs) == 1 and len(groups) > 1 else CURVE_COLOR
        fig.add_trace(go.Scatter(
            x=list(range(len(curve))), y=list(curve), mode="lines", name=name,
            line=dict(color=color, width=2.5, dash=("solid", *style.VARIANT_DASHES)[k % 6]),
            hovertemplate="i = %{x} nodes: best %{y:.2f}<extra>" + html.escape(name) + "</extra>"),
            row=1, col=2)


# --- 4. the summary table ----------------------------------------------------------------------
def _aggregates(result: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """(aggregate rows, sweep parameter keys) of a result document, its path, a list of
    aggregate rows or a DataFrame of them."""
    if isinstance(result, (str, os.PathLike)):
        try:
            result = json.loads(Path(result).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"result: cannot read {str(result)!r}: {e}") from e
    if isinstance(result, pd.DataFrame):
        # a frame writes NaN for a field a row lacks; a document would leave it out (None)
        result = [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()}
                  for r in load_results(result).to_dict("records")]
    keys: list[str] = []
    if isinstance(result, Mapping):
        keys = list((result.get("sweep") or {}).get("param_keys", []) or [])
        if isinstance(result.get("aggregates"), list):
            aggs = result["aggregates"]
        elif isinstance(result.get("rows"), list):
            # a document without aggregates: recompute them as `dynatree bench` does (imported
            # here: only such a document needs the bench package, torch-free as it is)
            from dynatree_core.bench.results import aggregate

            aggs = aggregate(result["rows"], run_id=result.get("run_id"), param_keys=keys)
        else:
            raise ValueError("result: a benchmark document needs an 'aggregates' or 'rows' list; "
                             f"got keys {sorted(map(str, result))}")
    elif isinstance(result, (list, tuple)) and all(isinstance(r, Mapping) for r in result):
        aggs = [r for r in result if not r.get("warmup")]
    else:
        raise ValueError("result must be a benchmark result document (dict), a path to its JSON, "
                         f"a list of aggregate rows or a DataFrame; got {type(result).__name__}")
    aggs = [dict(a) for a in aggs]
    if not aggs:
        raise ValueError("result holds no aggregate rows")
    if any("method" not in a for a in aggs):
        raise ValueError("result: every aggregate row needs a 'method'")
    return aggs, keys


def _num(v: Any) -> float | None:
    """A finite float or None (DataFrame rows carry NaN for missing values)."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _names(aggs: list[dict[str, Any]], keys: list[str]) -> list[str]:
    """Display names, one per aggregate: the label, plus the cell fields that tell apart rows
    sharing a (dataset, label) (several runs, T, L_max or sweep points in one file)."""
    base = [str(a.get("label") or a["method"]) for a in aggs]
    fields = [("run_id", "run"), ("max_new_tokens", "T"), ("max_prompt_len", "L_max")] + [(k, k) for k in keys]
    groups: dict[tuple, list[int]] = {}
    for i, a in enumerate(aggs):
        groups.setdefault((a.get("dataset"), base[i]), []).append(i)
    names = list(base)
    for idx in groups.values():
        if len(idx) < 2:
            continue
        varying = [(k, short) for k, short in fields if len({json.dumps(aggs[i].get(k), default=str)
                                                              for i in idx}) > 1]
        for i in idx:
            extra = ", ".join(f"{short}={aggs[i].get(k)}" for k, short in varying)
            names[i] = f"{base[i]} ({extra})" if extra else f"{base[i]} #{idx.index(i) + 1}"
    return names


def policy_rows(result: Any, dataset: str | None = None) -> list[dict[str, Any]]:
    """One row per (dataset, method label) of a benchmark result (:data:`ROW_KEYS`).

    ``result``: the document ``dynatree bench`` writes (its ``aggregates``; recomputed from
    ``rows`` if it has none), a path to it, a list of aggregate rows or a DataFrame of them.
    Row fields: ``L_bar`` = tokens committed per iteration, ``accepted_length`` = ℓ̄,
    ``tokens_per_s`` (+ ``_std``), ``speedup`` over AR, ``mean_tree_size``, ``oracle_gap`` and
    ``oracle_n`` (with ``oracle_mean`` and ``oracle_gap_own``; None where the aggregate lacks them) and ``fastest`` (highest tokens/s of its
    dataset; ties all count). Rows keep the file's order, grouped by dataset."""
    aggs, keys = _aggregates(result)
    datasets = list(dict.fromkeys(a.get("dataset") for a in aggs))
    if dataset is not None:
        if dataset not in datasets:
            raise ValueError(f"dataset {dataset!r} is not in the result; it has {datasets}")
        datasets = [dataset]
    names = _names(aggs, keys)
    rows: list[dict[str, Any]] = []
    for ds in datasets:
        sub = [(names[i], a) for i, a in enumerate(aggs) if a.get("dataset") == ds]
        best = max((_num(a.get("tokens_per_s")) for _, a in sub if _num(a.get("tokens_per_s")) is not None),
                   default=None)
        for name, a in sub:
            tps = _num(a.get("tokens_per_s"))
            rows.append({
                "dataset": ds, "method": name, "family": a.get("method"), "n": a.get("n"),
                "L_bar": _num(a.get("tokens_per_iteration")),
                "accepted_length": _num(a.get("mean_accepted_length")),
                "tokens_per_s": tps, "tokens_per_s_std": _num(a.get("tokens_per_s_std")),
                "speedup": _num(a.get("speedup")), "mean_tree_size": _num(a.get("mean_tree_size")),
                "oracle_gap": _num(a.get("oracle_gap")), "oracle_n": _num(a.get("oracle_n")),
                "oracle_mean": _num(a.get("oracle_mean")), "oracle_gap_own": _num(a.get("oracle_gap_own")),
                "fastest": tps is not None and tps == best})
    return rows


def policy_table(result: Any, dataset: str | None = None) -> str:
    """:func:`policy_rows` as an HTML table: method, L̄, tokens/s (mean ± std), speedup over AR,
    mean tree size (when any row has it) and the oracle gap at the method's own mean tree size
    ("–" where not measured); the fastest method of each dataset in bold."""
    rows = policy_rows(result, dataset)
    with_size = any(r["mean_tree_size"] is not None for r in rows)
    head = ["dataset", "method", "L̄ (tok/iter)", "tokens/s", "speedup vs AR"]
    head += ["mean tree size"] if with_size else []
    head += [ORACLE_GAP_HEAD]
    out = ["<table class='dt-policy-table' style='border-collapse:collapse;font-size:13px'>",
           "<thead><tr>" + "".join(f"<th style='text-align:left;padding:2px 8px;border-bottom:1px solid #999'>"
                                   f"{html.escape(h)}</th>" for h in head) + "</tr></thead>", "<tbody>"]
    for r in rows:
        tps = _fmt(r["tokens_per_s"], 1)
        if r["tokens_per_s"] is not None and r["tokens_per_s_std"] is not None:
            tps += f" ± {r['tokens_per_s_std']:.1f}"
        cells = [MISSING if r["dataset"] is None else str(r["dataset"]), r["method"], _fmt(r["L_bar"]), tps,
                 MISSING if r["speedup"] is None else f"{r['speedup']:.2f}×"]
        cells += [_fmt(r["mean_tree_size"], 1)] if with_size else []
        gap = _fmt(r["oracle_gap"])
        cells.append(gap if r["oracle_n"] is None or gap == MISSING else f"{gap} (n = {r['oracle_n']:g})")
        attrs = " class='dt-fastest' style='font-weight:bold'" if r["fastest"] else ""
        out.append(f"<tr{attrs}>" + "".join(f"<td style='padding:2px 8px'>{html.escape(str(c))}</td>"
                                            for c in cells) + "</tr>")
    out += ["</tbody>", "<caption style='caption-side:bottom;font-size:11px;color:#666;text-align:left'>"
            "bold: fastest per dataset · L̄ = tokens committed per iteration · speedup = tokens/s ÷ AR's "
            "(same run and dataset) · oracle gap = what the best tree of n nodes accepts minus the method's "
            "accepted length, n = its mean number of drafted nodes rounded to whole nodes</caption>", "</table>"]
    return "\n".join(out)

"""View: the verify-cost curve c(n) and where each tree policy operates on it.

:func:`cost_figure` draws a :class:`dynatree_core.policy.cost_model.CostModel` (the measured sizes as rings,
the interpolated curve as a line, the marginal cost between measured sizes on the right axis) and, given the
trees' sizes (:func:`tree_sizes`: a mapping label -> sizes, a trace or traces), one lane per method of the
sizes it verified. Reads saved data only, no torch.
"""

from __future__ import annotations

import html
import math
import re
from collections import Counter
from typing import Any, Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dynatree_core.policy.cost_model import CostModel
from dynatree_core.records.trace import Trace

from dynatree_viz.core import style
from dynatree_viz.views.policy_common import (CURVE_COLOR, check_labels, coerce, method_styles, method_symbols,
                                              trace_label)

MARGINAL_COLOR = "#9e9e9e"
#: the right axis's trace: the slope between neighbouring measured sizes (per extra token)
MARGINAL_NAME = "marginal cost per extra token, between neighbouring measured sizes"


def _as_cost(cost: Any) -> CostModel:
    return coerce(cost, CostModel, "cost")


def _is_count(v: Any) -> bool:
    try:
        return not isinstance(v, bool) and float(v).is_integer() and v >= 0
    except (TypeError, ValueError):
        return False


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
    check_labels(sizes, "sizes")
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
    styles, symbols = method_styles(list(per_method)), method_symbols(list(per_method))
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

"""View: the oracle gap, how far each policy's accepted length falls short of the best tree of its size
(:class:`dynatree_core.records.oracle.OracleSummary` per method). Reads saved data only, no torch."""

from __future__ import annotations

import html
import math
from typing import Any, Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dynatree_core.records.oracle import OracleSummary

from dynatree_viz.core import style
from dynatree_viz.views.policy_common import CURVE_COLOR, check_labels, coerce, method_styles, method_symbols

ORACLE_COLOR = "#bdbdbd"


def _as_summary(label: str, s: Any) -> OracleSummary:
    return coerce(s, OracleSummary, f"summaries[{label!r}]")


def oracle_gap_figure(summaries: Mapping[str, Any], *, title: str | None = None,
                      height: int | None = None) -> go.Figure:
    """How far each policy's accepted length falls short of the best tree of its size.

    Left: per method, grouped bars of its mean accepted length ℓ̄ and the oracle's at the
    method's own tree size, the gap written above. Right: the oracle curve best(i) (mean best
    accepted length with i nodes; one curve per distinct run / top-k, shared by the methods that
    have it) with each method as a point (n, ℓ̄) and a dotted segment up to the oracle: its length
    is the gap."""
    check_labels(summaries, "summaries")
    sums = {str(k): _as_summary(str(k), v) for k, v in summaries.items()}
    labels = list(sums)
    styles, symbols = method_styles(labels), method_symbols(labels)
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

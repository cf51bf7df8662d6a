"""View: a reliability diagram per depth (:class:`dynatree_core.records.reliability.Calibration`): how well
the draft's probabilities predict acceptance. Reads saved data only, no torch."""

from __future__ import annotations

import math
from typing import Any, Mapping

import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from dynatree_core.records.reliability import Calibration, DepthCalibration, ReliabilityBin

from dynatree_viz.core import style
from dynatree_viz.views.policy_common import coerce, fmt

_OI = style.OKABE_ITO
#: what the predicted probability of each calibration kind is (``Calibration.kind``)
KIND_TITLES: dict[str, str] = {"confidence": "draft confidence c(u)",
                               "conditional": "draft probability q(token | parent)",
                               "path": "path probability p(u)"}

def _as_calibration(cal: Any) -> Calibration:
    return coerce(cal, Calibration, "cal")


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
        f"reliability of the {kind}: overall ECE {fmt(cal.overall.ece, 3)}")
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
    name = f"{what} (ECE {fmt(dc.ece)})"
    scale = "" if dc.scale is None else f", scale s = {dc.scale:.3f}"
    about = (f"{what}: {dc.count} predictions, ECE {fmt(dc.ece, 3)}{scale}<br>mean predicted "
             f"{fmt(dc.mean_predicted, 3)}, observed {fmt(dc.observed_rate, 3)}")
    fig.add_trace(go.Scatter(
        x=[b.mean_predicted for b in pts], y=[b.observed_rate for b in pts], mode="lines+markers",
        name=name, legendrank=rank, line=dict(color=color, width=width),
        marker=dict(color=color, size=[6 + 16 * math.sqrt(b.count / most) for b in pts],
                    line=dict(color="white", width=1)),
        hovertext=[f"bin [{b.lo:.2f}, {b.hi:.2f}): {b.count} predictions<br>predicted "
                   f"{b.mean_predicted:.3f}, observed {b.observed_rate:.3f}<br>{about}" for b in pts],
        hovertemplate="%{hovertext}<extra></extra>"))

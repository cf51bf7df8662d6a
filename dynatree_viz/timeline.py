"""View 3: per-iteration timeline of a whole trace.

Five stacked panels sharing the iteration axis: committed tokens (accepted + bonus), tree size and
depth, acceptance a_r with the history window mean ā, the adapter's D0 and τ_h (the values the
iteration was grown with), and the time split draft / verify / commit.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dynatree_core.trace import Trace

from . import style

CURRENT_SHAPE = "current iteration"
_TIMING_COLORS = {"draft": "#74add1", "verify": "#f46d43", "commit": "#999999"}


def _hist(rec, key: str, when: str = "before"):
    h = rec.history_before if when == "before" else rec.history_after
    return None if not h else h.get(key)


def timeline_figure(trace: Trace, *, current: int | None = None, height: int = 900,
                    title: str | None = None) -> go.Figure:
    """Per-iteration panels; ``current`` marks one iteration (its ``index``) with a shaded band
    across all panels."""
    its = list(trace.iterations)
    x = [r.index for r in its]
    fig = make_subplots(
        rows=5, cols=1, shared_xaxes=True, vertical_spacing=0.035,
        specs=[[{}], [{"secondary_y": True}], [{}], [{"secondary_y": True}], [{}]],
        subplot_titles=("committed tokens per iteration", "tree size (nodes) and depth",
                        "acceptance a_r and window mean ā", "history adapter: D0 and τ_h",
                        "time per iteration (ms)"))
    acc = [r.accepted_length for r in its]
    bonus = [len(r.committed) - min(r.accepted_length, len(r.committed)) for r in its]
    fig.add_trace(go.Bar(x=x, y=acc, name="accepted (drafted)", marker_color=style.ACCEPTED,
                         legendgroup="tok"), row=1, col=1)
    fig.add_trace(go.Bar(x=x, y=bonus, name="bonus", marker_color=style.BONUS,
                         legendgroup="tok"), row=1, col=1)
    fig.add_trace(go.Bar(x=x, y=[r.num_nodes for r in its], name="drafted nodes",
                         marker_color="#abd9e9"), row=2, col=1)
    fig.add_trace(go.Scatter(x=x, y=[r.tree.depth for r in its], name="depth",
                             mode="lines+markers", line=dict(color="#313695")),
                  row=2, col=1, secondary_y=True)
    fig.add_trace(go.Scatter(x=x, y=[r.acceptance for r in its], name="a_r", mode="markers",
                             marker=dict(color="#4d4d4d", size=7)), row=3, col=1)
    wm = [_hist(r, "window_mean", "after") for r in its]
    if any(v is not None for v in wm):
        fig.add_trace(go.Scatter(x=x, y=wm, name="ā (window mean)", mode="lines",
                                 line=dict(color="#1b7837", width=2)), row=3, col=1)
    target = ((trace.config or {}).get("history") or {}).get("target_acceptance")
    if target is not None:
        fig.add_hline(y=target, line=dict(color="#1b7837", dash="dot", width=1), row=3, col=1,
                      annotation_text=f"a* = {target}", annotation_position="top left")
    d0 = [_hist(r, "d0") for r in its]
    if any(v is not None for v in d0):
        fig.add_trace(go.Scatter(x=x, y=d0, name="D0 (real)", mode="lines",
                                 line=dict(color="#762a83")), row=4, col=1)
        fig.add_trace(go.Scatter(x=x, y=[_hist(r, "d0_effective") for r in its],
                                 name="D0 used", mode="markers",
                                 marker=dict(color="#762a83", symbol="line-ew-open", size=12)),
                      row=4, col=1)
        fig.add_trace(go.Scatter(x=x, y=[_hist(r, "tau_h") for r in its], name="τ_h",
                                 mode="lines", line=dict(color="#e08214", dash="dash")),
                      row=4, col=1, secondary_y=True)
    else:
        fig.add_annotation(text="no history adapter in this run", showarrow=False,
                           xref="x4 domain", yref="y6 domain", x=0.5, y=0.5)
    for key, color in _TIMING_COLORS.items():
        fig.add_trace(go.Bar(x=x, y=[1000.0 * r.timings.get(key, 0.0) for r in its],
                             name=f"{key} time", marker_color=color, legendgroup="time"),
                      row=5, col=1)
    fig.update_layout(
        barmode="stack", template="plotly_white", height=height, bargap=0.15,
        title=dict(text=title if title is not None else
                   f"{trace.method}: {len(its)} iterations, {len(trace.tokens)} tokens",
                   x=0.01, font=dict(size=14)),
        margin=dict(l=60, r=60, t=70, b=40), legend=dict(font=dict(size=10)),
        hovermode="x unified")
    fig.update_yaxes(title_text="tokens", row=1, col=1)
    # secondary_y=False: without it an update to a cell also hits its secondary axis
    fig.update_yaxes(title_text="nodes", row=2, col=1, secondary_y=False)
    max_depth = max((r.tree.depth for r in its), default=1)
    fig.update_yaxes(title_text="depth", row=2, col=1, secondary_y=True, showgrid=False,
                     range=[0, max_depth + 0.5], dtick=1)
    fig.update_yaxes(rangemode="tozero", row=2, col=1, secondary_y=False)
    fig.update_yaxes(title_text="a", range=[-0.05, 1.05], row=3, col=1)
    fig.update_yaxes(title_text="D0", row=4, col=1, dtick=1, secondary_y=False)
    fig.update_yaxes(title_text="τ_h", row=4, col=1, secondary_y=True, showgrid=False,
                     tickformat=".2f")
    fig.update_yaxes(title_text="ms", row=5, col=1)
    fig.update_xaxes(title_text="iteration", row=5, col=1)
    if its:
        mark_iteration(fig, current)
    return fig


def mark_iteration(fig: go.Figure, current: int | None) -> None:
    """(Re)draw the band marking iteration ``current`` (None removes it)."""
    fig.layout.shapes = [s for s in fig.layout.shapes if s.name != CURRENT_SHAPE]
    if current is None:
        return
    # One paper-high band on the (shared, matched) x axis: works on a FigureWidget too, which
    # does not keep make_subplots' grid that add_vrect(row="all") needs.
    fig.add_shape(type="rect", xref="x", yref="paper", x0=current - 0.5, x1=current + 0.5,
                  y0=0, y1=1, fillcolor=style.HIGHLIGHT, opacity=0.12, line_width=0,
                  layer="below", name=CURRENT_SHAPE)

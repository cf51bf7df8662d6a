"""View 3: per-iteration timeline of a whole trace.

Up to five stacked panels sharing the iteration axis: committed tokens (accepted + bonus), tree
size and depth, acceptance a_r with the history window mean ā, the adapter's D0 and τ_h (the
values the iteration was grown with), and the time split draft / verify / commit. Panels with no
data (an AR run has no tree, acceptance or adapter) are left out, and the title says so.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dynatree_core.records.trace import Trace

from dynatree_viz.core import style

CURRENT_SHAPE = "current iteration"
_OI = style.OKABE_ITO
_TIMING_COLORS = {k: style.QUANTITY_COLORS[f"{k} time"] for k in ("draft", "verify", "commit")}

#: panel key -> (subplot title, has a secondary y axis); drawn in this order when they have data
PANELS: dict[str, tuple[str, bool]] = {
    "tokens": ("committed tokens per iteration", False),
    "tree": ("tree size (nodes) and depth", True),
    "acceptance": (f"acceptance {style.plot_symbol('a_r')} and window mean ā", False),
    "adapter": (f"history adapter: D0 and {style.plot_symbol('τ_h')}", True),
    "time": ("time per iteration (ms)", False),
}
#: why a panel is left out (said under the title instead of an empty panel)
_MISSING = {"tree": "no draft tree", "acceptance": "no acceptance",
            "adapter": "no history adapter"}


def _hist(rec, key: str, when: str = "before"):
    h = rec.history_before if when == "before" else rec.history_after
    return None if not h else h.get(key)


def timeline_panels(trace: Trace) -> list[str]:
    """The panels with something to show: an AR run has no tree, acceptance or adapter, so it
    gets two panels rather than three empty ones."""
    its = list(trace.iterations)
    has = {"tokens": True,
           "tree": any(r.num_nodes > 0 for r in its),
           "acceptance": any(r.acceptance is not None for r in its),
           "adapter": any(r.history_before for r in its),
           "time": True}
    return [k for k in PANELS if has[k]]


def timeline_figure(trace: Trace, *, current: int | None = None, height: int | None = None,
                    title: str | None = None) -> go.Figure:
    """Per-iteration panels; ``current`` marks one iteration (its ``index``) with a shaded band
    across all panels. Panels without data (see :func:`timeline_panels`) are left out and named
    in a note under the title; ``height`` defaults to 170 px per panel."""
    its = list(trace.iterations)
    x = [r.index for r in its]
    panels = timeline_panels(trace)
    row = {k: i + 1 for i, k in enumerate(panels)}
    fig = make_subplots(
        # about 60 px between panels, room for the next panel's title above it
        rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=min(0.3, 60 / (170 * len(panels))),
        specs=[[{"secondary_y": PANELS[k][1]}] for k in panels],
        subplot_titles=[PANELS[k][0] for k in panels])
    acc = [r.accepted_length for r in its]
    bonus = [len(r.committed) - min(r.accepted_length, len(r.committed)) for r in its]
    if "tree" in row:
        fig.add_trace(go.Bar(x=x, y=acc, name="accepted (drafted)", marker_color=style.ACCEPTED,
                             legendgroup="tok"), row=1, col=1)
    # without a draft every committed token is the target's own (what a bonus is in a tree run)
    fig.add_trace(go.Bar(x=x, y=bonus, name="bonus" if "tree" in row else "target's token",
                         marker_color=style.BONUS, legendgroup="tok"), row=1, col=1)
    if "tree" in row:
        fig.add_trace(go.Bar(x=x, y=[r.num_nodes for r in its], name="drafted nodes",
                             marker_color=style.QUANTITY_COLORS["drafted nodes"]), row=row["tree"], col=1)
        fig.add_trace(go.Scatter(x=x, y=[r.tree.depth for r in its], name="depth",
                                 mode="lines+markers", line=dict(color=style.QUANTITY_COLORS["depth"])),
                      row=row["tree"], col=1, secondary_y=True)
    if "acceptance" in row:
        add_acceptance_panel(fig, trace, row["acceptance"])
    if "adapter" in row:
        add_adapter_panel(fig, trace, row["adapter"])
    _time_panel(fig, its, x, row["time"], panels.index("time"))
    head = title if title is not None else (
        f"{trace.method}: {len(its)} iterations, {len(trace.tokens)} tokens")
    missing = [_MISSING[k] for k in PANELS if k not in row]
    note = (f"<br><span style='font-size:11px;color:#666'>{trace.method}: "
            f"{', '.join(missing)}, so those panels are left out</span>" if missing else "")
    fig.update_layout(
        barmode="stack", template="plotly_white", bargap=0.15,
        height=height if height is not None else 170 * len(panels) + 130,
        title=dict(text=head + note, x=0.01, font=dict(size=14)),
        margin=dict(l=60, r=60, t=90 if missing else 70, b=40), legend=dict(font=dict(size=10)),
        hovermode="x unified")
    _label_axes(fig, its, row)
    if its:
        mark_iteration(fig, current)
    return fig


#: a time part whose longest bar is below this share of the tallest stack is too thin to see: it
#: is named in the panel's title instead of a legend entry with no visible bar (04: commit < 1 ms
#: under 180 ms stacks)
THIN_SHARE = 0.01


def _time_panel(fig: go.Figure, its: list, x: list, r: int, title_index: int) -> None:
    """The draft / verify / commit time stacked per iteration (ms)."""
    parts = {k: [1000.0 * it.timings.get(k, 0.0) for it in its] for k in _TIMING_COLORS}
    top = max((sum(v) for v in zip(*parts.values())), default=0.0)
    thin = []
    for key, color in _TIMING_COLORS.items():
        if not any(parts[key]) and key != "verify":
            continue  # e.g. AR never drafts: no all-zero "draft time" series in the legend
        if key != "verify" and max(parts[key]) < THIN_SHARE * top:
            thin.append(f"{key} ≤ {max(parts[key]):.2g} ms, too thin to draw")
            continue
        fig.add_trace(go.Bar(x=x, y=parts[key], name=f"{key} time", marker_color=color, legendgroup="time"),
                      row=r, col=1)
    if thin:
        fig.layout.annotations[title_index].text = f"{PANELS['time'][0]}; {', '.join(thin)}"


def add_adapter_panel(fig: go.Figure, trace: Trace, r: int) -> None:
    """The history adapter's D0 (real, and the whole value the depth gate used: a step line, so each
    value holds exactly its own iterations) and τ_h before each iteration, into row ``r`` of ``fig`` (a
    subplot with a secondary y axis). 04's history chart draws its lower panel with it."""
    its, colour = list(trace.iterations), style.QUANTITY_COLORS
    x = [rec.index for rec in its]
    fig.add_trace(go.Scatter(x=x, y=[_hist(rec, "d0") for rec in its], name=D0_REAL, mode="lines",
                             line=dict(color=colour["D0"], width=2)), row=r, col=1)
    fig.add_trace(go.Scatter(x=x, y=[_hist(rec, "d0_effective") for rec in its], name=D0_USED, mode="lines",
                             line=dict(color=colour["D0"], dash="dot", shape="hv", width=2)), row=r, col=1)
    fig.add_trace(go.Scatter(x=x, y=[_hist(rec, "tau_h") for rec in its], name=TAU_H_LINE,
                             mode="lines", line=dict(color=colour["τ_h"], dash="dash")),
                  row=r, col=1, secondary_y=True)


def add_acceptance_panel(fig: go.Figure, trace: Trace, r: int) -> None:
    """Each iteration's acceptance a_r, the adapter's window mean ā and its target a*, into row ``r``."""
    its, colour = list(trace.iterations), style.QUANTITY_COLORS
    x = [rec.index for rec in its]
    fig.add_trace(go.Scatter(x=x, y=[rec.acceptance for rec in its], name=A_R_POINTS, mode="markers",
                             marker=dict(color=colour["a_r"], size=7)), row=r, col=1)
    wm = [_hist(rec, "window_mean", "after") for rec in its]
    if any(v is not None for v in wm):
        fig.add_trace(go.Scatter(x=x, y=wm, name=A_BAR_LINE, mode="lines",
                                 line=dict(color=colour["ā"], width=2)), row=r, col=1)
    target = ((trace.config or {}).get("history") or {}).get("target_acceptance")
    if target is not None and any(rec.history_before for rec in its):
        fig.add_hline(y=target, line=dict(color=colour["ā"], dash="dot", width=1),
                      row=r, col=1, annotation_text=f"a* = {target} (the target for ā)",
                      annotation_position="top left")


#: most ticks :func:`round_ticks` puts on an axis
MAX_ROUND_TICKS = 5
#: tick steps :func:`round_ticks` chooses from (values such as thresholds in [0, 1] and beyond)
ROUND_STEPS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0)


def round_ticks(values: list[float], max_ticks: int = MAX_ROUND_TICKS) -> dict:
    """Plotly axis settings with ticks at round values (multiples of a step from
    :data:`ROUND_STEPS`) that bracket ``values``: the smallest step giving at most ``max_ticks``
    ticks from the multiple at or below the least value to the one at or above the greatest.
    Plotly's own ticks on a narrow range (τ_h from 0.90 to 0.99) are odd values rounded by the
    tick format (0.89, 0.91, 0.94, ...), and a line at 0.99 can sit above the top tick "0.98".
    A little padding keeps a line at an end tick off the frame. Empty ``values``: no settings."""
    vals = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return {}
    lo, hi = min(vals), max(vals)
    for step in ROUND_STEPS:
        first = math.floor(lo / step + 1e-9) * step
        last = math.ceil(hi / step - 1e-9) * step
        if last - first < step / 2:  # one value: a tick either side of it
            first, last = first - step, last + step
        if round((last - first) / step) + 1 <= max_ticks:
            break
    pad = 0.04 * (last - first)
    decimals = next(d for d in range(10) if abs(round(step, d) - step) < 1e-12)  # 0.25: 2, not 1
    return dict(tickmode="linear", tick0=round(first, 10), dtick=step,
                range=[first - pad, last + pad], tickformat=f".{decimals}f")


#: the paper's symbols as plot text (a code name such as "tau_h" or "τ_h" is not what the paper writes)
TAU_H = style.plot_symbol("τ_h")
A_R = style.plot_symbol("a_r")
#: the legend's words for each quantity (the symbols alone are not taught in every notebook)
A_R_POINTS = f"{A_R}: acceptance per iteration"
A_BAR_LINE = "ā: its window mean"
D0_REAL = "D0 (adapter's value)"
D0_USED = "D0 used (rounded)"
TAU_H_LINE = f"{TAU_H}: breadth threshold"

#: most depth ticks a panel shows: one per level of an 8-deep tree squeezed them into each other
MAX_DEPTH_TICKS = 5


def depth_dtick(max_depth: int) -> int:
    """Whole-level tick step giving at most :data:`MAX_DEPTH_TICKS` ticks over 0..``max_depth``."""
    return max(1, math.ceil(max_depth / (MAX_DEPTH_TICKS - 1)))


def _label_axes(fig: go.Figure, its: list, row: dict[str, int]) -> None:
    fig.update_yaxes(title_text="tokens", rangemode="tozero", row=1, col=1)
    if "tree" in row:
        # secondary_y=False: without it an update to a cell also hits its secondary axis
        fig.update_yaxes(title_text="nodes", rangemode="tozero", row=row["tree"], col=1,
                         secondary_y=False)
        max_depth = max((r.tree.depth for r in its), default=1)
        fig.update_yaxes(title_text="depth", row=row["tree"], col=1, secondary_y=True,
                         showgrid=False, range=[0, max_depth + 0.5], dtick=depth_dtick(max_depth))
    if "acceptance" in row:
        fig.update_yaxes(title_text="a", range=[-0.05, 1.05], row=row["acceptance"], col=1)
    if "adapter" in row:
        fig.update_yaxes(title_text="D0", row=row["adapter"], col=1, dtick=1, secondary_y=False)
        taus = [v for v in (_hist(rec, "tau_h") for rec in its) if v is not None]
        fig.update_yaxes(title_text=TAU_H, row=row["adapter"], col=1, secondary_y=True,
                         showgrid=False, **round_ticks(taus))
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=row["time"], col=1)
    fig.update_xaxes(title_text="iteration", row=row["time"], col=1)


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

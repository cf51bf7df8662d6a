"""One batch iteration of a batched run: every active row's tree, and what the padding cost.

``generate(pair, [prompt0, prompt1, ...])`` verifies every active row's tree in ONE target
forward, each row padded to the widest: row b verifies n_b slots (its root and drafted nodes),
the forward is W = max n_b wide, and ``W - n_b`` slots of row b are computed and thrown away.
:func:`batch_figure` draws one batch iteration: the active rows' trees side by side, each as
:func:`~dynatree_viz.views.tree.tree_figure` draws it (the tree view's own layout, labels and
accepted path) and all on one scale (px per leaf, px per level, node size), so their sizes compare
at a glance; beneath them a strip of bars: per row its accepted ℓ_b, the rest of its n_b, and
the padding up to W. Rows that already left the batch are noted as finished. :func:`batch_summary`
gives the same numbers per batch iteration as a table. Every number is read from the traces'
batch fields (``Trace.batch``, ``IterationRecord.batch``), never recomputed from the trees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import plotly.graph_objects as go

from dynatree_core.records.trace import IterationRecord, Trace

from dynatree_viz.core import style
from dynatree_viz.core.labels import GAP, Label, LabelPlan, plan_labels, text_height, text_width, unit_for
from dynatree_viz.core.scene import TreeScene, sampling_active
from dynatree_viz.core.tokens import TokenNamer
from dynatree_viz.views import tree as tv

#: bar trace names of the strip (tests and the stepper look them up by name)
BAR_ACCEPTED = "accepted ℓ<sub>b</sub>"
BAR_VERIFIED = "verified, not accepted: n<sub>b</sub> − ℓ<sub>b</sub> (root included)"
BAR_PADDING = "padding: W − n<sub>b</sub> (computed, thrown away)"
PADDED_WIDTH = "padded width W"  # the dashed line at W (a shape)
FINISHED = "finished"            # the note on a row that left the batch (annotations' name)
PANEL_TITLE = "row title"        # each column's title (annotations' name)
ROW_TEXT = "row numbers"         # n_b and ℓ_b beside each bar (annotations' name)

_LEFT, _COL_GAP, _FINISHED_COL = 64, 40, 150  # px: margin for the strip's ticks, between columns
_TITLE_PX, _STRIP_GAP, _ROW_PX, _TEXT_PX = 60, 78, 30, 190
_PADDING_FILL, _PADDING_LINE, _VERIFIED_FILL = "#f6f6f6", "#9a9a9a", "#bdbdbd"


@dataclass
class _Batch:
    """The rows of one batch, in row order, and each row's record per batch iteration."""

    rows: list[Trace]
    size: int
    records: list[dict[int, IterationRecord]]  # per row: batch iteration -> its record
    n_iterations: int

    def active(self, i: int) -> list[int]:
        return [b for b, recs in enumerate(self.records) if i in recs]

    def last_iteration(self, b: int) -> int | None:
        return max(self.records[b], default=None)


def _batch(traces: Sequence[Trace]) -> _Batch:
    """Check that ``traces`` are the B rows of one batched run and index their records (ValueError
    naming ``traces`` and what is wrong)."""
    if isinstance(traces, Trace) or not isinstance(traces, Sequence) or len(traces) == 0:
        raise ValueError("traces must be a non-empty sequence of Trace, one per row of a batched run "
                         f"(generate(pair, [prompt, ...])), got {type(traces).__name__}")
    sizes: set[int] = set()
    by_row: dict[int, Trace] = {}
    for k, t in enumerate(traces):
        if not isinstance(t, Trace):
            raise ValueError(f"traces[{k}] must be a Trace, got {type(t).__name__}")
        if not t.batch or "size" not in t.batch or "row" not in t.batch:
            raise ValueError(f"traces[{k}].batch must be {{'size': B, 'row': b}} (a row of a batched run), "
                             f"got {t.batch!r}")
        size, row = int(t.batch["size"]), int(t.batch["row"])
        if not 0 <= row < size:
            raise ValueError(f"traces[{k}].batch['row'] must be in [0, {size - 1}], got {row}")
        if row in by_row:
            raise ValueError(f"traces: row {row} appears twice (traces[{k}] and another); rows must be distinct")
        sizes.add(size)
        by_row[row] = t
    if len(sizes) > 1:
        raise ValueError(f"traces must all come from one batch (one batch size), got sizes {sorted(sizes)}")
    size = sizes.pop()
    missing = sorted(set(range(size)) - set(by_row))
    if missing:
        raise ValueError(f"traces must hold every row of the batch of size {size} (rows 0 to {size - 1}); "
                         f"rows {missing} are missing")
    rows = [by_row[b] for b in range(size)]
    records = [_records_by_iteration(b, t) for b, t in enumerate(rows)]
    n = max((max(r, default=-1) + 1 for r in records), default=0)
    out = _Batch(rows, size, records, n)
    for i in range(n):
        _check_iteration(out, i)
    return out


def _records_by_iteration(b: int, t: Trace) -> dict[int, IterationRecord]:
    out: dict[int, IterationRecord] = {}
    for j, rec in enumerate(t.iterations):
        if not rec.batch or "iteration" not in rec.batch:
            raise ValueError(f"traces: row {b}'s iterations[{j}].batch must hold the batch fields "
                             f"(iteration, padded_width, active, nodes), got {rec.batch!r}")
        i = int(rec.batch["iteration"])
        if i in out:
            raise ValueError(f"traces: row {b} has two records of batch iteration {i}")
        out[i] = rec
    return out


def _check_iteration(batch: _Batch, i: int) -> None:
    """One forward's records agree: the same W and active rows, which are the rows holding a record of
    it, and no row wider than W (the fields the figure shows are the records', so they must agree)."""
    active = batch.active(i)
    first = batch.records[active[0]][i].batch
    for b in active:
        f = batch.records[b][i].batch
        if int(f["padded_width"]) != int(first["padded_width"]) or sorted(f["active"]) != sorted(first["active"]):
            raise ValueError(f"traces: the records of batch iteration {i} disagree on padded_width or active "
                             f"(row {active[0]}: {first}, row {b}: {f}); are they from one batch?")
        if not 1 <= int(f["nodes"]) <= int(f["padded_width"]):
            raise ValueError(f"traces: row {b} at batch iteration {i} has nodes n_b = {f['nodes']}, "
                             f"outside [1, W = {f['padded_width']}]")
    if sorted(int(b) for b in first["active"]) != active:
        raise ValueError(f"traces: batch iteration {i} lists active rows {sorted(first['active'])}, but rows "
                         f"{active} hold a record of it")


def batch_summary(traces: Sequence[Trace]) -> list[dict[str, Any]]:
    """Per batch iteration: ``iteration``, ``W`` (the padded width), ``active`` (row indices),
    ``n_b`` and ``ell_b`` (row -> verified width n_b, accepted length ℓ_b), ``sum_n_b`` (Σ n_b) and
    ``efficiency`` (Σ n_b / (B_active · W): the share of the forward's slots that were real nodes)."""
    batch = _batch(traces)
    return [_summary(batch, i) for i in range(batch.n_iterations)]


def _summary(batch: _Batch, i: int) -> dict[str, Any]:
    active = batch.active(i)
    recs = {b: batch.records[b][i] for b in active}
    w = int(recs[active[0]].batch["padded_width"])
    n_b = {b: int(r.batch["nodes"]) for b, r in recs.items()}
    return {"iteration": i, "W": w, "active": active, "n_b": n_b,
            "ell_b": {b: r.accepted_length for b, r in recs.items()},
            "sum_n_b": sum(n_b.values()), "efficiency": sum(n_b.values()) / (len(active) * w)}


@dataclass
class _Panel:
    """One active row's tree, laid out and labelled by the tree view's helpers."""

    row: int
    scene: TreeScene
    status: list[str]
    lay: Any          # tree._Layout
    texts: dict
    labels: list[Label]


def _panel(row: int, scene: TreeScene, lay: Any, look: Any) -> _Panel:
    texts = tv.label_texts(scene, lay, look.chars)
    sizes = {k: style.label_font_size(t, look.font_size) for k, t in texts.items()}
    labels = [Label(k, lay.pos[k][0], lay.pos[k][1], text_width(t, sizes[k]), text_height(t, sizes[k]))
              for k, t in texts.items()]
    return _Panel(row, scene, scene.statuses(), lay, texts, labels)


def _title(panel: _Panel, summary: dict) -> str:
    b = panel.row
    bonus = (f" + bonus '{style.hover_escape(panel.scene.namer(panel.scene.bonus))}'"
             if panel.scene.bonus is not None else "")
    return f"<b>row {b}</b> · ℓ = {summary['ell_b'][b]}{bonus} · n = {summary['n_b'][b]}"


def batch_figure(traces: Sequence[Trace], iteration: int, tokenizer: Any = None) -> go.Figure:
    """Batch iteration ``iteration`` of a batched run (``traces``: one per row, any order, as
    ``generate(pair, prompts)`` returns them): the active rows' trees side by side on one scale,
    titled "row b" with ℓ_b (and the bonus token), then per row a bar of its n_b slots (ℓ_b
    accepted, the rest verified) padded to W, and rows that left the batch noted as finished.
    ``tokenizer`` names tokens the traces store no text for (as in :func:`tree_figure`).
    Trees' traces carry the tree view's names and ``meta = {"row": b}``; the bars are
    :data:`BAR_ACCEPTED`, :data:`BAR_VERIFIED`, :data:`BAR_PADDING` (``customdata`` = row)."""
    batch = _batch(traces)
    if isinstance(iteration, bool) or not isinstance(iteration, int) or not 0 <= iteration < batch.n_iterations:
        raise ValueError(f"iteration must be an int in [0, {batch.n_iterations - 1}] (the batch iterations of "
                         f"these traces), got {iteration!r}")
    summary = _summary(batch, iteration)
    color_by = tv.resolve_color_by(style.COLOR_BY_AUTO, any(sampling_active(t.sampling) for t in batch.rows))
    panels, look = _panels(batch, iteration, tokenizer)
    scale = _scale(panels)
    titles = {p.row: _title(p, summary) for p in panels}
    cols = _columns(batch.size, panels, titles, scale.unit)
    plot_w = max(sum(w for _, w, _ in cols) + _COL_GAP * (len(cols) - 1), 560.0)
    legend = _legend(panels, color_by)
    strip_h = _ROW_PX * batch.size
    plot_h = scale.tree_h + _STRIP_GAP + strip_h
    names = [BAR_ACCEPTED, BAR_VERIFIED, BAR_PADDING] + [k.name for k in legend]
    bottom = int(math.ceil(52 + tv.legend_height(names, plot_w)))
    right = int(math.ceil(136 + 0.02 * plot_w))  # the colour bar, as in the tree view
    fig = go.Figure()
    x0 = 0.0
    first_tree = True
    for k, (b, w, x_range) in enumerate(cols):
        dom = [x0 / plot_w, (x0 + w) / plot_w]
        x0 += w + _COL_GAP
        if x_range is None:
            _finished_column(fig, b, batch.last_iteration(b), dom)
            continue
        p = next(q for q in panels if q.row == b)
        ax = "" if first_tree else str(k + 1)  # the first tree takes plotly's x / y (the colour bar's axes)
        _add_tree(fig, p, scale.plans[b], look, color_by, ax)
        _tree_axes(fig, ax, dom, x_range, [1 - scale.tree_h / plot_h, 1.0], scale, ticks=first_tree)
        fig.add_annotation(text=titles[b], name=PANEL_TITLE, xref="paper", yref="paper",
                           x=(dom[0] + dom[1]) / 2, y=1.0, xanchor="center", yanchor="bottom", yshift=6,
                           showarrow=False, font=dict(size=13, color="#222"))
        first_tree = False
    _add_strip(fig, batch, summary, plot_w, strip_h / plot_h)
    fig.add_traces(legend)
    bar = tv._colorbar(color_by)
    bar.marker.colorbar.len = min(280, scale.tree_h)
    fig.add_trace(bar)
    fig.update_layout(
        title=dict(text=_figure_title(summary, batch.size), x=0.01, y=1 - 14 / (plot_h + _TITLE_PX + bottom),
                   yanchor="top", font=dict(size=14)),
        width=int(math.ceil(_LEFT + plot_w + right)), height=int(math.ceil(_TITLE_PX + plot_h + bottom)),
        margin=dict(l=_LEFT, r=right, t=_TITLE_PX, b=bottom), template="plotly_white", hovermode="closest",
        showlegend=True, barmode="stack",
        legend=dict(orientation="h", yanchor="top", y=-40 / plot_h, xanchor="left", x=0.0, font=dict(size=10)),
        meta={"iteration": iteration, "W": summary["W"], "active": summary["active"]})
    return fig


def _panels(batch: _Batch, iteration: int, tokenizer: Any) -> tuple[list[_Panel], Any]:
    """The active rows' panels, all with one look (the dense one if any tree is dense): one node size,
    one font in every panel."""
    active = batch.active(iteration)
    scenes = {b: TreeScene.from_record(batch.records[b][iteration],
                                       TokenNamer.from_trace(batch.rows[b], tokenizer=tokenizer))
              for b in active}
    lays = {b: tv._layout(s, False) for b, s in scenes.items()}
    look = max((tv._look(lay) for lay in lays.values()), key=lambda lk: lk.dense)
    return [_panel(b, scenes[b], lays[b], look) for b in active], look


@dataclass
class _Scale:
    """The one scale of every panel: ``unit`` px per leaf, ``level_px`` per level, the y range (levels)."""

    unit: float
    plans: dict[int, LabelPlan]
    level_px: float
    depth: int
    y_range: list[float]
    tree_h: float


def _scale(panels: Sequence[_Panel]) -> _Scale:
    """px per leaf wide enough for every row's labels, px per level tall enough for every row's, and
    each row's labels planned at that scale (its edges start below its labels)."""
    unit = max(unit_for(p.labels) for p in panels)
    plans = {p.row: plan_labels(p.labels, unit) for p in panels}
    level_px = max(plan.level_px for plan in plans.values())
    for plan in plans.values():
        plan.level_px = level_px
    depth = max(p.lay.depth for p in panels)
    below = max(max(plans[p.row].bottom.get(depth, 0.0) for p in panels) + GAP, 0.5 * level_px)
    return _Scale(unit, plans, level_px, depth, [depth + below / level_px, -0.5],
                  level_px * (depth + 0.5) + below)


def _columns(size: int, panels: Sequence[_Panel], titles: dict[int, str],
             unit: float) -> list[tuple[int, float, list[float] | None]]:
    """Per row (row, px width, x range): a tree's range at ``unit`` px per leaf, widened (centred) for
    its title; a finished row a narrow column with no range."""
    cols: list[tuple[int, float, list[float] | None]] = []
    for b in range(size):
        p = next((q for q in panels if q.row == b), None)
        if p is None:
            cols.append((b, _FINISHED_COL, None))
            continue
        lo, hi = -1.0, float(max(p.lay.n_leaves, 2))  # the tree view's x range
        extra = max(text_width(titles[b], 13) + 8 - (hi - lo) * unit, 0.0) / unit / 2
        cols.append((b, (hi - lo + 2 * extra) * unit, [lo - extra, hi + extra]))
    return cols


def _tree_axes(fig: go.Figure, ax: str, x_dom: list[float], x_range: list[float], y_dom: list[float],
               scale: _Scale, ticks: bool) -> None:
    """One panel's axes: its own x range, the shared y range; depth ticks on the first panel only."""
    fig.layout[f"xaxis{ax}"] = dict(domain=x_dom, range=x_range, visible=False, anchor=f"y{ax}")
    fig.layout[f"yaxis{ax}"] = dict(
        domain=y_dom, range=scale.y_range, anchor=f"x{ax}", zeroline=False, showgrid=False, tickmode="array",
        tickvals=list(range(scale.depth + 1)), ticktext=[f"d={d}" for d in range(scale.depth + 1)],
        showticklabels=ticks)


def _figure_title(summary: dict, size: int) -> str:
    return (f"Batch iteration {summary['iteration']}: {len(summary['active'])} of {size} rows verified in one "
            f"target forward, each padded to W = {summary['W']} · Σn<sub>b</sub> = {summary['sum_n_b']} · "
            f"padding efficiency {summary['efficiency']:.0%}")


def _add_tree(fig: go.Figure, p: _Panel, plan: Any, look: Any, color_by: str, ax: str) -> None:
    """Row ``p``'s tree as the tree view draws it (lines, marks, markers, then labels), on axes ``ax``."""
    geo = tv._Geometry(plan, [], [], 0, 0, {})  # only its label plan (where edges start) is read
    traces = tv._tree_traces(p.scene, p.status, p.lay, geo, look, color_by, None)
    traces.append(tv._leader_trace(plan, p.lay.pos))
    traces.append(tv._label_trace(sorted(p.texts), p.texts, plan.offset, p.lay.pos, look.font_size,
                                  tv.label_colors(p.scene, p.lay)))
    for t in traces:
        t.update(xaxis=f"x{ax}", yaxis=f"y{ax}", meta={"row": p.row})
    fig.add_traces(traces)


def _finished_column(fig: go.Figure, b: int, last: int | None, dom: list[float]) -> None:
    """A row that left the batch: its title and a note where its tree would be."""
    when = f"after batch iteration {last}" if last is not None else "before batch iteration 0"
    fig.add_annotation(text=f"<b>row {b}</b> · {FINISHED}", name=PANEL_TITLE, xref="paper", yref="paper",
                       x=(dom[0] + dom[1]) / 2, y=1.0, xanchor="center", yanchor="bottom", yshift=6,
                       showarrow=False, font=dict(size=13, color="#666"))
    fig.add_annotation(text=f"<i>{FINISHED}</i><br>left the batch<br>{when}",
                       name=FINISHED, xref="paper", yref="paper", x=(dom[0] + dom[1]) / 2, y=1.0,
                       xanchor="center", yanchor="top", yshift=-12, showarrow=False, align="center",
                       font=dict(size=12, color="#666"))


def _add_strip(fig: go.Figure, batch: _Batch, summary: dict, plot_w: float, top: float) -> None:
    """Per row a stacked bar on one slot axis: ℓ_b accepted, n_b − ℓ_b verified, W − n_b padding; a
    dashed line at W; n_b and ℓ_b written beside each bar; finished rows noted on their line."""
    active, w = summary["active"], summary["W"]
    n_b, ell = summary["n_b"], summary["ell_b"]
    # room right of W for the numbers (px -> slots on this axis)
    x_max = w * plot_w / (plot_w - _TEXT_PX)
    ax = "x99"
    common = dict(orientation="h", y=active, customdata=active, xaxis=ax, yaxis="y99", width=0.62)
    fig.add_trace(go.Bar(name=BAR_ACCEPTED, x=[ell[b] for b in active], marker=dict(color=style.ACCEPTED),
                         hovertemplate="row %{y}: ℓ = %{x} accepted<extra></extra>", **common))
    fig.add_trace(go.Bar(name=BAR_VERIFIED, x=[n_b[b] - ell[b] for b in active],
                         marker=dict(color=_VERIFIED_FILL),
                         hovertemplate="row %{y}: %{x} verified, not accepted<extra></extra>", **common))
    fig.add_trace(go.Bar(name=BAR_PADDING, x=[w - n_b[b] for b in active],
                         marker=dict(color=_PADDING_FILL, line=dict(color=_PADDING_LINE, width=1),
                                     pattern=dict(shape="/", fgcolor=_PADDING_LINE, solidity=0.25)),
                         hovertemplate="row %{y}: %{x} padding slots<extra></extra>", **common))
    step = next(s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500) if w / s <= 12 or s == 500)
    # ticks stop at W: slots past it do not exist (the room there is for the numbers)
    fig.layout.xaxis99 = dict(domain=[0, 1], range=[0, x_max], anchor="y99", showgrid=True, zeroline=True,
                              tickmode="array", tickvals=list(range(0, w + 1, step)),
                              title=dict(text="slots of the row in the verify forward", font=dict(size=11),
                                         standoff=4))
    fig.layout.yaxis99 = dict(domain=[0, top], range=[batch.size - 0.5, -0.5], anchor="x99", tickmode="array",
                              tickvals=list(range(batch.size)), ticktext=[f"row {b}" for b in range(batch.size)],
                              showgrid=False)
    fig.add_shape(type="line", name=PADDED_WIDTH, xref=ax, yref="y99 domain", x0=w, x1=w, y0=0, y1=1,
                  line=dict(color="#444", width=1.5, dash="dash"))
    fig.add_annotation(text=f"W = {w} (padded width)", xref=ax, yref="y99 domain", x=w, y=1.0,
                       xanchor="center", yanchor="bottom", showarrow=False, font=dict(size=12, color="#444"))
    for b in active:
        fig.add_annotation(text=f"n<sub>{b}</sub> = {n_b[b]} · ℓ<sub>{b}</sub> = {ell[b]}", name=ROW_TEXT,
                           xref=ax, yref="y99", x=w, y=b, xanchor="left", xshift=8, showarrow=False,
                           font=dict(size=12, color="#222"))
    for b in range(batch.size):
        if b not in active:
            last = batch.last_iteration(b)
            when = f"after batch iteration {last}" if last is not None else "before batch iteration 0"
            fig.add_annotation(text=f"<i>{FINISHED}: left the batch {when}</i>", name=FINISHED, xref=ax,
                               yref="y99", x=0, y=b, xanchor="left", xshift=4, showarrow=False,
                               font=dict(size=12, color="#666"))


def _legend(panels: Sequence[_Panel], color_by: str) -> list[go.Scatter]:
    """The tree view's legend entries of every panel, each once."""
    seen: dict[str, go.Scatter] = {}
    for p in panels:
        for key in tv._legend_keys(p.scene, p.status, color_by, False, None):
            seen.setdefault(key.name, key)
    return list(seen.values())


__all__ = ["BAR_ACCEPTED", "BAR_PADDING", "BAR_VERIFIED", "FINISHED", "batch_figure", "batch_summary"]

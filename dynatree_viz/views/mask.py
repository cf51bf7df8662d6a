"""View 2: the tree-attention verification mask of one iteration as a heatmap.

Rows (queries) and tree columns (keys) are the tree nodes in BFS order, exactly the order the
target verifies them in; the committed prefix, which every row sees in full, is summarised as
one column on the left. Rows on the accepted path are drawn in the accepted colour and framed,
and one extra row can be highlighted (the stepper links it to a click in the tree view).
"""

from __future__ import annotations

import bisect
import html
import math
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from dynatree_core.records.trace import IterationRecord

from dynatree_viz.core import style
from dynatree_viz.core.labels import text_width
from dynatree_viz.core.tokens import TokenNamer, node_texts, resolve_namer

#: cell codes of the heatmap's z
MASKED, ATTENDS, ATTENDS_ACCEPTED, PREFIX = 0, 1, 2, 3
CODE_NAMES = {MASKED: "masked", ATTENDS: "attends", ATTENDS_ACCEPTED: "attends (accepted row, framed)",
              PREFIX: "prefix (every row attends)"}
# Light vs dark blue differ in lightness, not only hue, so they survive colour-vision
# deficiencies; accepted rows are also framed and their labels bold.
_CODE_COLORS = {MASKED: "#f7f7f7", ATTENDS: style.OKABE_ITO["sky_blue"],
                ATTENDS_ACCEPTED: style.ACCEPTED, PREFIX: style.PREFIX}
HOVER_TEXT_MAX_NODES = 96  # above this, per-cell hover text would bloat exported HTML
MASK_SHAPE = "accepted rows"


def _discrete_colorscale() -> list[list]:
    n = len(_CODE_COLORS)
    scale: list[list] = []
    for code in range(n):
        scale += [[code / n, _CODE_COLORS[code]], [(code + 1) / n, _CODE_COLORS[code]]]
    return scale


def mask_matrix(rec: IterationRecord) -> list[list[int]]:
    """Cell codes: column 0 is the prefix summary, then one column per node (BFS)."""
    tree_part = rec.attention_mask(include_prefix=False)
    acc = set(rec.accepted_path) | ({0} if rec.accepted_path else set())
    rows = []
    for i, row in enumerate(tree_part):
        on = ATTENDS_ACCEPTED if i in acc else ATTENDS
        rows.append([PREFIX] + [on if v else MASKED for v in row])
    return rows


def _hover_matrix(rec: IterationRecord, texts: list[str], z: list[list[int]]) -> list[list[str]]:
    n = len(texts)
    rows = []
    for i in range(n):
        query = (f"query #{i} '{style.hover_escape(texts[i])}' "
                 f"(position {rec.prefix_len + rec.tree.depths[i]})")
        row = [f"{query}<br>key: the {rec.prefix_len} prefix tokens<br>{CODE_NAMES[z[i][0]]}"]
        for j in range(n):
            row.append(f"{query}<br>key: #{j} '{style.hover_escape(texts[j])}'"
                       f"<br>{CODE_NAMES[z[i][j + 1]]}")
        rows.append(row)
    return rows


def mask_figure(rec: IterationRecord, *, namer: TokenNamer | None = None,
                highlight: int | None = None, max_label_chars: int = 12,
                title: str | None = None, tokenizer: Any = None) -> go.Figure:
    """Heatmap of ``rec.attention_mask()`` (prefix summarised in the leftmost column).

    The first trace is the heatmap (z = cell codes, see ``CODE_NAMES``; z[i][0] is the prefix
    summary, z[i][j + 1] key node j) with x = brick edges (the prefix brick left of -0.5, key
    node j centred on x = j) and y = i the query node i. ``highlight`` frames row i;
    ``tokenizer`` names tokens without stored text (see :mod:`dynatree_viz.core.tokens`).
    Axis labels are thinned so that none overlaps the next (on long trees), the accepted rows'
    labels first; every accepted row is also named right of the matrix (the ``ACCEPTED_NAMES``
    annotations, bold, in the accepted colour).
    """
    namer = resolve_namer(rec, namer, tokenizer)
    texts = node_texts(rec, namer)
    n = len(rec.tree)
    z = mask_matrix(rec)
    labels = [f"{i} {style.short_label(t, max_label_chars)}" for i, t in enumerate(texts)]
    hover = _hover_matrix(rec, texts, z) if n <= HOVER_TEXT_MAX_NODES else None
    # The prefix is one z column drawn as a block of k key columns: wide enough to see next to
    # a 256-node tree, and honest that it is a summary. Plotly reads n + 2 x values for n + 1 z
    # columns as brick edges, which gives that one column its own width.
    k = max(1, n // 16)
    heat = go.Heatmap(
        z=z, x=[-k - 0.5] + [j - 0.5 for j in range(n + 1)], y=list(range(n)), zmin=-0.5,
        zmax=len(CODE_NAMES) - 0.5, colorscale=_discrete_colorscale(),
        xgap=1 if n <= 64 else 0, ygap=1 if n <= 64 else 0,
        colorbar=dict(tickvals=list(CODE_NAMES), ticktext=list(CODE_NAMES.values()),
                      thickness=12, len=0.5, y=0.75, xanchor="left"),
        hovertext=hover,
        hovertemplate=("%{hovertext}<extra></extra>" if hover is not None else
                       "query #%{y}<br>%{z} (0 masked, 1/2 attends, 3 prefix)<extra></extra>"),
        name="mask")
    acc_rows = ([0] + list(rec.accepted_path)) if rec.accepted_path else []
    geo = _MaskGeometry.of(n, k, labels, acc_rows)
    fig = go.Figure(heat)
    fig.data[0].colorbar.x = 1 + geo.colorbar_px / geo.plot_w
    # half the plot's height, but never under COLORBAR_ROW_PX per colour: a 3-row mask (live in
    # the stepper) squeezed its four labels into ~15 px each, overlapping
    fig.data[0].colorbar.update(lenmode="pixels", len=max(0.5 * geo.plot_h, COLORBAR_ROW_PX * len(CODE_NAMES)),
                                y=1.0, yanchor="top")
    fig.update_layout(
        title=dict(text=title if title is not None else
                   f"Tree-attention mask: {n} queries × ({rec.prefix_len} prefix + {n} tree keys)",
                   x=0.01, font=dict(size=14)),
        template="plotly_white", width=geo.width, height=geo.height, margin=geo.margin,
        shapes=_row_frames(acc_rows, highlight, n, k),
        annotations=_accepted_names(labels, acc_rows, geo, n),
        **_mask_axes(rec, labels, acc_rows, geo, n, k))
    return fig


#: px of the colour bar per colour (a label of the mask's tick font, and a gap)
COLORBAR_ROW_PX = 24
#: annotation name of the accepted rows' labels right of the matrix
ACCEPTED_NAMES = "accepted row"
TICK_FONT = 11
TICK_ANGLE = -60
_MIN_GAP = 1.2 * TICK_FONT  # px between neighbouring tick labels (across their lines)


@dataclass
class _MaskGeometry:
    """Square cells of ``cell`` px; the margins hold the thinned tick labels, the accepted rows'
    names and the colour bar, so plotly never moves the plot area."""

    cell: float
    plot_w: float
    plot_h: float
    margin: dict
    names_px: float
    colorbar_px: float

    @property
    def width(self) -> int:
        return int(math.ceil(self.margin["l"] + self.plot_w + self.margin["r"]))

    @property
    def height(self) -> int:
        return int(math.ceil(self.margin["t"] + self.plot_h + self.margin["b"]))

    @classmethod
    def of(cls, n: int, k: int, labels: list[str], acc_rows: list[int]) -> "_MaskGeometry":
        cell = min(40.0, max(3.5, 1000.0 / (n + k)))
        widest = max(text_width(lab, TICK_FONT) for lab in labels)
        names = max((text_width(labels[i], TICK_FONT + 1) for i in acc_rows), default=0.0)
        names_px = 46 + names  # the leader line, then the names
        bar = max(text_width(t, 12) for t in CODE_NAMES.values()) + 40
        slant = math.sin(math.radians(abs(TICK_ANGLE)))
        margin = dict(l=int(widest + 40), t=60, r=int(names_px + 24 + bar),
                      b=int(max(widest, text_width("prefix (9999)", TICK_FONT)) * slant + 50))
        return cls(cell, cell * (n + k), cell * n, margin, names_px, names_px + 24)


def _thinned(n: int, spacing_px: float, cell: float, first: list[int]) -> list[int]:
    """Tick positions at least ``spacing_px`` apart, the ones in ``first`` chosen first."""
    step = max(1, math.ceil(spacing_px / cell))
    chosen: list[int] = []
    for i in list(dict.fromkeys(first)) + list(range(n)):
        at = bisect.bisect_left(chosen, i)
        if all(abs(i - c) >= step for c in chosen[max(at - 1, 0):at + 1]):
            chosen.insert(at, i)
    return chosen


def _mask_axes(rec: IterationRecord, labels: list[str], acc_rows: list[int], geo: _MaskGeometry,
               n: int, k: int) -> dict:
    slant = math.sin(math.radians(abs(TICK_ANGLE)))
    xt = [j for j in _thinned(n, _MIN_GAP / slant, geo.cell, acc_rows)  # clear of the prefix's
          if (j + (k + 1) / 2) * geo.cell * slant >= _MIN_GAP]
    yt = _thinned(n, _MIN_GAP, geo.cell, acc_rows)
    font = dict(size=TICK_FONT)
    return dict(
        xaxis=dict(tickmode="array", tickvals=[-(k + 1) / 2] + xt, tickfont=font,
                   ticktext=[f"prefix ({rec.prefix_len})"] + [labels[j] for j in xt],
                   tickangle=TICK_ANGLE, side="bottom", showgrid=False, title="key (BFS)",
                   range=[-k - 0.5, n - 0.5], zeroline=False),
        yaxis=dict(tickmode="array", tickvals=yt, tickfont=font, range=[n - 0.5, -0.5],
                   ticktext=[f"<b>{labels[i]}</b>" if i in acc_rows else labels[i] for i in yt],
                   showgrid=False, title="query (BFS)", zeroline=False))


def _accepted_names(labels: list[str], acc_rows: list[int], geo: _MaskGeometry,
                    n: int) -> list[dict]:
    """Each accepted row's label right of the matrix, with a leader line to its row: pushed
    apart where rows are closer than a label's height (long trees)."""
    ys: list[float] = []
    for i in acc_rows:
        ys.append(max(i * geo.cell + geo.cell / 2, ys[-1] + _MIN_GAP + 1 if ys else 0.0))
    over = (ys[-1] + _MIN_GAP / 2 - geo.plot_h) if ys else 0.0
    for j in range(len(ys) - 1, -1, -1):  # past the bottom: move the tail up
        if over <= 0:
            break
        ys[j] -= over
        over = ys[j - 1] + _MIN_GAP + 1 - ys[j] if j else 0.0
    return [dict(name=ACCEPTED_NAMES, text=f"<b>{html.escape(labels[i])}</b>", x=n - 0.5, y=i,
                 xref="x", yref="y", ax=40, ay=y - (i * geo.cell + geo.cell / 2),
                 xanchor="left", yanchor="middle", showarrow=True, arrowhead=0, arrowwidth=1,
                 arrowcolor=style.ACCEPTED, font=dict(size=TICK_FONT + 1, color=style.ACCEPTED))
            for i, y in zip(acc_rows, ys)]


def _row_frames(acc_rows: list[int], highlight: int | None, n: int, k: int) -> list[dict]:
    shapes = [dict(type="rect", x0=-k - 0.5, x1=n - 0.5, y0=i - 0.5, y1=i + 0.5, name=MASK_SHAPE,
                   line=dict(color=style.ACCEPTED, width=1.5), fillcolor="rgba(0,0,0,0)")
              for i in acc_rows]
    if highlight is not None and 0 <= highlight < n:
        shapes.append(dict(type="rect", x0=-k - 0.5, x1=n - 0.5, y0=highlight - 0.5,
                           y1=highlight + 0.5, name="highlight",
                           line=dict(color=style.HIGHLIGHT, width=3), fillcolor="rgba(0,0,0,0)"))
    return shapes

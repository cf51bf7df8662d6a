"""View 2: the tree-attention verification mask of one iteration as a heatmap.

Rows (queries) and tree columns (keys) are the tree nodes in BFS order, exactly the order the
target verifies them in; the committed prefix, which every row sees in full, is summarised as
one column on the left. Rows on the accepted path are drawn in the accepted colour and framed,
and one extra row can be highlighted (the stepper links it to a click in the tree view).
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from dynatree_core.records.trace import IterationRecord

from dynatree_viz import style
from dynatree_viz.tokens import TokenNamer, node_texts, resolve_namer

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
                highlight: int | None = None, max_label_chars: int = 8,
                title: str | None = None, tokenizer: Any = None) -> go.Figure:
    """Heatmap of ``rec.attention_mask()`` (prefix summarised in the leftmost column).

    The first trace is the heatmap (z = cell codes, see ``CODE_NAMES``; z[i][0] is the prefix
    summary, z[i][j + 1] key node j) with x = brick edges (the prefix brick left of -0.5, key
    node j centred on x = j) and y = i the query node i. ``highlight`` frames row i;
    ``tokenizer`` names tokens without stored text (see :mod:`dynatree_viz.tokens`).
    """
    namer = resolve_namer(rec, namer, tokenizer)
    texts = node_texts(rec, namer)
    n = len(rec.tree)
    z = mask_matrix(rec)
    labels = [f"{i} {style.short_label(t, max_label_chars)}" for i, t in enumerate(texts)]
    prefix_label = f"prefix ({rec.prefix_len})"
    hover = _hover_matrix(rec, texts, z) if n <= HOVER_TEXT_MAX_NODES else None
    # The prefix is one z column drawn as a block of k key columns: wide enough to see next to
    # a 256-node tree, and honest that it is a summary. Plotly reads n + 2 x values for n + 1 z
    # columns as brick edges, which gives that one column its own width.
    k = max(1, n // 16)
    edges = [-k - 0.5] + [j - 0.5 for j in range(n + 1)]
    prefix_center = -(k + 1) / 2
    heat = go.Heatmap(
        z=z, x=edges, y=list(range(n)), zmin=-0.5, zmax=len(CODE_NAMES) - 0.5,
        colorscale=_discrete_colorscale(), xgap=1 if n <= 64 else 0, ygap=1 if n <= 64 else 0,
        colorbar=dict(tickvals=list(CODE_NAMES), ticktext=list(CODE_NAMES.values()),
                      thickness=12, len=0.5, y=0.75),
        hovertext=hover,
        hovertemplate=("%{hovertext}<extra></extra>" if hover is not None else
                       "query #%{y}<br>%{z} (0 masked, 1/2 attends, 3 prefix)<extra></extra>"),
        name="mask")
    fig = go.Figure(heat)
    step = max(1, n // 40)  # thin the tick labels so they never overlap
    ticks = list(range(0, n, step))
    acc_rows = ([0] + list(rec.accepted_path)) if rec.accepted_path else []
    tick_text = [f"<b>{labels[i]}</b>" if i in acc_rows else labels[i] for i in ticks]
    shapes = [dict(type="rect", x0=-k - 0.5, x1=n - 0.5, y0=i - 0.5, y1=i + 0.5, name=MASK_SHAPE,
                   line=dict(color=style.ACCEPTED, width=1.5), fillcolor="rgba(0,0,0,0)")
              for i in acc_rows]
    if highlight is not None and 0 <= highlight < n:
        shapes.append(dict(type="rect", x0=-k - 0.5, x1=n - 0.5, y0=highlight - 0.5,
                           y1=highlight + 0.5, name="highlight",
                           line=dict(color=style.HIGHLIGHT, width=3), fillcolor="rgba(0,0,0,0)"))
    size = int(min(max(260 + 14 * n, 420), 1300))
    fig.update_layout(
        title=dict(text=title if title is not None else
                   f"Tree-attention mask: {n} queries × ({rec.prefix_len} prefix + {n} tree keys)",
                   x=0.01, font=dict(size=14)),
        template="plotly_white", width=size + 260, height=size,
        margin=dict(l=110, r=20, t=60, b=110),
        xaxis=dict(tickmode="array", tickvals=[prefix_center] + ticks, ticktext=[prefix_label] + [
            labels[i] for i in ticks], tickangle=-60, side="bottom", showgrid=False,
            title="key (BFS)", constrain="domain"),
        yaxis=dict(tickmode="array", tickvals=ticks, ticktext=tick_text, autorange="reversed",
                   showgrid=False, title="query (BFS)", scaleanchor="x", constrain="domain"),
        shapes=shapes,
    )
    return fig

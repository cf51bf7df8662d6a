"""View 5: method / configuration comparison from benchmark results (paper Figures 4-9 shapes).

Input: a pandas DataFrame, a list of dict rows, a benchmark result document (a dict: its
``"aggregates"`` list is used if present, else ``"results"`` or ``"rows"``, minus rows marked
``"warmup": true``), or paths to JSON files holding any of those (a list of paths is
concatenated). One row = one measured (method, configuration, dataset[, sweep value]) cell, or
one prompt of it. Expected columns:

=====================  ======================================================================
``method``             ``ar`` / ``linear`` / ``fixed_tree`` / ``dynatree`` (required)
``label``              display name of the configuration (default: ``method``)
``dataset``            dataset name (optional; panels are split by it in bar mode)
``tokens_per_s``       throughput, new tokens per second
``speedup``            throughput / the AR baseline's throughput
``tokens_per_iteration``  L̄, committed tokens per verification round
``acceptance_rate``    a, accepted draft tokens / drafted depth (None/NaN for AR)
<sweep column>         any numeric column named by ``x=`` (e.g. ``d0``, ``n_max``, ``tau``)
=====================  ======================================================================

Metric columns that are absent are skipped; repeated rows for one cell (several prompts or
seeds) are averaged and drawn with standard-deviation error bars (a single row per cell uses its
``<metric>_std`` column, as in ``dynatree_core.bench`` aggregates, when present). Nested
``metrics`` dicts in a row (``{"metrics": {"tokens_per_s": ...}}``) are flattened. A result
document's ``sweep.param_keys`` become the default ``x`` of :func:`compare_figure`.

Colours: a method label always gets the same colour (:data:`dynatree_viz.core.style.METHOD_COLORS`,
variants such as ``linear:k=3`` the family colour plus a dash / bar pattern), whichever other
methods share the figure. Every value axis starts at 0, so a 4% difference looks like 4%; the
speedup panels also draw the AR baseline at 1.0.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dynatree_core.policy.knobs import KNOBS

from dynatree_viz.core import style

DEFAULT_METRICS: tuple[str, ...] = ("tokens_per_s", "speedup", "tokens_per_iteration",
                                    "acceptance_rate")
METRIC_TITLES: dict[str, str] = {"tokens_per_s": "throughput (tokens/s)",
                                 "speedup": "speedup vs AR", "tokens_per_iteration": "L̄ (tokens/iter)",
                                 "acceptance_rate": "acceptance a", "mean_accepted_length": "ℓ̄"}

#: axis titles of the sweep columns, in words and the paper's symbols: the growth rule's knobs from
#: the knob table (:data:`dynatree_core.policy.knobs.KNOBS`), the other sweep columns named here
#: (a column named nowhere keeps its own name)
X_TITLES: dict[str, str] = {**{k.name: k.title for k in KNOBS},
                            "max_new_tokens": "generated tokens T", "max_prompt_len": "prompt length L_max (tokens)",
                            "d": "tree depth D", "b": "breadth B", "k": "draft length K"}
#: how the AR baseline of the speedup panels is drawn, and its legend entry (a label written on the
#: panel would sit on whichever bar reaches the line)
AR_LINE = dict(color="#888", dash="dot", width=1)
AR_LINE_NAME = "AR (speedup 1.0)"

ResultsLike = Any  # DataFrame | list[dict] | dict | str | PathLike | list[str | PathLike]


def _rows_from_obj(obj: Any, sweep_keys: list[str]) -> list[dict]:
    if isinstance(obj, dict):
        sweep = obj.get("sweep")
        if isinstance(sweep, dict):
            sweep_keys += [k for k in sweep.get("param_keys", []) if k not in sweep_keys]
        for key in ("aggregates", "results", "rows"):
            if isinstance(obj.get(key), list):
                return [r for r in obj[key] if not (isinstance(r, dict) and r.get("warmup"))]
        return [obj]
    if isinstance(obj, list):
        return [r for r in obj if not (isinstance(r, dict) and r.get("warmup"))]
    raise TypeError(f"cannot read benchmark rows from {type(obj).__name__}")


def _flatten(row: dict) -> dict:
    flat = {k: v for k, v in row.items() if not isinstance(v, dict)}
    for k, v in row.items():
        if isinstance(v, dict) and k in ("metrics", "config", "summary"):
            for kk, vv in v.items():
                if not isinstance(vv, (dict, list)):
                    flat.setdefault(kk, vv)
    return flat


def load_results(source: ResultsLike) -> pd.DataFrame:
    """Benchmark rows as a DataFrame (see the module docstring for accepted inputs)."""
    if isinstance(source, pd.DataFrame):
        df = source.copy()
    else:
        if isinstance(source, (str, os.PathLike)):
            source = [source]
        rows: list[dict] = []
        sweep_keys: list[str] = []
        if isinstance(source, list) and source and all(isinstance(s, (str, os.PathLike)) for s in source):
            for path in source:
                rows += _rows_from_obj(json.loads(Path(path).read_text(encoding="utf-8")), sweep_keys)
        else:
            rows = _rows_from_obj(source, sweep_keys)
        df = pd.DataFrame([_flatten(r) for r in rows])
        df.attrs["sweep_keys"] = sweep_keys
    if "method" not in df.columns:
        raise ValueError("benchmark rows need a 'method' column; got columns "
                         f"{sorted(map(str, df.columns))}")
    if "label" not in df.columns:
        df["label"] = df["method"]
    df["label"] = df["label"].fillna(df["method"]).astype(str)
    return df


def _ordered(values: Iterable) -> list:
    return list(dict.fromkeys(v for v in values if not (isinstance(v, float) and v != v)))


def value_axis_range(tops: Sequence[float], metric: str) -> list[float]:
    """[0, top + 8%]: a value axis that starts at zero (never zoomed into the spread between
    methods), with room above the highest bar / error bar; speedup always shows its 1.0 line."""
    top = max([t for t in tops if t == t] or [1.0])
    if metric == "speedup":
        top = max(top, 1.0)
    return [0.0, top * 1.08 if top > 0 else 1.0]


def compare_figure(results: ResultsLike, *, x: str | None = None,
                   metrics: Sequence[str] | None = None, color: str = "label",
                   dataset: str | None = None, title: str | None = None,
                   height: int | None = None) -> go.Figure:
    """Compare methods/configurations.

    Without ``x`` (and no sweep keys in a result document): grouped bars, one panel per metric,
    bars grouped by ``dataset`` (paper Fig. 4 shape). With ``x`` (a sweep column such as ``"d0"``): one line per ``color`` group against
    ``x`` per metric (Figs. 5-9 shapes); rows lacking ``x`` are left out. ``dataset`` filters to
    one dataset. Metrics default to the ones of :data:`DEFAULT_METRICS` present in the data.
    """
    df, x, metrics = _compared(results, x, metrics, dataset)
    groups = _ordered(df[color])
    styles = style.group_styles(groups)
    cols = min(2, len(metrics))
    rows = (len(metrics) + cols - 1) // cols
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[METRIC_TITLES.get(m, m) for m in metrics],
                        vertical_spacing=0.16 if rows > 1 else 0.1, horizontal_spacing=0.1)
    has_ds = "dataset" in df.columns and df["dataset"].notna().any()
    for k, metric in enumerate(metrics):
        r, c = k // cols + 1, k % cols + 1
        tops = [top for g in groups
                if (top := _add_group(fig, df[df[color] == g], g, styles[g], metric, x, has_ds,
                                      color, k == 0, r, c)) is not None]
        if x is not None:
            fig.update_xaxes(title_text=X_TITLES.get(x, x), row=r, col=c)
        fig.update_yaxes(range=value_axis_range(tops, metric), row=r, col=c)
        if metric == "speedup":
            fig.add_hline(y=1.0, line=AR_LINE, row=r, col=c)
    if "speedup" in metrics:  # the baseline named once, in the legend
        # a legend key for the lines drawn as shapes (its group marks it as a key, not a trace)
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line=AR_LINE, name=AR_LINE_NAME,
                                 legendgroup="ar-baseline", hoverinfo="skip"))
    fig.update_layout(template="plotly_white", barmode="group",
                      height=height or 320 * rows + 80,
                      title=dict(text=title or ("methods compared" if x is None else f"sweep over {x}"),
                                 x=0.01, font=dict(size=14)),
                      # below the x-axis title when there is one (else the title prints over the legend)
                      margin=dict(l=60, r=20, t=80, b=50 if x is None else 110),
                      legend=dict(orientation="h", yanchor="top", y=-0.08 if x is None else -0.3 / rows))
    return fig


def _compared(results: ResultsLike, x: str | None, metrics: Sequence[str] | None,
              dataset: str | None) -> tuple[pd.DataFrame, str | None, list[str]]:
    """The rows to draw (one dataset, rows with ``x``), the sweep column and the metrics present."""
    df = load_results(results)
    if x is None and df.attrs.get("sweep_keys"):
        x = df.attrs["sweep_keys"][0]
    if dataset is not None and "dataset" in df.columns:
        df = df[df["dataset"] == dataset]
    if x is not None:
        if x not in df.columns:
            raise ValueError(f"sweep column {x!r} not in the results; columns: {sorted(map(str, df.columns))}")
        df = df[df[x].notna()]
    found = [m for m in (metrics or DEFAULT_METRICS) if m in df.columns and df[m].notna().any()]
    if not found:
        raise ValueError(f"none of the metrics {list(metrics or DEFAULT_METRICS)} are in the results")
    return df, x, found


def _add_group(fig: go.Figure, sub: pd.DataFrame, g: Any, st: style.MethodStyle, metric: str,
               x: str | None, has_ds: bool, color: str, legend: bool, r: int,
               c: int) -> float | None:
    """One group's bars (by dataset) or line (along ``x``) with error bars, in panel (r, c);
    returns the top of its values plus errors (None: nothing drawn)."""
    key = ("dataset" if has_ds else color) if x is None else x
    agg = sub.groupby(key, sort=x is not None)[metric].agg(["mean", "std", "count"])
    xs = [str(v) for v in agg.index] if x is None else list(agg.index)
    if agg["mean"].isna().all():
        return None
    err = agg["std"].where(agg["count"] > 1)
    if f"{metric}_std" in sub.columns and (agg["count"] == 1).all():
        err = sub.groupby(key, sort=(x is not None))[f"{metric}_std"].first().reindex(agg.index)
    err_y = dict(type="data", array=err.fillna(0).tolist(), visible=bool(err.notna().any()))
    # the legend says the method in words; its group keeps the label (the data's id)
    common = dict(name=style.method_title(g), legendgroup=str(g), showlegend=legend, error_y=err_y,
                  hovertemplate=f"{style.method_title(g)}<br>%{{x}}: %{{y:.3g}}<extra>{metric}</extra>")
    ys = agg["mean"].tolist()
    if x is None:
        fig.add_trace(go.Bar(x=xs, y=ys, marker=dict(color=st.color, pattern=dict(shape=st.pattern)),
                             **common), row=r, col=c)
    else:
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", marker_color=st.color,
                                 line=dict(color=st.color, dash=st.dash), **common), row=r, col=c)
    return max((m + (e if e == e else 0.0)) for m, e in zip(ys, err.fillna(0)) if m == m)

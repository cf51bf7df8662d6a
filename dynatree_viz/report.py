"""A standalone, offline HTML report of a whole trace.

Contents: run summary (method, models, metrics, config), the iteration timeline, the coloured
output text, then for each iteration its tree and its attention mask side by side. plotly.js is
inlined once (first figure) and every figure has a fixed div id, so the file works without a
network and two reports of the same trace are byte-identical.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any, Sequence

from dynatree_core.trace import Trace

from .compare import ResultsLike, compare_figure
from .export import figure_html
from .mask_view import mask_figure
from .text_view import text_html
from .timeline import timeline_figure
from .tokens import TokenNamer
from .tree_view import tree_figure

_CSS = """
body { font-family: -apple-system, 'Segoe UI', Roboto, sans-serif; margin: 18px 28px; color: #222; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 28px;
  border-bottom: 1px solid #ddd; padding-bottom: 4px; } h3 { font-size: 15px; margin: 18px 0 4px; }
table.dt-kv { border-collapse: collapse; font-size: 13px; }
table.dt-kv td { padding: 2px 14px 2px 0; vertical-align: top; }
table.dt-kv td:first-child { color: #666; }
.dt-row { display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start; }
.dt-scroll { overflow-x: auto; max-width: 100%; }
.dt-muted { color: #777; font-size: 13px; }
details > summary { cursor: pointer; color: #444; }
"""

_METRIC_KEYS = ("new_tokens", "tokens_per_s", "iterations", "tokens_per_iteration",
                "mean_accepted_length", "acceptance_rate", "mean_tree_size", "wall_time_s",
                "draft_time_s", "verify_time_s", "target_forwards_per_token", "stopped_by")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return html.escape(str(v))


def _kv_table(rows: Sequence[tuple[str, Any]]) -> str:
    return ("<table class='dt-kv'>" + "".join(
        f"<tr><td>{html.escape(k)}</td><td>{_fmt(v)}</td></tr>" for k, v in rows) + "</table>")


def report_html(trace: Trace, *, title: str | None = None,
                iterations: Sequence[int] | None = None, show_pruned: bool = True,
                masks: bool = True, results: ResultsLike | None = None,
                compare_x: str | None = None) -> str:
    """The report as one HTML string (see :func:`report`)."""
    namer = TokenNamer.from_trace(trace)
    title = title or f"DynaTree trace report: {trace.method}"
    its = list(trace.iterations)
    chosen = range(len(its)) if iterations is None else [i for i in iterations if 0 <= i < len(its)]
    first = [True]

    def fig(f, div_id: str) -> str:
        out = figure_html(f, div_id, include_plotlyjs=first[0])
        first[0] = False
        return out

    m = trace.metrics or {}
    summary = [("method", trace.method), ("target", trace.target_name),
               ("draft", trace.draft_name), ("drafter", _drafter_text(trace)),
               ("device / dtype", f"{trace.device} / {trace.dtype}"),
               ("prompt tokens", len(trace.prompt_tokens)),
               ("max_new_tokens", trace.max_new_tokens)]
    summary += [(k, m[k]) for k in _METRIC_KEYS if m.get(k) is not None]
    cfg = json.dumps(trace.config, indent=1, sort_keys=True, default=str)
    parts = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>",
             f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>",
             f"<div class='dt-muted'>schema {html.escape(trace.schema_version)} · "
             f"{len(its)} iterations · {len(trace.tokens)} new tokens</div>",
             "<h2>Run</h2>", _kv_table(summary),
             f"<details><summary>config</summary><pre>{html.escape(cfg)}</pre></details>"]
    if trace.prompt_text:
        parts.append(f"<h3>prompt</h3><pre style='white-space:pre-wrap'>"
                     f"{html.escape(trace.prompt_text)}</pre>")
    parts.append("<h2>Output</h2>")
    parts.append(text_html(trace, namer=namer, show_prompt=False))
    if its:
        parts += ["<h2>Timeline</h2>", fig(timeline_figure(trace), "dt-timeline")]
    if results is not None:
        parts += ["<h2>Method comparison</h2>",
                  fig(compare_figure(results, x=compare_x), "dt-compare")]
    if chosen:
        parts.append("<h2>Iterations</h2><div class='dt-muted'>Fill = draft confidence c(u) "
                     "(buttons switch to p(u)); green = accepted path, red outline = the target "
                     "chose another token there (hover for it), star = bonus token, marker shape "
                     "= stop reason, grey rings = pruned candidates.</div>")
    for i in chosen:
        rec = its[i]
        parts.append(f"<h3 id='iteration-{rec.index}'>iteration {rec.index}</h3>"
                     "<div class='dt-row'>")
        parts.append("<div class='dt-scroll'>" + fig(
            tree_figure(rec, namer=namer, show_pruned=show_pruned, drafter=trace.drafter_kind),
            f"dt-tree-{rec.index}") +
            "</div>")
        if masks:
            parts.append("<div class='dt-scroll'>" + fig(
                mask_figure(rec, namer=namer), f"dt-mask-{rec.index}") + "</div>")
        parts.append("</div>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def report(trace: Trace | str, path: str | os.PathLike | None = None, **kwargs: Any) -> str:
    """Write (if ``path``) and return a standalone offline HTML report of ``trace``.

    ``trace`` may be a path to a trace JSON file. Keyword arguments: ``title``, ``iterations``
    (positions to draw trees/masks for; default all), ``show_pruned``, ``masks``, ``results``
    (benchmark rows for a comparison figure, see :func:`dynatree_viz.compare_figure`) and
    ``compare_x`` (its sweep column). Deterministic: the same trace gives the same bytes.
    """
    if not isinstance(trace, Trace):
        trace = Trace.from_json(trace)
    text = report_html(trace, **kwargs)
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text


def _drafter_text(trace: Trace) -> str | None:
    """``feature (hidden_size 576, head_ids 8192, ...)``: the drafter kind and its main settings."""
    d = trace.drafter
    if not d:
        return None
    keys = [k for k in ("layers", "head_ids", "hidden_size", "model_type") if d.get(k) is not None]
    extra = ", ".join(f"{k} {d[k]}" for k in keys)
    return f"{d.get('kind')}" + (f" ({extra})" if extra else "")

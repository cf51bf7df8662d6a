"""A standalone, offline HTML report of a whole trace.

Contents: a navigation bar (sections, and every iteration by its anchor ``#iteration-<index>``),
run summary (method, models, metrics, config), the iteration timeline, the coloured output
text, then for each iteration its tree and its attention mask side by side (optionally the
:func:`~dynatree_viz.views.why` panel of where its accepted path ended). The two columns are a CSS
grid whose figures fill their cell and follow the window, so they stay side by side down to
tablet widths (:data:`STACK_BELOW_PX`); a tree too wide to read when shrunk scrolls in its cell.
plotly.js is inlined once (first figure) and every figure has a fixed div id, so the file works
without a network and two reports of the same trace are byte-identical.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any, Sequence

from dynatree_core.records.trace import Trace

from dynatree_viz.views.compare import ResultsLike, compare_figure
from dynatree_viz.core.images import figure_html
from dynatree_viz.export.page import explorer_page_html, srcdoc_iframe
from dynatree_viz.views.mask import mask_figure
from dynatree_viz.views.text import text_html
from dynatree_viz.views.timeline import timeline_figure
from dynatree_viz.core.tokens import resolve_namer
from dynatree_viz.views.tree import tree_figure
from dynatree_viz.views.why import why as why_figure

#: below this window width the tree and the mask stack (a phone); above it they sit side by side
STACK_BELOW_PX = 800
#: a figure shrinks with its column down to this width, then its cell scrolls
MIN_FIGURE_PX = 360

_CSS = """
body { font-family: -apple-system, 'Segoe UI', Roboto, sans-serif; margin: 0 28px 18px; color: #222; }
nav.dt-nav { position: sticky; top: 0; z-index: 10; background: #fff; border-bottom: 1px solid #ddd;
  padding: 6px 0; font-size: 13px; }
nav.dt-nav a { margin-right: 12px; }
.dt-iters { display: flex; flex-wrap: wrap; gap: 4px 10px; font-size: 12px; margin: 4px 0 10px; }
.dt-iter-nav { font-size: 12px; font-weight: normal; margin-left: 12px; }
h2, h3 { scroll-margin-top: 40px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 28px;
  border-bottom: 1px solid #ddd; padding-bottom: 4px; } h3 { font-size: 15px; margin: 18px 0 4px; }
table.dt-kv { border-collapse: collapse; font-size: 13px; }
table.dt-kv td { padding: 2px 14px 2px 0; vertical-align: top; }
table.dt-kv td:first-child { color: #666; }
.dt-row { display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); gap: 12px;
  align-items: start; }
.dt-row > .dt-wide { grid-column: 1 / -1; }
@media (max-width: STACKpx) { .dt-row { grid-template-columns: minmax(0, 1fr); } }
.dt-scroll { overflow-x: auto; min-width: 0; max-width: 100%; }
.dt-muted { color: #777; font-size: 13px; }
details > summary { cursor: pointer; color: #444; }
""".replace("STACK", str(STACK_BELOW_PX))

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
                compare_x: str | None = None, tokenizer: Any = None,
                why: bool = False, explorer: bool = False) -> str:
    """The report as one HTML string (see :func:`report`)."""
    namer = resolve_namer(trace, None, tokenizer)
    title = title or f"DynaTree trace report: {trace.method}"
    its = list(trace.iterations)
    chosen = list(range(len(its)) if iterations is None else
                  [i for i in iterations if 0 <= i < len(its)])
    fig = _FigureWriter()
    sections = [("run", "Run"), ("output", "Output")] + (
        [("timeline", "Timeline")] if its else []) + (
        [("compare", "Method comparison")] if results is not None else []) + (
        [("explorer", "Explorer")] if explorer and its else []) + (
        [("iterations", "Iterations")] if chosen else [])
    parts = _head(trace, title, sections)
    parts.append("<h2 id='output'>Output</h2>")
    parts.append(text_html(trace, namer=namer, show_prompt=False))
    if its:
        parts += ["<h2 id='timeline'>Timeline</h2>", fig(timeline_figure(trace), "dt-timeline")]
    if results is not None:
        parts += ["<h2 id='compare'>Method comparison</h2>",
                  fig(compare_figure(results, x=compare_x), "dt-compare")]
    if explorer and its:  # the offline explorer page in a frame of its own (its tree drawn as SVG)
        parts += ["<h2 id='explorer'>Explorer</h2>",
                  srcdoc_iframe(explorer_page_html(trace, tokenizer=tokenizer, plotly_js=False))]
    if chosen:
        parts.append("<h2 id='iterations'>Iterations</h2><div class='dt-muted'>Fill = draft "
                     "confidence c(u) (buttons switch to p(u)); accepted = blue thick edge and "
                     "ring, rejected = vermillion ✗ (hover for the target's choice), star = bonus "
                     "token, marker shape = stop reason, grey rings = pruned candidates; the "
                     "legend under each tree lists what it uses.</div>")
        parts.append(_iteration_index([its[i] for i in chosen]))
    for k, i in enumerate(chosen):
        prev = its[chosen[k - 1]].index if k > 0 else None
        nxt = its[chosen[k + 1]].index if k + 1 < len(chosen) else None
        parts += _iteration_section(trace, i, prev, nxt, fig, namer, show_pruned, masks, why)
    parts.append("</body></html>\n")
    return "\n".join(parts)


class _FigureWriter:
    """Figures as HTML divs that fill their column; plotly.js is inlined with the first only."""

    def __init__(self) -> None:
        self.first = True

    def __call__(self, f: Any, div_id: str, min_px: int = 0) -> str:
        out = figure_html(f, div_id, include_plotlyjs=self.first, fill_width=True)
        self.first = False
        return out if not min_px else f"<div style='min-width:{min_px}px'>{out}</div>"


def _head(trace: Trace, title: str, sections: Sequence[tuple[str, str]]) -> list[str]:
    """The page head, the navigation and the run's facts (models, metrics, config, prompt)."""
    m = trace.metrics or {}
    summary = [("method", trace.method), ("target", trace.target_name),
               ("draft", trace.draft_name), ("drafter", _drafter_text(trace)),
               ("device / dtype", f"{trace.device} / {trace.dtype}"),
               ("prompt tokens", len(trace.prompt_tokens)),
               ("max_new_tokens", trace.max_new_tokens)]
    summary += [(k, m[k]) for k in _METRIC_KEYS if m.get(k) is not None]
    cfg = json.dumps(trace.config, indent=1, sort_keys=True, default=str)
    parts = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>",
             "<meta name='viewport' content='width=device-width, initial-scale=1'>",
             f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
             _nav(sections), f"<h1 id='top'>{html.escape(title)}</h1>",
             f"<div class='dt-muted'>schema {html.escape(trace.schema_version)} · "
             f"{len(trace.iterations)} iterations · {len(trace.tokens)} new tokens</div>",
             "<h2 id='run'>Run</h2>", _kv_table(summary),
             f"<details><summary>config</summary><pre>{html.escape(cfg)}</pre></details>"]
    if trace.prompt_text:
        parts.append(f"<h3>prompt</h3><pre style='white-space:pre-wrap'>"
                     f"{html.escape(trace.prompt_text)}</pre>")
    return parts


def _iteration_section(trace: Trace, i: int, prev: int | None, nxt: int | None,
                       fig: _FigureWriter, namer: Any, show_pruned: bool, masks: bool,
                       why: bool) -> list[str]:
    """One iteration: its tree, mask and why panel side by side (each scrolls if too wide)."""
    rec = trace.iterations[i]
    parts = [f"<h3 id='iteration-{rec.index}'>iteration {rec.index}"
             f"{_iter_links(prev, nxt)}</h3><div class='dt-row'>"]
    tree = tree_figure(rec, namer=namer, show_pruned=show_pruned, drafter=trace.drafter_kind)
    natural = int(tree.layout.width or 0)
    # a small tree may shrink with its column; a wide one keeps room for its leaf labels
    min_px = natural if natural > 700 else MIN_FIGURE_PX
    parts.append("<div class='dt-scroll'>" + fig(tree, f"dt-tree-{rec.index}", min_px) + "</div>")
    if masks:
        parts.append("<div class='dt-scroll'>" + fig(
            mask_figure(rec, namer=namer), f"dt-mask-{rec.index}", MIN_FIGURE_PX) + "</div>")
    if why:
        parts.append("<div class='dt-scroll dt-wide'>" + fig(
            why_figure(trace, i, namer=namer), f"dt-why-{rec.index}", MIN_FIGURE_PX) + "</div>")
    parts.append("</div>")
    return parts


def _nav(sections: Sequence[tuple[str, str]]) -> str:
    links = "".join(f"<a href='#{a}'>{html.escape(t)}</a>" for a, t in sections)
    return f"<nav class='dt-nav'><a href='#top'>↑ top</a>{links}</nav>"


def _iteration_index(recs: Sequence[Any]) -> str:
    """One link per iteration, with what it did (accepted length / drafted nodes)."""
    return "<div class='dt-iters'>" + "".join(
        f"<a href='#iteration-{r.index}' title='{r.num_nodes} drafted nodes, accepted "
        f"{r.accepted_length}'>{r.index}<span class='dt-muted'> (ℓ={r.accepted_length}/"
        f"{r.num_nodes})</span></a>" for r in recs) + "</div>"


def _iter_links(prev: int | None, nxt: int | None) -> str:
    links = ([f"<a href='#iteration-{prev}'>◀ {prev}</a>"] if prev is not None else []) + (
        [f"<a href='#iteration-{nxt}'>{nxt} ▶</a>"] if nxt is not None else []) + [
        "<a href='#iterations'>all iterations</a>"]
    return f"<span class='dt-iter-nav'>{' · '.join(links)}</span>"


def report(trace: Trace | str, path: str | os.PathLike | None = None, **kwargs: Any) -> str:
    """Write (if ``path``) and return a standalone offline HTML report of ``trace``.

    ``trace`` may be a path to a trace JSON file. Keyword arguments: ``title``, ``iterations``
    (positions to draw trees/masks for; default all), ``show_pruned``, ``masks``, ``results``
    (benchmark rows for a comparison figure, see :func:`dynatree_viz.compare_figure`),
    ``compare_x`` (its sweep column), ``tokenizer`` (``.decode(list[int])``: names tokens the
    trace has no text for, e.g. pruned candidates) and ``why`` (add each iteration's
    :func:`dynatree_viz.views.why.why` panel) and ``explorer`` (add the offline explorer page,
    :func:`dynatree_viz.explorer_page`, whose sliders regrow the trees in the browser). Deterministic: the same trace gives the same bytes.
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

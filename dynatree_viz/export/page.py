"""The offline explorer page: one HTML file in which a recorded run's trees regrow as a reader moves
the knobs, with no kernel, no Python and no network (:func:`explorer_page`).

The page holds each recorded iteration's tree (best: a recording made for replay,
``generate(..., trace="replay")``, whose trees hold every node a setting inside the page's ranges
can grow), the knob table as JSON (:func:`dynatree_core.policy.knobs.knobs_json`) and a small
JavaScript port of the growth rule (``explorer_page.js``) that regrows exactly as
:func:`dynatree_core.policy.replay.replay_tree` does. plotly.js is inlined once. Every text the page
did not write (prompt, tokens) travels as JSON inside a ``<script type="application/json">`` with
``<``, ``>`` and ``&`` escaped, and is shown through ``textContent`` or as HTML-escaped plot labels:
it renders as text and runs nothing. ``window.dynatreeExplorer`` is the tests' hook.
"""

from __future__ import annotations

import html
import json
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any

from dynatree_core.policy.config import DynaTreeConfig
from dynatree_core.policy.knobs import knobs_json, page_ranges, slider_knobs
from dynatree_core.records.trace import Trace

from dynatree_viz.core.tokens import TokenNamer, resolve_namer
from dynatree_viz.widgets.explorer_setting import config_for_record

#: the presets the page offers, by name (each clamped into the page's ranges)
PRESETS = {"paper": DynaTreeConfig.paper, "cpu": DynaTreeConfig.cpu, "gpu": DynaTreeConfig.gpu}


def script_json(data: Any) -> str:
    """JSON safe inside a ``<script>`` element: no ``</script>``, no ``<!--``, no line separators
    that old parsers end a string at (each written as its ``\\u`` escape; JSON.parse reads it back)."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for ch, esc in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"), ("\u2028", "\\u2028"),
                    ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def _knob_values(cfg: DynaTreeConfig) -> dict[str, float]:
    ranges = page_ranges()
    return {k.name: min(max(getattr(cfg, k.name), ranges[k.name][0]), ranges[k.name][1]) for k in slider_knobs()}


def page_data(trace: Trace, namer: TokenNamer) -> dict[str, Any]:
    """What the page regrows from: per iteration the recorded tree (tokens, parents, the draft's
    top-k of every fed node, the target's token after every node), its D_max cap and starting
    knobs; the token texts by id; the prompt; the presets."""
    iterations, ids, done = [], set(trace.prompt_tokens), 0
    for rec in trace.iterations:
        t = rec.tree
        ids.update(t.tokens, rec.target_argmax, rec.committed)
        for row in t.topk_tokens:
            ids.update(row or ())
        iterations.append(dict(
            index=rec.index, t=t.tokens, p=t.parents, tk=t.topk_tokens, tl=t.topk_logps, tg=rec.target_argmax,
            cap=trace.max_new_tokens - done - 1, start=_knob_values(config_for_record(trace, rec)),
            before=done, committed=rec.committed, recorded_ell=rec.accepted_length))
        done += len(rec.committed)
    return dict(iterations=iterations, vocab={str(i): namer(i) for i in sorted(ids)},
                prompt=trace.prompt_text if trace.prompt_text is not None else "".join(
                    namer(t) for t in trace.prompt_tokens),
                tokens=[t for rec in trace.iterations for t in rec.committed],
                presets={name: _knob_values(make()) for name, make in PRESETS.items()},
                replay=trace.replay is not None, target=trace.target_name, draft=trace.draft_name or "",
                sampling=trace.sampling)


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def _asset(name: str) -> str:
    return resources.files("dynatree_viz.export").joinpath(name).read_text(encoding="utf-8")


def explorer_page_html(trace: Trace, *, title: str | None = None, tokenizer: Any = None,
                       namer: TokenNamer | None = None, plotly_js: bool = True) -> str:
    """The page as one HTML string (see :func:`explorer_page`); ``plotly_js=False`` leaves plotly.js
    out (only for a page embedded where plotly is already loaded)."""
    if not trace.iterations:
        raise ValueError("the trace has no iterations to explore")
    namer = resolve_namer(trace, namer, tokenizer)
    data = page_data(trace, namer)
    title = title or "DynaTree explorer"
    head = f"<script>{_plotly_js()}</script>" if plotly_js else ""
    parts = {"TITLE": html.escape(title), "PLOTLY": head, "RULE": _asset("explorer_page.js"),
             "UI": _asset("explorer_page_ui.js"), "KNOBS": script_json(json.loads(knobs_json())),
             "DATA": script_json(data)}
    # one pass: a marker inside an inserted text is never replaced again
    return re.sub(r"/\*(TITLE|PLOTLY|RULE|UI|KNOBS|DATA)\*/", lambda m: parts[m.group(1)],
                  _asset("explorer_page.html"))


def explorer_page(trace: Trace | str | os.PathLike, path: str | os.PathLike, **kwargs: Any) -> Path:
    """Write the offline explorer page of ``trace`` (a Trace or a trace JSON file) to ``path``: a
    slider per knob of the table, an iteration stepper, reset, the presets, the tree regrown in the
    browser by the same rule as :func:`~dynatree_core.policy.replay.replay_tree`, its accepted path,
    ℓ, node count and a why panel per clicked node. Keyword arguments as :func:`explorer_page_html`.
    Make the trace with ``generate(..., trace="replay")`` so every setting on the page can regrow."""
    if not isinstance(trace, Trace):
        trace = Trace.from_json(trace)
    path = Path(path)
    path.write_text(explorer_page_html(trace, **kwargs), encoding="utf-8")
    return path


def srcdoc_iframe(page_html: str, height: int = 900) -> str:
    """The page inside an ``<iframe srcdoc>`` (what a notebook's static HTML keeps): the attribute
    value is HTML-escaped, so the page's own markup cannot close it."""
    # in a div: a bare <iframe> makes IPython's HTML() warn (a stderr line in the notebook)
    return (f'<div class="dt-explorer-frame"><iframe srcdoc="{html.escape(page_html, quote=True)}" '
            f'style="width:100%;height:{height}px;border:1px solid #ddd" sandbox="allow-scripts"></iframe></div>')

"""An animation out of the notebook: :func:`export_slides` writes one offline HTML file with one
slide per step (plotly.js inlined, arrow keys / buttons to navigate), :func:`export_frames` one
image per frame (kaleido + Chrome)."""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from dynatree_core.records.trace import IterationRecord, Trace

from dynatree_viz.core.images import (ImageExportUnavailable, figure_html, quiet_kaleido, require_image_export,
                                      save_image)
from dynatree_viz.views.animation import _record, animate, frame_figures

_SLIDES_CSS = """
body { font-family: sans-serif; margin: 0; color: #222; }
.dt-bar { position: sticky; top: 0; background: #fff; border-bottom: 1px solid #ddd;
  padding: 8px 16px; display: flex; gap: 12px; align-items: center; z-index: 10; }
.dt-bar button { font-size: 15px; padding: 4px 14px; }
.dt-slide { display: none; padding: 8px 16px; }
.dt-slide.dt-current { display: block; }
.dt-slide h2 { font-size: 18px; margin: 6px 0; }
.dt-hint { color: #777; font-size: 12px; }
"""

_SLIDES_JS = """
(function () {
  var slides = document.querySelectorAll('.dt-slide');
  var counter = document.getElementById('dt-counter');
  var cur = 0;
  function show(k) {
    cur = Math.max(0, Math.min(slides.length - 1, k));
    for (var i = 0; i < slides.length; i++) {
      slides[i].classList.toggle('dt-current', i === cur);
    }
    counter.textContent = (cur + 1) + ' / ' + slides.length;
    var div = slides[cur].querySelector('.plotly-graph-div');
    if (div && window.Plotly) { window.Plotly.Plots.resize(div); }
    if (location.hash !== '#' + slides[cur].id) { history.replaceState(null, '', '#' + slides[cur].id); }
  }
  document.getElementById('dt-prev').onclick = function () { show(cur - 1); };
  document.getElementById('dt-next').onclick = function () { show(cur + 1); };
  document.getElementById('dt-first').onclick = function () { show(0); };
  document.addEventListener('keydown', function (e) {
    if (['ArrowRight', 'PageDown', ' ', 'Enter'].indexOf(e.key) >= 0) { show(cur + 1); e.preventDefault(); }
    else if (['ArrowLeft', 'PageUp', 'Backspace'].indexOf(e.key) >= 0) { show(cur - 1); e.preventDefault(); }
    else if (e.key === 'Home') { show(0); } else if (e.key === 'End') { show(slides.length - 1); }
  });
  var start = 0;
  for (var i = 0; i < slides.length; i++) { if ('#' + slides[i].id === location.hash) { start = i; } }
  show(start);
})();
"""


def slides_html(fig: go.Figure, *, title: str | None = None) -> str:
    """One offline HTML document with one slide per frame of ``fig`` (see :func:`export_slides`)."""
    figs = frame_figures(fig)
    page_title = title or "DynaTree · step by step"
    slides = []
    for k, (f, fr) in enumerate(zip(figs, fig.frames or [None] * len(figs))):
        meta = (f.layout.meta if isinstance(f.layout.meta, dict) else {}) or {}
        phase = str(meta.get("phase", "") or (fr.name if fr is not None else ""))
        name = fr.name if fr is not None else f"slide {k + 1}"
        heading = f"{k + 1}. {name}"
        div = figure_html(f, f"dt-slide-fig-{k}", include_plotlyjs=(k == 0))
        slides.append(f"<section class='dt-slide' id='slide-{k + 1}' "
                      f"data-phase='{html.escape(phase, quote=True)}' "
                      f"data-name='{html.escape(name, quote=True)}'>"
                      f"<h2>{html.escape(heading)}</h2>{div}</section>")
    head = html.escape(page_title)
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<title>{head}</title><style>{_SLIDES_CSS}</style></head><body>"
            "<div class='dt-bar'><button id='dt-first' title='first slide (Home)'>⏮</button>"
            "<button id='dt-prev' title='previous (←)'>◀ prev</button>"
            "<span id='dt-counter'></span>"
            "<button id='dt-next' title='next (→, space)'>next ▶</button>"
            f"<b>{head}</b><span class='dt-hint'>← / → or space to step · works offline</span>"
            "</div>" + "".join(slides) + f"<script>{_SLIDES_JS}</script></body></html>\n")


def export_slides(source: Trace | IterationRecord | str | go.Figure, iteration: int = 0,
                  path: str | os.PathLike = "dynatree_slides.html", *, tokenizer: Any = None,
                  title: str | None = None, **animate_kwargs: Any) -> Path:
    """Write ONE self-contained offline HTML file with one slide per step of :func:`animate`
    (draft levels, verify, select, commit): plotly.js is inlined (no CDN), ← / → / space or the
    buttons step through, ``#slide-k`` in the address opens slide k. ``source`` may also be an
    animated figure (e.g. :func:`dynatree_viz.views.race.race`); then ``iteration`` is ignored."""
    if isinstance(source, go.Figure):
        fig = source
    else:
        fig = animate(source, iteration, tokenizer=tokenizer, **animate_kwargs)
        if title is None:
            rec, trace = _record(source, iteration)
            title = f"Iteration {rec.index} step by step" + (
                f" · {trace.method}" if trace is not None else "")
    path = Path(path)
    path.write_text(slides_html(fig, title=title), encoding="utf-8")
    return path


def export_frames(fig: go.Figure, dir: str | os.PathLike, fmt: str = "png", *,
                  scale: float = 1.0) -> list[Path]:
    """One image per frame of an animated figure (``000_draft_d=0.png`` …) in ``dir``, via
    :func:`dynatree_viz.save_image` (kaleido >= 1 and a Chrome/Chromium). Raises
    :class:`ImageExportUnavailable` naming what is missing, before writing anything.
    For one animated GIF of all frames use :func:`dynatree_viz.export_gif`."""
    fmt = fmt.lower().lstrip(".")
    if fmt not in ("png", "svg", "pdf", "jpg", "jpeg", "webp"):
        raise ValueError(f"fmt must be one of png, svg, pdf, jpg, webp; got {fmt!r}"
                         + (" (one GIF of every frame: dynatree_viz.export_gif)" if fmt == "gif"
                            else ""))
    require_image_export()
    out_dir = Path(dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    names = [fr.name for fr in fig.frames] or ["figure"]
    figs = frame_figures(fig)
    paths = [out_dir / ("{:03d}_{}.{}".format(k, "".join(
        c if c.isalnum() or c in "=-." else "_" for c in str(name)), fmt))
        for k, name in enumerate(names)]
    try:  # one browser session for every frame (plotly >= 6.1), else one image at a time
        import plotly.io as pio

        write_images = getattr(pio, "write_images", None)
        if write_images is None:
            raise AttributeError("write_images")
        with quiet_kaleido():
            write_images(figs, paths, format=fmt, scale=scale, width=[f.layout.width for f in figs],
                         height=[f.layout.height for f in figs])
    except AttributeError:
        for f, p in zip(figs, paths):
            save_image(f, p, format=fmt, scale=scale)
    except Exception as e:  # kaleido reports a missing/broken browser in many ways
        raise ImageExportUnavailable(f"frame export failed: {type(e).__name__}: {e}") from e
    return paths


__all__ = ["export_frames", "export_slides", "slides_html"]

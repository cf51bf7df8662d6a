"""Outputs that still show where no JavaScript or no kernel runs.

A notebook is read in more places than it runs: nbconvert HTML (offline), nbviewer and GitHub
run no JavaScript and have no kernel. A Plotly figure stored only as Plotly JSON (the
``plotly_mimetype`` renderer) shows nothing there, and a widget stored without its state shows
as nothing or as a Python repr. So:

* :func:`use_static_fallbacks` makes every figure's output carry a PNG beside the Plotly JSON
  (renderer ``plotly_mimetype+dynatree_png``): JupyterLab, VS Code and Colab pick the interactive
  JSON, static viewers the image (Plotly JSON is not in their display priority). The image of an
  animation tells its whole story (:func:`dynatree_viz.views.strip.static_figure`): every step of
  :func:`~dynatree_viz.views.animation` side by side, the finish of :func:`~dynatree_viz.views.race`.
* :class:`StaticFallback` gives a widget a ``text/html`` snapshot of its current state beside the
  widget view: a live kernel shows the widget; nbconvert drops widget views without stored state
  and falls back to the snapshot, as do nbviewer and GitHub.

Images need kaleido and a Chrome/Chromium (:func:`dynatree_viz.core.images.image_export_available`);
without them figures keep only their JSON and snapshots say why the image is missing, so a
notebook still runs (e.g. under nbval on a machine without a browser).
"""

from __future__ import annotations

import atexit
import base64
import html
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.io._base_renderers import PngRenderer

from dynatree_viz.views.strip import static_figure
from dynatree_viz.core.images import ImageExportUnavailable, quiet_kaleido, require_image_export

_state: dict[str, Any] = {"images": None, "reason": ""}
#: the renderer :func:`use_static_fallbacks` pairs with ``plotly_mimetype``
STATIC_RENDERER = "dynatree_png"


def images_enabled() -> bool:
    """Whether figures are rendered to PNG in this process (see :func:`use_static_fallbacks`)."""
    if _state["images"] is None:
        try:
            require_image_export()
            _state["images"], _state["reason"] = True, "ok"
            _start_server()
        except ImageExportUnavailable as e:
            _state["images"], _state["reason"] = False, str(e)
    return bool(_state["images"])


def _start_server() -> None:
    """One browser for every image of the process (kaleido otherwise starts one per image: ~2 s)."""
    try:
        import kaleido

        kaleido.start_sync_server(silence_warnings=True)
        atexit.register(kaleido.stop_sync_server, silence_warnings=True)
    except Exception:  # older kaleido: one browser per image, slower but the same pictures
        pass


def use_static_fallbacks(images: bool | None = None) -> str:
    """Set Plotly's default renderer so each figure is stored as interactive JSON plus, when
    images can be made here, a PNG. Returns the renderer name (also in ``pio.renderers.default``).

    ``images=False`` forces JSON only (e.g. for a quick run); ``None`` decides by availability."""
    if images is None:
        images = images_enabled()
    elif images and not images_enabled():
        raise RuntimeError(f"static images requested but unavailable: {_state['reason']}")
    renderer = f"plotly_mimetype+{STATIC_RENDERER}" if images else "plotly_mimetype"
    if images:
        pio.renderers[STATIC_RENDERER] = StaticPngRenderer()
    pio.renderers.default = renderer
    return renderer


class StaticPngRenderer(PngRenderer):
    """plotly's PNG renderer, at each figure's own size, drawing what a reader without a kernel
    should see (:func:`dynatree_viz.views.strip.static_figure`: an animation's every step, a race's
    finish) and without kaleido's warnings in the notebook's output."""

    def __init__(self) -> None:
        super().__init__(width=None, height=None)

    def to_mimebundle(self, fig_dict: dict) -> dict:
        png = figure_png(static_figure(go.Figure(fig_dict)))
        return {} if png is None else {self.mime_type: base64.b64encode(png).decode("ascii")}


def figure_png(fig: go.Figure) -> bytes | None:
    """The figure as PNG bytes at its own size, or None where images cannot be made."""
    if not images_enabled():
        return None
    try:
        with quiet_kaleido():
            return fig.to_image(format="png")
    except Exception:  # a browser that fails to start: the caller shows the reason instead
        _state["images"], _state["reason"] = False, "kaleido could not start its browser"
        return None


def figure_snapshot_html(fig: go.Figure, alt: str) -> str:
    """An ``<img>`` of what a reader without a kernel should see of the figure
    (:func:`~dynatree_viz.views.strip.static_figure`; PNG inlined as data: no network), or a note
    saying why not."""
    png = figure_png(static_figure(fig))
    if png is None:
        return (f'<p style="color:#555;font-style:italic">[{html.escape(alt)}: no static image '
                f'({html.escape(_state["reason"] or "image export unavailable")})]</p>')
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}" style="max-width:100%"/>'


class StaticFallback:
    """Mixin for ipywidgets: adds a ``text/html`` snapshot (``static_html()``) to the widget's
    display bundle, for viewers without a kernel."""

    def static_html(self) -> str:  # pragma: no cover - every widget overrides it
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = super()._repr_mimebundle_(**kwargs)  # type: ignore[misc]
        if bundle is None:
            bundle = {}
        try:
            snapshot = self.static_html()
        except Exception as e:  # a snapshot must never break the live widget
            snapshot = f"<p>[static snapshot unavailable: {html.escape(type(e).__name__)}]</p>"
        note = ('<p style="color:#555;font-size:90%">Static snapshot of an interactive widget '
                '(run the notebook to use it).</p>')
        return {**bundle, "text/html": note + snapshot}

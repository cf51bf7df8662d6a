"""Export: byte-stable HTML snippets/files and static images (PNG/SVG via kaleido).

Plotly's HTML output is deterministic as long as the div id is fixed (its default is a random
UUID), so every function here takes an explicit ``div_id``. Static images need kaleido >= 1,
which drives a Chrome/Chromium browser; where none is found :func:`save_image` raises
:class:`ImageExportUnavailable` with the reason, and tests skip on it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import warnings
from pathlib import Path
from typing import Iterator

import plotly.graph_objects as go

#: plotly config used for every exported figure (no "edit in chart studio" link, no logo)
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}


class ImageExportUnavailable(RuntimeError):
    """Static image export is not possible here (no kaleido or no browser for it)."""


def figure_html(fig: go.Figure, div_id: str, *, include_plotlyjs: bool | str = False,
                full_html: bool = False, fill_width: bool = False) -> str:
    """The figure as HTML with a fixed ``div_id`` (two calls give identical bytes).

    ``include_plotlyjs=True`` inlines plotly.js (offline, ~4 MB): do that for the first figure
    of a page only. ``fill_width=True`` drops the figure's fixed width so that it fills (and
    follows) its container, keeping its height.
    """
    if not fill_width:
        return fig.to_html(div_id=div_id, include_plotlyjs=include_plotlyjs,
                           full_html=full_html, config=PLOTLY_CONFIG, validate=False)
    height = fig.layout.height
    fluid = go.Figure(fig)
    fluid.update_layout(width=None, autosize=True)
    return fluid.to_html(div_id=div_id, include_plotlyjs=include_plotlyjs, full_html=full_html,
                         config=PLOTLY_CONFIG, validate=False, default_width="100%",
                         default_height=f"{height}px" if height else "100%")


def save_html(fig: go.Figure, path: str | os.PathLike, div_id: str = "dynatree-figure") -> Path:
    """A standalone, offline HTML file of one figure."""
    path = Path(path)
    path.write_text(figure_html(fig, div_id, include_plotlyjs=True, full_html=True),
                    encoding="utf-8")
    return path


def find_browser() -> str | None:
    """A Chrome/Chromium executable kaleido can drive, or None."""
    env = os.environ.get("BROWSER_PATH")
    if env and Path(env).exists():
        return env
    for name in ("google-chrome", "google-chrome-stable", "chromium", "chromium-browser", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    try:  # a browser kaleido downloaded itself (kaleido.get_chrome())
        from choreographer.cli.defaults import default_download_path  # type: ignore

        for p in Path(default_download_path).rglob("chrome"):
            if p.is_file() and os.access(p, os.X_OK):
                return str(p)
    except Exception:
        pass
    return None


def image_export_available() -> tuple[bool, str]:
    """(available, reason). Cheap: checks for kaleido and a browser without starting one."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return False, "static image export needs kaleido (pip install 'kaleido>=1')"
    if find_browser() is None:
        return False, ("static image export needs Chrome or Chromium for kaleido >= 1: install "
                       "one (e.g. `apt-get install chromium`, or `kaleido.get_chrome()`) or set "
                       "BROWSER_PATH")
    return True, "ok"


def require_image_export() -> None:
    """Make kaleido usable here or raise :class:`ImageExportUnavailable` with the reason: checks
    for kaleido and a browser, and points ``BROWSER_PATH`` (where choreographer looks first) at
    the browser found. Every image writer in this package starts with it."""
    ok, reason = image_export_available()
    if not ok:
        raise ImageExportUnavailable(reason)
    browser = find_browser()
    if browser and not os.environ.get("BROWSER_PATH"):
        os.environ["BROWSER_PATH"] = browser


@contextlib.contextmanager
def quiet_kaleido() -> Iterator[None]:
    """Silence the one warning plotly gives on every image once kaleido's browser server runs
    (:func:`dynatree_viz.widgets.static.use_static_fallbacks` starts one): "The kopts argument is ignored
    if using a server" (plotly passes kopts, the server already has its own). It would print this
    machine's site-packages path above every figure of a notebook."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The kopts argument is ignored if using a server",
                                category=UserWarning)
        yield


def save_image(fig: go.Figure, path: str | os.PathLike, *, format: str | None = None,
               width: int | None = None, height: int | None = None, scale: float = 1.0) -> Path:
    """Write a PNG/SVG/PDF (format from the suffix unless given). Raises
    :class:`ImageExportUnavailable` with the reason when no browser/kaleido is usable."""
    require_image_export()
    path = Path(path)
    fmt = (format or path.suffix.lstrip(".") or "png").lower()
    try:
        with quiet_kaleido():
            fig.write_image(str(path), format=fmt, width=width, height=height, scale=scale)
    except Exception as e:  # kaleido reports a missing/broken browser in many ways
        raise ImageExportUnavailable(f"static image export failed: {type(e).__name__}: {e}") from e
    return path

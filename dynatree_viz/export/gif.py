"""GIF export: one moving picture of an animation, a race or a stepper (for a slide or a README).

Every frame is drawn by the renderer a notebook's static image uses
(:func:`dynatree_viz.widgets.static.figure_png`: kaleido and a Chrome/Chromium), then Pillow assembles
them (``pip install 'dynatree[viz]'`` brings it). :func:`export_gif` takes

* an animated figure: :func:`dynatree_viz.views.animation.animate` (one frame per step) or :func:`dynatree_viz.views.race.race`
  (its frames, thinned to ``max_frames``, the finish held longest);
* a :class:`~dynatree_viz.widgets.stepper.Stepper` (:func:`dynatree_viz.show`): one frame per iteration of
  its trace, its tree as the stepper draws it;
* a trace, a trace JSON path or an iteration record: :func:`dynatree_viz.views.animation.animate` of it.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any, Sequence

import plotly.graph_objects as go

from dynatree_core.records.trace import IterationRecord, Trace

from dynatree_viz.views.animation import animate, frame_figures, is_animation
from dynatree_viz.core.images import ImageExportUnavailable, require_image_export
from dynatree_viz.widgets.static import figure_png
from dynatree_viz.widgets.stepper import Stepper

#: per-frame time (ms) when the caller gives none: an animation's step, a race's tick, a
#: stepper's iteration
DEFAULT_MS = {"animate": 1400, "race": 120, "stepper": 1200}
#: the last frame stays this many times longer (the story's end)
HOLD_LAST = 3


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError as e:  # pragma: no cover - Pillow is in the [viz] extra
        raise ImageExportUnavailable("GIF export needs Pillow: pip install 'dynatree[viz]' "
                                     "(or pip install pillow)") from e
    return Image


def gif_frames(obj: Any, iteration: int = 0, *, max_frames: int = 60,
               **animate_kwargs: Any) -> tuple[list[go.Figure], str]:
    """The figures :func:`export_gif` draws, one per GIF frame, and their kind (``"animate"``,
    ``"race"`` or ``"stepper"``)."""
    if isinstance(obj, Stepper):
        return obj.iteration_figures(), "stepper"
    if isinstance(obj, (Trace, IterationRecord, str, os.PathLike)):
        obj = animate(obj, iteration, **animate_kwargs)
    if not isinstance(obj, go.Figure):
        raise TypeError("export_gif needs an animated figure (animate, race), a Stepper, or a "
                        f"trace / record to animate; got {type(obj).__name__}")
    return _thinned(frame_figures(obj), max_frames), "animate" if is_animation(obj) else "race"


def _thinned(figs: Sequence[go.Figure], most: int) -> list[go.Figure]:
    """At most ``most`` of ``figs``, evenly spaced, the first and the last kept."""
    if len(figs) <= most or most < 2:
        return list(figs)
    step = (len(figs) - 1) / (most - 1)
    return [figs[round(k * step)] for k in range(most)]


def export_gif(obj: Any, path: str | os.PathLike, *, iteration: int = 0,
               frame_ms: int | None = None, max_frames: int = 60, scale: float = 1.0,
               colors: int = 256, loop: int = 0, **animate_kwargs: Any) -> Path:
    """Write ``obj`` (see the module docstring) as an animated GIF at ``path``: each frame drawn
    by the static renderer, ``frame_ms`` per frame (default by kind, :data:`DEFAULT_MS`), the
    last held :data:`HOLD_LAST` times as long, ``scale`` resizing every frame, a shared palette
    of ``colors`` colours, ``loop=0`` = forever. Raises :class:`ImageExportUnavailable` naming
    what is missing (kaleido, a browser, Pillow) before writing anything."""
    Image = _pillow()
    require_image_export()
    figs, kind = gif_frames(obj, iteration, max_frames=max_frames, **animate_kwargs)
    frames = []
    for f in figs:
        png = figure_png(f)
        if png is None:
            raise ImageExportUnavailable("GIF export failed: the static renderer drew no image")
        frames.append(Image.open(io.BytesIO(png)).convert("RGB"))
    frames = _same_size(frames, scale)
    ms = frame_ms if frame_ms is not None else DEFAULT_MS[kind]
    palette = _palette(frames, colors)
    quantized = [f.quantize(palette=palette, dither=Image.Dither.NONE) for f in frames]
    path = Path(path)
    quantized[0].save(path, format="GIF", save_all=True, append_images=quantized[1:],
                      duration=[ms] * (len(frames) - 1) + [ms * HOLD_LAST], loop=loop,
                      optimize=True, disposal=1)
    return path


def _palette(frames: list, colors: int) -> Any:
    """One palette for every frame (so a pixel keeps its colour from frame to frame), from a
    strip of small copies of all of them."""
    from PIL import Image

    thumbs = [f.resize((max(1, f.width // 2), max(1, f.height // 2)), Image.Resampling.NEAREST)
              for f in frames]  # nearest: thin marks keep their own colours
    strip = Image.new("RGB", (max(t.width for t in thumbs), sum(t.height for t in thumbs)), "white")
    y = 0
    for t in thumbs:
        strip.paste(t, (0, y))
        y += t.height
    return strip.quantize(colors=colors, method=Image.Quantize.FASTOCTREE)


def _same_size(frames: list, scale: float) -> list:
    """Every frame on a white canvas of the largest frame's size, times ``scale``."""
    from PIL import Image

    w = max(f.width for f in frames)
    h = max(f.height for f in frames)
    out = []
    for f in frames:
        canvas = Image.new("RGB", (w, h), "white")
        canvas.paste(f, (0, 0))
        if scale != 1.0:
            canvas = canvas.resize((max(1, round(w * scale)), max(1, round(h * scale))),
                                   Image.Resampling.LANCZOS)
        out.append(canvas)
    return out


__all__ = ["DEFAULT_MS", "HOLD_LAST", "export_gif", "gif_frames"]

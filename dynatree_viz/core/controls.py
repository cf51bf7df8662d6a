"""Play / pause buttons and a step slider for plotly animations (:func:`dynatree_viz.views.animation.animate`,
:func:`dynatree_viz.views.race.race`): one place for plotly's animation arguments."""

from __future__ import annotations

from typing import Any, Sequence


def _jump() -> dict:
    """Animation arguments that show one frame at once (no transition)."""
    return dict(frame=dict(duration=0, redraw=True), transition=dict(duration=0), mode="immediate")


def play_pause(frame_ms: int, **place: Any) -> dict:
    """An ``updatemenus`` entry: ▶ play (``frame_ms`` per frame, from the current one) and
    ❚❚ pause; ``place`` positions it (x, y, anchors, pad)."""
    play = dict(frame=dict(duration=frame_ms, redraw=True), fromcurrent=True,
                transition=dict(duration=0), mode="immediate")
    pause = dict(_jump(), frame=dict(duration=0, redraw=False))
    return dict(type="buttons", direction="left", showactive=False, buttons=[
        dict(label="▶ play", method="animate", args=[None, play]),
        dict(label="❚❚ pause", method="animate", args=[[None], pause])], **place)


def step_slider(names: Sequence[str], labels: Sequence[str], **place: Any) -> dict:
    """A ``sliders`` entry with one step per frame name (shown as ``labels``), opening on the
    first; ``place`` positions and styles it."""
    return dict(active=0, steps=[dict(label=lab, method="animate", args=[[nm], _jump()])
                                 for nm, lab in zip(names, labels)], **place)


__all__ = ["play_pause", "step_slider"]

"""The batch stepper (ipywidgets): a batched run's iterations one verify forward at a time
(:func:`batch_stepper`).

Built as the iteration stepper is (:mod:`dynatree_viz.widgets.stepper`): a ``VBox`` whose slider,
play and prev / next buttons move over the batch iterations and redraw
:func:`~dynatree_viz.views.batch.batch_figure` into one synced ``FigureWidget``; ``info`` says the
iteration's numbers in a line (from :func:`~dynatree_viz.views.batch.batch_summary`).
"""

from __future__ import annotations

from typing import Any, Sequence

import ipywidgets as widgets
import plotly.graph_objects as go

from dynatree_core.records.trace import Trace

from dynatree_viz.views.batch import batch_figure, batch_summary
from dynatree_viz.widgets.figure_state import figure_widget, replace_figure
from dynatree_viz.widgets.static import StaticFallback, figure_snapshot_html


class BatchStepper(StaticFallback, widgets.VBox):
    """Step through the batch iterations of a batched run's ``traces`` (one per row).

    Attributes: ``slider`` (the batch iteration), ``play``, ``prev_button``, ``next_button``,
    ``fig`` (FigureWidget: :func:`batch_figure` of the shown iteration), ``info`` (HTML),
    ``summary`` (:func:`batch_summary`, computed once).
    """

    def __init__(self, traces: Sequence[Trace], *, start: int = 0, tokenizer: Any = None):
        self.summary = batch_summary(traces)  # validates the traces: a bad batch fails here, named
        self.traces = list(traces)
        self.tokenizer = tokenizer
        last = len(self.summary) - 1
        if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start <= last:
            raise ValueError(f"start must be an int in [0, {last}] (the batch iterations), got {start!r}")
        self.slider = widgets.IntSlider(value=start, min=0, max=last, description="batch iteration",
                                        continuous_update=False, style={"description_width": "110px"},
                                        layout=widgets.Layout(width="420px"))
        self.play = widgets.Play(value=start, min=0, max=last, interval=1500, description="play")
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        self.prev_button = widgets.Button(description="◀ prev", layout=widgets.Layout(width="80px"))
        self.next_button = widgets.Button(description="next ▶", layout=widgets.Layout(width="80px"))
        self.info = widgets.HTML()
        self.fig = figure_widget()
        self.prev_button.on_click(lambda _: self.step(-1))
        self.next_button.on_click(lambda _: self.step(+1))
        self.slider.observe(lambda _: self._redraw(), names="value")
        controls = widgets.HBox([self.play, self.prev_button, self.slider, self.next_button],
                                layout=widgets.Layout(flex_flow="row wrap"))
        super().__init__([controls, self.info, self.fig])
        self._redraw()

    @property
    def iteration(self) -> int:
        """The shown batch iteration."""
        return self.slider.value

    def step(self, delta: int) -> None:
        """Move ``delta`` batch iterations (clamped to the run)."""
        self.slider.value = min(max(self.slider.value + delta, self.slider.min), self.slider.max)

    def _redraw(self) -> None:
        i = self.iteration
        self.play.value = i
        s = self.summary[i]
        rows = ", ".join(f"row {b}: n = {s['n_b'][b]}, ℓ = {s['ell_b'][b]}" for b in s["active"])
        self.info.value = (f"<b>batch iteration {i}</b> of {len(self.summary)} · {len(s['active'])} active rows · "
                           f"W = {s['W']} · Σn<sub>b</sub> = {s['sum_n_b']} · padding efficiency "
                           f"{s['efficiency']:.0%} · {rows}")
        replace_figure(self.fig, batch_figure(self.traces, i, tokenizer=self.tokenizer))

    def static_html(self) -> str:
        """The shown batch iteration as static HTML: the info line and the figure's image."""
        return "\n".join([self.info.value, figure_snapshot_html(go.Figure(self.fig), "batch iteration")])


def batch_stepper(traces: Sequence[Trace], **kwargs: Any) -> BatchStepper:
    """The batch stepper for a batched run's traces (one per row, e.g. ``[r.trace for r in
    generate(pair, prompts)]``); keyword arguments as :class:`BatchStepper` (``start``, ``tokenizer``)."""
    return BatchStepper(traces, **kwargs)

"""The iteration stepper (ipywidgets): tree, mask, why panel, text and timeline of a trace's
iterations, updated together as the slider, the play button or a click moves (:func:`show`).

A ``ipywidgets.VBox`` subclass, so it displays by itself in Jupyter; controls and figures are
attributes (``stepper.slider.value = 3``, ``stepper.next_button.click()``). Figures are plotly
``FigureWidget``s whose state is synced (:mod:`dynatree_viz.widgets.figure_state`), so a page
reload shows what Python holds. Under sampling it replays the recorded draws (never draws anew).
"""

from __future__ import annotations

import html
from typing import Any, Callable

import ipywidgets as widgets
import plotly.graph_objects as go

from dynatree_core.records.trace import IterationRecord, Trace

from dynatree_viz.core import style
from dynatree_viz.views.mask import mask_figure
from dynatree_viz.widgets.figure_state import figure_widget, replace_figure, sync_state
from dynatree_viz.widgets.sampling import sampling_summary
from dynatree_viz.core.scene import sampling_active
from dynatree_viz.widgets.static import StaticFallback, figure_snapshot_html
from dynatree_viz.views.text import text_html
from dynatree_viz.views.timeline import mark_iteration, timeline_figure
from dynatree_viz.core.tokens import TokenNamer
from dynatree_viz.views.tree import NODES, resolve_color_by, tree_figure, trace_index
from dynatree_viz.views.why import why



def _empty_figure(message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(template="plotly_white", height=300, xaxis=dict(visible=False),
                      yaxis=dict(visible=False))
    return fig


#: the colour switch's buttons: wide enough for "colour: p(token)" on one line (110 px wrapped it)
COLOR_TOGGLE_STYLE = {"button_width": "150px"}


class Stepper(StaticFallback, widgets.VBox):
    """Step through a trace's iterations: tree, mask, text and timeline update together.

    Attributes: ``slider`` (iteration position), ``play``, ``prev_button``, ``next_button``,
    ``color_toggle`` ("confidence" / "cum_prob" / "target_p": the only colour switch; the tree
    figure's own buttons are left out; it starts on "target_p" for a sampled trace when
    ``color_by="auto"``), ``pruned_checkbox``, ``tree_fig``, ``mask_fig``, ``why_fig``,
    ``timeline_fig`` (FigureWidgets), ``text`` (HTML), ``info`` (HTML).
    Clicking a node in the tree highlights its row in the mask and explains it in ``why_fig``
    (:meth:`select_node`; ``node`` selects one of the ``start`` iteration on opening); with no
    node selected ``why_fig`` explains where the accepted path ended. ``tokenizer`` (``.decode(list[int])``) or ``decode`` (id -> str) names tokens the
    trace has no text for.
    The stepper replays the recorded iterations: under sampling it shows the target's recorded
    draws and never re-grows or re-draws (that is the live explorer's job, :func:`explore`).
    """

    def __init__(self, trace: Trace, *, start: int = 0, node: int | None = None,
                 color_by: str = "auto", show_pruned: bool = False, namer: TokenNamer | None = None,
                 decode: Callable[[int], str] | None = None, tokenizer: Any = None):
        self.trace = trace
        self.namer = namer or TokenNamer.from_trace(trace, decode=decode, tokenizer=tokenizer)
        self.selected: int | None = None
        n = len(trace.iterations)
        last = max(n - 1, 0)
        self.slider = widgets.IntSlider(value=min(max(start, 0), last), min=0, max=last,
                                        description="iteration", continuous_update=False,
                                        disabled=n == 0)
        self.play = widgets.Play(value=self.slider.value, min=0, max=last, interval=1200,
                                 description="play", disabled=n == 0)
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        self.prev_button = widgets.Button(description="◀ prev", layout=widgets.Layout(width="80px"))
        self.next_button = widgets.Button(description="next ▶", layout=widgets.Layout(width="80px"))
        self.color_toggle = widgets.ToggleButtons(
            options=[(f"colour: {style.COLOR_BY_TITLES[k]}", k) for k in style.COLOR_BY_CHOICES],
            value=resolve_color_by(color_by, sampling_active(trace.sampling)),
            style=COLOR_TOGGLE_STYLE)
        self.pruned_checkbox = widgets.Checkbox(value=show_pruned, description="pruned ghosts",
                                                indent=False, layout=widgets.Layout(width="auto"))
        self.info = widgets.HTML()
        # _redraw() below fills each figure before it is displayed and every move re-syncs its
        # widget state, so a view built after a page reload shows it (see figure_state).
        self.tree_fig = figure_widget()
        self.mask_fig = figure_widget()
        self.why_fig = figure_widget()
        self.timeline_fig = figure_widget(timeline_figure(trace, height=700) if n else
                                          _empty_figure("empty trace"))
        self.text = widgets.HTML()
        self.prev_button.on_click(lambda _: self.step(-1))
        self.next_button.on_click(lambda _: self.step(+1))
        self.slider.observe(lambda _: self._redraw(), names="value")
        self.color_toggle.observe(lambda _: self._draw_tree(), names="value")
        self.pruned_checkbox.observe(lambda _: self._draw_tree(), names="value")
        wrap = widgets.Layout(flex_flow="row wrap")  # what does not fit beside goes below, never clipped
        controls = widgets.HBox([self.play, self.prev_button, self.slider, self.next_button,
                                 self.color_toggle, self.pruned_checkbox], layout=wrap)
        # tree (~700 px) + mask (~1050 px with its legend) overflow a 1600 px window: the mask
        # then wraps below the tree instead of losing its legend past the edge
        super().__init__([controls, self.info,
                          widgets.HBox([self.tree_fig, self.mask_fig],
                                       layout=widgets.Layout(flex_flow="row wrap")),
                          self.why_fig, self.text, self.timeline_fig])
        self._redraw()
        if node is not None:  # e.g. a node where the draft ran, so the why panel has bars
            self.select_node(node)

    def static_html(self) -> str:
        """The shown iteration, complete, as static HTML (what viewers without a kernel
        display): the info line, the tree and mask images, the why panel, the text so far and
        the timeline with the iteration marked, in the widget's own order."""
        if self.record is None:
            return "\n".join([self.info.value, self.text.value])
        return "\n".join([
            self.info.value,
            '<div style="display:flex;flex-wrap:wrap;gap:8px">'
            + figure_snapshot_html(go.Figure(self.tree_fig), "draft tree")
            + figure_snapshot_html(go.Figure(self.mask_fig), "tree-attention mask") + "</div>",
            figure_snapshot_html(go.Figure(self.why_fig), "why the accepted path ended there"
                                 if self.selected is None else f"why node #{self.selected}"),
            self.text.value,
            figure_snapshot_html(go.Figure(self.timeline_fig), "timeline")])

    @property
    def position(self) -> int:
        """Position of the shown iteration in ``trace.iterations``."""
        return self.slider.value

    @property
    def record(self) -> IterationRecord | None:
        its = self.trace.iterations
        return its[self.position] if its else None

    def step(self, delta: int) -> None:
        """Move ``delta`` iterations (clamped to the trace)."""
        self.slider.value = min(max(self.slider.value + delta, self.slider.min), self.slider.max)

    def show(self, position: int) -> None:
        """Show iteration ``position`` (moves the slider; every view follows)."""
        if position != self.slider.value:
            self.slider.value = position  # the slider observer calls back here
            return
        self._redraw()

    def _redraw(self) -> None:
        rec = self.record
        self.selected = None
        if rec is None:
            replace_figure(self.tree_fig, _empty_figure("no iterations in this trace"))
            self.text.value = text_html(self.trace, namer=self.namer)
            return
        position = self.position
        self.play.value = position
        self.info.value = self._info_html(rec)
        self._draw_tree()
        replace_figure(self.mask_fig, mask_figure(rec, namer=self.namer))
        self._draw_why()
        self.text.value = text_html(self.trace, upto=position, current=position, namer=self.namer)
        with self.timeline_fig.batch_update():
            mark_iteration(self.timeline_fig, rec.index)
        sync_state(self.timeline_fig)

    def select_node(self, node: int | None) -> None:
        """Highlight one node (BFS index) in the tree and its row in the mask."""
        rec = self.record
        if rec is None:
            return
        self.selected = node
        self._draw_tree()
        replace_figure(self.mask_fig, mask_figure(rec, namer=self.namer, highlight=node))
        self._draw_why()

    def _draw_why(self) -> None:
        """Explain the selected node (the root: the decision after it), else where the accepted
        path ended."""
        node = self.selected
        at = 0 if node == 0 else None
        fig = why(self.trace, self.position, None if node == 0 else node, at=at, namer=self.namer)
        replace_figure(self.why_fig, fig)

    def _tree_figure(self, rec: IterationRecord, highlight: int | None = None) -> go.Figure:
        """One iteration's tree as the stepper draws it (its colour and ghost settings)."""
        return tree_figure(rec, color_by=self.color_toggle.value,
                           show_pruned=self.pruned_checkbox.value, namer=self.namer,
                           highlight=highlight, drafter=self.trace.drafter_kind,
                           color_buttons=False, sampling=self.trace.sampling)

    def iteration_figures(self) -> list[go.Figure]:
        """The tree of every iteration of the trace, as the stepper draws it (the frames of
        :func:`dynatree_viz.export_gif`)."""
        return [self._tree_figure(rec) for rec in self.trace.iterations]

    def _draw_tree(self) -> None:
        rec = self.record
        if rec is None:
            return
        replace_figure(self.tree_fig, self._tree_figure(rec, self.selected))
        nodes = self.tree_fig.data[trace_index(self.tree_fig, NODES)]
        nodes.on_click(self._on_node_click)

    def _on_node_click(self, trace: Any, points: Any, state: Any) -> None:
        if points.point_inds:
            self.select_node(int(points.point_inds[0]))

    def _info_html(self, rec: IterationRecord) -> str:
        acc = rec.acceptance
        h = rec.history_before or {}
        hist = (f" · D0 = {h.get('d0_effective')} (real {h.get('d0', 0):.2f}), "
                f"τ_h = {h.get('tau_h', 0):.3f}" if h else "")
        return (f"<b>iteration {rec.index}</b> · prefix {rec.prefix_len} tokens · "
                f"{rec.num_nodes} drafted nodes · depth {rec.tree.depth} · accepted ℓ = "
                f"{rec.accepted_length}{'' if acc is None else f' (a = {acc:.2f})'} · committed "
                f"{len(rec.committed)}{hist}"
                + (f" · drafter: {html.escape(self.trace.drafter_kind)}" if self.trace.drafter_kind else "")
                + (f"<br>sampled: {html.escape(sampling_summary(self.trace.sampling))} (the recorded "
                   "draws, replayed)" if sampling_active(self.trace.sampling) else ""))


def show(trace: Trace | str, **kwargs: Any) -> Stepper:
    """The stepper widget for a trace (or a path to a trace JSON file); keyword arguments as
    :class:`Stepper` (``tokenizer=`` among them)."""
    if not isinstance(trace, Trace):
        trace = Trace.from_json(trace)
    return Stepper(trace, **kwargs)


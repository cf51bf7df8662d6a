"""Plotly ``FigureWidget``s whose saved widget state always holds the figure they show.

A ``FigureWidget`` keeps two copies of its figure: the Python figure (``fig.data``,
``fig.layout``) and the widget state (``_widget_data``, ``_widget_layout``) that a front end
reads when it builds a view. Plotly fills the state only when the widget is constructed or
displayed by itself; a widget displayed inside a box (every figure of the stepper and the
explorer) and then changed (``add_traces``, ``layout = ...``, a new shape) sends the change as a
message to the views open now, but its state keeps the old figure. A page reload while the
kernel runs then builds every view from that stale state (an empty grid, for a widget built
empty) and the next move's "delete traces 0..n" fails in the browser ("indices must be valid
indices for gd.data"). So every change here ends with :func:`sync_state`.
"""

from __future__ import annotations

from copy import deepcopy

import plotly.graph_objects as go

from dynatree_viz.widgets.plotly_once import FigureWidget


def sync_state(target: go.FigureWidget) -> None:
    """Copy ``target``'s figure into its widget state, as plotly does when it displays a widget.

    The views open now ignore a state change (they follow the edit messages already sent), so
    this only decides what a view built later (after a page reload) starts from."""
    target._widget_data = deepcopy(target._data)
    target._widget_layout = deepcopy(target._layout_obj._props)


def figure_widget(fig: go.Figure | None = None) -> go.FigureWidget:
    """A ``FigureWidget`` built with ``fig``'s traces and layout, its state holding them (plotly.js loaded
    once per page: :mod:`dynatree_viz.widgets.plotly_once`)."""
    target = FigureWidget(fig) if fig is not None else FigureWidget()
    sync_state(target)
    return target


def replace_figure(target: go.FigureWidget, fig: go.Figure) -> None:
    """Redraw ``target`` with ``fig``'s data and layout, and keep its state in step.

    The views are updated by messages (delete the old traces, add the new ones, relayout): the
    front end applies them to what it shows, which, since the state always holds the figure,
    is what Python holds too, even in a view rebuilt by a reload.

    Assigning a layout sends only the keys the new layout sets: a key only the old one had (the
    mask's frames of the last iteration's accepted rows, an annotation) stayed drawn in the open
    views (seen live in JupyterLab: stale frames after a move, gone after a reload). So those
    keys are cleared first."""
    stale = set(target._layout_obj._props or {}) - set(fig.layout.to_plotly_json())
    target.data = ()
    target.add_traces(list(fig.data))
    if stale:  # plotly.js relayout: [] empties an array of items, null resets anything else
        target._send_relayout_msg({k: [] if k in _ITEM_ARRAYS else None for k in sorted(stale)})
    target.layout = fig.layout
    sync_state(target)


#: layout keys holding a list of items (plotly's "info arrays" of shapes, annotations, ...)
_ITEM_ARRAYS = frozenset({"shapes", "annotations", "images", "sliders", "updatemenus", "selections"})

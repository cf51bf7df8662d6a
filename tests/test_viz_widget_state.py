"""The widgets' FigureWidgets keep their figure in the widget state a reloaded page is built from.

A front end that opens a view (a page reload while the kernel runs) draws the widget state
``_widget_data`` / ``_widget_layout``, then applies the edit messages that follow. These tests
read the state the way that front end does (``get_state``) and replay the messages on it.
"""

from __future__ import annotations

import pytest

import dynatree_viz as dv
from dynatree_viz.widgets.figure_state import figure_widget, replace_figure


@pytest.fixture(scope="module")
def trace():
    return dv.synthetic.synthetic_trace(6)


def _state(w):
    """(traces, layout) as a front end building a view now receives them."""
    st = w.get_state()
    return st["_widget_data"], st["_widget_layout"]


def _figures(widget):
    names = ("tree_fig", "mask_fig", "why_fig", "timeline_fig")
    return {n: getattr(widget, n) for n in names if hasattr(widget, n)}


def _assert_state_holds_the_figure(w, name, nonempty=False):
    data, layout = _state(w)
    assert len(data) == len(w.data) and (len(data) > 0 or not nonempty), name
    assert [t.get("type") for t in data] == [t.type for t in w.data], name
    assert [t.get("name") for t in data] == [t.name for t in w.data], name
    title = w.layout.title.text
    assert (layout.get("title") or {}).get("text") == title, name
    assert len(layout.get("shapes") or []) == len(w.layout.shapes), name


def test_a_fresh_stepper_holds_every_figure_in_its_state_before_any_move(trace):
    st = dv.show(trace)
    for name, w in _figures(st).items():
        _assert_state_holds_the_figure(w, name, nonempty=True)


def test_every_move_keeps_the_state_in_step_with_the_figure(trace):
    st = dv.show(trace)
    moves = [lambda: st.next_button.click(), lambda: setattr(st.slider, "value", 4),
             lambda: st.select_node(2), lambda: setattr(st.color_toggle, "value", "cum_prob"),
             lambda: setattr(st.pruned_checkbox, "value", True), lambda: st.prev_button.click()]
    for move in moves:
        move()
        for name, w in _figures(st).items():
            _assert_state_holds_the_figure(w, name)
    band = [s for s in _state(st.timeline_fig)[1]["shapes"] if s.get("name") == "current iteration"]
    assert band[0]["x0"] == 2.5  # the timeline's mark of iteration 3 is in the state, too


def test_the_explorer_holds_its_tree_in_its_state_before_and_after_a_move(trace):
    ex = dv.explore(trace, iteration=2)
    _assert_state_holds_the_figure(ex.tree_fig, "tree_fig", nonempty=True)
    ex.sliders["n_max"].value = 1
    _assert_state_holds_the_figure(ex.tree_fig, "tree_fig", nonempty=True)


class _ReloadedView:
    """A view built from the widget's state now, then fed the edit messages that follow (what
    plotly's front end does): a delete of an index the view lacks is the browser's
    "indices must be valid indices for gd.data"."""

    def __init__(self, w):
        self.data = list(_state(w)[0])
        w.observe(self._delete, names="_py2js_deleteTraces")
        w.observe(self._add, names="_py2js_addTraces")

    def _delete(self, change):
        msg = change["new"]
        if msg:
            inds = msg["delete_inds"]
            assert all(0 <= i < len(self.data) for i in inds), f"invalid indices {inds}"
            self.data = [t for i, t in enumerate(self.data) if i not in set(inds)]

    def _add(self, change):
        msg = change["new"]
        if msg:
            self.data += msg["trace_data"]


def test_a_view_rebuilt_after_a_reload_takes_the_next_move_without_errors(trace):
    st = dv.show(trace)
    st.slider.value = 3  # the reader has moved, then reloads the page
    views = {name: _ReloadedView(w) for name, w in _figures(st).items()}
    for name, view in views.items():
        assert len(view.data) == len(getattr(st, name).data), name  # not an empty grid
    assert views["tree_fig"].data
    st.next_button.click()
    for name, view in views.items():
        w = getattr(st, name)
        assert [t.get("name") for t in view.data] == [t.name for t in w.data], name


def test_replace_figure_keeps_the_state_whatever_the_trace_count():
    import plotly.graph_objects as go

    w = figure_widget(go.Figure([go.Scatter(x=[0], y=[0], name="a")]))
    assert [t["name"] for t in _state(w)[0]] == ["a"]
    replace_figure(w, go.Figure([go.Bar(x=[1], y=[2], name=n) for n in "bcd"],
                                layout=dict(title_text="three")))
    data, layout = _state(w)
    assert [t["name"] for t in data] == ["b", "c", "d"] and layout["title"]["text"] == "three"


def test_replace_figure_clears_in_the_open_views_what_the_new_layout_no_longer_sets():
    # live in JupyterLab: after a move, the mask kept the last iteration's frames of accepted rows
    # (assigning a layout sends only the keys the new one sets); a reload, built from the state,
    # drew it right. The open view gets the same layout as the state.
    import plotly.graph_objects as go

    w = figure_widget(go.Figure([go.Scatter(x=[0], y=[0])], layout=dict(
        shapes=[dict(type="rect", x0=0, x1=1, y0=0, y1=1)], annotations=[dict(text="a", x=0, y=0)],
        legend=dict(x=0.3), title_text="old")))
    view = dict(w.layout.to_plotly_json())
    sent = []
    w.observe(lambda c: c["new"] and sent.append(c["new"]["relayout_data"]), names="_py2js_relayout")
    replace_figure(w, go.Figure([go.Scatter(x=[1], y=[1])], layout=dict(title_text="new")))
    for msg in sent:  # plotly.js relayout: null unsets a key, [] empties an array of items
        for k, v in msg.items():
            if v is None:
                view.pop(k, None)
            else:
                view[k] = v
    assert not view.get("shapes") and not view.get("annotations") and "legend" not in view
    assert view["title"]["text"] == "new" == _state(w)[1]["title"]["text"]

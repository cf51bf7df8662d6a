"""Outputs for viewers without JavaScript or a kernel (dynatree_viz.widgets.static)."""

from __future__ import annotations

import warnings

import plotly.graph_objects as go
import plotly.io as pio
import pytest

import dynatree_viz as dv
from dynatree_core.policy.config import ARConfig
from dynatree_viz.widgets import static
from dynatree_viz.views import tree as tv
from dynatree_viz.views.race import CURVE, FINISH
from helpers.viz import record


@pytest.fixture
def no_images(monkeypatch):
    monkeypatch.setitem(static._state, "images", False)
    monkeypatch.setitem(static._state, "reason", "no browser in this test")


@pytest.fixture
def drawn(monkeypatch):
    """Stand in for kaleido: every figure 'renders' to a tiny PNG-like byte string; the list
    keeps each figure drawn."""
    figs = []
    monkeypatch.setitem(static._state, "images", True)

    def to_image(self, format="png", **k):
        figs.append(self)
        return b"\x89PNG-fake"

    monkeypatch.setattr(go.Figure, "to_image", to_image)
    return figs


@pytest.fixture
def fake_images(drawn):
    return drawn


def _static_image_of(fig, drawn):
    """What the notebook renderer stores as the figure's PNG (the figure it drew)."""
    renderer = static.use_static_fallbacks()
    bundle = pio.renderers._build_mime_bundle(fig.to_dict(), renderer)
    assert set(bundle) == {"application/vnd.plotly.v1+json", "image/png"}
    return drawn[-1]


def test_renderer_stores_json_and_png_when_images_can_be_made(fake_images, monkeypatch):
    monkeypatch.setattr(pio.renderers, "default", pio.renderers.default)
    assert static.use_static_fallbacks() == "plotly_mimetype+dynatree_png"
    assert pio.renderers.default == "plotly_mimetype+dynatree_png"
    fig = dv.tree_figure(dv.synthetic.synthetic_trace(2)[1])
    still = _static_image_of(fig, fake_images)
    assert fig.layout.updatemenus and not still.layout.updatemenus  # buttons a PNG cannot press
    still.layout.updatemenus = fig.layout.updatemenus
    assert still.to_dict() == fig.to_dict()  # otherwise a still figure is itself


def test_static_image_of_a_race_is_its_finish(drawn, monkeypatch):
    monkeypatch.setattr(pio.renderers, "default", pio.renderers.default)
    ar, dt = dv.synthetic.synthetic_trace(80, config=ARConfig(), max_new_tokens=20), dv.synthetic.synthetic_trace(20, max_new_tokens=20)
    fig = dv.race({"AR": ar, "DynaTree": dt})
    assert all(len(t.x) == 0 for t in fig.data if t.name.endswith(FINISH))  # opens at x = 0
    shown = _static_image_of(fig, drawn)
    assert not shown.frames and not shown.layout.sliders and not shown.layout.updatemenus
    for ln in dv.race_data({"AR": ar, "DynaTree": dt}).lanes:
        (star,) = [t for t in shown.data if t.name == f"{ln.label} {FINISH}"]
        assert list(star.x) == [ln.end] and list(star.y) == [ln.total_tokens]  # complete, starred
        assert f"{ln.total_tokens} tokens" in star.text[0]  # with its count of forwards
        assert f"{int(ln.end)} forwards" in star.text[0]
        (curve,) = [t for t in shown.data if t.name == f"{ln.label} {CURVE}"]
        assert curve.x[-1] == ln.end and curve.y[-1] == ln.total_tokens


def test_static_image_of_an_animation_is_every_step_side_by_side(drawn, monkeypatch):
    monkeypatch.setattr(pio.renderers, "default", pio.renderers.default)
    rec = record()
    fig = dv.animate(rec, show_pruned=True)
    shown = _static_image_of(fig, drawn)
    all_steps = dv.animation_steps(rec, show_pruned=True)
    assert len(all_steps) == len(fig.frames) and all_steps[0].phase == "draft" and all_steps[0].nodes == [0]
    steps = all_steps[1:]  # every step but the root alone, which every panel draws anyway
    titles = [a.text for a in shown.layout.annotations]
    assert len(titles) == len(steps)  # one panel per step, in order
    for k, (title, step) in enumerate(zip(titles, steps)):
        assert title.startswith(f"<b>{k + 1}. ") and step.phase in title
        axis = "x" if k == 0 else f"x{k + 1}"
        nodes = [t for t in shown.data if t.name == tv.NODES and t.xaxis == axis]
        assert [list(t.customdata) for t in nodes] == [step.nodes]  # the step's own nodes
    phases = [s.phase for s in steps]
    assert phases.count("draft") == rec.tree.depth and phases[-3:] == ["verify", "select", "commit"]
    # the verdict appears from verify on, the accepted path from select on
    marks = {t.xaxis: len(t.x) for t in shown.data if t.name == tv.ACCEPTED_MARKS}
    path = {t.xaxis: len(t.x) for t in shown.data if t.name == tv.ACCEPTED_EDGES}
    n = len(steps)
    assert marks["x"] == 0 and marks[f"x{n - 2}"] == len(rec.accepted_path)
    assert path[f"x{n - 2}"] == 0 and path[f"x{n - 1}"] > 0
    assert "+ '" in titles[-1]  # the commit panel names what was appended


def test_kaleidos_server_warning_never_reaches_a_notebook(drawn, monkeypatch):
    """plotly warns "The kopts argument is ignored if using a server" on every image once the
    server runs (with this machine's site-packages path): the renderer swallows exactly that."""
    def noisy(self, format="png", **k):
        warnings.warn("The kopts argument is ignored if using a server.", UserWarning)
        return b"\x89PNG-fake"

    monkeypatch.setattr(go.Figure, "to_image", noisy)
    fig = dv.tree_figure(record())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert static.figure_png(fig) == b"\x89PNG-fake"
        pio.renderers._build_mime_bundle(fig.to_dict(), static.use_static_fallbacks())
    monkeypatch.setattr(go.Figure, "to_image", lambda self, **k: warnings.warn("other", UserWarning))
    with pytest.warns(UserWarning, match="other"):  # any other warning still shows
        static.figure_png(fig)


def test_renderer_falls_back_to_json_only_without_images(no_images, monkeypatch):
    monkeypatch.setattr(pio.renderers, "default", pio.renderers.default)
    assert static.use_static_fallbacks() == "plotly_mimetype"
    with pytest.raises(RuntimeError, match="no browser in this test"):
        static.use_static_fallbacks(images=True)


def _bundle(widget):
    data = widget._repr_mimebundle_()
    return data[0] if isinstance(data, tuple) else data


def test_stepper_bundle_keeps_the_widget_view_and_adds_a_static_snapshot(fake_images):
    trace = dv.synthetic.synthetic_trace(4)
    st = dv.show(trace, start=2)
    b = _bundle(st)
    assert "application/vnd.jupyter.widget-view+json" in b  # a live kernel still gets the widget
    snap = b["text/html"]
    # tree, mask, why and timeline, inlined (no network): the iteration complete
    assert snap.count('src="data:image/png;base64,') == 4
    assert "<b>iteration 2</b>" in snap
    assert "http://" not in snap and "https://" not in snap
    st.slider.value = 3  # the snapshot follows the widget's state
    assert _bundle(st)["text/html"] != snap


def test_stepper_snapshot_draws_the_iteration_it_names(drawn):
    trace = dv.synthetic.synthetic_trace(5)
    st = dv.show(trace, start=3)
    drawn.clear()
    snap = _bundle(st)["text/html"]
    rec = trace.iterations[3]
    assert f"<b>iteration {rec.index}</b>" in snap and f"accepted ℓ = {rec.accepted_length}" in snap
    tree, mask, why, timeline = drawn
    assert tree.layout.title.text.startswith(f"Iteration {rec.index}:")
    assert len(next(t for t in tree.data if t.name == tv.NODES).x) == len(rec.tree)  # all of it
    assert len(mask.data[0].z) == len(rec.tree)
    assert any(s.x0 <= rec.index <= s.x1 for s in timeline.layout.shapes)  # marked there
    assert why.data and "".join(st.text.value.split()) in "".join(snap.split())


def test_snapshot_says_why_an_image_is_missing(no_images):
    st = dv.show(dv.synthetic.synthetic_trace(3))
    snap = _bundle(st)["text/html"]
    assert "no static image" in snap and "no browser in this test" in snap
    assert "data:image/png" not in snap


def test_explorer_snapshot_shows_settings_status_and_tree(fake_images):
    ex = dv.explore(dv.synthetic.synthetic_trace(3), iteration=1)
    snap = _bundle(ex)["text/html"]
    assert "τ_h = " in snap and "D_max = " in snap and 'src="data:image/png;base64,' in snap
    ex.sliders["n_max"].value = 2
    assert "N_max = 2" in _bundle(ex)["text/html"]

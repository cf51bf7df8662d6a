"""Outputs for viewers without JavaScript or a kernel (dynatree_viz.static)."""

from __future__ import annotations

import plotly.graph_objects as go
import plotly.io as pio
import pytest

import dynatree_viz as dv
from dynatree_viz import static


@pytest.fixture
def no_images(monkeypatch):
    monkeypatch.setitem(static._state, "images", False)
    monkeypatch.setitem(static._state, "reason", "no browser in this test")


@pytest.fixture
def fake_images(monkeypatch):
    """Stand in for kaleido: every figure 'renders' to a tiny PNG-like byte string."""
    monkeypatch.setitem(static._state, "images", True)
    monkeypatch.setattr(go.Figure, "to_image", lambda self, format="png", **k: b"\x89PNG-fake")


def test_renderer_stores_json_and_png_when_images_can_be_made(fake_images, monkeypatch):
    monkeypatch.setattr(pio.renderers, "default", pio.renderers.default)
    assert static.use_static_fallbacks() == "plotly_mimetype+png"
    assert pio.renderers.default == "plotly_mimetype+png"


def test_renderer_falls_back_to_json_only_without_images(no_images, monkeypatch):
    monkeypatch.setattr(pio.renderers, "default", pio.renderers.default)
    assert static.use_static_fallbacks() == "plotly_mimetype"
    with pytest.raises(RuntimeError, match="no browser in this test"):
        static.use_static_fallbacks(images=True)


def _bundle(widget):
    data = widget._repr_mimebundle_()
    return data[0] if isinstance(data, tuple) else data


def test_stepper_bundle_keeps_the_widget_view_and_adds_a_static_snapshot(fake_images):
    trace = dv.demo_trace(4)
    st = dv.show(trace, start=2)
    b = _bundle(st)
    assert "application/vnd.jupyter.widget-view+json" in b  # a live kernel still gets the widget
    snap = b["text/html"]
    assert snap.count('src="data:image/png;base64,') == 2  # tree and mask, inlined (no network)
    assert "Iteration" in snap or "iteration" in snap
    assert "http://" not in snap and "https://" not in snap
    st.slider.value = 3  # the snapshot follows the widget's state
    assert _bundle(st)["text/html"] != snap


def test_snapshot_says_why_an_image_is_missing(no_images):
    st = dv.show(dv.demo_trace(3))
    snap = _bundle(st)["text/html"]
    assert "no static image" in snap and "no browser in this test" in snap
    assert "data:image/png" not in snap


def test_explorer_snapshot_shows_settings_status_and_tree(fake_images):
    ex = dv.explore(dv.demo_trace(3), iteration=1)
    snap = _bundle(ex)["text/html"]
    assert "tau_h=" in snap and "d_max=" in snap and 'src="data:image/png;base64,' in snap
    ex.sliders["n_max"].value = 2
    assert "n_max=2" in _bundle(ex)["text/html"]

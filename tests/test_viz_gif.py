"""dv.export_gif: one moving picture of an animation, a race or a stepper, every frame drawn by
the static renderer (stood in for here by a painter that keeps the figures; one test uses the
real kaleido where a browser is installed)."""

from __future__ import annotations

import io

import pytest
from PIL import Image

import dynatree_viz as dv
from dynatree_core.policy.config import ARConfig
from dynatree_viz.export import gif
from dynatree_viz.views import tree as tv
from dynatree_viz.views.race import FINISH
from helpers.viz import record, tiny_trace


@pytest.fixture
def painted(monkeypatch):
    """Stand in for kaleido: each figure becomes a small PNG of its own colour (so no two
    consecutive frames are alike); the list keeps the figures in the order drawn."""
    figs = []

    def paint(fig):
        figs.append(fig)
        shade = (len(figs) * 53) % 256
        im = Image.new("RGB", (int(fig.layout.width or 700) // 8, int(fig.layout.height or 450) // 8),
                       (shade, 255 - shade, 90))
        buf = io.BytesIO()
        im.save(buf, format="PNG")
        return buf.getvalue()

    monkeypatch.setattr(gif, "figure_png", paint)
    monkeypatch.setattr(gif, "require_image_export", lambda: None)
    return figs


def _frames(path):
    im = Image.open(path)
    out = []
    for k in range(im.n_frames):
        im.seek(k)
        out.append(im.info.get("duration"))
    return im, out


def test_an_animation_becomes_one_gif_frame_per_step_the_commit_held(painted, tmp_path):
    rec = record()
    fig = dv.animate(rec)
    path = dv.export_gif(fig, tmp_path / "it.gif")
    im, durations = _frames(path)
    steps = dv.animation_steps(rec)
    assert im.format == "GIF" and im.n_frames == len(steps) == len(painted)
    assert durations == [1400] * (len(steps) - 1) + [1400 * gif.HOLD_LAST]
    assert im.info.get("loop") == 0  # forever
    assert [f.layout.meta["phase"] for f in painted] == [s.phase for s in steps]
    assert all(not f.layout.sliders and not f.layout.updatemenus for f in painted)  # stills
    # a trace (or a record) is animated first, with the animation's arguments
    painted.clear()
    dv.export_gif(tiny_trace(3), tmp_path / "t.gif", iteration=1, frame_ms=500)
    assert painted[-1].layout.meta["phase"] == "commit"
    assert _frames(tmp_path / "t.gif")[1][0] == 500


def test_a_race_is_thinned_to_max_frames_and_ends_on_the_finish(painted, tmp_path):
    ar = dv.synthetic.synthetic_trace(160, config=ARConfig(), max_new_tokens=40)
    dt = dv.synthetic.synthetic_trace(40, max_new_tokens=40)
    fig = dv.race({"AR": ar, "DynaTree": dt})
    assert len(fig.frames) > 12
    path = dv.export_gif(fig, tmp_path / "race.gif", max_frames=12)
    im, durations = _frames(path)
    assert im.n_frames == 12 and durations[-1] == 120 * gif.HOLD_LAST
    finish = [t for t in painted[-1].data if t.name.endswith(FINISH)]
    assert len(finish) == 2 and all(len(t.x) == 1 for t in finish)  # both lanes finished
    assert all(len(t.x) == 0 for t in painted[0].data if t.name.endswith(FINISH))  # from x = 0


def test_a_stepper_becomes_one_frame_per_iteration(painted, tmp_path):
    trace = dv.synthetic.synthetic_trace(5)
    st = dv.show(trace, start=2)
    path = dv.export_gif(st, tmp_path / "stepper.gif")
    im, durations = _frames(path)
    assert im.n_frames == len(trace.iterations) and set(durations[:-1]) == {1200}
    assert [f.layout.title.text.split(":")[0] for f in painted] == [
        f"Iteration {r.index}" for r in trace.iterations]
    assert all(len(f.data[tv.trace_index(f, tv.NODES)].x) == len(r.tree)
               for f, r in zip(painted, trace.iterations))
    assert st.position == 2  # the widget itself is left where it was


def test_frames_share_one_size_and_scale(painted, tmp_path):
    path = dv.export_gif(dv.animate(record()), tmp_path / "small.gif", scale=0.5)
    im = Image.open(path)
    widest = max(int(f.layout.width) // 8 for f in painted)
    assert im.size[0] == round(widest * 0.5)


def test_nothing_is_written_without_an_image_exporter(monkeypatch, tmp_path):
    def missing():
        raise dv.core.images.ImageExportUnavailable("static image export needs kaleido")

    monkeypatch.setattr(gif, "require_image_export", missing)
    with pytest.raises(dv.core.images.ImageExportUnavailable, match="kaleido"):
        dv.export_gif(dv.animate(record()), tmp_path / "x.gif")
    assert not (tmp_path / "x.gif").exists()
    with pytest.raises(TypeError, match="animated figure"):
        gif.gif_frames(42)


@pytest.mark.skipif(not dv.core.images.image_export_available()[0], reason="needs kaleido and a Chromium")
def test_a_real_gif_through_kaleido(tmp_path):
    path = dv.export_gif(dv.animate(tiny_trace(2), 1), tmp_path / "real.gif", scale=0.5)
    im = Image.open(path)
    assert im.n_frames == len(dv.animation_steps(tiny_trace(2), 1))
    assert path.stat().st_size < 1_500_000

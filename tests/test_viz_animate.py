"""dynatree_viz.views.animation: one iteration step by step, its static frames, slides and images."""

from __future__ import annotations

import html
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dynatree_viz as dv
from dynatree_core.policy.config import ARConfig
from dynatree_viz.core import style
from dynatree_viz.views import tree as tv
from dynatree_viz.views.animation import TARGET_CHOICES, TEXT_PANEL
from helpers.viz import VOCAB, FakeTokenizer, edge_of, record, rule, segments as _segments, tiny_trace

ROOT = Path(__file__).resolve().parents[1]


def _by_name(frame_or_fig):
    return {t.name: t for t in frame_or_fig.data}


def _plain(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def _statuses(rec):
    on_path = {0} | set(rec.accepted_path)
    acc, rej = [], []
    for i, p in enumerate(rec.tree.parents):
        if i in rec.accepted_path:
            acc.append(i)
        elif i > 0 and p in on_path:
            rej.append(i)
    return acc, rej


def test_frames_are_the_draft_levels_then_verify_select_commit_in_order():
    rec = record()
    fig = dv.animate(rec)
    depth = rec.tree.depth
    assert depth == 3
    names = [f.name for f in fig.frames]
    assert names == [f"draft d={k}" for k in range(depth + 1)] + ["verify", "select", "commit"]
    assert [f.layout.meta["phase"] for f in fig.frames] == ["draft"] * 4 + [
        "verify", "select", "commit"]
    # play/pause buttons and a slider with one step per frame, in frame order
    (menu,) = fig.layout.updatemenus
    assert [b.method for b in menu.buttons] == ["animate", "animate"]
    assert "play" in menu.buttons[0].label and "pause" in menu.buttons[1].label
    (slider,) = fig.layout.sliders
    assert [s.args[0][0] for s in slider.steps] == names
    assert slider.active == 0
    # the figure opens on the first step: the root alone
    assert list(_by_name(fig)[tv.NODES].customdata) == [0]


def test_draft_frame_k_shows_exactly_the_nodes_of_depth_at_most_k_with_their_q():
    rec = record(growth=rule(n_max=5))
    tree = rec.tree
    fig = dv.animate(rec)
    for k in range(tree.depth + 1):
        fr = _by_name(fig.frames[k])
        expect = [i for i in range(len(tree)) if tree.depths[i] <= k]
        nodes = fr[tv.NODES]
        assert list(nodes.customdata) == expect
        assert list(nodes.y) == [tree.depths[i] for i in expect]
        for i, label in zip(expect, nodes.text):
            assert label.startswith(style.short_label(VOCAB[tree.tokens[i]], 10))
            if i > 0:
                assert label.endswith(f"q={math.exp(tree.logps[i]):.2f}")
        assert len(_segments(fr[tv.EDGES])) == len(expect) - 1
        # nothing about the target yet: no marks, no choices, no path, no bonus
        for name in (tv.ACCEPTED_MARKS, tv.REJECTED_MARKS, TARGET_CHOICES, tv.ACCEPTED_EDGES,
                     tv.BONUS):
            assert not list(fr[name].x or []), (k, name)
        assert "rejected" not in " ".join(nodes.hovertext)
        assert "target p(token)" not in " ".join(nodes.hovertext)


def test_verify_frame_marks_accepted_and_rejected_and_shows_the_targets_choice():
    rec = record(target={(1, 2): 5})  # the target rejects " sat": ℓ = 1, two rejections
    fig = dv.animate(rec, tokenizer=FakeTokenizer())
    names = [f.name for f in fig.frames]
    fr = _by_name(fig.frames[names.index("verify")])
    nodes = fr[tv.NODES]
    pos = {int(c): (x, y) for c, x, y in zip(nodes.customdata, nodes.x, nodes.y)}
    assert sorted(pos) == list(range(len(rec.tree)))
    acc, rej = _statuses(rec)
    assert acc == rec.accepted_path == [1] and rej
    assert sorted(zip(fr[tv.ACCEPTED_MARKS].x, fr[tv.ACCEPTED_MARKS].y)) == sorted(
        pos[i] for i in acc)
    assert sorted(zip(fr[tv.REJECTED_MARKS].x, fr[tv.REJECTED_MARKS].y)) == sorted(
        pos[i] for i in rej)
    choices = fr[TARGET_CHOICES]
    assert list(choices.customdata) == list(range(len(rec.tree)))
    assert list(choices.text) == ["→" + style.short_label(VOCAB[rec.target_argmax[i]], 10)
                                  for i in range(len(rec.tree))]
    assert [(x, y) for x, y in zip(choices.x, choices.y)] == [pos[i] for i in range(len(rec.tree))]
    assert not list(fr[tv.BONUS].x) and not list(fr[tv.ACCEPTED_EDGES].x)
    assert "rejected" in fig.frames[names.index("verify")].layout.title.text


def test_select_frame_highlights_the_path_and_the_bonus_and_commit_appends_the_text():
    tr = tiny_trace(3)
    rec = tr.iterations[1]
    fig = dv.animate(tr, 1)
    names = [f.name for f in fig.frames]
    sel = _by_name(fig.frames[names.index("select")])
    nodes = sel[tv.NODES]
    pos = {int(c): (x, y) for c, x, y in zip(nodes.customdata, nodes.x, nodes.y)}
    segs = _segments(sel[tv.ACCEPTED_EDGES])
    path = [0] + rec.accepted_path
    star = sel[tv.BONUS]
    points = dict(pos, bonus=(star.x[0], star.y[0]))
    assert [edge_of(sg, points) for sg in segs] == list(zip(path, path[1:] + ["bonus"]))
    assert list(star.text) == [style.short_label(VOCAB[rec.bonus], 10)]
    # commit: the record's committed text appended after the prompt and iteration 0's tokens
    commit = fig.frames[names.index("commit")]
    committed = "".join(rec.committed_texts)
    assert commit.layout.meta["committed_text"] == committed
    context = tr.prompt_text + "".join(tr.iterations[0].committed_texts)
    assert commit.layout.meta["text"] == context + committed
    (panel,) = [a for a in commit.layout.annotations if a.name == TEXT_PANEL]
    assert _plain(panel.text).endswith(committed)
    # the bonus is underlined in the panel, as in the text view
    assert f"<u><span style='color:#7a4a00'>{html.escape(VOCAB[rec.bonus])}</span></u>" in panel.text
    for name in names[: names.index("commit")]:  # before commit, nothing is appended yet
        fr = fig.frames[names.index(name)]
        assert fr.layout.meta["committed_text"] == ""
        (p,) = [a for a in fr.layout.annotations if a.name == TEXT_PANEL]
        assert _plain(p.text).rstrip("▌").endswith(context[-20:])


def test_layout_is_stable_and_the_last_frame_matches_the_static_tree_view():
    rec = record()
    fig = dv.animate(rec)
    static = _by_name(dv.tree_figure(rec))[tv.NODES]
    where = {}
    for fr in fig.frames:
        nodes = _by_name(fr)[tv.NODES]
        for c, x, y in zip(nodes.customdata, nodes.x, nodes.y):
            assert where.setdefault(int(c), (x, y)) == (x, y)  # a node never moves
    last = _by_name(fig.frames[-1])[tv.NODES]
    assert list(last.x) == list(static.x) and list(last.y) == list(static.y)
    assert list(last.marker.color) == list(static.marker.color)
    assert list(last.marker.symbol) == list(static.marker.symbol)
    assert list(last.marker.line.color) == list(static.marker.line.color)
    # every encoding has a legend entry, including the new "→ x" and q labels
    legend = [t.name for t in fig.data if t.showlegend is not False]
    assert tv.LEGEND_REJECTED in legend
    assert any(n.startswith("→ x") for n in legend) and any("q =" in n for n in legend)
    assert tv.LEGEND_ACCEPTED in legend and tv.LEGEND_BONUS in legend


def test_pruned_candidates_appear_at_their_level():
    rec = record()
    fig = dv.animate(rec, show_pruned=True)
    tree = rec.tree
    assert tree.pruned
    for k in range(tree.depth + 1):
        shown = fig.frames[k].layout.meta["pruned"]
        assert shown == [j for j, p in enumerate(tree.pruned) if tree.depths[p.parent] < k]
        assert len(_by_name(fig.frames[k])[tv.PRUNED].x) == len(shown)


def test_an_ar_iteration_is_root_verify_select_commit():
    tr = dv.synthetic.synthetic_trace(3, config=ARConfig(), max_new_tokens=3)
    rec = tr.iterations[2]
    fig = dv.animate(tr, 2)
    assert [f.name for f in fig.frames] == ["draft d=0", "verify", "select", "commit"]
    assert fig.frames[-1].layout.meta["committed_text"] == "".join(rec.committed_texts)
    assert list(_by_name(fig.frames[1])[TARGET_CHOICES].customdata) == [0]


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"iteration must be a position in \[0, 2\]"):
        dv.animate(tiny_trace(3), 5)
    with pytest.raises(TypeError, match="Trace"):
        dv.animate(42)


def test_frame_figures_are_the_frames_as_static_figures():
    rec = record()
    fig = dv.animate(rec)
    figs = dv.views.animation.frame_figures(fig)
    assert len(figs) == len(fig.frames)
    for f, fr in zip(figs, fig.frames):
        assert not f.layout.sliders and not f.layout.updatemenus
        assert f.layout.title.text == fr.layout.title.text and f.layout.title.x == 0.01
        assert list(_by_name(f)[tv.NODES].customdata) == list(_by_name(fr)[tv.NODES].customdata)
        assert len(f.data) == len(fig.data)  # the legend keys and colour bar stay


def test_slides_are_one_offline_html_file_with_one_slide_per_step(tmp_path):
    tr = tiny_trace(2)
    path = dv.export_slides(tr, 1, tmp_path / "slides.html")
    text = path.read_text(encoding="utf-8")
    fig = dv.animate(tr, 1)
    sections = re.findall(r"<section class='dt-slide' id='slide-(\d+)' data-phase='(\w+)' "
                          r"data-name='([^']+)'", text)
    assert [int(k) for k, _, _ in sections] == list(range(1, len(fig.frames) + 1))
    assert [name for _, _, name in sections] == [f.name for f in fig.frames]
    assert [ph for _, ph, _ in sections] == ["draft"] * 4 + ["verify", "select", "commit"]
    assert not re.search(r"<script[^>]*src=[\"']?https?://", text)  # nothing from a CDN
    assert not [tag for tag in re.findall(r"<script[^>]*>", text) if "src" in tag]  # all inline
    assert text.count("Plotly.newPlot") == len(fig.frames)
    assert len(text) > 1_000_000  # plotly.js inlined, once
    assert "ArrowRight" in text and "id='dt-next'" in text and "id='dt-prev'" in text


def test_slides_of_any_animated_figure(tmp_path):
    a = dv.synthetic.synthetic_trace(30, config=ARConfig(), max_new_tokens=8)
    d = dv.synthetic.synthetic_trace(8, max_new_tokens=8)
    fig = dv.race({"ar": a, "dynatree": d})
    text = dv.export_slides(fig, path=tmp_path / "race.html").read_text(encoding="utf-8")
    assert text.count("<section class='dt-slide'") == len(fig.frames)


def test_frame_images_or_a_clear_reason(tmp_path):
    fig = dv.animate(record())
    with pytest.raises(ValueError, match="export_gif"):
        dv.export.slides.export_frames(fig, tmp_path / "gif", fmt="gif")
    ok, _ = dv.core.images.image_export_available()
    if not ok:
        with pytest.raises(dv.core.images.ImageExportUnavailable, match="kaleido|Chrome"):
            dv.export.slides.export_frames(fig, tmp_path / "frames")
        assert not (tmp_path / "frames").exists()
        return
    paths = dv.export.slides.export_frames(fig, tmp_path / "frames", fmt="svg")
    assert [p.name.split("_", 1)[1] for p in paths] == [
        f"{f.name.replace(' ', '_')}.svg" for f in fig.frames]


def test_new_views_work_with_torch_blocked(tmp_path):
    code = ("import sys; sys.modules['torch'] = None\n"
            "import dynatree_viz as dv\n"
            "from dynatree_core.policy.config import ARConfig\n"
            "d = dv.synthetic.synthetic_trace(4, max_new_tokens=10)\n"
            "a = dv.synthetic.synthetic_trace(20, config=ARConfig(), max_new_tokens=10)\n"
            "f = dv.animate(d, 1)\n"
            "r = dv.race({'ar': a, 'dynatree': d}, x='time')\n"
            f"dv.export_slides(d, 1, {str(tmp_path / 's.html')!r})\n"
            "assert not any(m.startswith(('dynatree_core.engine.loop', 'dynatree_core.pairs.pair'))"
            " for m in sys.modules)\n"
            "print('ok', len(f.frames) > 3, len(r.frames) > 3)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok True True"


def test_frame_export_without_kaleido_names_what_is_missing(tmp_path, monkeypatch):
    export = sys.modules["dynatree_viz.core.images"]  # the one availability check every image writer uses
    monkeypatch.setattr(export, "image_export_available",
                        lambda: (False, "static image export needs kaleido (pip install "
                                        "'kaleido>=1')"))
    with pytest.raises(dv.core.images.ImageExportUnavailable, match="needs kaleido"):
        dv.export.slides.export_frames(dv.animate(record()), tmp_path / "frames")
    assert not (tmp_path / "frames").exists()


def test_static_frames_close_the_gap_the_controls_leave():
    fig = dv.animate(record())
    (static, *_) = dv.views.animation.frame_figures(fig)
    assert fig.layout.sliders[0].y >= 1  # the controls sit above the tree
    assert static.layout.margin.t < fig.layout.margin.t
    # the text line stays just above the tree (paper y = 1)
    (panel,) = [a for a in static.layout.annotations if a.name == TEXT_PANEL]
    assert panel.y == 1.0 and panel.yanchor == "bottom"


def test_slides_render_offline_in_headless_chromium(tmp_path):
    """Opened by a real browser with the network off: every slide's figure is drawn, the
    address ``#slide-k`` opens slide k and the counter says so (where a Chromium is installed)."""
    from browser import dump_dom

    page = dv.export_slides(record(), 0, tmp_path / "slides.html")
    n = len(dv.animate(record()).frames)
    dom = dump_dom(page.as_uri() + "#slide-5", tmp_path / "profile")
    for k in range(n):  # plotly drew every slide's figure
        section = re.search(rf"<section[^>]*id=\"slide-{k + 1}\".*?</section>", dom, re.S)
        assert section and "main-svg" in section.group(0), k
    current = re.findall(r"<section class=\"dt-slide dt-current\"[^>]*id=\"(slide-\d+)\"", dom)
    assert current == ["slide-5"]
    assert f">5 / {n}<" in dom

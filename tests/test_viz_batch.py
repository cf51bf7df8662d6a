"""The batch view: one batch iteration's trees side by side on one scale, the n_b / W / ℓ_b strip,
finished rows, input checks, the batch fields through JSON, the stepper, and a torch-free import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import plotly.graph_objects as go
import pytest

import dynatree_viz as dv
from dynatree_core.records.trace import Trace
from dynatree_viz.core import style
from dynatree_viz.views.batch import (BAR_ACCEPTED, BAR_PADDING, BAR_VERIFIED, FINISHED, PADDED_WIDTH,
                                      PANEL_TITLE)
from dynatree_viz.views.tree import ACCEPTED_MARKS, LABELS, NODES
from helpers.viz import assert_labels_clear

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def traces() -> list[Trace]:
    return dv.synthetic.synthetic_batch_traces()


def _copy(traces: list[Trace]) -> list[Trace]:
    return [Trace.from_json(t.to_json()) for t in traces]


def _record(traces: list[Trace], b: int, i: int):
    """Row b's record of batch iteration i, found by its batch field (None: the row had finished)."""
    return next((r for r in traces[b].iterations if r.batch["iteration"] == i), None)


def _active(traces: list[Trace], i: int) -> list[int]:
    return [b for b in range(len(traces)) if _record(traces, b, i) is not None]


def _row_trace(fig: go.Figure, name: str, b: int):
    return next(t for t in fig.data if t.name == name and (t.meta or {}).get("row") == b)


def _bar(fig: go.Figure, name: str):
    return next(t for t in fig.data if t.type == "bar" and t.name == name)


def _axes(fig: go.Figure, b: int):
    nodes = _row_trace(fig, NODES, b)
    return fig.layout["xaxis" + nodes.xaxis[1:]], fig.layout["yaxis" + nodes.yaxis[1:]]


def test_synthetic_batch_rows_differ_and_the_last_finishes_early(traces):
    assert [t.batch for t in traces] == [{"size": 3, "row": b} for b in range(3)]
    assert [len(t) for t in traces] == [6, 6, 3]
    sizes = [[len(r.tree) for r in t] for t in traces]
    accepted = [[r.accepted_length for r in t] for t in traces]
    assert len({tuple(s[:3]) for s in sizes}) == 3 and len({tuple(a[:3]) for a in accepted}) > 1
    for i in range(6):
        active = _active(traces, i)
        w = max(len(_record(traces, b, i).tree) for b in active)
        for b in active:
            rec = _record(traces, b, i)
            assert rec.index == i
            assert rec.batch == {"iteration": i, "padded_width": w, "active": active, "nodes": 1 + rec.num_nodes}


def test_one_tree_per_active_row_on_one_shared_scale(traces):
    for i in (0, 4):
        fig = dv.batch_figure(traces, i)
        rows = sorted(t.meta["row"] for t in fig.data if t.name == NODES)
        assert rows == _active(traces, i) == ([0, 1, 2] if i == 0 else [0, 1])
        for b in rows:
            assert len(_row_trace(fig, NODES, b).x) == len(_record(traces, b, i).tree)
        axes = [_axes(fig, b) for b in rows]
        assert len({tuple(ya.range) for _, ya in axes}) == 1  # one depth scale
        assert len({tuple(ya.domain) for _, ya in axes}) == 1
        plot_w = fig.layout.width - fig.layout.margin.l - fig.layout.margin.r
        unit = [(xa.domain[1] - xa.domain[0]) * plot_w / (xa.range[1] - xa.range[0]) for xa, _ in axes]
        assert max(unit) - min(unit) < 1e-6  # px per leaf the same in every panel
        sizes = [_row_trace(fig, NODES, b).marker.size for b in rows]
        assert len({s[0] for s in sizes}) == 1 and len({x for s in sizes for x in s[1:]}) == 1
        titles = [a.text for a in fig.layout.annotations if a.name == PANEL_TITLE]
        for b in rows:
            ell = _record(traces, b, i).accepted_length
            assert any(t.startswith(f"<b>row {b}</b> · ℓ = {ell}") for t in titles), (b, titles)


def test_labels_clear_of_marks_edges_and_each_other_across_panels(traces):
    for i in range(6):
        fig = dv.batch_figure(traces, i)
        trees = go.Figure(data=[t for t in fig.data if t.type == "scatter" and t.meta], layout=fig.layout)
        assert_labels_clear(trees)


def test_accepted_path_highlighted_in_each_row(traces):
    seen = set()
    for i in range(6):
        fig = dv.batch_figure(traces, i)
        for b in _active(traces, i):
            rec = _record(traces, b, i)
            nodes = _row_trace(fig, NODES, b)
            at = {(x, y): k for k, x, y in zip(nodes.customdata, nodes.x, nodes.y)}
            marks = _row_trace(fig, ACCEPTED_MARKS, b)
            ringed = {at[(x, y)] for x, y in zip(marks.x, marks.y)}
            assert ringed == set(rec.accepted_path)
            labels = _row_trace(fig, LABELS, b)
            blue = {k for k, c in zip(labels.customdata, labels.textfont.color) if c == style.ACCEPTED}
            assert blue == set(rec.accepted_path)
            seen.add(bool(rec.accepted_path))
    assert seen == {True, False}  # both a row with an accepted path and one without were checked


def test_strip_values_are_the_traces_n_b_W_and_ell_b(traces):
    for i in range(6):
        fig = dv.batch_figure(traces, i)
        active = _active(traces, i)
        recs = [_record(traces, b, i) for b in active]
        acc, ver, pad = (_bar(fig, n) for n in (BAR_ACCEPTED, BAR_VERIFIED, BAR_PADDING))
        assert list(acc.y) == list(ver.y) == list(pad.y) == active
        assert list(acc.x) == [len(r.accepted_path) for r in recs]
        assert [a + v for a, v in zip(acc.x, ver.x)] == [r.batch["nodes"] for r in recs]
        assert [a + v + p for a, v, p in zip(acc.x, ver.x, pad.x)] == [r.batch["padded_width"] for r in recs]
        line = next(s for s in fig.layout.shapes if s.name == PADDED_WIDTH)
        assert line.x0 == line.x1 == recs[0].batch["padded_width"]
        assert f"W = {recs[0].batch['padded_width']} " in fig.layout.title.text


def test_the_figure_reads_W_from_the_traces(traces):
    # a wider recorded W (e.g. a static shape) is drawn as recorded, not recomputed from the trees
    wide = _copy(traces)
    for b in _active(wide, 1):
        _record(wide, b, 1).batch["padded_width"] += 3
    fig = dv.batch_figure(wide, 1)
    w = _record(traces, 0, 1).batch["padded_width"] + 3
    assert next(s for s in fig.layout.shapes if s.name == PADDED_WIDTH).x0 == w
    assert [a + v + p for a, v, p in zip(*(_bar(fig, n).x for n in (BAR_ACCEPTED, BAR_VERIFIED, BAR_PADDING)))] \
        == [w] * 3
    assert dv.batch_summary(wide)[1]["W"] == w


def test_finished_rows_are_noted_and_others_not(traces):
    assert not [a for a in dv.batch_figure(traces, 2).layout.annotations if a.name == FINISHED]
    for i in (3, 5):
        fig = dv.batch_figure(traces, i)
        notes = [a.text for a in fig.layout.annotations if a.name == FINISHED]
        assert len(notes) == 2 and all("after batch iteration 2" in n for n in notes)
        assert "<b>row 2</b> · finished" in [a.text for a in fig.layout.annotations if a.name == PANEL_TITLE]
        assert not any((t.meta or {}).get("row") == 2 for t in fig.data)


def test_batch_summary_per_batch_iteration(traces):
    summary = dv.batch_summary(traces)
    assert [s["iteration"] for s in summary] == list(range(6))
    for s in summary:
        i = s["iteration"]
        active = _active(traces, i)
        recs = {b: _record(traces, b, i) for b in active}
        n_b = {b: 1 + r.num_nodes for b, r in recs.items()}
        w = max(n_b.values())
        assert s["active"] == active and s["W"] == w and s["n_b"] == n_b
        assert s["ell_b"] == {b: r.accepted_length for b, r in recs.items()}
        assert s["sum_n_b"] == sum(n_b.values())
        assert s["efficiency"] == pytest.approx(sum(n_b.values()) / (len(active) * w))
    assert summary[0]["efficiency"] < 1 and [len(s["active"]) for s in summary] == [3, 3, 3, 2, 2, 2]


def test_tokens_named_by_a_tokenizer_where_the_traces_store_no_text(traces):
    texts = {tok: text for t in traces for r in t for tok, text in zip(r.tree.tokens, r.token_texts)}
    texts.update({tok: text for t in traces for r in t for tok, text in zip(r.committed, r.committed_texts)})

    class Tokenizer:
        def decode(self, ids: list[int]) -> str:
            return "".join(texts[i] for i in ids)

    bare = _copy(traces)
    for t in bare:
        for r in t:
            r.token_texts, r.committed_texts = [], []
    want = dv.batch_figure(traces, 1)
    assert "⟨" in "".join(_row_trace(dv.batch_figure(bare, 1), LABELS, 0).text)  # ids without a tokenizer
    got = dv.batch_figure(bare, 1, tokenizer=Tokenizer())
    for b in _active(traces, 1):
        assert _row_trace(got, LABELS, b).text == _row_trace(want, LABELS, b).text


@pytest.mark.parametrize("iteration", [-1, 6, 1.0, "2", True])
def test_iteration_out_of_range_is_named(traces, iteration):
    with pytest.raises(ValueError, match=r"iteration must be an int in \[0, 5\]"):
        dv.batch_figure(traces, iteration)


def test_traces_from_no_batch_or_mixed_batches_are_named(traces):
    with pytest.raises(ValueError, match="traces must be a non-empty sequence"):
        dv.batch_figure([], 0)
    with pytest.raises(ValueError, match=r"traces\[0\].batch must be"):
        dv.batch_figure([dv.synthetic.synthetic_trace(2)], 0)
    four = dv.synthetic.synthetic_batch_traces(batch_size=4)
    with pytest.raises(ValueError, match="one batch size"):
        dv.batch_figure([traces[0], traces[1], four[2]], 0)
    with pytest.raises(ValueError, match="row 1 appears twice"):
        dv.batch_figure([traces[0], traces[1], traces[1]], 0)
    with pytest.raises(ValueError, match=r"rows \[2\] are missing"):
        dv.batch_summary(traces[:2])
    other = _copy(traces)
    _record(other, 1, 0).batch["padded_width"] += 1  # row 1's W disagrees with rows 0 and 2
    with pytest.raises(ValueError, match="batch iteration 0 disagree"):
        dv.batch_summary(other)
    other = _copy(traces)
    other[2].iterations.append(Trace.from_json(traces[0].to_json())[3])  # row 2 back in a forward it left
    with pytest.raises(ValueError, match="traces"):
        dv.batch_summary(other)
    with pytest.raises(ValueError, match="batch_size must be an int >= 2"):
        dv.synthetic.synthetic_batch_traces(batch_size=1)
    with pytest.raises(ValueError, match="start must be an int in"):
        dv.batch_stepper(traces, start=6)


def test_json_round_trip_keeps_the_batch_fields(traces, tmp_path):
    loaded = []
    for t in traces:
        path = tmp_path / f"row{t.batch['row']}.json"
        t.to_json(path)
        loaded.append(Trace.from_json(path))
    for t, u in zip(traces, loaded):
        assert u.batch == t.batch and u.schema_version == "1.1"
        assert [r.batch for r in u] == [r.batch for r in t] and all(r.batch for r in u)
    assert dv.batch_summary(loaded) == dv.batch_summary(traces)
    # the shuffled rows of a loaded batch draw the same figure
    assert dv.batch_figure(loaded[::-1], 4).to_json() == dv.batch_figure(traces, 4).to_json()


def test_stepper_slider_and_buttons_redraw_the_figure(traces):
    st = dv.batch_stepper(traces)
    assert st.iteration == 0 and st.fig.layout.title.text.startswith("Batch iteration 0:")
    assert list(_bar(st.fig, BAR_ACCEPTED).y) == [0, 1, 2]
    st.slider.value = 4
    assert st.fig.layout.title.text.startswith("Batch iteration 4:")
    assert list(_bar(st.fig, BAR_ACCEPTED).y) == [0, 1]
    assert list(_bar(st.fig, BAR_ACCEPTED).x) == [_record(traces, b, 4).accepted_length for b in (0, 1)]
    assert "batch iteration 4" in st.info.value and f"W = {st.summary[4]['W']}" in st.info.value
    assert st.fig.get_state()["_widget_layout"]["title"]["text"].startswith("Batch iteration 4:")  # synced
    st.next_button.click()
    st.next_button.click()  # clamped at the last batch iteration
    assert st.iteration == 5 and st.play.value == 5
    st.prev_button.click()
    assert st.iteration == 4 and st.fig.layout.title.text.startswith("Batch iteration 4:")
    assert st.info.value in st.static_html()


def test_batch_view_imports_and_draws_with_torch_blocked():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import dynatree_viz as dv\n"
            "ts = dv.synthetic.synthetic_batch_traces()\n"
            "f = dv.batch_figure(ts, 3)\n"
            "st = dv.batch_stepper(ts); st.next_button.click()\n"
            "assert 'torch' not in {m.split('.')[0] for m, v in sys.modules.items() if v is not None}\n"
            "print('ok', st.iteration, len(dv.batch_summary(ts)))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok 1 6"

"""dynatree_viz mask heatmap, timeline, text view and method comparison."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from dynatree_viz import compare_figure, mask_figure
from dynatree_viz.synthetic import synthetic_results, synthetic_trace
from dynatree_viz.views.compare import AR_LINE_NAME, X_TITLES, load_results
from dynatree_viz import text_html, timeline_figure
from dynatree_viz.views.mask import ATTENDS, ATTENDS_ACCEPTED, MASKED, PREFIX
from dynatree_viz.views.timeline import A_BAR_LINE, D0_REAL, D0_USED, TAU_H_LINE
from dynatree_viz.core import style
from dynatree_viz.views.text import BONUS_STYLE, CURRENT_STYLE, alternatives
from dynatree_viz.core.tokens import TokenNamer
from helpers.viz import FakeTokenizer, record, rule, tiny_trace


def test_mask_heatmap_matches_the_attention_mask():
    rec = record()
    fig = mask_figure(rec)
    z = np.array(fig.data[0].z)
    n = len(rec.tree)
    assert z.shape == (n, n + 1)  # prefix summarised into one column
    assert (z[:, 0] == PREFIX).all()
    visible = z[:, 1:] != MASKED
    assert (visible == rec.attention_mask(include_prefix=False)).all()
    assert rec.attention_mask().shape == (n, rec.prefix_len + n)
    acc_rows = {0, *rec.accepted_path}
    for i in range(n):
        on = set(z[i, 1:][visible[i]].tolist())
        assert on == ({ATTENDS_ACCEPTED} if i in acc_rows else {ATTENDS})
    assert f"prefix ({rec.prefix_len})" in fig.layout.xaxis.ticktext
    assert len(fig.layout.shapes) == len(acc_rows)
    assert "'␣cat'" in fig.data[0].hovertext[1][2] and "attends" in fig.data[0].hovertext[1][2]


def test_mask_names_a_whole_word_token_in_full():
    rec = record()
    rec.token_texts = [" the", " photosynthesis", " conversion"] + list(rec.token_texts[3:])
    ticks = [re.sub("</?b>", "", t) for t in mask_figure(rec).layout.yaxis.ticktext]
    assert "1 photosynthe…" in ticks  # 14 letters: still cut at 12, and marked so
    assert "2 conversion" in ticks  # what the stepper cut to "2 convers…"


def test_mask_highlight_row_is_framed():
    rec = record()
    shapes = mask_figure(rec, highlight=5).layout.shapes
    hl = [s for s in shapes if s.name == "highlight"]
    assert len(hl) == 1 and hl[0].y0 == 4.5 and hl[0].y1 == 5.5


def test_timeline_series_come_from_the_trace():
    tr = synthetic_trace(8)
    fig = timeline_figure(tr, current=2)
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["accepted (drafted)"].y) == [r.accepted_length for r in tr]
    assert list(by_name["drafted nodes"].y) == [r.num_nodes for r in tr]
    assert list(by_name["depth"].y) == [r.tree.depth for r in tr]
    assert list(by_name[D0_REAL].y) == [r.history_before["d0"] for r in tr]
    assert list(by_name[D0_USED].y) == [r.history_before["d0_effective"] for r in tr]
    assert by_name[D0_USED].line.shape == "hv"  # a step line: each whole value holds its own iterations only
    assert list(by_name[TAU_H_LINE].y) == [r.history_before["tau_h"] for r in tr]
    assert list(by_name[A_BAR_LINE].y) == [r.history_after["window_mean"] for r in tr]
    assert by_name["drafted nodes"].marker.color != by_name["draft time"].marker.color  # a count, not a time
    assert list(by_name["verify time"].y) == pytest.approx([1000 * r.timings["verify"] for r in tr])
    band = [s for s in fig.layout.shapes if s.name == "current iteration"]
    assert len(band) == 1 and band[0].x0 == 1.5


def test_a_time_part_too_thin_to_see_is_named_in_the_title_not_the_legend():
    # 04's commit time (< 1 ms under 180 ms stacks) was a legend entry with no bar to see
    from helpers.legend import unseen_legend_entries

    tr = synthetic_trace(8)
    for r in tr:
        r.timings["commit"] = 0.0001 if r.index else 0.0004
    fig = timeline_figure(tr)
    names = [t.name for t in fig.data]
    assert "commit time" not in names and "verify time" in names and not unseen_legend_entries(fig)
    titles = [a.text for a in fig.layout.annotations]
    assert any(t.startswith("time per iteration (ms); commit ≤ 0.4 ms, too thin to draw") for t in titles)
    for r in tr:
        r.timings["commit"] = 0.5 * r.timings["verify"]  # thick enough: a bar of its own again
    assert "commit time" in [t.name for t in timeline_figure(tr).data]


def test_timeline_depth_ticks_stay_apart_on_deep_trees():
    from dynatree_viz.views.timeline import MAX_DEPTH_TICKS, depth_dtick

    for depth in (1, 3, 4, 8, 12, 30):
        assert depth // depth_dtick(depth) + 1 <= MAX_DEPTH_TICKS
    assert depth_dtick(3) == 1  # a shallow tree keeps one tick per level
    tr = synthetic_trace(8)
    axis = timeline_figure(tr).layout.yaxis3  # the tree panel's depth axis (secondary)
    assert axis.title.text == "depth" and axis.dtick == depth_dtick(max(r.tree.depth for r in tr))


def test_text_view_colours_tokens_by_iteration_and_kind():
    tr = tiny_trace(2)
    h = text_html(tr)
    assert h.count("data-iter=") == len(tr.tokens) == 8
    assert h.count("data-kind='bonus'") == 2 and h.count("data-kind='drafted'") == 6
    assert h.count("data-iter='1'") == 4
    assert "a cat on the" in h  # the prompt
    assert "iteration 0 · drafted, accepted at depth 1" in h
    up_to_0 = text_html(tr, upto=0, current=0)
    assert up_to_0.count("data-iter=") == 4 and up_to_0.count(" dt-current'") == 4
    doc = text_html(tr, standalone=True)
    assert doc.startswith("<!DOCTYPE html>") and doc.rstrip().endswith("</html>")


def test_text_view_alternatives_are_siblings_and_children_of_last_accepted():
    rec = record()
    namer = TokenNamer.from_trace(rec)
    first = alternatives(rec, 0, namer)  # " cat" was chosen at the root: " dog" was rejected
    assert len(first) == 1 and "'␣dog'" in first[0]
    bonus = alternatives(rec, len(rec.committed) - 1, namer)  # after " on": nothing drafted
    assert bonus == []
    assert "no alternatives were drafted here" in text_html(tiny_trace(1))


def test_compare_bars_and_sweep_lines():
    rows = synthetic_results("methods")
    fig = compare_figure(rows)
    bars = [t for t in fig.data if t.type == "bar"]
    assert {t.legendgroup for t in bars} == {"ar", "linear", "fixed_tree", "dynatree"}
    # the legend says each method in words, not the bench's id
    assert {t.name for t in bars} == {"AR", "linear", "fixed tree", "DynaTree"}
    dyn_speed = next(t for t in bars if t.legendgroup == "dynatree" and "speedup" in t.hovertemplate)
    assert list(dyn_speed.y) == pytest.approx([1.94, 1.94])
    sweep = compare_figure(synthetic_results("sweep"), x="d0", metrics=["speedup"])
    assert all(t.type == "scatter" for t in sweep.data) and len(sweep.data) == 2 + 1  # + the AR baseline
    assert list(sweep.data[0].x) == [2, 3, 4, 5, 6, 7]
    # the AR baseline is named in the legend, not written over the bars; the x axis in words
    assert sweep.data[-1].name == AR_LINE_NAME and not sweep.layout.annotations[1:]
    assert not [a for a in fig.layout.annotations if "AR =" in a.text or "1.0" in a.text]
    assert sweep.layout.xaxis.title.text == X_TITLES["d0"] == "base depth D0"
    assert compare_figure(synthetic_results("sweep"), x="d0", metrics=["tokens_per_s"]).data[-1].name != AR_LINE_NAME


def test_compare_reads_result_files_averages_repeats_and_skips_warmup(tmp_path):
    rows = [{"method": "dynatree", "label": "dt", "dataset": "w", "tokens_per_s": v, "speedup": 1.0}
            for v in (10.0, 14.0)] + [{"method": "dynatree", "label": "dt", "dataset": "w",
                                      "tokens_per_s": 1000.0, "speedup": 9.0, "warmup": True}]
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"rows": rows}))
    df = load_results(path)
    assert len(df) == 2
    fig = compare_figure(str(path), metrics=["tokens_per_s"])
    assert list(fig.data[0].y) == [12.0]
    assert fig.data[0].error_y.visible and fig.data[0].error_y.array[0] == pytest.approx(2 ** 1.5)
    with pytest.raises(ValueError, match="method"):
        load_results([{"tokens_per_s": 1.0}])
    with pytest.raises(ValueError, match="sweep column"):
        compare_figure(rows, x="n_max")


def _legend_sample(h: str, kind: str) -> str:
    m = re.search(rf"<span [^>]*data-legend='{kind}'[^>]*>", h)
    assert m, f"no {kind} sample in the legend"
    return m.group(0)


def test_text_legend_bonus_sample_is_underlined_and_not_an_iteration_colour():
    h = text_html(tiny_trace(2))
    sample = _legend_sample(h, "bonus")
    assert BONUS_STYLE in sample  # the underline is inline: it shows even without the <style>
    bg = re.search(r"background:\s*(#[0-9a-fA-F]{6})", sample).group(1).lower()
    assert bg not in {c.lower() for c in style.ITERATION_COLORS}
    # the bonus tokens themselves carry the same underline inline, the drafted ones do not
    bonus_spans = re.findall(r"<span [^>]*data-kind='bonus'[^>]*>", h)
    drafted_spans = re.findall(r"<span [^>]*data-kind='drafted'[^>]*>", h)
    assert bonus_spans and all(BONUS_STYLE in s for s in bonus_spans)
    assert drafted_spans and not any(BONUS_STYLE in s for s in drafted_spans)


def test_text_view_keeps_its_look_without_the_style_block():
    """An untrusted notebook strips <style>; the inline styles still colour every token."""
    h = re.sub(r"<style>.*?</style>", "", text_html(tiny_trace(2), upto=1, current=1), flags=re.S)
    spans = re.findall(r"<span [^>]*data-iter='(\d+)'([^>]*)>", h)
    assert spans and all(f"background:{style.iteration_color(int(i))}" in rest for i, rest in spans)
    assert all(CURRENT_STYLE in rest for i, rest in spans if i == "1")


def test_text_view_names_pruned_alternatives_with_a_tokenizer():
    # tau = 0.2 prunes all three children of " dog"; the target picks " dog" and then " fast"
    rec = record(growth=rule(tau=0.2), target={(1,): 3, (1, 3): 10})
    assert rec.committed == [3, 10] and {p.token for p in rec.tree.pruned} == {4, 5, 10}
    tr = tiny_trace(1)
    tr.iterations, tr.tokens = [rec], list(rec.committed)
    plain = text_html(tr)
    assert "⟨5⟩" in plain  # " ran" was pruned: the trace has no text for it
    named = text_html(tr, tokenizer=FakeTokenizer())
    assert "⟨" not in named and "&#x27;␣ran&#x27; pruned by τ" in named
    fast = next(p for p in rec.tree.pruned if p.token == 10)
    p_u = math.exp(fast.cum_logp)
    assert p_u < 0.2 <= math.exp(fast.logp)  # τ compares p(u) (pruned), not q (which passes)
    assert (f"&#x27;␣fast&#x27; pruned by τ (p(u)={p_u:.4f}, draft q=0.32) ← the target&#x27;s "
            "choice") in named


def test_mask_colours_tell_accepted_rows_apart_by_lightness():
    from dynatree_viz.views.mask import _CODE_COLORS

    def lum(h):
        r, g, b = (int(h[k:k + 2], 16) for k in (1, 3, 5))
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    assert abs(lum(_CODE_COLORS[ATTENDS]) - lum(_CODE_COLORS[ATTENDS_ACCEPTED])) > 40


def _colour(trace):
    return trace.marker.color if trace.type == "bar" else trace.line.color


def test_method_colours_are_fixed_whatever_else_is_in_the_figure():
    rows = synthetic_results("methods")
    everything = compare_figure(rows)
    only_two = compare_figure([r for r in rows if r["method"] in ("dynatree", "fixed_tree")])
    sweep = compare_figure(synthetic_results("sweep"), x="d0")
    for fig in (everything, only_two, sweep):
        for t in fig.data:
            if t.name != AR_LINE_NAME:
                assert _colour(t) == style.METHOD_COLORS[t.legendgroup], (t.legendgroup, _colour(t))
    for group in style.COLOR_GROUPS:  # labels drawn together never share a colour
        assert len({style.METHOD_COLORS[lab] for lab in group}) == len(group), group
    assert set(style.METHOD_COLORS) == {lab for g in style.COLOR_GROUPS for lab in g}
    # ablation labels and linear variants: the family colour, variants told apart by dash
    ks = [{"method": "linear", "label": f"linear:k={k}", "d0": d, "speedup": 1.0 + d / 10}
          for k in (3, 5) for d in (1, 2)]
    abl = [{"method": "dynatree", "label": lab, "d0": d, "speedup": 1.2}
           for lab in ("dynatree:fixed_backbone", "dynatree:full") for d in (1, 2)]
    fig = compare_figure(ks + abl, x="d0", metrics=["speedup"])
    by = {t.legendgroup: t for t in fig.data}
    assert by["linear:k=3"].name == "linear (k=3)" and by["dynatree:full"].name == "DynaTree (full)"
    assert by["linear:k=3"].line.color == by["linear:k=5"].line.color == style.METHOD_COLORS["linear"]
    assert by["linear:k=3"].line.dash != by["linear:k=5"].line.dash
    assert by["dynatree:full"].line.color == style.METHOD_COLORS["dynatree:full"]
    # groups that are not methods (sweep series) get colours by sorted name, not by row order
    series = [{"method": "dynatree", "series": s, "d0": 1, "speedup": 1.1} for s in ("b", "a")]
    f1 = compare_figure(series, x="d0", color="series")
    f2 = compare_figure(series[::-1], x="d0", color="series")
    assert {t.name: t.line.color for t in f1.data} == {t.name: t.line.color for t in f2.data}


def test_speedup_axes_start_at_zero_and_show_the_ar_baseline():
    rows = [{"method": m, "label": m, "d0": d, "speedup": sp, "tokens_per_s": 20 * sp}
            for m, base in (("fixed_tree", 1.00), ("dynatree", 1.04)) for d, sp in
            ((2, base), (3, base + 0.08))]  # all within 1.00-1.12: a 4% difference
    fig = compare_figure(rows, x="d0")  # panels: throughput (y), speedup (y2)
    lo, hi = fig.layout.yaxis2.range
    assert lo == 0 and 1.12 <= hi < 1.5
    assert fig.layout.yaxis.range[0] == 0 and fig.layout.yaxis.range[1] >= 20 * 1.12
    baseline = [s for s in fig.layout.shapes if s.y0 == 1.0 and s.y1 == 1.0]
    assert len(baseline) == 1
    bars = compare_figure(synthetic_results("methods"))
    assert all(bars.layout[a].range[0] == 0 for a in ("yaxis", "yaxis2", "yaxis3", "yaxis4"))


def test_ar_timeline_has_no_empty_panels_and_no_note_over_the_axes():
    from dynatree_core.policy.config import ARConfig

    fig = timeline_figure(synthetic_trace(5, config=ARConfig()))
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["committed tokens per iteration", "time per iteration (ms)"]
    assert "yaxis3" not in fig.layout.to_plotly_json()  # two panels, two axes
    for t in fig.data:  # every trace sits on a panel that exists and has data
        assert t.yaxis in ("y", "y2") and any(v for v in t.y)
    # the note about what an AR run lacks is part of the title, not an annotation on a panel
    assert "no draft tree, no acceptance, no history adapter" in fig.layout.title.text
    full = timeline_figure(synthetic_trace(4))
    assert len(full.layout.annotations) >= 5 and "left out" not in full.layout.title.text

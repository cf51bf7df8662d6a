"""The paper's table layouts."""

from __future__ import annotations

import pytest

from dynatree_core.bench.results import aggregate
from dynatree_core.bench.tables import COST_COLUMNS, make_tables, render, table4, to_markdown
from helpers.bench import ROWS, row

COSTS = list(COST_COLUMNS.values())


def test_tables_have_the_paper_columns_and_cost_counters():
    t = make_tables(aggregate(ROWS))
    assert 4 not in t  # no ablation rows -> no Table 4
    assert list(t[1].columns) == ["dataset", "method", "n", "throughput_tok_s", "throughput_tok_s_std", "speedup",
                                  "overhead_ms_iter", "syncs_iter", *COSTS]
    assert t[1]["overhead_ms_iter"].isna().all()  # rows from before the metric existed: shown as "-"
    assert list(t[2].columns) == ["dataset", "method", "n", "ttft_ms", "ttft_ms_std", "tpot_ms", "tpot_ms_std",
                                  *COSTS]
    assert list(t[3].columns) == ["dataset", "method", "n", "acceptance", "L_bar", "l_bar", "iterations", *COSTS]
    assert list(t[5].columns) == ["dataset", "method", "n", "peak_memory_mib", "memory_kind", *COSTS]
    assert list(t[1]["method"]) == ["ar", "dynatree", "ar", "dynatree"]  # AR first within each dataset
    assert list(t[1]["dataset"]) == ["wikitext2", "wikitext2", "pg19", "pg19"]  # the paper's order
    assert t[2]["ttft_ms"].iloc[0] == pytest.approx(100.0)


def test_table1_speedup_is_recomputed_per_dataset():
    t1 = make_tables(aggregate(ROWS), [1])[1].set_index(["dataset", "method"])
    assert t1.loc[("wikitext2", "dynatree"), "speedup"] == pytest.approx(2.5)
    assert t1.loc[("pg19", "dynatree"), "speedup"] == pytest.approx(2.0)


def test_table4_reports_delta_against_the_fixed_backbone():
    rows = [row("wikitext2", "ar", i, 10.0) for i in range(2)]
    for lab, tps in (("dynatree:fixed_backbone", 20.0), ("dynatree:breadth_depth", 25.0), ("dynatree:full", 30.0)):
        rows += [row("wikitext2", lab, i, tps, method="dynatree") for i in range(2)]
    t4 = table4(aggregate(rows))
    assert list(t4["variant"]) == ["Fixed backbone", "+ Breadth & Depth", "+ History (full)"]
    assert list(t4["delta_vs_fixed_pct"]) == pytest.approx([0.0, 25.0, 50.0])
    assert list(t4["speedup"]) == pytest.approx([2.0, 2.5, 3.0])


def test_markdown_pairs_mean_and_std():
    md = to_markdown(make_tables(aggregate(ROWS), [1])[1], "T1")
    lines = md.splitlines()
    assert lines[0] == "**T1**"
    assert "throughput_tok_s_std" not in md and "12.00 ± 2.000" in md
    assert "Table 3" in render(aggregate(ROWS), [1, 3])


def test_markdown_headers_are_for_people_and_speedup_has_its_sign():
    md = render(aggregate(ROWS), [1, 3])
    header = [ln for ln in md.splitlines() if ln.startswith("| dataset")]
    assert header and "tok/s" in header[0] and "L̄ (tok/iter)" in header[1] and "ℓ̄" in header[1]
    for raw in ("throughput_tok_s", "L_bar", "l_bar"):
        assert raw not in md
    assert "2.50×" in md


def _timed(label, method, tps, iterations, verify_s, draft_s=0.0, wall=10.0, tree=0.0, tokens_per_it=1.0):
    return {**row("wikitext2", label, 1, tps, method=method), "iterations": iterations, "wall_time_s": wall,
            "prefill_time_s": 0.0, "verify_time_s": verify_s, "draft_time_s": draft_s, "mean_tree_size": tree,
            "tokens_per_iteration": tokens_per_it}


def test_speed_notes_explain_only_methods_slower_than_ar_with_their_costs():
    from dynatree_core.bench.tables import speed_notes

    rows = [_timed("ar", "ar", 20.0, 200, 9.5),
            _timed("dynatree", "dynatree", 18.0, 100, 8.0, draft_s=1.5, wall=11.1, tree=5.0, tokens_per_it=1.8),
            _timed("linear", "linear", 25.0, 80, 7.0, draft_s=1.0, wall=8.0, tree=2.0, tokens_per_it=2.5)]
    notes = speed_notes(aggregate(rows))
    assert len(notes) == 1
    (n,) = notes
    assert n.startswith("wikitext2: dynatree is slower than AR here (0.90x)")
    # iteration 111 ms (draft 15 + verify over 6 tokens 80) against AR's 50 ms step: break-even L̄ 2.22
    assert "111 ms" in n and "verify over 6.0 tokens 80 ms" in n and "2.22" in n and "L̄=1.80" in n


def test_the_compile_note_says_what_compiling_cost_apart_and_nothing_when_nothing_compiled():
    from dynatree_core.bench.tables import compile_note

    assert compile_note({"compile": None}) is None and compile_note({}) is None
    c = {"forwards": 9, "compile_s": 41.25, "graphs": 9, "capture_s": 1.5, "forward_graphs": 9, "regions": 12,
         "region_s": 20.0, "timed_compiles": 0, "recompiled_rows": 1}
    assert compile_note({"compile": c}) == (
        "compile, outside the timed decodes: 9 forwards in 41.2 s, 9 CUDA graphs captured in 1.5 s, 12 region "
        "graphs in 20.0 s; 0 graphs compiled inside timed decodes (1 rows decoded again warm)")

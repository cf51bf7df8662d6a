"""Aggregation (warmup exclusion, mean/std, speedup) and safe result files."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from dynatree_core.bench.results import (SCHEMA_VERSION, ResultError, aggregate, load_result, recompute,
                                         result_path, write_json_atomic)
from helpers.bench import ROWS, row


def by(aggs, dataset, label):
    (a,) = [a for a in aggs if a["dataset"] == dataset and a["label"] == label]
    return a


def test_aggregates_equal_recomputation_from_rows_without_warmup():
    aggs = aggregate(ROWS)
    for a in aggs:
        measured = [r["tokens_per_s"] for r in ROWS if r["dataset"] == a["dataset"] and r["label"] == a["label"]
                    and not r["warmup"]]
        assert a["n"] == 3 and a["n_warmup"] == 1
        assert a["tokens_per_s"] == pytest.approx(statistics.mean(measured))
        assert a["tokens_per_s_std"] == pytest.approx(statistics.stdev(measured))


def test_warmup_rows_do_not_move_the_mean():
    heavy = [dict(r, tokens_per_s=1e9) if r["warmup"] else r for r in ROWS]
    assert by(aggregate(heavy), "wikitext2", "ar")["tokens_per_s"] == pytest.approx(12.0)


def test_speedup_is_tps_over_ar_of_the_same_dataset():
    aggs = aggregate(ROWS)
    assert by(aggs, "wikitext2", "dynatree")["speedup"] == pytest.approx(30.0 / 12.0)
    assert by(aggs, "pg19", "dynatree")["speedup"] == pytest.approx(10.0 / 5.0)
    assert by(aggs, "pg19", "ar")["speedup"] == pytest.approx(1.0)


def test_speedup_is_none_without_an_ar_baseline():
    aggs = aggregate([r for r in ROWS if r["label"] != "ar"])
    assert all(a["speedup"] is None for a in aggs)


def test_recompute_ignores_stale_stored_aggregates():
    result = {"schema_version": SCHEMA_VERSION, "run_id": "r", "rows": ROWS,
              "aggregates": [{"dataset": "wikitext2", "label": "dynatree", "speedup": 99.0}]}
    assert by(recompute(result), "wikitext2", "dynatree")["speedup"] == pytest.approx(2.5)


def test_sweep_parameters_separate_cells():
    rows = [row("wikitext2", "ar", i, 10.0, d=None) for i in range(2)]
    rows += [row("wikitext2", "fixed_tree", i, 10.0 * d, d=d) for d in (2, 3) for i in range(2)]
    aggs = aggregate(rows, param_keys=["d"])
    assert sorted(a["speedup"] for a in aggs if a["label"] == "fixed_tree") == [2.0, 3.0]


def test_write_refuses_to_overwrite_and_leaves_no_partial_file(tmp_path):
    p = tmp_path / "r.json"
    write_json_atomic(p, {"a": 1})
    with pytest.raises(FileExistsError):
        write_json_atomic(p, {"a": 2})
    assert json.loads(p.read_text()) == {"a": 1}
    write_json_atomic(p, {"a": 3}, overwrite=True)
    assert json.loads(p.read_text()) == {"a": 3}
    q = tmp_path / "bad.json"
    with pytest.raises(ValueError):
        write_json_atomic(q, {"x": math.nan})  # fails while serializing
    assert not q.exists() and sorted(x.name for x in tmp_path.iterdir()) == ["r.json"]


def test_result_path_is_unique_in_a_directory_and_refuses_an_existing_file(tmp_path):
    first = result_path(tmp_path, "bench")
    first.write_text("{}")
    second = result_path(tmp_path, "bench")
    assert second != first and not second.exists()
    with pytest.raises(FileExistsError, match="--overwrite"):
        result_path(first, "ignored")
    assert result_path(first, "ignored", overwrite=True) == first


def test_load_result_rejects_other_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"schema_version": 999, "rows": []}))
    with pytest.raises(ResultError, match="schema_version"):
        load_result(p)


def test_merging_one_datasets_runs_of_two_runtimes_keeps_each_dataset_and_prompt_once():
    """The device check runs a runtime and a dataset at a time; the merged file names each once, keeps
    every row and adds the compile sections up."""
    from dynatree_core.bench.results import merge_results

    def doc(runtime: str, run_id: str) -> dict:
        row = dict(ROWS[0], runtime=runtime, run_id=run_id)
        return {"schema_version": SCHEMA_VERSION, "run_id": run_id, "rows": [row], "_wall_s": 1.0,
                "protocol": {"datasets": ["wikitext2"], "max_prompt_len": {"wikitext2": [64]}},
                "data": {"wikitext2": {"origin": "bundled"}}, "prompts": [{"dataset": "wikitext2", "index": 0}],
                "warnings": ["w"], "compile": {"forwards": 2 if runtime == "compiled" else 0, "region_s": 0.5,
                                              "timed_compiles": 0}}

    merged = merge_results([doc("graphs", "a"), doc("compiled", "b")])
    assert merged["protocol"]["datasets"] == ["wikitext2"] and merged["prompts"] == [{"dataset": "wikitext2", "index": 0}]
    assert merged["warnings"] == ["w"] and len(merged["rows"]) == 2 and {r["run_id"] for r in merged["rows"]} == {"a"}
    assert merged["compile"] == {"forwards": 2, "region_s": 1.0, "timed_compiles": 0} and "_wall_s" not in merged

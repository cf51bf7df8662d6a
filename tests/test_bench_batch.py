"""The batch benchmark (``dynatree bench --batch-size``) on the tiny test pair: its JSON, its checks."""

from __future__ import annotations

import json

import pytest

from dynatree_core.bench.batch import (BATCH_SCHEMA_VERSION, BatchPoint, batch_points, measure, run_batch_point,
                                       summarize)
from dynatree_core.bench.methods import method_specs
from dynatree_core.cli import main

from helpers.bench import bench_args


def test_batch_bench_writes_json_with_every_row_checked_against_batched_ar(data_dir, tmp_path, capsys):
    out = tmp_path / "batch.json"
    argv = bench_args(data_dir, out, "--batch-size", "1,3", "--repeats", "1", methods="ar,dynatree")
    argv[argv.index("--num-prompts") + 1] = "3"
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == BATCH_SCHEMA_VERSION and doc["config"]["batch_sizes"] == [1, 3]
    labels = {(r["dataset"], r["batch_size"], r["label"]) for r in doc["rows"]}
    assert doc["config"]["ar_control"] is True  # AR twice per round: its own spread
    assert doc["config"]["batching"] == "fixed"  # each point decodes its B prompts to their end: no refill
    assert labels == {(ds, b, lab) for ds in ("wikitext2", "pg19") for b in (1, 3)
                      for lab in ("ar", "dynatree", "dynatree+budget", "ar#2")} | {
        (ds, 1, "dynatree@loop") for ds in ("wikitext2", "pg19")}  # B = 1 through the batch-1 loop as well
    assert doc["checks"]["every_row_matches_batched_ar"] and all(r["matches_batched_ar"] for r in doc["rows"])
    for r in doc["rows"]:
        assert r["speedup_vs_batched_ar"] > 0 and 0 < r["padding_efficiency"] <= 1
        assert r["decode_tokens_per_s"] > r["tokens_per_s"] and r["prefill_s"] > 0  # the prompts' prefill left out
        assert r["finish_p50_s"] <= r["finish_p90_s"] <= r["wall_s"] + 1e-6
        if r["label"] == "ar":  # AR verifies one token per row: nothing padded, one target token per token
            assert r["padding_efficiency"] == 1 and r["target_tokens_per_committed"] == 1
            assert r["rows_differing_from_batch1_ar"] == []  # tiny fp32 models are batch-invariant here
    # one round: no spread to read a method against
    assert all(c["vs_ar_control"] is None for c in doc["summary"])
    assert "× batched AR" in capsys.readouterr().out


def test_batch_points_put_ar_first_and_pair_each_drafting_method_with_its_budget():
    specs = method_specs(["ar", "linear", "dynatree"])
    pts = batch_points(specs, [2, 4])
    assert [(p.label, p.rows) for p in pts[:2]] == [("ar", 2), ("ar", 4)]
    assert {p.label for p in pts} == {"ar", "linear", "linear+budget", "dynatree", "dynatree+budget"}
    assert [p.label for p in batch_points(specs, [2], "off")] == ["ar", "linear", "dynatree"]
    assert [p.label for p in batch_points(specs, [1], "off")] == ["ar", "linear", "dynatree", "linear@loop",
                                                                   "dynatree@loop"]
    with pytest.raises(ValueError, match="batch sizes >= 1"):
        batch_points(specs, [0])
    with pytest.raises(ValueError, match="--batch-budget"):
        batch_points(specs, [2], "sometimes")
    with pytest.raises(ValueError, match="--batch-budget"):
        batch_points(specs, [2], "on,on")
    # the budget with and without its depth choice, beside each other in one run
    pts = batch_points(specs, [2], "on,widths")
    assert [p.label for p in pts] == ["ar", "linear+budget", "linear+widths", "dynatree+budget", "dynatree+widths"]
    assert [(p.budget, p.depth) for p in pts[3:]] == [(True, True), (True, False)]
    # the budget serving the fixed batch's finish, and counting every token alike, beside each other
    pts = batch_points(specs, [2], "on,rate")
    assert [(p.label, p.objective) for p in pts[3:]] == [("dynatree+budget", "finish"), ("dynatree+rate", "rate")]


def test_a_rate_point_s_budget_counts_every_token_alike(monkeypatch):
    """``--batch-budget rate`` builds its budget with ``objective="rate"``, ``on`` with the finish (the default)."""
    import dynatree_core.engine.batch as engine_batch
    from helpers import cached_pair

    from dynatree_core.policy.batch_budget import BatchCost

    cost = BatchCost((1, 2), tuple(tuple(0.01 * w for w in range(1, 40)) for _ in (1, 2)), (0.001, 0.001))
    monkeypatch.setattr(engine_batch, "batch_cost", lambda *a, **k: cost)
    (spec,) = method_specs(["dynatree"])
    pair = cached_pair("llama", "sdpa", 0.05)
    for mode, objective in (("on", "finish"), ("rate", "rate")):
        (point,) = [p for p in batch_points([spec], [2], mode) if p.budget]
        budgets: dict = {}
        run_batch_point(pair, point, [[5, 9, 2, 33], [1, 2, 3]], 4, budgets)
        assert budgets[point].objective == objective


def test_batch_points_run_on_each_runtime_asked_for_and_refuse_the_others():
    specs = method_specs(["ar", "dynatree"])
    pts = batch_points(specs, [2], "off", ["eager", "static"])
    assert [(p.label, p.runtime) for p in pts] == [("ar", "eager"), ("ar@static", "static"), ("dynatree", "eager"),
                                                   ("dynatree@static", "static")]
    for bad in (["compiled"], ["static", "static"], []):
        with pytest.raises(ValueError, match="--runtime: a batch runs on the runtimes eager, static"):
            batch_points(specs, [2], "off", bad)


def test_the_batch_bench_on_the_static_runtime_compares_each_row_with_ar_on_the_same_runtime(data_dir, tmp_path):
    out = tmp_path / "batch.json"
    argv = bench_args(data_dir, out, "--batch-size", "2", "--repeats", "2", "--batch-budget", "off",
                      "--runtime", "eager,static", "--dataset", "wikitext2", methods="ar,dynatree")
    argv[argv.index("--num-prompts") + 1] = "2"
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["config"]["runtimes"] == ["eager", "static"]
    # the second round runs the points in reverse: no method always runs right after AR
    orders = {rep: [r["label"] for r in sorted(doc["rows"], key=lambda r: r["order"]) if r["repeat"] == rep]
              for rep in (0, 1)}
    # AR's control runs last; the next round turns the order by one place (every point takes every place)
    assert orders[0] == ["ar", "ar@static", "dynatree", "dynatree@static", "ar#2", "ar#2@static"]
    assert orders[1] == orders[0][1:] + orders[0][:1]
    for rep in (0, 1):
        rows = {r["label"]: r for r in doc["rows"] if r["repeat"] == rep}
        for label, r in rows.items():  # each ratio is to AR on the same runtime in the same round
            ar = rows["ar@static" if r["runtime"] == "static" else "ar"]
            assert r["speedup_vs_batched_ar"] == pytest.approx(r["tokens_per_s"] / ar["tokens_per_s"])
    assert doc["checks"]["every_row_matches_batched_ar"]
    cells = {c["label"]: c for c in doc["summary"]}
    for label in ("dynatree", "dynatree@static"):  # two rounds: each read against its own runtime's control
        got = cells[label]["vs_ar_control"]
        assert got["verdict"] in ("faster", "slower", "within") and got["low"] <= got["ratio"] <= got["high"]
    assert cells["ar#2"]["vs_ar_control"] is None and cells["ar"]["vs_ar_control"] is None
    rows = {r["label"]: r for r in doc["rows"] if r["repeat"] == 0}
    # static shapes: the verify is padded to a bucket, so it pads at least as much as the eager run
    assert rows["dynatree@static"]["padding_efficiency"] <= rows["dynatree"]["padding_efficiency"] + 1e-9


def test_ar_runs_again_last_at_every_b_as_the_control_where_asked():
    specs = method_specs(["ar", "dynatree"])
    pts = batch_points(specs, [2, 4], "on", control=True)
    assert [(p.label, p.rows) for p in pts] == [("ar", 2), ("ar", 4), ("dynatree+budget", 2), ("dynatree+budget", 4),
                                                ("ar#2", 2), ("ar#2", 4)]
    assert all(p.spec.method == "ar" and not p.budget for p in pts if p.control)
    assert not any(p.control for p in batch_points(specs, [2], "on"))


def test_over_n_rounds_every_point_runs_once_in_every_place_and_then_the_order_turns_back():
    from dynatree_core.bench.batch import round_order

    pts = batch_points(method_specs(["ar", "dynatree"]), [2], "on", control=True)  # ar, dynatree+budget, ar#2
    n = len(pts)
    for rounds in (range(n), range(n, 2 * n)):
        places = [[round_order(pts, r).index(p) for r in rounds] for p in pts]
        assert all(sorted(pl) == list(range(n)) for pl in places)
    # the second n rounds reverse the first n's turns: who runs right before whom changes too
    before = {(o[i], o[i + 1]) for r in range(n) for o in [round_order(pts, r)] for i in range(n - 1)}
    after = {(o[i], o[i + 1]) for r in range(n, 2 * n) for o in [round_order(pts, r)] for i in range(n - 1)}
    assert before.isdisjoint(after)


def test_the_summary_reads_each_method_against_ar_s_control_on_its_runtime():
    def row(label, ratio, rep, runtime="eager", control=False):
        return {"dataset": "d", "batch_size": 2, "label": label, "method": label.split("#")[0].split("@")[0],
                "runtime": runtime, "control": control, "speedup_vs_batched_ar": ratio, "tokens_per_s": ratio,
                "decode_speedup_vs_batched_ar": ratio, "padding_efficiency": 1.0, "mean_accepted_per_row": 1.0,
                "finish_p90_s": 1.0, "repeat": rep}

    rows = [row("ar", 1.0, i) for i in range(3)] + [row("ar#2", c, i, control=True)
                                                   for i, c in enumerate((0.99, 1.01, 1.0))]
    rows += [row("dynatree", m, i) for i, m in enumerate((0.90, 0.91, 0.89))]
    rows += [row("dynatree@static", m, i, "static") for i, m in enumerate((0.90, 0.91, 0.89))]
    rows.append(row("dynatree", 0.5, 7))  # a round without a control is not read against one
    cells = {c["label"]: c for c in summarize(rows)}
    assert cells["dynatree"]["vs_ar_control"]["rounds"] == 3
    assert cells["dynatree"]["vs_ar_control"]["verdict"] == "slower"
    assert cells["dynatree"]["decode_vs_ar_control"]["verdict"] == "slower"
    assert cells["dynatree@static"]["vs_ar_control"] is None  # no control on the static runtime in this run
    assert cells["ar"]["vs_ar_control"] is None


def test_the_summary_spreads_each_cell_over_its_rounds():
    rows = [{"dataset": "d", "batch_size": 2, "label": "dynatree", "speedup_vs_batched_ar": s, "tokens_per_s": 10 * s,
             "decode_speedup_vs_batched_ar": s + 0.05, "padding_efficiency": 0.5, "mean_accepted_per_row": 2.0,
             "finish_p90_s": 1.0} for s in (0.9, 1.3)]
    (cell,) = summarize(rows)
    assert cell["runs"] == 2 and cell["speedup_min"] == 0.9 and cell["speedup_max"] == 1.3
    assert cell["speedup_vs_batched_ar"] == pytest.approx(1.1)
    assert (cell["decode_speedup_min"], cell["decode_speedup_max"]) == pytest.approx((0.95, 1.35))


def test_bad_batch_sizes_exit_2(data_dir, tmp_path, capsys):
    assert main(bench_args(data_dir, tmp_path / "x.json", "--batch-size", "0,2")) == 2
    assert "batch sizes >= 1" in capsys.readouterr().err


def test_a_points_budget_keeps_what_it_measured_from_one_run_to_the_next():
    from helpers import cached_pair

    from dynatree_core.policy.batch_budget import BatchBudget, BatchCost

    pair = cached_pair("llama", "sdpa", 0.05)
    (spec,) = [s for s in method_specs(["dynatree"])]
    point = BatchPoint(spec, 2, budget=True)
    cost = BatchCost((1, 2), tuple(tuple(0.01 * w for w in range(1, 40)) for _ in (1, 2)), (0.001, 0.001))
    budgets = {point: BatchBudget(cost)}
    prompts = [[5, 9, 2, 33], [1, 2, 3]]
    run_batch_point(pair, point, prompts, 6, budgets)
    first = {k: v[0] for k, v in budgets[point].spent.items()}
    kept = budgets[point]
    run_batch_point(pair, point, prompts, 6, budgets)
    assert budgets[point] is kept
    assert sum(v[0] for v in kept.spent.values()) > sum(first.values())  # the sums went on growing

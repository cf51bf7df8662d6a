"""``--runtime best``: each method is reported on its fastest runtime, and a speedup is given both
against AR on the row's own runtime and against the fastest AR of any runtime (the honest one)."""

from __future__ import annotations

import argparse

import pytest

from dynatree_core.bench.methods import MethodSpec
from dynatree_core.bench.protocol import RunPoint
from dynatree_core.bench.results import aggregate, best_runtime
from dynatree_core.bench.tables import table1
from dynatree_core.cli.resolve import runtime_points

from helpers.bench import row

# AR is faster compiled (15 vs 10 tok/s); DynaTree faster eager (30 vs 24)
TPS = {("ar", "eager"): 10.0, ("ar", "compiled"): 15.0, ("dynatree", "eager"): 30.0, ("dynatree", "compiled"): 24.0}
ROWS = [row("wikitext2", m, i, t, runtime=rt) for (m, rt), t in TPS.items() for i in range(3)]


def by(aggs, label, runtime):
    return next(a for a in aggs if a["label"] == label and a["runtime"] == runtime)


def test_speedup_is_given_against_own_runtime_ar_and_against_the_fastest_ar():
    aggs = aggregate(ROWS)
    eager = by(aggs, "dynatree", "eager")
    assert eager["speedup"] == pytest.approx(3.0) and eager["speedup_best_ar"] == pytest.approx(2.0)
    assert eager["runtime_best_ar"] == "compiled"
    assert by(aggs, "dynatree", "compiled")["speedup_best_ar"] == pytest.approx(1.6)


def test_best_runtime_keeps_each_methods_fastest_row_and_names_its_runtime():
    best = best_runtime(aggregate(ROWS))
    assert {(a["label"], a["runtime"]) for a in best} == {("ar", "compiled"), ("dynatree", "eager")}


def test_table1_shows_both_ratios_when_runtimes_differ():
    df = table1(best_runtime(aggregate(ROWS)))
    got = dict(zip(df["method"], zip(df["runtime"], df["speedup"], df["speedup_best_ar"])))
    assert got["dynatree"] == ("eager", pytest.approx(3.0), pytest.approx(2.0))
    assert "speedup_best_ar" not in table1(aggregate([r for r in ROWS if r["runtime"] == "eager"])).columns


def test_runtime_best_expands_to_eager_and_compiled_on_the_cpu():
    points = runtime_points([RunPoint(MethodSpec("ar", "ar", None), 8)], argparse.Namespace(runtime=["best"]), "cpu")
    assert [p.runtime for p in points] == ["eager", "compiled"]

"""Nothing compiles in a timed decode: the benchmark warms every (method, runtime, path) a row times before
timing it, counts the graphs dynamo compiles inside each timed decode (0 on every row), decodes again warm
a row whose first timed decode still compiled, and reports what compiling cost, the forwards and the
compiled regions apart, in the result file (schema 1.1; files of schema 1 still load)."""

from __future__ import annotations

import json

import pytest

from dynatree_core.bench import execution, protocol
from dynatree_core.bench.data import Prompt
from dynatree_core.bench.methods import MethodSpec, method_specs
from dynatree_core.policy.config import Eagle2Config
from dynatree_core.bench.protocol import RunPoint
from dynatree_core.bench.results import ResultError, load_result
from dynatree_core.bench.execution import SerialBackend, ShardTask
from dynatree_core.bench.pairs import pair_info
from dynatree_core.bench.runner import Experiment, load_corpora, prepare, run_points, run_prepared
from dynatree_core.bench.shards import plan_shards
from dynatree_core.pairs.tiny import tiny_pair


def _prompts(n: int) -> list[Prompt]:
    return [Prompt("wikitext2", i, "x", 0, "t", 0, 10 + i, 10 + i, 10 + i, [5 + i, 9, 14, 3, 22, 7, 31, 12, 5, 9][:10]
                   + [3] * i, "") for i in range(n)]


def _run(pair, specs, runtime: str, n: int = 2) -> list[dict]:
    points = [RunPoint(s, 10, runtime=runtime, oracle=False) for s in specs]
    return run_points(pair, points, ["wikitext2"], lambda ds, l: _prompts(n), {"wikitext2": 16}, 1, progress=False)


@pytest.fixture
def eager_backend(monkeypatch):
    """``compiled`` through dynamo's eager backend: the same graphs and guards, no code generation."""
    monkeypatch.setenv("DYNATREE_COMPILE_BACKEND", "eager")


#: hidden sizes no other test's models have: dynamo's graphs serve every model of one shape (its guards do not
#: name the parameters), so a test that must see its warm-ups compile needs shapes no earlier test in the
#: process compiled (the suite runs its files in any order, over several processes)
OWN_SHAPES = {"bench": 40, "result": 56}


def test_a_compiled_bench_compiles_nothing_inside_its_timed_decodes(eager_backend):
    pair = tiny_pair("llama", noise=0.05, hidden=OWN_SHAPES["bench"])
    specs = method_specs(["ar", "linear"], k=3) + method_specs(["dynatree"], preset="gpu")
    worker = SerialBackend(pair).worker
    rows, compiled = [], 0
    points = [RunPoint(s, 10, runtime="compiled", oracle=False) for s in specs]
    shards = plan_shards(points, ["wikitext2"], {"wikitext2": 16}, {("wikitext2", 16): 2}, 1)
    for shard in shards:
        res = worker.run(ShardTask(shard, [points[j] for j in shard.points], [_prompts(2)[i] for i in shard.prompts],
                                   16))
        rows += res.rows
        compiled += res.compile["forward_graphs"] + res.compile["regions"]
    assert compiled > 0  # the warm-ups compiled (the counter sees compiles), the timed decodes did not:
    assert {r["runtime"] for r in rows} == {"compiled"} and len(rows) == 2 * len(specs)
    assert all(r["compiles"] == 0 for r in rows), [(r["label"], r["compiles"]) for r in rows]
    assert len({r["output_sha1"] for r in rows if r["prompt_index"] == 0}) == 1  # exact: every method is AR
    keys = {k for k in worker._warm}
    assert {(s.label, "compiled") for s in specs} <= {k[:2] for k in keys} and all(k[2] for k in keys)


def test_a_timed_decode_that_compiled_is_decoded_again_warm(eager_backend, monkeypatch):
    """With every point under one warm-up key, the second method is never warmed: its first timed decode
    compiles its regions (an EAGLE-2 shape of its own: no other test compiles it), the worker decodes it
    again and keeps the warm one, and says so."""
    monkeypatch.setattr(execution, "warm_key", lambda point, run: ("one", "key", 0))
    pair = tiny_pair("llama", noise=0.05, seed=3)
    unwarmed = MethodSpec("eagle2:own", "eagle2", Eagle2Config(k=2, depth=3, n_total=7))
    rows = _run(pair, method_specs(["ar"]) + [unwarmed], "compiled", n=2)
    again = [r for r in rows if r.get("recompiled")]
    assert again and {r["label"] for r in again} == {"eagle2:own"} and again[0]["prompt_index"] == 0
    assert all(r["compiles"] == 0 for r in rows)


def test_the_result_reports_compiling_apart_and_reads_schema_1_files(eager_backend, tmp_path):
    pair = tiny_pair("llama", noise=0.05, seed=5, hidden=OWN_SHAPES["result"])
    points = [RunPoint(s, 8, runtime=rt, oracle=False) for rt in ("static", "compiled")
              for s in method_specs(["ar", "linear"], k=2)]
    exp = Experiment(kind="bench", points=points, datasets=["wikitext2"], num_prompts=2, warmup=1,
                     max_prompt_len={"wikitext2": 16}, data_source="bundled")
    doc = run_prepared(prepare(pair_info(pair), exp, load_corpora(exp)), SerialBackend(pair), progress=False)
    c = doc["compile"]
    assert doc["schema_version"] == "1.1"
    assert c["timed_compiles"] == 0 and c["recompiled_rows"] == 0
    assert c["forwards"] > 0 and c["forward_graphs"] >= c["forwards"]  # the compiled path's forwards, each timed
    assert c["forward_graphs"] > 0 and c["forward_dynamo_s"] > 0  # charged to the forwards, not the regions
    assert all("draft_host_s" in r and r["phase_clock"] == "host" for r in doc["rows"])
    old = dict(doc, schema_version=1)
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert load_result(tmp_path / "old.json")["schema_version"] == 1
    (tmp_path / "new.json").write_text(json.dumps(dict(doc, schema_version="2.0")))
    with pytest.raises(ResultError, match="schema_version 1.x"):
        load_result(tmp_path / "new.json")


def test_the_warm_key_names_the_method_the_runtime_and_the_path():
    pair = tiny_pair("llama", noise=0.05, seed=7)
    (spec,) = method_specs(["linear"], k=2)
    p = _prompts(1)[0]
    eager = protocol.start_prompt(pair, RunPoint(spec, 4, runtime="eager"), p, None, False)
    static = protocol.start_prompt(pair, RunPoint(spec, 4, runtime="static"), p, None, False)
    assert protocol.warm_key(RunPoint(spec, 4, runtime="eager"), eager) == ("linear", "eager", None)
    key = protocol.warm_key(RunPoint(spec, 4, runtime="static"), static)
    assert key[:2] == ("linear", "static") and key[2] == static.target.capacity > 0

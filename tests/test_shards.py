"""The protocol as shards: planning, the serial order, checkpoints, --resume, partial results and
same-worker speedups (in this process; tests/test_ray.py runs the shards on Ray workers)."""

from __future__ import annotations

import json

import pytest

from helpers.bench import make_data_dir, spy_on_history
from dynatree_core.bench.checkpoint import Checkpoint, CheckpointError, checkpoint_path
from dynatree_core.bench.execution import SerialBackend, ShardResult
from dynatree_core.bench.methods import method_specs, parse_methods
from dynatree_core.bench.pairs import pair_info
from dynatree_core.bench.protocol import RunPoint
from dynatree_core.bench.results import aggregate
from dynatree_core.bench.runner import Experiment, document, load_corpora, prepare, run_prepared
from dynatree_core.bench.shards import merge_rows, plan_shards
from dynatree_core.bench.sweeps import length_points
from dynatree_core.pairs.tiny import tiny_pair
from helpers.bench import deterministic


def specs():
    return method_specs(parse_methods("ar,linear,dynatree"), preset="cpu", k=3)


def test_plan_groups_points_by_T_and_L_and_only_dynatree_waits_for_warmup():
    lin = [s for s in specs() if s.method != "dynatree"]
    points, _ = length_points(specs(), [4, 6])
    points += [RunPoint(s, 5) for s in lin]  # a group without DynaTree: its prompts need nothing
    shards = plan_shards(points, ["wikitext2", "pg19"], {"wikitext2": 16, "pg19": 16},
                         {("wikitext2", 16): 4, ("pg19", 16): 4}, warmup=1)
    assert len(shards) == 2 * 3 * 4  # datasets x groups x (warmup + 3 measured prompts)
    assert [s.id for s in shards[:4]] == ["wikitext2/T=4,L=16/warmup", "wikitext2/T=6,L=16/warmup",
                                          "wikitext2/T=5,L=16/warmup", "wikitext2/T=4,L=16/p1"]
    by_id = {s.id: s for s in shards}
    assert by_id["wikitext2/T=6,L=16/p3"].needs == "wikitext2/T=6,L=16/warmup"
    assert by_id["wikitext2/T=5,L=16/p3"].needs is None
    assert by_id["pg19/T=4,L=16/warmup"].prompts == (0,) and by_id["pg19/T=4,L=16/p2"].prompts == (2,)
    assert plan_shards(points, ["wikitext2"], {"wikitext2": 16}, {("wikitext2", 16): 3}, warmup=0)[0].needs is None
    with pytest.raises(ValueError, match="warmup"):
        plan_shards(points, ["wikitext2"], {"wikitext2": 16}, {("wikitext2", 16): 2}, warmup=2)


def test_merge_puts_rows_in_serial_order_whatever_order_shards_finished():
    points = [RunPoint(s, 4) for s in specs()]
    shards = plan_shards(points, ["wikitext2"], {"wikitext2": 16}, {("wikitext2", 16): 3}, warmup=1)
    rows = {s.id: [{"dataset": "wikitext2", "p": i, "j": j} for i in s.prompts for j in s.points] for s in shards}
    merged = merge_rows(list(reversed(shards)), dict(reversed(list(rows.items()))), ["wikitext2"])
    assert [(r["p"], r["j"]) for r in merged] == [(i, j) for i in range(3) for j in range(3)]
    with pytest.raises(ValueError, match="expected 3"):
        merge_rows(shards, {**rows, shards[1].id: rows[shards[1].id][:2]}, ["wikitext2"])


def test_speedup_compares_each_worker_with_ar_on_that_worker():
    def row(label, worker, tps):
        return {"run_id": "r", "dataset": "d", "max_new_tokens": 4, "max_prompt_len": 8, "label": label,
                "method": label, "tokens_per_s": tps, "worker": worker}

    # worker a is twice as fast as worker b for every method, and ran more of x's prompts: pooled
    # means would mix the devices (x 125 tok/s vs AR 66.7: 1.875x) where each device says 1.5x
    rows = [row("ar", "a", 100), row("x", "a", 150), row("x", "a", 150),
            row("ar", "b", 50), row("ar", "b", 50), row("x", "b", 75)]
    x = next(a for a in aggregate(rows) if a["label"] == "x")
    assert x["speedup_by_worker"] == {"a": pytest.approx(1.5), "b": pytest.approx(1.5)}
    assert x["speedup"] == pytest.approx(1.5) and x["tokens_per_s"] / x["tps_ar"] == pytest.approx(1.875)
    rows.append(row("x", "c", 10))  # a worker without AR gives no ratio
    x = next(a for a in aggregate(rows) if a["label"] == "x")
    assert set(x["speedup_by_worker"]) == {"a", "b"}
    old = [{k: v for k, v in r.items() if k != "worker"} for r in rows[:2]]  # files from before workers
    x = next(a for a in aggregate(old) if a["label"] == "x")
    assert x["speedup"] == pytest.approx(1.5) and x["speedup_by_worker"] is None


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    pair = tiny_pair("llama", noise=0.02)
    data = make_data_dir(tmp_path_factory.mktemp("data"))
    exp = Experiment(kind="bench", points=[RunPoint(s, 6) for s in specs()], datasets=["wikitext2", "pg19"],
                     num_prompts=3, warmup=1, max_prompt_len={"wikitext2": 24, "pg19": 24}, data_dir=str(data))
    prep = prepare(pair_info(pair), exp, load_corpora(exp))
    full = run_prepared(prep, SerialBackend(pair), progress=False)
    return pair, prep, full


def test_measured_prompts_start_from_the_warmup_state(setup, monkeypatch):
    pair, prep, _ = setup
    seen = spy_on_history(monkeypatch)
    run_prepared(prep, SerialBackend(pair), progress=False)
    # per dataset: the warm-up decode (untimed), warmup prompt 0, prompts 1 and 2 -- DynaTree only
    dt = [s for s in seen if s[1] is not None]
    wiki = dt[:4]
    assert wiki[0][0] is None and wiki[1][0] is None  # the worker's warm-up decode, then the warmup prompt
    end_of_warmup = wiki[1][1].to_dict()
    assert wiki[2][0].to_dict() == end_of_warmup and wiki[3][0].to_dict() == end_of_warmup
    assert wiki[2][0] is not wiki[3][0]  # each measured prompt gets its own copy


def test_the_serial_run_records_who_ran_each_row(setup):
    _, prep, full = setup
    assert {r["worker"] for r in full["rows"]} == {"local"} and all(r["host"] and r["device"] for r in full["rows"])
    ex = full["execution"]
    assert ex["backend"] == "serial" and ex["shards"] == ex["shards_done"] == len(prep.shards) == 6
    assert ex["resumed_shards"] == [] and ex["retries"] == []
    assert [(r["dataset"], r["prompt_index"], r["label"]) for r in full["rows"]] == \
        [(ds, i, lab) for ds in ("wikitext2", "pg19") for i in range(3) for lab in ("ar", "linear", "dynatree")]


def test_resume_after_an_interrupt_runs_only_the_missing_shards(setup, tmp_path):
    pair, prep, full = setup
    path = checkpoint_path(tmp_path, "bench", prep.fingerprint)
    ck = Checkpoint.open(path, prep.header(), resume=False)
    ran: list[str] = []

    def stop_after_three(res: ShardResult) -> None:
        ran.append(res.shard)
        if len(ran) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_prepared(prep, SerialBackend(pair), checkpoint=ck, progress=False, on_result=stop_after_three)
    partial = document(prep, ck)
    assert partial["partial"] and len(partial["missing_shards"]) == 3 and len(partial["rows"]) == 9
    json.dumps(partial, allow_nan=False)  # readable as it is
    with pytest.raises(CheckpointError, match="--resume"):
        Checkpoint.open(path, prep.header(), resume=False)  # never clobber finished work

    # a driver killed mid-write leaves a torn last line: it is ignored
    with open(path, "a") as f:
        f.write('{"shard": "pg19/T=6,L=24/p1", "ro')
    again = Checkpoint.open(path, prep.header(), resume=True)
    assert set(again.done) == set(ran) and again.header["run_id"] == ck.header["run_id"]
    resumed: list[str] = []
    doc = run_prepared(prep, SerialBackend(pair), checkpoint=again, progress=False, on_result=lambda r: resumed.append(r.shard))
    assert not set(resumed) & set(ran) and len(resumed) == 3
    assert sorted(doc["execution"]["resumed_shards"]) == sorted(ran)
    assert "partial" not in doc and doc["run_id"] == ck.header["run_id"]
    assert deterministic(doc["rows"]) == deterministic(full["rows"])


def test_resume_refuses_another_experiments_checkpoint(setup, tmp_path):
    _, prep, _ = setup
    path = checkpoint_path(tmp_path, "bench", prep.fingerprint)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        Checkpoint.open(path, prep.header(), resume=True)
    Checkpoint.open(path, {**prep.header(), "fingerprint": "another"}, resume=False)
    with pytest.raises(CheckpointError, match="another experiment"):
        Checkpoint.open(path, prep.header(), resume=True)


def test_cli_interrupt_leaves_a_readable_partial_result_and_resume_finishes(tmp_path, capsys, monkeypatch):
    from dynatree_core.bench import execution
    from dynatree_core.cli import main

    data = make_data_dir(tmp_path / "data")
    out = tmp_path / "res"
    args = ["bench", "--target", "tiny-llama", "--data-dir", str(data), "--out", str(out), "--num-prompts", "3",
            "--warmup", "1", "--max-new-tokens", "4", "--max-prompt-len", "16", "--methods", "ar,dynatree",
            "--dataset", "wikitext2", "--no-progress"]
    real_run, calls = execution.ShardWorker.run, []

    def interrupted_second_shard(self, task):
        calls.append(task.shard.id)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_run(self, task)

    monkeypatch.setattr(execution.ShardWorker, "run", interrupted_second_shard)
    assert main(args) == 130
    assert "--resume" in capsys.readouterr().err
    (partial,) = out.glob("*.partial.json")
    (ck,) = out.glob("*.checkpoint.jsonl")
    assert calls == ["wikitext2/T=4,L=16/warmup", "wikitext2/T=4,L=16/p1"]
    assert json.loads(partial.read_text())["missing_shards"] == ["wikitext2/T=4,L=16/p1", "wikitext2/T=4,L=16/p2"]
    assert main(["table", str(partial)]) == 0  # partial results render like any result, and say so
    assert "partial result (2 of 3 shards missing)" in capsys.readouterr().err
    assert main(args) == 2 and "--resume" in capsys.readouterr().err  # finished work is never overwritten
    monkeypatch.setattr(execution.ShardWorker, "run", real_run)
    assert main(args + ["--resume"]) == 0
    (final,) = (f for f in out.glob("*.json") if not f.name.endswith(".partial.json"))
    doc = json.loads(final.read_text())
    assert doc["execution"]["resumed_shards"] == calls[:1] and len(doc["rows"]) == 6 and not ck.exists()
    assert doc["run_id"] == json.loads(partial.read_text())["run_id"]

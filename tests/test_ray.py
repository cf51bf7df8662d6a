"""The benchmark on a local Ray instance with two workers (tiny pair): the merged result equals the
serial run's, a killed worker's shard is retried, --resume repeats nothing, and bad clusters,
addresses or installs give clear errors."""

from __future__ import annotations

import json
import math
import sys

import pytest
import ray

from helpers.bench import make_data_dir
from dynatree_core.bench.checkpoint import Checkpoint, checkpoint_path
from dynatree_core.bench.execution import SerialBackend, ShardResult
from dynatree_core.bench.methods import method_specs, parse_methods
from dynatree_core.bench.pairs import PairSpec, pair_info
from dynatree_core.bench.protocol import RunPoint
from dynatree_core.bench.ray_backend import RayBackend, RayUnavailable, check_address
from dynatree_core.bench.results import AGG_METRICS
from dynatree_core.bench.runner import Experiment, load_corpora, prepare, run_prepared
from dynatree_core.cli import main
from helpers.bench import TIMING, deterministic, is_timing

SPEC = PairSpec(target="tiny-llama", draft_noise=0.02)
#: aggregate metrics that do not measure time
COUNTS = [m for m in AGG_METRICS if not m.endswith(("_s", "_ms", "_bytes"))]


@pytest.fixture(scope="module")
def ray_session():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def exp(tmp_path_factory):
    data = make_data_dir(tmp_path_factory.mktemp("data"))
    specs = method_specs(parse_methods("ar,linear,dynatree"), preset="cpu", k=3)
    return Experiment(kind="bench", points=[RunPoint(s, 6) for s in specs], datasets=["wikitext2", "pg19"],
                      num_prompts=3, warmup=1, max_prompt_len={"wikitext2": 24, "pg19": 24}, data_dir=str(data))


@pytest.fixture(scope="module")
def serial(exp):
    import torch

    # the workers compute with one thread (--cpus-per-task 1); so does the serial reference, since
    # another thread count sums in another order and moves confidences in the last bits
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pair = SPEC.load()
        prep = prepare(pair_info(pair), exp, load_corpora(exp))
        return prep, run_prepared(prep, SerialBackend(pair), progress=False)
    finally:
        torch.set_num_threads(threads)


def same(a, b) -> bool:
    """Equal, floats up to 1e-6 relative: another process may sum in another order (the CPU
    kernels pick code paths by memory alignment), which moves a confidence in its last bits;
    tokens, hashes and counts must match exactly."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-6)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def same_rows(rows, reference) -> bool:
    """The rows of two runs agree, timings (and who ran them) aside."""
    a, b = deterministic(rows), deterministic(reference)
    assert [r["output_sha1"] for r in a] == [r["output_sha1"] for r in b]  # the very same tokens
    return same(a, b)


def ray_run(exp, checkpoint=None, on_result=None, **kwargs):
    backend = RayBackend(SPEC, workers=2, **kwargs)
    try:
        prep = prepare(backend.pair_info(), exp, load_corpora(exp))
        backend.scale(len(prep.shards))
        ck = checkpoint(prep) if checkpoint is not None else None
        return prep, run_prepared(prep, backend, checkpoint=ck, progress=False, on_result=on_result,
                                  execution=backend.describe())
    finally:
        backend.close()


def test_two_workers_give_the_serial_runs_result(ray_session, exp, serial):
    sprep, sdoc = serial
    prep, doc = ray_run(exp)
    assert prep.fingerprint == sprep.fingerprint  # the same experiment, whoever runs it
    assert same_rows(doc["rows"], sdoc["rows"])
    assert len({r["worker"] for r in doc["rows"]}) == 2
    assert doc["checks"]["outputs_identical_across_methods"]
    for a, b in zip(doc["aggregates"], sdoc["aggregates"]):
        assert same({k: a[k] for k in COUNTS}, {k: b[k] for k in COUNTS})
        assert same(a["oracle_gap"], b["oracle_gap"])
    assert set(doc) == set(sdoc)  # one schema
    ex = doc["execution"]
    assert ex["backend"] == "ray" and ex["address"] == "local" and len(ex["workers"]) == 2 and not ex["retries"]
    for a in doc["aggregates"]:  # every speedup is AR vs the method on one worker
        workers_of = {r["worker"] for r in doc["rows"]
                      if (r["dataset"], r["label"]) == (a["dataset"], a["label"]) and not r["warmup"]}
        assert a["speedup"] is not None and set(a["speedup_by_worker"]) == workers_of


def test_a_killed_worker_loses_no_row(ray_session, exp, serial, tmp_path):
    victim = "pg19/T=6,L=24/p2"
    prep, doc = ray_run(exp, crash_once=(victim, str(tmp_path / "crashed")))
    assert (tmp_path / "crashed").exists()  # the worker really died running it
    assert [r["shard"] for r in doc["execution"]["retries"]] == [victim]
    assert "ActorDiedError" in doc["execution"]["retries"][0]["error"]
    assert same_rows(doc["rows"], serial[1]["rows"])
    assert len(doc["execution"]["workers"]) == 3  # the dead one and its replacement are both listed


def test_resume_after_an_interrupt_repeats_no_finished_shard(ray_session, exp, serial, tmp_path):
    first: list[str] = []

    def interrupt_after_two(res: ShardResult) -> None:
        first.append(res.shard)
        if len(first) == 2:
            raise KeyboardInterrupt

    def new(prep):
        return Checkpoint.open(checkpoint_path(tmp_path, "bench", prep.fingerprint), prep.header(), resume=False)

    def resume(prep):
        return Checkpoint.open(checkpoint_path(tmp_path, "bench", prep.fingerprint), prep.header(), resume=True)

    with pytest.raises(KeyboardInterrupt):
        ray_run(exp, checkpoint=new, on_result=interrupt_after_two)
    second: list[str] = []
    _, doc = ray_run(exp, checkpoint=resume, on_result=lambda r: second.append(r.shard))
    assert len(first) == 2 and not set(first) & set(second) and len(first) + len(second) == 6
    assert sorted(doc["execution"]["resumed_shards"]) == sorted(first)
    assert same_rows(doc["rows"], serial[1]["rows"])


def bench_args(data_dir, out, *extra):
    return ["bench", "--target", "tiny-llama", "--data-dir", str(data_dir), "--out", str(out), "--num-prompts", "3",
            "--warmup", "1", "--max-new-tokens", "4", "--max-prompt-len", "16", "--methods", "ar,dynatree",
            "--dataset", "wikitext2", "--no-progress", *extra]


def test_cli_ray_run_writes_the_result_and_removes_its_checkpoint(ray_session, tmp_path, capsys):
    data = make_data_dir(tmp_path / "data")
    out = tmp_path / "res"
    assert main(bench_args(data, out, "--ray", "--ray-workers", "2")) == 0
    (f,) = out.glob("*.json")
    d = json.loads(f.read_text())
    assert d["execution"]["backend"] == "ray" and d["execution"]["workers_requested"] == 2
    assert not list(out.glob("*.checkpoint.jsonl"))
    assert "against AR measured on the same worker" in capsys.readouterr().out  # the table says so


@pytest.mark.parametrize("address, message", [("127.0.0.1:1", "cannot reach a Ray cluster"),
                                              ("no-port-here", "expected HOST:PORT"),
                                              ("ray://host:port", "expected HOST:PORT")])
def test_bad_addresses_fail_fast_and_name_the_option(address, message):
    with pytest.raises(RayUnavailable, match=message) as e:
        check_address(address)
    assert "--ray" in str(e.value)


def test_cli_errors_for_address_gpus_and_missing_ray(ray_session, tmp_path, capsys, monkeypatch):
    data = make_data_dir(tmp_path / "data")
    assert main(bench_args(data, tmp_path / "a", "--ray", "127.0.0.1:1")) == 2
    assert "cannot reach a Ray cluster" in capsys.readouterr().err
    assert main(bench_args(data, tmp_path / "b", "--ray", "--gpus-per-task", "1")) == 2
    assert "--gpus-per-task 1: the Ray cluster at local has 0 GPU(s)" in capsys.readouterr().err
    assert main(bench_args(data, tmp_path / "c", "--gpus-per-task", "1")) == 2
    assert "--gpus-per-task needs --ray" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    assert main(bench_args(data, tmp_path / "d", "--ray")) == 2
    assert "pip install 'dynatree[ray]'" in capsys.readouterr().err
    assert not [f for d in "abcd" for f in (tmp_path / d).glob("*.json")]  # nothing half-written


def test_timing_fields_are_the_only_ones_left_out():
    kept = {"output_sha1", "iterations", "mean_accepted_length", "oracle", "compiles", "host_syncs",
            "tokens_per_iteration", "stopped_by", "phase_clock"}
    assert not kept & TIMING and not any(is_timing(k) for k in kept)
    assert is_timing("draft_host_s") and is_timing("some_new_clock_ms")


def test_cli_sweep_runs_on_ray_too(ray_session, tmp_path):
    data = make_data_dir(tmp_path / "data")
    out = tmp_path / "sweep.json"
    assert main(["sweep", "length", "--lengths", "3,5", "--target", "tiny-llama", "--data-dir", str(data),
                 "--out", str(out), "--num-prompts", "2", "--warmup", "0", "--max-prompt-len", "16",
                 "--methods", "ar,linear", "--dataset", "wikitext2", "--no-progress", "--ray"]) == 0
    d = json.loads(out.read_text())
    assert d["execution"]["backend"] == "ray" and d["execution"]["shards"] == 4  # 2 T values x 2 prompts
    assert sorted({(r["max_new_tokens"], r["prompt_index"]) for r in d["rows"]}) == [(3, 0), (3, 1), (5, 0), (5, 1)]

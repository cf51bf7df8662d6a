"""scripts/gpu_check.py on the CPU with the tiny pair and the smallest sizes: every section is in
the JSON, failures are recorded without stopping the script, only exactness sets the exit code; the
script is a thin entry point over dynatree_core.bench.device_check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers.exactness import EDGE_CONFIGS
from helpers.scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_check.py"
TINY = ["--device", "cpu", "--quick", "--target", "tiny-llama", "--no-progress",
        "--tests", "tests/test_exactness.py", "--pytest-k", "edge_configs and llama and sdpa",
        "--precision-tokens", "8", "--precision-prompt-len", "16", "--bench-tokens", "8",
        "--bench-prompt-len", "16", "--linear-k", "2", "--audit-tokens", "4"]


def _module():
    return load_script("gpu_check")


def _run(out: Path, *extra: str) -> tuple[int, dict, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    p = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *TINY, *extra], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    doc = json.loads((out / "gpu_check.json").read_text())
    assert (out / "gpu_check.txt").read_text().strip() == "\n".join(doc["summary"]).strip()
    return p.returncode, doc, p.stdout + p.stderr


def test_tiny_cpu_run_has_every_section(tmp_path):
    rc, doc, log = _run(tmp_path)
    assert rc == 0, log
    assert doc["schema_version"] == 1 and doc["kind"] == "gpu_check" and doc["status"] == "complete"
    assert doc["config"]["device"] == "cpu" and doc["config"]["target"] == "tiny-llama"
    s = doc["sections"]
    assert set(s) == {"environment", "exactness", "precision", "bench", "exact", "fastpath"}
    assert all(x["status"] == "ok" and x["wall_s"] >= 0 for x in s.values()), {k: x["status"] for k, x in s.items()}
    env = s["environment"]["info"]
    assert env["torch"] and env["transformers"] and env["date_utc"] and "cuda_capability" in env
    ex = s["exactness"]
    assert ex["passed"] == len(EDGE_CONFIGS) and ex["failed"] == 0 and ex["test_device"] == "cpu"
    agg = s["precision"]["aggregate"]
    assert set(agg) >= {"float32", "float16", "bfloat16", "fp32_margins"}
    assert agg["float32"]["dynatree_equals_ar"] == agg["float32"]["prompts"] == 1  # fp32: exact
    assert "fraction_differs" in agg["float16"] and "fp32_margin_at_diff" in agg["bfloat16"]
    b = s["bench"]
    assert b["outputs_identical_across_methods"] is True
    labels = {r["label"] for r in b["table"]}
    assert labels == {"ar", "linear", "fixed_tree", "dynatree:preset=paper", "dynatree:preset=cpu", "dynatree:preset=gpu",
                      "dynatree:cost", "eagle2", "sequoia"}  # the tree policies ride along (--policies)
    assert {r["dataset"] for r in b["table"]} == {"wikitext2", "pg19"}
    assert {r["runtime"] for r in b["table"]} == {"eager", "static"}  # --quick: the CPU's runtimes side by side
    for r in b["table"]:
        for key in ("tokens_per_s", "speedup", "L_bar", "engine_overhead_ms", "host_syncs_per_iteration",
                    "host_sync_excess", "peak_memory_bytes"):
            assert key in r
    assert b["sync_audit"]["status"] == "skipped"  # CUDA only
    fast = s["fastpath"]
    assert fast["weights_bytes"] > 0 and fast["bandwidth_bytes_s"] is None  # measured on CUDA only
    curve = fast["runtimes"]["static"]
    assert curve["buckets"][0] == 1 and set(map(int, curve["verify_s"])) == set(curve["buckets"])
    assert all(v > 0 for v in curve["verify_s"].values()) and curve["capture_s"] >= 0
    assert set(fast["ar_tok_s"]) == {"wikitext2/eager", "wikitext2/static", "pg19/eager", "pg19/static"}
    bench = json.loads((tmp_path / "bench.json").read_text())
    assert bench["schema_version"] == "1.1" and bench["protocol"]["datasets"] == ["wikitext2", "pg19"]
    assert s["exact"]["outputs_identical_across_methods"] is True and s["exact"]["dtype"] == "float32"
    assert json.loads((tmp_path / "exact.json").read_text())["rows"]
    assert len({r["run_id"] for r in bench["rows"]}) == 1
    assert doc["verdict"] == {"exactness_ok": True, "exit_code": 0, "problems": [], "notes": doc["verdict"]["notes"]}


def test_failures_are_recorded_and_only_exactness_fails_the_run(tmp_path):
    bad = tmp_path / "test_always_fails.py"
    bad.write_text("def test_fails():\n    assert False\n")
    rc, doc, log = _run(tmp_path / "out", "--tests", str(bad), "--pytest-k", "fails",
                        "--dtypes", "float32,float8", "--datasets", "nosuchdata")
    assert rc == 1, log
    s = doc["sections"]
    assert s["exactness"]["status"] == "failed" and s["exactness"]["failed"] == 1
    assert "float8" in s["precision"]["load_errors"] and s["precision"]["status"] == "ok"
    assert s["bench"]["status"] == "error" and s["bench"]["error"]["type"] and s["bench"]["error"]["where"]
    assert doc["verdict"]["exactness_ok"] is False and doc["verdict"]["exit_code"] == 1
    assert any("section bench: error" in n for n in doc["verdict"]["notes"])


def test_an_exhausted_budget_skips_sections_with_a_reason(tmp_path):
    rc, doc, _ = _run(tmp_path, "--budget-s", "0")
    assert rc == 0 and doc["status"] == "complete"
    assert doc["sections"]["environment"]["reason"].startswith("time budget")
    assert all(x["status"] == "skipped" and x["reason"] for x in doc["sections"].values())
    assert doc["verdict"]["exactness_ok"] is None and doc["verdict"]["exit_code"] == 0


def test_the_script_is_a_thin_entry_point_over_the_package():
    import ast

    text = SCRIPT.read_text()
    defs = {n.name for n in ast.parse(text).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert len(text.splitlines()) <= 300 and defs == {"parse_args", "main"}
    args = _module().parse_args(["--quick", "--target", "tiny-gpt_neox"])
    assert args.runtimes == ["eager", "static"] and args.target == "tiny-gpt_neox"


def test_a_bad_pair_name_is_refused_naming_the_valid_ones(capsys):
    import pytest

    with pytest.raises(SystemExit):
        _module().parse_args(["--target", "tiny-mamba"])
    assert "the tiny pairs are ('tiny-llama', 'tiny-gpt_neox'" in capsys.readouterr().err


def test_parse_pytest_reads_the_summary_or_the_progress_of_a_killed_run():
    from dynatree_core.bench.device_check import exactness as gc

    done = gc.parse_pytest("....F\n=== 1 failed, 4 passed, 2 skipped, 3 deselected in 12.50s ===\n")
    assert (done["passed"], done["failed"], done["skipped"], done["duration_s"]) == (4, 1, 2, 12.5)
    killed = gc.parse_pytest("........................................  [ 76%]\n......sF")
    assert (killed["passed"], killed["failed"], killed["skipped"], killed["duration_s"]) == (46, 1, 1, None)
    assert gc.parse_pytest("1 error in 0.3s")["errors"] == 1


def test_the_sync_audit_covers_every_way_the_loop_touches_the_device(monkeypatch):
    """The audit needs CUDA's sync debug mode; here its per-iteration rows come from the loop's own
    counts, which checks what the section runs: every policy (calibrated first) next to AR,
    linear and the paper's DynaTree, each without an error."""
    import dynatree_core.engine.sync_audit as sa
    from dynatree_core.engine.api import iterate
    from dynatree_core.pairs.tiny import tiny_pair

    def counted_only(pair, prompt, method, config=None, max_new_tokens=32):
        recs = list(iterate(pair, prompt, method, config, max_new_tokens=max_new_tokens, ignore_eos=True))[1:]
        return [{"iteration": r.index, "counted": r.host_syncs, "observed": r.host_syncs,
                 "draft_levels": r.draft_forwards, "sources": []} for r in recs]

    monkeypatch.setattr(sa, "audit_host_syncs", counted_only)
    from dynatree_core.bench.device_check.bench import sync_audit

    args = _module().parse_args(["--audit-tokens", "6"])
    out = sync_audit(tiny_pair("llama", noise=0.05), args)
    assert set(out["methods"]) == {"ar", "linear:k=3", "dynatree:preset=paper", "fixed_tree", "dynatree:cost",
                                   "eagle2", "sequoia"}
    for label, m in out["methods"].items():
        assert "error" not in m, (label, m)
        assert m["iterations"] > 0 and m["iterations_observed_gt_counted"] == 0


def _bench_doc(dtype: str | None, identical: bool) -> dict:
    """A finished device check with only a bench section, as the harness writes it."""
    row = {"dataset": "wikitext2", "label": "ar", "runtime": "graphs", "tokens_per_s": 241.6, "speedup": 1.0,
           "L_bar": 1.0, "engine_overhead_ms": 0.97, "host_syncs_per_iteration": 1.0, "host_sync_excess": 0,
           "peak_memory_bytes": 2 ** 30, "draft_ms_per_iteration": None, "verify_ms_per_iteration": 3.6}
    bench = {"status": "ok", "wall_s": 70.0, "target_name": "SmolLM2", "num_prompts": 3, "warmup": 1,
             "max_new_tokens": 192, "max_prompt_len": 256, "outputs_identical_across_methods": identical,
             "mismatching_cells": [] if identical else ["ar", "dynatree:preset=gpu"], "table": [row],
             "compile": {"forwards": 18, "compile_s": 95.25, "graphs": 18, "capture_s": 2.5, "cache_hits": 0,
                         "cache_misses": 18}}
    if dtype is not None:
        bench["dtype"] = dtype
    return {"created": "2026-11-28T17:51:12+00:00", "total_s": 77.0, "config": {"budget_s": 165.0},
            "sections": {"environment": {"status": "ok", "wall_s": 2.0, "info": {"device": "cuda"}}, "bench": bench}}


def test_the_summary_prints_the_benchs_own_dtype_and_only_an_fp32_bench_fails_exactness():
    """The H200's bf16 bench was headed "fp32" and failed the run for outputs that differ from AR in
    bf16, where greedy exactness is not promised (docs/gpu.md, "Which dtype is exact")."""
    from dynatree_core.bench.device_check.summary import summary, verdict

    for dtype, short, fails in (("bfloat16", "bf16", False), ("float16", "fp16", False), ("float32", "fp32", True),
                                (None, "fp32", True)):  # None: a section written before the dtype was recorded
        doc = _bench_doc(dtype, identical=False)
        doc["verdict"] = v = verdict(doc)
        head = next(line for line in summary(doc).splitlines() if line.startswith("[c] bench"))
        assert f"SmolLM2, {short}, N=3" in head, head
        assert v["exit_code"] == int(fails) and bool(v["problems"]) == fails
        assert fails or any(n.startswith(f"{short} bench outputs differ from AR") and "fp32" in n for n in v["notes"])
    doc = _bench_doc("bfloat16", identical=True)
    doc["verdict"] = v = verdict(doc)
    text = summary(doc)
    assert v["exit_code"] == 0 and not v["notes"]
    head = next(line for line in text.splitlines() if "draft ms/it" in line)
    assert head.index("draft ms/it") < head.index("(host)") < head.index("verify ms/it") < head.rindex("(host)")
    row = next(line for line in text.splitlines() if line.strip().startswith("wikitext2"))
    assert row.split()[6:10] == ["-", "-", "3.60", "-"]  # draft (device, host), verify (device 3.6 ms, host)
    assert "18 forwards compiled in 95.2 s (FX cache hits 0, misses 18), then 18 CUDA graphs captured in 2.5 s" in text


def test_runtimes_are_checked_by_name_and_compiled_runs_beside_eager_and_graphs(capsys):
    import pytest

    args = _module().parse_args(["--runtimes", "eager,graphs,compiled"])
    assert args.runtimes == ["eager", "graphs", "compiled"]
    for bad in ("eager,fast", "auto", ","):
        with pytest.raises(SystemExit):
            _module().parse_args(["--runtimes", bad])
        assert "--runtimes" in capsys.readouterr().err


def _spy_on_record_top_k(monkeypatch) -> list:
    import dynatree_core.engine.api as api

    asked, real = [], api.iterate

    def iterate(*a, **kw):
        asked.append(kw.get("record_top_k"))
        return real(*a, **kw)

    monkeypatch.setattr(api, "iterate", iterate)
    return asked


def test_the_device_checks_bench_reads_no_oracle_so_its_timed_runs_ask_for_no_chain_view(monkeypatch, tmp_path):
    """Its table prints no oracle column: no run keeps the draft's chain view (record_top_k), the rows
    carry none and the result says so; the table has each phase's ms per iteration."""
    import time

    from dynatree_core.bench.device_check.bench import section_bench

    asked = _spy_on_record_top_k(monkeypatch)
    args = _module().parse_args(["--out", str(tmp_path), *TINY, "--runtimes", "eager", "--presets", "gpu",
                                 "--policies", "none", "--datasets", "wikitext2", "--bench-tokens", "6"])
    sec: dict = {}
    section_bench(sec, time.monotonic() + 300, args, {})
    assert asked and set(asked) == {None}
    bench = json.loads((tmp_path / "bench.json").read_text())
    assert all("oracle" not in r and r["record_top_k"] is None for r in bench["rows"])
    assert bench["protocol"]["oracle"]["labels"] == []
    assert {r["label"] for r in sec["table"]} == {"ar", "linear", "fixed_tree", "dynatree:preset=gpu"}
    assert all(r["draft_ms_per_iteration"] >= 0 and r["verify_ms_per_iteration"] > 0 for r in sec["table"])
    assert sec["compile"]["forwards"] == 0 and sec["compile"]["graphs"] == 0  # eager: nothing compiled


def test_a_bench_whose_tables_read_the_oracle_asks_for_it_and_sweeps_do_not(monkeypatch):
    """``dynatree bench`` prints Table 6 (the oracle gap): its points keep the oracle (RunPoint's default)
    and each run asks for ORACLE_TOP_K; a sweep reports Table 1 and a figure, so its points do not."""
    from dynatree_core.bench import sweeps
    from dynatree_core.bench.data import Prompt
    from dynatree_core.bench.methods import method_specs
    from dynatree_core.bench.protocol import ORACLE_TOP_K, RunPoint
    from dynatree_core.bench.runner import oracle_settings, run_points
    from dynatree_core.pairs.tiny import tiny_pair

    asked = _spy_on_record_top_k(monkeypatch)
    prompts = [Prompt("wikitext2", i, "x", 0, "t", 0, 8, 8, 8, [5 + i] * 8, "") for i in range(2)]
    points = [RunPoint(s, 5) for s in method_specs(["ar", "linear", "dynatree"], preset="cpu", k=2)]
    rows = run_points(tiny_pair("llama", noise=0.05), points, ["wikitext2"], lambda ds, n: prompts,
                      {"wikitext2": 8}, 1, progress=False)
    assert asked and set(asked) == {ORACLE_TOP_K}
    assert all(r["record_top_k"] == ORACLE_TOP_K and len(r["oracle"]["reach"]) == r["iterations"] for r in rows)
    assert oracle_settings(points)["labels"] == ["ar", "linear", "dynatree"]
    swept, _ = sweeps.length_points(method_specs(["dynatree"], preset="cpu"), [8, 16])
    assert swept and not any(p.oracle or p.record_top_k for p in swept)


def test_an_fp32_exactness_bench_that_differs_fails_the_run_and_establishes_exactness_when_equal():
    """The table plan runs no pytest section: its fp32 exactness bench is what says exactness held."""
    from dynatree_core.bench.device_check.summary import summary, verdict

    for identical in (True, False):
        doc = _bench_doc("bfloat16", identical=True)
        doc["sections"]["exact"] = {"status": "ok", "wall_s": 9.0, "dtype": "float32", "runtimes": ["graphs"],
                                    "num_prompts": 1, "max_new_tokens": 64, "table": [{"label": "ar"}],
                                    "outputs_identical_across_methods": identical,
                                    "mismatching_cells": [] if identical else ["eagle2"],
                                    "compile": {"forwards": 0, "compile_s": 0.0, "regions": 4, "region_s": 1.5,
                                                "timed_compiles": 0}}
        doc["verdict"] = v = verdict(doc)
        assert v["exactness_ok"] is identical and v["exit_code"] == int(not identical)
        line = next(x for x in summary(doc).splitlines() if x.startswith("[e] fp32 exactness"))
        assert f"every method's tokens equal AR's: {identical}" in line and "4 region graphs compiled in 1.5 s" in line
        assert "0 compiled inside timed decodes" in line

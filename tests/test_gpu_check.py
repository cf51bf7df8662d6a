"""scripts/gpu_check.py on the CPU with the tiny pair and the smallest sizes: every section is in
the JSON, failures are recorded without stopping the script, only exactness sets the exit code; the
script is a thin entry point over dynatree_core.bench.device_check."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from helpers.exactness import EDGE_CONFIGS

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_check.py"
TINY = ["--device", "cpu", "--quick", "--target", "tiny-llama", "--no-progress",
        "--tests", "tests/test_exactness.py", "--pytest-k", "edge_configs and llama and sdpa",
        "--precision-tokens", "8", "--precision-prompt-len", "16", "--bench-tokens", "8",
        "--bench-prompt-len", "16", "--linear-k", "2", "--audit-tokens", "4"]


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
    assert set(s) == {"environment", "exactness", "precision", "bench", "fastpath"}
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
    assert bench["schema_version"] == 1 and bench["protocol"]["datasets"] == ["wikitext2", "pg19"]
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

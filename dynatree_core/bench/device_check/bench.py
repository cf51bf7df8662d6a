"""The device check's bench section: the benchmark (AR, linear K, fixed tree, DynaTree per preset and the
other tree policies) on both datasets, on every runtime side by side, merged into one result, with the
seconds spent compiling and capturing apart; on CUDA the host-sync audit of every way the loop touches
the device. Its table reads no oracle, so no run records one (``RunPoint.oracle``): the timings are
decoding's alone."""

from __future__ import annotations

import argparse
import shlex
import time
from typing import Any

from dynatree_core.bench.device_check.harness import error_summary
from dynatree_core.bench.device_check.loading import bench_prompts, load_pair
from dynatree_core.bench.results import bench_table, merge_results, write_json_atomic


def bench_specs(args: argparse.Namespace) -> list[Any]:
    """AR, linear at each K, fixed tree, DynaTree once per preset (labelled dynatree:preset=P), and
    the other tree policies (``--policies``: cost-aware DynaTree, which calibrates its cost curve on
    the device first; EAGLE-2 and Sequoia with their published, GPU-sized defaults)."""
    from dynatree_core.bench.methods import MethodSpec, method_specs

    specs = method_specs(["ar", "linear", "fixed_tree"], k=args.linear_k)
    for preset in args.presets:
        (s,) = method_specs(["dynatree"], preset=preset)
        specs.append(MethodSpec(f"dynatree:preset={preset}", s.method, s.config))
    return specs + method_specs(args.policies)


def section_bench(sec: dict[str, Any], deadline: float, args: argparse.Namespace, pairs: dict[str, Any]) -> None:
    """Each dataset of ``args.datasets`` while the limit allows (a dataset at a time), merged into
    ``bench.json``; the table the summary prints; on CUDA the host-sync audit."""
    from dynatree_core.bench.protocol import RunPoint
    from dynatree_core.bench.runner import Experiment, load_corpora, run_experiment
    from dynatree_core.runtime.compile_cache import compile_totals

    specs = bench_specs(args)
    sec.update(target=args.target, drafter=args.drafter, dtype=args.bench_dtype, datasets=list(args.datasets),
               labels=[s.label for s in specs], num_prompts=args.bench_prompts, warmup=args.bench_warmup,
               max_new_tokens=args.bench_tokens, max_prompt_len=args.bench_prompt_len, data_source="bundled")
    t = time.monotonic()
    pair = pairs.get(args.bench_dtype) or load_pair(args, args.bench_dtype)
    sec["load_s"] = round(time.monotonic() - t, 2)
    sec["target_name"], sec["draft_name"] = pair.target_name, pair.draft_name
    compiled_before = compile_totals()
    docs: list[dict[str, Any]] = []
    for ds in args.datasets:
        per_ds = [d["_wall_s"] for d in docs]
        if per_ds and time.monotonic() + max(per_ds) > deadline:
            sec["truncated"] = f"time limit: {ds} skipped ({max(per_ds):.0f} s per dataset, limit reached)"
            break
        t = time.monotonic()
        points = [RunPoint(s, args.bench_tokens, runtime=r, oracle=False) for r in args.runtimes for s in specs]
        exp = Experiment(kind="bench", points=points, datasets=[ds],
                         num_prompts=args.bench_prompts, warmup=args.bench_warmup,
                         max_prompt_len={ds: args.bench_prompt_len}, data_source="bundled",
                         extra={"command_line": "scripts/gpu_check.py " + " ".join(map(shlex.quote, args.argv))})
        doc = run_experiment(pair, exp, load_corpora(exp), progress=not args.no_progress)
        doc["_wall_s"] = time.monotonic() - t
        docs.append(doc)
    if not docs:
        raise RuntimeError("no dataset fitted the time limit")
    merged = merge_results(docs)
    path = write_json_atomic(args.out / "bench.json", merged, overwrite=True)
    sec["result_file"] = str(path)
    sec["outputs_identical_across_methods"] = merged["checks"]["outputs_identical_across_methods"]
    sec["mismatching_cells"] = merged["checks"]["mismatching_cells"]
    sec["table"] = with_phase_times(bench_table(merged), merged["aggregates"])
    sec["compile"] = compile_delta(compiled_before, compile_totals())
    sec["bench_warnings"] = merged["warnings"]
    if pair.device.type == "cuda":
        sec["sync_audit"] = sync_audit(pair, args)
    else:
        sec["sync_audit"] = {"status": "skipped", "reason": "needs CUDA (torch.cuda sync debug mode)"}


def with_phase_times(table: list[dict[str, Any]], aggregates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The table's rows (one per aggregate, in order) with the draft and verify phases' milliseconds per
    iteration (each phase's mean seconds over the mean iterations; None where a phase never ran)."""
    out = []
    for row, a in zip(table, aggregates, strict=True):
        its = a.get("iterations")
        ms = {f"{phase}_ms_per_iteration": a[f"{phase}_time_s"] / its * 1e3 if its and a.get(f"{phase}_time_s")
              else None for phase in ("draft", "verify")}
        out.append({**row, **ms})
    return out


def compile_delta(before: Any, after: Any) -> dict[str, Any]:
    """What compiling cost between two :func:`~dynatree_core.runtime.compile_cache.compile_totals`: the
    compiled forwards and their seconds, the CUDA graphs captured of them and those seconds, apart."""
    return {"forwards": after.forwards - before.forwards, "compile_s": round(after.compile_s - before.compile_s, 3),
            "graphs": after.graphs - before.graphs, "capture_s": round(after.capture_s - before.capture_s, 3),
            "cache_hits": after.cache_hits - before.cache_hits,
            "cache_misses": after.cache_misses - before.cache_misses}


def sync_audit(pair: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Counted host syncs against CUDA's sync debug mode (dynatree_core.engine.sync_audit), per method."""
    from dynatree_core.bench.methods import method_specs
    from dynatree_core.engine.calibrate import prepare_config
    from dynatree_core.policy.config import DynaTreeConfig, LinearConfig
    from dynatree_core.engine.sync_audit import audit_host_syncs

    prompt = bench_prompts(pair, 1, 64)[0].token_ids
    out: dict[str, Any] = {"status": "ok", "max_new_tokens": args.audit_tokens, "methods": {}}
    # every way the loop touches the device: static chains, confidence-driven levels with the
    # history adapter, the cost-aware fill, EAGLE-2's rerank, Sequoia's shape (the policies'
    # calibrations are cached by the bench that ran before; each priced on the audited run's runtime)
    audited = [("ar", "ar", None), ("linear:k=3", "linear", LinearConfig(k=3)),
               ("dynatree:preset=paper", "dynatree", DynaTreeConfig.paper())]
    audited += [(s.label, s.method, s.config) for s in method_specs(["fixed_tree"] + list(args.policies))]
    for label, method, cfg in audited:
        try:
            cfg = prepare_config(cfg, pair, runtime="auto") if cfg is not None else None
            rows = audit_host_syncs(pair, list(prompt), method, cfg, max_new_tokens=args.audit_tokens)
        except Exception as e:
            out["methods"][label] = {"error": error_summary(e)}
            continue
        over = [r for r in rows if r["observed"] > r["counted"]]
        out["methods"][label] = {"iterations": len(rows),
                                 "max_counted": max((r["counted"] for r in rows), default=None),
                                 "max_observed": max((r["observed"] for r in rows), default=None),
                                 "iterations_observed_gt_counted": len(over),
                                 "uncounted_sources": sorted({s for r in over for s in r["sources"]})[:10]}
    return out

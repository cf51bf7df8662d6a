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
    """The base methods (``--base-methods``: AR, linear at each K, the fixed tree), DynaTree once per
    preset (labelled dynatree:preset=P), and the other tree policies (``--policies``: cost-aware
    DynaTree, which calibrates its cost curve on the device first; EAGLE-2 and Sequoia with their
    published, GPU-sized defaults)."""
    from dynatree_core.bench.methods import MethodSpec, method_specs

    specs = method_specs(list(args.base_methods), k=args.linear_k)
    for preset in args.presets:
        (s,) = method_specs(["dynatree"], preset=preset)
        specs.append(MethodSpec(f"dynatree:preset={preset}", s.method, s.config))
    return specs + method_specs(args.policies)


def section_bench(sec: dict[str, Any], deadline: float, args: argparse.Namespace, pairs: dict[str, Any],
                  run: dict[str, Any] | None = None, report: Any = None) -> None:
    """Each dataset of ``args.datasets`` while the limit allows (a dataset at a time), merged into
    ``bench.json``; the table the summary prints; on CUDA the host-sync audit. ``run`` overrides the
    sizes (``dtype``, ``runtimes``, ``prompts``, ``warmup``, ``tokens``, ``datasets``, ``file``,
    ``audit``): the exactness bench (:func:`section_exact`) is this bench at its own size. The result
    file and the section (and ``report``, when given) are rewritten after every runtime and dataset."""
    from dynatree_core.bench.compile_ledger import compile_delta, compile_mark

    r = {"dtype": args.bench_dtype, "runtimes": args.runtimes, "prompts": args.bench_prompts,
         "warmup": args.bench_warmup, "tokens": args.bench_tokens, "datasets": list(args.datasets),
         "file": "bench.json", "audit": True, **(run or {})}
    specs = bench_specs(args)
    sec.update(target=args.target, drafter=args.drafter, dtype=r["dtype"], datasets=r["datasets"],
               runtimes=list(r["runtimes"]), labels=[s.label for s in specs], num_prompts=r["prompts"],
               warmup=r["warmup"], max_new_tokens=r["tokens"], max_prompt_len=args.bench_prompt_len,
               data_source="bundled")
    t = time.monotonic()
    pair = pairs.get(r["dtype"]) or load_pair(args, r["dtype"])
    pairs[r["dtype"]] = pair
    sec["load_s"] = round(time.monotonic() - t, 2)
    sec["target_name"], sec["draft_name"] = pair.target_name, pair.draft_name
    before = compile_mark()

    def record(merged: dict[str, Any]) -> None:  # after every chunk: a run stopped later keeps these rows
        path = write_json_atomic(args.out / r["file"], merged, overwrite=True)
        sec["result_file"] = str(path)
        sec["outputs_identical_across_methods"] = merged["checks"]["outputs_identical_across_methods"]
        sec["mismatching_cells"] = merged["checks"]["mismatching_cells"]
        sec["table"] = with_phase_times(bench_table(merged), merged["aggregates"])
        sec["compile"] = {**compile_delta(before, compile_mark()), **{
            k: (merged.get("compile") or {}).get(k, 0) for k in ("timed_compiles", "recompiled_rows")}}
        if report is not None:
            report.write()

    merged = _bench_chunks(sec, deadline, args, pair, specs, r, record)
    sec["bench_warnings"] = merged["warnings"]
    if not r["audit"]:
        return
    if pair.device.type == "cuda":
        sec["sync_audit"] = sync_audit(pair, args)
    else:
        sec["sync_audit"] = {"status": "skipped", "reason": "needs CUDA (torch.cuda sync debug mode)"}


def _bench_chunks(sec: dict[str, Any], deadline: float, args: argparse.Namespace, pair: Any, specs: list[Any],
                  r: dict[str, Any], record: Any) -> dict[str, Any]:
    """The benchmark a runtime at a time, a dataset at a time (so the first runtime's rows are kept
    whatever the next one's compiling costs), each chunk merged into the result so far and handed to
    ``record``; a chunk is skipped when the longest one of its runtime so far would pass the limit."""
    from dynatree_core.bench.protocol import RunPoint
    from dynatree_core.bench.runner import Experiment, load_corpora, run_experiment

    docs: list[dict[str, Any]] = []
    skipped: list[str] = []
    for rt in r["runtimes"]:
        for ds in r["datasets"]:
            took = [d["_wall_s"] for d in docs if d["_runtime"] == rt]
            if took and time.monotonic() + max(took) > deadline or time.monotonic() > deadline:
                skipped.append(f"{rt}/{ds}")
                continue
            t = time.monotonic()
            points = [RunPoint(s, r["tokens"], runtime=rt, oracle=False) for s in largest_tree_first(specs)]
            exp = Experiment(kind="bench", points=points, datasets=[ds], num_prompts=r["prompts"],
                             warmup=r["warmup"], max_prompt_len={ds: args.bench_prompt_len}, data_source="bundled",
                             extra={"command_line": "scripts/gpu_check.py " + " ".join(map(shlex.quote, args.argv))})
            doc = run_experiment(pair, exp, load_corpora(exp), progress=not args.no_progress)
            doc["_wall_s"], doc["_runtime"] = time.monotonic() - t, rt
            docs.append(doc)
            record(merge_results([{k: v for k, v in d.items() if k != "_runtime"} for d in docs]))
    if skipped:
        sec["truncated"] = f"time limit: {', '.join(skipped)} skipped"
    if not docs:
        raise RuntimeError("no dataset fitted the time limit")
    return merge_results([{k: v for k, v in d.items() if k != "_runtime"} for d in docs])


def largest_tree_first(specs: list[Any]) -> list[Any]:
    """The methods by the largest tree they verify, largest first: a fast path is kept and reused by
    every later run it fits, so the first run builds the buckets all the others need and each bucket's
    forward is compiled (captured) once, not once more each time a larger tree comes along."""
    def largest(spec: Any) -> int:
        cfg = spec.config
        if not getattr(cfg, "drafts", False):
            return 1
        try:
            rule = cfg.growth_rule()
        except ValueError:  # cost-aware DynaTree, Sequoia: calibrated on the device first; their node budget
            return 1 + int(getattr(cfg, "n_max", 0))
        return 1 + rule.n_max + (rule.tail_n_max if rule.lookup_tail else 0)

    return sorted(specs, key=largest, reverse=True)


def section_exact(sec: dict[str, Any], deadline: float, args: argparse.Namespace, pairs: dict[str, Any],
                  report: Any = None) -> None:
    """The exactness bench: the bench's methods in fp32 on ``--exact-runtimes``, ``--exact-prompts``
    prompts of the first dataset at T = ``--exact-tokens`` (no warm-up prompt: nothing is timed that
    matters here), written to ``exact.json``; every method's tokens must equal AR's (greedy exactness
    is promised in fp32). The bf16 table beside it cannot show that: another tree size is another
    kernel shape, which flips near-ties in bf16 (docs/gpu.md, "Which dtype is exact")."""
    section_bench(sec, deadline, args, pairs, {
        "dtype": "float32", "runtimes": args.exact_runtimes, "prompts": args.exact_prompts, "warmup": 0,
        "tokens": args.exact_tokens, "datasets": list(args.datasets[:1]), "file": "exact.json", "audit": False},
        report)


def with_phase_times(table: list[dict[str, Any]], aggregates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The table's rows (one per aggregate, in order) with the draft and verify phases' milliseconds per
    iteration (each phase's mean seconds over the mean iterations; None where a phase never ran): the
    device's time on CUDA (events on the stream), and the host's time issuing the phase apart
    (``*_host_ms_per_iteration``; on a CPU the same clock)."""
    out = []
    for row, a in zip(table, aggregates, strict=True):
        its = a.get("iterations")
        ms = {f"{phase}{kind}_ms_per_iteration": a[f"{phase}{src}"] / its * 1e3 if its and a.get(f"{phase}{src}")
              else None for phase in ("draft", "verify") for kind, src in (("", "_time_s"), ("_host", "_host_s"))}
        out.append({**row, **ms, "compiles": a.get("compiles")})
    return out


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

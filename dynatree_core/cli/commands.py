"""The subcommands: ``generate``, ``bench``, ``sweep``, ``table``, ``calibrate`` (``distill`` is
:mod:`dynatree_core.distill.cli`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from dynatree_core.bench.data import parse_datasets
from dynatree_core.bench.methods import ABLATION_LABELS, parse_methods
from dynatree_core.bench.protocol import RunPoint
from dynatree_core.cli.args import CLIError
from dynatree_core.cli.resolve import (bench_prompts, build_specs, check_model_args, device_name, dynatree_overrides,
                                       generate_sampling, load_pair, protocol_numbers, resolve_preset, runtime_points,
                                       sampled_points)
from dynatree_core.cli.run import EXACTNESS_FAILED, execute_experiment, make_experiment

def cmd_generate(args: argparse.Namespace) -> int:
    from dynatree_core.bench.results import write_text_atomic
    from dynatree_core.engine.api import generate

    device = device_name(args)
    spec = build_specs(args, parse_methods(args.method), device)
    if len(spec) != 1:
        raise CLIError("generate runs one method; 'ablation' expands to three")
    spec = spec[0]
    if args.max_new_tokens is None:
        args.max_new_tokens = 64
    if args.max_new_tokens < 1:  # checked before the (slow) model load, with bench's limit
        raise CLIError(f"--max-new-tokens (T) must be >= 1, got {args.max_new_tokens}")
    check_model_args(args, spec.method != "ar")
    if args.trace and Path(args.trace).exists() and not args.overwrite:
        raise CLIError(f"{args.trace} exists; pass --overwrite to replace it")
    if args.trace:
        tdir = Path(args.trace).resolve().parent
        if not tdir.is_dir() or not os.access(tdir, os.W_OK):
            raise CLIError(f"cannot write the trace to {args.trace!r}: {tdir} is not a writable directory")
    if spec.method == "hf_assisted" and args.trace:
        raise CLIError("--trace records the engine's iterations; hf_assisted runs Hugging Face's own loop")
    sampling = generate_sampling(args)  # bad settings fail here, before the model loads
    import torch

    from dynatree_core.runtime.static.fast_path import resolve_runtime

    resolve_runtime(args.runtime, torch.device(device))
    if spec.method == "hf_assisted" and not sampling.greedy:
        raise CLIError("hf_assisted runs Hugging Face's assisted generation greedily here; keep --temperature 0")
    if sampling.rule == "rejection" and spec.method == "ar":
        raise CLIError("--verify rejection checks drafted tokens; --method ar drafts none (use match)")
    pair = load_pair(args)
    if spec.method == "hf_assisted":
        from dynatree_core.bench.hf_assisted import generate_hf_assisted

        result = generate_hf_assisted(pair, args.prompt, args.max_new_tokens, spec.config, ignore_eos=args.ignore_eos)
    else:
        result = generate(pair, args.prompt, spec.method, spec.config, args.max_new_tokens,
                          trace=bool(args.trace), ignore_eos=args.ignore_eos, sampling=sampling, runtime=args.runtime)
    print(result.text if result.text is not None else result.tokens)
    print(f"\n--- metrics ({spec.label}, target {pair.target_name}, draft {pair.draft_name}) ---")
    for k, v in result.metrics.to_dict().items():
        print(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}")
    if args.trace:
        write_text_atomic(args.trace, result.trace.to_json(), overwrite=args.overwrite)
        print(f"trace: {args.trace}", file=sys.stderr)
    return 0



def cmd_bench(args: argparse.Namespace) -> int:
    if args.batch_size:
        return cmd_batch_bench(args)
    datasets = parse_datasets(args.dataset)
    names = parse_methods(args.methods)
    specs = build_specs(args, names, device_name(args))
    n, w, t, l_max = protocol_numbers(args, datasets)
    points = runtime_points(sampled_points([RunPoint(s, t) for s in specs], args), args, device_name(args))
    exp = make_experiment(args, "bench", points, datasets, n, w, l_max)
    tables = [1, 2, 3] + ([4] if any(s.label in ABLATION_LABELS for s in specs) else []) + [6] + (
        [7] if any(not p.sampling.greedy for p in points) else [])
    return execute_experiment(args, exp, f"bench-{'+'.join(datasets)}", tables)


def cmd_batch_bench(args: argparse.Namespace) -> int:
    """``bench --batch-size``: the batch benchmark (:mod:`dynatree_core.bench.batch`), greedy, on ``--runtime``
    eager (the default) and/or static."""
    from datetime import datetime, timezone
    from dynatree_core.bench import batch
    from dynatree_core.bench.results import write_json_atomic

    datasets = parse_datasets(args.dataset)
    specs = build_specs(args, parse_methods(args.methods), device_name(args))
    runtimes = ["eager" if r == "auto" else r for r in args.runtime]  # a batch's CPU default, as one prompt's
    points = batch.batch_points(specs, args.batch_size, args.batch_budget, runtimes, control=args.ar_control)
    if args.repeats < 1:
        raise CLIError(f"--repeats must be >= 1, got {args.repeats}")
    n, _, t, l_max = protocol_numbers(args, datasets)
    n = max(n, max(args.batch_size))
    check_model_args(args, any(p.spec.method != "ar" for p in points))
    pair = load_pair(args)
    prompts = {}
    for ds in datasets:
        prompts[ds] = bench_prompts(args, pair, ds, n, l_max[ds])
    result = batch.run_batch_bench(pair, prompts, points, t, args.repeats, progress=not args.no_progress)
    doc = {"schema_version": batch.BATCH_SCHEMA_VERSION, "kind": "batch_bench",
           "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "config": {"datasets": datasets, "batch_sizes": args.batch_size, "budget": args.batch_budget,
                      "runtimes": runtimes,
                      "max_new_tokens": t, "max_prompt_len": l_max, "num_prompts": n, "seed": args.seed,
                      "repeats": args.repeats, "ar_control": args.ar_control,
                      # every point decodes its B prompts to their end together: nothing refills a finished row
                      "batching": "fixed",
                      "methods": [s.to_dict() for s in specs],
                      "target": pair.target_name, "draft": pair.draft_name, "device": str(pair.device),
                      "command_line": args.command_line},
           **result}
    out = Path(args.out)
    path = out if out.suffix == ".json" else out / f"batch-{'+'.join(datasets)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, doc, overwrite=args.overwrite)
    print(batch.to_markdown(doc["summary"]))
    print(f"\nresult: {path}", file=sys.stderr)
    if not doc["checks"]["every_row_matches_batched_ar"]:
        print("EXACTNESS: a row differs from batched AR's tokens (see the rows' matches_batched_ar)", file=sys.stderr)
        return EXACTNESS_FAILED
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from dynatree_core.bench import sweeps
    from dynatree_core.bench.methods import dynatree_config

    datasets = parse_datasets(args.dataset)
    device = device_name(args)
    n, w, t, l_max = protocol_numbers(args, datasets)
    skipped: list[str] = []
    if args.sweep == "fixed_tree":
        points, meta = sweeps.fixed_tree_points(args.d_values, args.b_values, args.tau_values, n_max=args.n_max,
                                                max_new_tokens=t, kv_mode=args.kv_mode)
    elif args.sweep == "sensitivity":
        base = dynatree_config(resolve_preset(args, device), history=not args.no_history, kv_mode=args.kv_mode,
                               **dynatree_overrides(args))
        thresholds = [(h, lo) for h in args.tau_h_values for lo in args.tau_l_values]
        points, meta, skipped = sweeps.sensitivity_points(base, thresholds=thresholds, breadths=args.breadths,
                                                          depths=args.depths, max_new_tokens=t)
    else:
        specs = build_specs(args, parse_methods(args.methods), device)
        if args.sweep == "length":
            points, meta = sweeps.length_points(specs, args.lengths)
        else:
            points, meta = sweeps.prompt_length_points(specs, args.prompt_lengths, t)
    for s in skipped:
        print(f"warning: {s}", file=sys.stderr)
    points = runtime_points(sampled_points(points, args), args, device)
    exp = make_experiment(args, f"sweep:{args.sweep}", points, datasets, n, w, l_max, sweep=meta)
    return execute_experiment(args, exp, f"sweep-{args.sweep}-{'+'.join(datasets)}", [1], figure=args.sweep)


def cmd_table(args: argparse.Namespace) -> int:
    from dynatree_core.bench.results import load_result, recompute
    from dynatree_core.bench.tables import TABLES, TITLES, make_tables, to_markdown, worker_note

    which = args.tables
    bad = [t for t in which if t not in TABLES]
    if bad:
        raise CLIError(f"unknown table(s) {bad}; choose from {list(TABLES)}")
    aggs: list[dict[str, Any]] = []
    for f in args.files:
        result = load_result(f)
        if result.get("partial"):  # an interrupted run: say what the numbers leave out
            print(f"note: {f} is a partial result ({len(result.get('missing_shards', []))} of "
                  f"{(result.get('execution') or {}).get('shards', '?')} shards missing); continue the run with "
                  f"--resume", file=sys.stderr)
        aggs += recompute(result)
    tables = make_tables(aggs, which)
    for t, df in tables.items():
        if args.format == "csv":
            print(f"# {TITLES[t]}")
            print(df.to_csv(index=False))
        else:
            print(to_markdown(df, TITLES[t]))
            print()
    if args.format != "csv" and (note := worker_note(aggs)):
        print(note)
    return 0



def cmd_calibrate(args: argparse.Namespace) -> int:
    from dynatree_core.engine import calibrate

    device_name(args)
    check_model_args(args, True)
    pair = load_pair(args)
    if pair.draft is None:
        raise CLIError("calibration needs a draft model: pass --draft")
    cost = calibrate.cost_model(pair, recalibrate=args.recalibrate)
    acc = calibrate.acceptance_vector(pair, recalibrate=args.recalibrate)
    print(calibrate.describe(cost))
    print("acceptance by draft rank: " + ", ".join(f"{a:.3f}" for a in acc))
    print(f"cache: {calibrate.cache_dir()}")
    return 0



"""One device check of dynatree, sized to finish in about 8 minutes on one GPU: the entry point of
:mod:`dynatree_core.bench.device_check`, which holds the sections.

Sections (each timed, each with a time limit inside one overall budget; a failing section is
recorded with a traceback summary and the script goes on):

  environment  device, capability, torch/transformers versions, date (UTC), TF32 settings
  exactness    pytest on the exactness properties with the tiny models on the device in fp32
               (``DYNATREE_TEST_DEVICE``, see tests/conftest.py)
  precision    the pair in fp32, fp16 and bf16: greedy AR tokens against fp32 AR, the top-2 logit
               margins where they first differ (near-ties explain mismatches), and whether DynaTree
               equals AR within each dtype
  bench        the benchmark (AR, linear K, fixed tree, DynaTree with its presets (--presets), and the
               other tree policies: cost-aware DynaTree, EAGLE-2, Sequoia) on the pair in fp32 (or
               --bench-dtype), both datasets, on every runtime of --runtimes side by side (eager and
               CUDA graphs; add compiled: --runtimes eager,graphs,compiled, compile time reported apart;
               on a CPU eager and static), with draft and verify ms per iteration and no oracle
               instrumentation in the timed loop, and on CUDA the host-sync audit
  exact        the bench's methods in fp32 on --exact-runtimes at a small size (--exact-prompts,
               --exact-tokens): every method's tokens must equal AR's (the check beside a bf16 table)
  fastpath     per fast runtime: the verify-cost curve c(n) over the buckets as the captured forwards
               replay them (engine.calibrate.fast_verify_curve, the curve cost-aware DynaTree on that
               runtime is priced with); the capture time (compile seconds apart); the target's bytes
               of weights against the measured device bandwidth (the tokens/s a step that only reads
               the weights would reach)

Writes ``gpu_check.json`` (every number, ``schema_version``), ``gpu_check.txt`` (the summary
printed at the end), ``bench.json`` (the benchmark's own result file) and ``exact.json`` (the fp32
exactness bench's) to ``--out``. Nothing
is downloaded: the embedded default pair (or ``--target tiny-llama``, ``ModelPair.named``) and the
bundled passages. Exit status 1 only if exactness failed (a failing exactness test, or fp32 outputs
differing between methods); 0 otherwise, whatever else failed (it is recorded).

  bash scripts/gpu_check.sh --out "$OUT"                       # on a GPU
  bash scripts/gpu_check.sh --device cpu --quick --out /tmp/gc  # here, a few minutes
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from anywhere, package not installed (the GPU machine)
    sys.path.insert(0, str(ROOT))

from dynatree_core.bench.device_check.bench import section_bench, section_exact  # noqa: E402
from dynatree_core.bench.device_check.environment import environment  # noqa: E402
from dynatree_core.bench.device_check.exactness import DEFAULT_TESTS, section_exactness  # noqa: E402
from dynatree_core.bench.device_check.fastpath import section_fastpath  # noqa: E402
from dynatree_core.bench.device_check.harness import Budget, Report, finish, run_section, start_watchdog  # noqa: E402
from dynatree_core.bench.device_check.precision import section_precision  # noqa: E402
from dynatree_core.bench.device_check.summary import DTYPES  # noqa: E402
from dynatree_core.pairs.choices import PAIR_DRAFTS, TINY_TARGETS  # noqa: E402

SECTIONS = ("exactness", "precision", "bench", "exact", "fastpath")
#: sized from the H100 runs (2026-11-26/27: a 135M-target forward took ~25 ms there, launch-bound):
#: exactness ~60 s, precision ~35 s per prompt plus ~35 s of loading, bench ~70 s per dataset at
#: T=192 with these 11 methods (N=4 with 9 methods: ~125 s per dataset), so every section fits its
#: limit and the whole run ~6 minutes
FULL = dict(budget_s=510.0, limit_exactness=150.0, limit_precision=90.0, limit_bench=240.0, limit_fastpath=60.0,
            precision_prompts=2, precision_tokens=96, precision_prompt_len=128,
            bench_prompts=2, bench_warmup=1, bench_tokens=192, bench_prompt_len=256,
            linear_k="2,3,4,5", presets="gpu,paper", policies="dynatree:cost,eagle2,sequoia", audit_tokens=32,
            runtimes="eager,graphs", base_methods="ar,linear,fixed_tree", limit_exact=120.0,
            exact_runtimes="graphs", exact_prompts=1, exact_tokens=64)

QUICK = dict(budget_s=480.0, limit_exactness=120.0, limit_precision=150.0, limit_bench=150.0, limit_fastpath=60.0,
             precision_prompts=1, precision_tokens=32, precision_prompt_len=64,
             bench_prompts=1, bench_warmup=0, bench_tokens=32, bench_prompt_len=64,
             linear_k="2,5", presets="paper,cpu,gpu", policies="dynatree:cost,eagle2,sequoia", audit_tokens=16,
             runtimes="eager,static", base_methods="ar,linear,fixed_tree", limit_exact=60.0,
             exact_runtimes="static", exact_prompts=1, exact_tokens=16)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpu_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "results" / "gpu_check"),
                   help="output directory (default results/gpu_check/)")
    p.add_argument("--device", default="auto", help="cuda, cuda:N, cpu or auto (default: cuda if available)")
    p.add_argument("--quick", action="store_true", help="CPU-sized: 1 prompt, T=32, fewer linear K")
    p.add_argument("--target", default="default",
                   help=f"pair of (b) and (c), as ModelPair.named takes it: default, {', '.join(TINY_TARGETS)} (no weights "
                        "needed) or a local path 'target[,draft]'")
    p.add_argument("--drafter", choices=PAIR_DRAFTS, default="auto", help="default pair's drafter")
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"which of {','.join(SECTIONS)} (default all)")
    p.add_argument("--tests", default=",".join(DEFAULT_TESTS), help="test files of (a), comma-separated")
    p.add_argument("--pytest-k", default=None, help="pytest -k expression for (a) (default: all tests)")
    p.add_argument("--dtypes", default=",".join(DTYPES), help="dtypes of (b) (float32 is the reference)")
    p.add_argument("--datasets", default="wikitext2,pg19", help="datasets of (c)")
    p.add_argument("--bench-dtype", default="float32", choices=DTYPES,
                   help="dtype of the bench and fastpath sections (default float32; bfloat16 for the bf16 table)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    for key, val in FULL.items():  # sizes: defaults from FULL, or QUICK with --quick
        p.add_argument("--" + key.replace("_", "-"), dest=key, type=type(val), default=None,
                       help=f"default {val} ({QUICK[key]} with --quick)")
    args = p.parse_args(argv)
    for key, val in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, val)
    args.argv = argv
    args.sections = [x for x in args.sections.split(",") if x]
    bad = [x for x in args.sections if x not in SECTIONS]
    if bad:
        p.error(f"unknown section(s) {bad}; choose from {SECTIONS}")
    from dynatree_core.pairs.named import check_pair_name  # torch: after the budget's clock starts

    try:
        check_pair_name(args.target, args.drafter)
    except ValueError as e:
        p.error(str(e))
    args.tests = [x for x in args.tests.split(",") if x]
    args.dtypes = [x for x in args.dtypes.split(",") if x]
    args.datasets = [x for x in args.datasets.split(",") if x]
    args.linear_k = [int(x) for x in str(args.linear_k).split(",") if x]
    args.presets = [x for x in str(args.presets).split(",") if x]
    args.policies = [x for x in str(args.policies).split(",") if x and x != "none"]
    args.base_methods = [x for x in str(args.base_methods).split(",") if x]
    if any(m not in ("ar", "linear", "fixed_tree") for m in args.base_methods):
        p.error(f"--base-methods {','.join(args.base_methods)!r}: each must be one of ar,linear,fixed_tree")
    from dynatree_core.runtime.static.fast_path import RUNTIMES

    named = [r for r in RUNTIMES if r != "auto"]  # side by side: each runtime by its name
    for opt in ("runtimes", "exact_runtimes"):
        setattr(args, opt, [x for x in str(getattr(args, opt)).split(",") if x])
        if not getattr(args, opt) or any(r not in named for r in getattr(args, opt)):
            p.error(f"--{opt.replace('_', '-')} {','.join(getattr(args, opt))!r}: each must be one of "
                    f"{','.join(named)} (e.g. eager,graphs,compiled)")
    args.out = Path(args.out)
    return args


def main(argv: list[str] | None = None) -> int:
    budget = Budget(0.0)  # the clock starts before the imports
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    budget.total_s = args.budget_s
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    args.out.mkdir(parents=True, exist_ok=True)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    report = Report(args.out, config)
    proc_slot: dict[str, Any] = {}
    watchdog = start_watchdog(report, budget, proc_slot)

    def env_body(sec: dict[str, Any], deadline: float) -> None:
        from dynatree_core.pairs.pair import resolve_device

        args.device = str(resolve_device(args.device))
        report.doc["config"]["device"] = args.device
        sec["info"] = environment(args.device)

    run_section(report, budget, "environment", 60.0, env_body)
    env_ok = report.section("environment")["status"] == "ok"
    pairs: dict[str, Any] = {}
    bodies = {"exactness": lambda sec, dl: section_exactness(sec, dl, args, proc_slot),
              "precision": lambda sec, dl: section_precision(sec, dl, args, pairs),
              "bench": lambda sec, dl: section_bench(sec, dl, args, pairs, report=report),
              "exact": lambda sec, dl: section_exact(sec, dl, args, pairs, report),
              "fastpath": lambda sec, dl: section_fastpath(sec, dl, args, pairs, report.section("bench"))}
    for name in SECTIONS:
        if not env_ok:
            report.section(name).update(status="skipped", reason="the environment section did not complete")
        elif name in args.sections:
            run_section(report, budget, name, getattr(args, f"limit_{name}"), bodies[name])
        else:
            report.section(name).update(status="skipped", reason="not in --sections")
    watchdog.cancel()
    report.doc["status"] = "complete"
    return finish(report, budget)


if __name__ == "__main__":
    sys.exit(main())

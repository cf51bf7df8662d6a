"""Where the time goes on a benchmark passage, eager, static (the fast path run eagerly) and compiled (issue 42):
torch.profiler over AR and DynaTree's `cpu` preset on the default pair, one WikiText-2 passage of the benchmark
(256-token prompt, seed 0),
after a warm-up run on the same runtime (compilation paid there); per cell the ops with the most self CPU time,
the engine's phases (draft, verify, forward, wall) and dynamo's counters after the warm-up. The freezing mode is
``$DYNATREE_COMPILE_FREEZING`` (compile_cache.FREEZING_MODES). Writes profile-<mode>.json beside this file.

    DYNATREE_COMPILE_FREEZING=prepack python docs/bench/2026-11-28-runtime-best/profile_passage.py
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import time
from pathlib import Path

import torch
import transformers

from dynatree_core import DynaTreeConfig, ModelPair, generate
from dynatree_core.bench.data import bundled_corpus, hf_tokenize, select_prompts


def counters() -> dict:
    from torch._dynamo.utils import counters as c
    return {group: {str(k): int(v) for k, v in c[group].items()} for group in ("stats", "graph_break", "recompiles")
            if group in c}


def profile_cell(pair, prompt: list[int], method: str, runtime: str, tokens: int) -> dict:
    cfg = DynaTreeConfig.cpu() if method == "dynatree" else None
    t0 = time.perf_counter()
    warm = generate(pair, prompt, method, cfg, max_new_tokens=tokens, ignore_eos=True, runtime=runtime)
    warm_s = time.perf_counter() - t0
    plain = generate(pair, prompt, method, cfg, max_new_tokens=tokens, ignore_eos=True, runtime=runtime)
    torch._dynamo.utils.counters.clear()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        res = generate(pair, prompt, method, cfg, max_new_tokens=tokens, ignore_eos=True, runtime=runtime)
    assert res.tokens == warm.tokens == plain.tokens
    table = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in table)
    top = sorted(table, key=lambda e: -e.self_cpu_time_total)[:25]
    m, q = res.metrics, plain.metrics
    return {"method": method, "runtime": runtime, "warmup_wall_s": round(warm_s, 2),
            "tokens_per_s_unprofiled": q.tokens_per_s, "tokens_per_s_profiled": m.tokens_per_s,
            "iterations": q.iterations, "L_bar": q.tokens_per_iteration,
            "phases_s_unprofiled": {"draft": q.draft_time_s, "verify": q.verify_time_s, "forward": q.forward_time_s,
                                    "wall": q.wall_time_s},
            "profiler_self_cpu_ms": total / 1e3,
            "top_ops": [{"op": e.key, "self_cpu_ms": round(e.self_cpu_time_total / 1e3, 2), "calls": e.count,
                         "share": round(e.self_cpu_time_total / total, 4)} for e in top],
            "dynamo_after_warmup": counters(), "tokens": res.tokens}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=96)
    args = ap.parse_args()
    mode = os.environ.get("DYNATREE_COMPILE_FREEZING", "prepack")
    pair = ModelPair.named("default")
    chosen, _ = select_prompts(bundled_corpus("wikitext2"), hf_tokenize(pair.tokenizer), 1, 256, seed=0)
    prompt = list(chosen[0].token_ids)
    cells = []
    for runtime in ("eager", "static", "compiled"):
        for method in ("ar", "dynatree"):
            cells.append(profile_cell(pair, prompt, method, runtime, args.tokens))
            c = cells[-1]
            print(f"{method} {runtime}: {c['tokens_per_s_unprofiled']:.1f} tok/s, L̄ {c['L_bar']:.2f}, warm-up "
                  f"{c['warmup_wall_s']:.0f} s, phases {c['phases_s_unprofiled']}", flush=True)
            for op in c["top_ops"][:10]:
                print(f"   {op['share']:6.1%} {op['self_cpu_ms']:9.1f} ms {op['calls']:6d}x  {op['op']}")
            print("   dynamo:", json.dumps(c["dynamo_after_warmup"])[:400], flush=True)
    same = all(c["tokens"] == cells[0]["tokens"] for c in cells)
    out = {"schema_version": 1, "kind": "runtime-profile",
           "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
           "config": {"tokens": args.tokens, "pair": "default", "prompt": "WikiText-2, benchmark passage 0 (seed 0)",
                      "prompt_tokens": len(prompt), "freezing": mode, "threads": torch.get_num_threads()},
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
           "machine": platform.platform(), "all_tokens_equal": same,
           "cells": [{k: v for k, v in c.items() if k != "tokens"} for c in cells]}
    Path(__file__).with_name(f"profile-{mode}.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Where the time goes, eager against compiled (issue 42, part 1): torch.profiler over AR and DynaTree's `cpu`
preset on the default pair, one WikiText-2-like prompt, after a warm-up run on the same runtime (compilation is
paid there and reported apart as capture_s); the ops with the most self CPU time, the phases the engine times,
and dynamo's counters (frames, recompiles, graph breaks and their reasons). Writes profile.json beside this file.

    python docs/bench/2026-11-28-compile-profile/profile_runtimes.py [--tokens 48]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import time
from collections import Counter
from pathlib import Path

import torch
import transformers

from dynatree_core import DynaTreeConfig, ModelPair, generate

PROMPT = ("The river flows through the old town, past the mill and the church. In the spring the water rises and "
          "the river floods the lower streets, and the people of the town carry their furniture upstairs. ") * 3


def counters() -> dict:
    from torch._dynamo.utils import counters as c
    return {group: {str(k): int(v) for k, v in c[group].items()} for group in ("stats", "graph_break", "recompiles")
            if group in c}


def profile_cell(pair, method: str, runtime: str, tokens: int) -> dict:
    cfg = DynaTreeConfig.cpu() if method == "dynatree" else None
    t0 = time.perf_counter()
    warm = generate(pair, PROMPT, method, cfg, max_new_tokens=tokens, ignore_eos=True, runtime=runtime)
    warm_s = time.perf_counter() - t0
    torch._dynamo.utils.counters.clear()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        res = generate(pair, PROMPT, method, cfg, max_new_tokens=tokens, ignore_eos=True, runtime=runtime)
    assert res.tokens == warm.tokens
    table = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in table)
    top = sorted(table, key=lambda e: -e.self_cpu_time_total)[:20]
    m = res.metrics
    return {"method": method, "runtime": runtime, "warmup_wall_s": warm_s, "tokens_per_s_profiled": m.tokens_per_s,
            "iterations": m.iterations, "L_bar": m.tokens_per_iteration,
            "phases_s": {"draft": m.draft_time_s, "verify": m.verify_time_s, "forward": m.forward_time_s,
                         "wall": m.wall_time_s},
            "profiler_self_cpu_ms": total / 1e3,
            "top_ops": [{"op": e.key, "self_cpu_ms": e.self_cpu_time_total / 1e3, "calls": e.count,
                         "share": e.self_cpu_time_total / total} for e in top],
            "dynamo_after_warmup": counters(), "tokens": res.tokens}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=48)
    args = ap.parse_args()
    pair = ModelPair.default()
    cells = []
    for runtime in ("eager", "compiled"):
        for method in ("ar", "dynatree"):
            cells.append(profile_cell(pair, method, runtime, args.tokens))
            c = cells[-1]
            print(f"{method} {runtime}: {c['tokens_per_s_profiled']:.1f} tok/s (profiled), warm-up {c['warmup_wall_s']:.0f} s",
                  flush=True)
            for op in c["top_ops"][:8]:
                print(f"   {op['share']:6.1%} {op['self_cpu_ms']:9.1f} ms {op['calls']:6d}x  {op['op']}")
            print("   dynamo:", json.dumps(c["dynamo_after_warmup"])[:400], flush=True)
    same = all(c["tokens"] == cells[0]["tokens"] for c in cells)
    out = {"schema_version": 1, "kind": "runtime-profile", "created": datetime.datetime.utcnow().isoformat() + "Z",
           "config": {"tokens": args.tokens, "pair": "default", "prompt_chars": len(PROMPT)},
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
           "machine": platform.platform(), "all_tokens_equal": same,
           "cells": [{k: v for k, v in c.items() if k != "tokens"} for c in cells]}
    Path(__file__).with_name("profile.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

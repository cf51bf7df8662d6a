"""Tokens/s of the data stage's decode loop, before (the dynamic loop) and after (the static loop),
on the real default target (SmolLM2-135M-Instruct, GGUF dequantized), same prompts, interleaved.

    python docs/bench/2026-11-28-teacher-data/bench_teacher_data.py --out docs/bench/2026-11-28-teacher-data/cpu.json

The prompts are the data stage's: generated everyday prompts (``kind_bank``) in chat and raw form,
sorted by length, so a batch is left-padded as in a real job. Each repeat runs every writer once, in
turn (dynamic, static, ...), greedy then sampled (T 0.8, top-p 0.95, as ``--gen-temperature`` /
``--gen-top-p``), from the same seed; the outputs of all writers are compared token for token.
``--profile`` adds the top operators of one greedy batch per writer (torch.profiler, CPU time).
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import time

import torch

from dynatree_core.distill.decode import decode, eos_ids
from dynatree_core.distill.prompts import chat_ids, kind_bank, raw_ids
from dynatree_core.pairs.default_pair import load_target


def prompts(tok, rows: int, seed: int) -> list[list[int]]:
    items = [ids for _, p in kind_bank(rows // 2, seed) for ids in (chat_ids(tok, p), raw_ids(tok, p))]
    return sorted(items, key=len)[:rows]


def once(model, batch, new, stop, writer, sample) -> tuple[float, list]:
    torch.manual_seed(0)
    t0 = time.perf_counter()
    out = decode(model, batch, new, stop, sample, 0.8, 0.95, runtime=writer)
    return time.perf_counter() - t0, out


def profile(model, batch, new, stop, writer) -> list[dict]:
    from torch.profiler import ProfilerActivity, profile as prof

    with prof(activities=[ProfilerActivity.CPU]) as p:
        once(model, batch, new, stop, writer, False)
    rows = sorted(p.key_averages(), key=lambda e: -e.self_cpu_time_total)[:12]
    return [{"op": e.key, "calls": e.count, "self_ms": round(e.self_cpu_time_total / 1e3, 1)} for e in rows]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--writers", default="dynamic,static")
    ap.add_argument("--modes", default="greedy,sampled")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    target, tok = load_target(dtype=torch.float32)
    batch = prompts(tok, a.rows, 0)
    stop = eos_ids(target, tok)
    writers = a.writers.split(",")
    res = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
           "machine": platform.processor() or platform.machine(), "threads": a.threads, "rows": len(batch),
           "new_tokens": a.new, "prompt_lengths": [len(batch[0]), len(batch[-1])], "runs": [], "profile": {}}
    for dt in a.dtypes.split(","):
        model = target if dt == "float32" else copy.deepcopy(target).to(getattr(torch, dt))
        for sample in [m == "sampled" for m in a.modes.split(",")]:
            once(model, batch[:8], 4, stop, "static", sample)  # warm-up (allocator, kernels)
            outs = {}
            for r in range(a.repeats):
                for w in writers:
                    s, out = once(model, batch, a.new, stop, w, sample)
                    slots = len(batch) * len(out[0])
                    outs.setdefault(w, out)
                    res["runs"].append({"dtype": dt, "sample": sample, "writer": w, "repeat": r, "seconds": round(s, 3),
                                        "steps": len(out[0]), "tokens_per_s": round(slots / s, 1)})
                    print(json.dumps(res["runs"][-1]), flush=True)
            cut = {w: [g[:next((i + 1 for i, x in enumerate(g) if x in stop), len(g))] for g in o]
                   for w, o in outs.items()}
            res.setdefault("same_tokens", {})[f"{dt}/{'sampled' if sample else 'greedy'}"] = \
                all(c == cut[writers[0]] for c in cut.values())
        if a.profile:
            res["profile"][dt] = {w: profile(model, batch, a.new, stop, w) for w in writers}
    summary = {}
    for run in res["runs"]:
        key = f"{run['dtype']}/{'sampled' if run['sample'] else 'greedy'}/{run['writer']}"
        summary.setdefault(key, []).append(run["tokens_per_s"])
    res["median_tokens_per_s"] = {k: statistics.median(v) for k, v in summary.items()}
    print(json.dumps({k: res[k] for k in ("median_tokens_per_s", "same_tokens")}, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()

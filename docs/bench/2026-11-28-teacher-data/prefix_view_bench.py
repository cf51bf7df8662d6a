"""The static loop with its prefix view (issue 51's CPU goal: not slower than the dynamic loop) against the
dynamic loop and against itself reading all L slots (the loop before the prefix view), at batch 64 on the
default target, interleaved: each round runs the writers in a rotated order, on the same prompts.

    python docs/bench/2026-11-28-teacher-data/prefix_view_bench.py --rounds 3 --new 32 --out <json>
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_teacher_data import prompts  # noqa: E402  (the bench's prompts: the data stage's, sorted by length)

from dynatree_core.distill.decode import _decode_batch, eos_ids  # noqa: E402
from dynatree_core.distill.static_decode import StaticWriter  # noqa: E402
from dynatree_core.pairs.default_pair import load_target  # noqa: E402


def run(model, batch, new, stop, writer: str) -> tuple[float, list]:
    t0 = time.perf_counter()
    if writer == "dynamic":
        out = _decode_batch(model, batch, new, stop, False, 1.0, 1.0)
    else:
        w = StaticWriter(model, batch, new, stop, False, 1.0, 1.0)
        if writer == "static-full":
            w.view_slots = lambda n: w.L  # every step reads all L slots, as before the prefix view
        out = w.run()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--writers", default="dynamic,static,static-full")
    ap.add_argument("--out")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    target, tok = load_target(dtype=torch.float32)
    batch, stop = prompts(tok, a.rows, 0), set()  # no stop: every run writes all its steps
    writers = a.writers.split(",")
    with torch.no_grad():
        run(target, batch[:8], 4, stop, "static")  # warm-up
        res = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": len(batch), "new": a.new,
               "prompt_lengths": [len(batch[0]), len(batch[-1])], "threads": a.threads, "runs": []}
        outs = {}
        for r in range(a.rounds):
            for w in writers[r % len(writers):] + writers[:r % len(writers)]:
                s, out = run(target, batch, a.new, stop, w)
                outs.setdefault(w, out)
                res["runs"].append({"round": r, "writer": w, "seconds": round(s, 3),
                                    "tokens_per_s": round(len(batch) * len(out[0]) / s, 1)})
                print(json.dumps(res["runs"][-1]), flush=True)
    res["median_tokens_per_s"] = {w: statistics.median(x["tokens_per_s"] for x in res["runs"] if x["writer"] == w)
                                  for w in writers}
    res["same_tokens"] = all(o == outs["dynamic"] for o in outs.values())
    print(json.dumps({k: res[k] for k in ("median_tokens_per_s", "same_tokens")}))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()

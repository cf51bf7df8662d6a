"""Host time of the draft phase on a tiny pair, where forwards are nearly free (issue 49).

Runs the decode loop on the tiny Llama pair (forwards of a few microseconds) for a few policies on a
given runtime and prints, per policy, the draft phase's seconds per iteration and per level *run*
(the drafter's forwards: the device-resident phase runs every level, padding included), the host
reads per iteration and the tokens. The code measured is whatever ``dynatree_core`` imports, so
``run.sh`` runs this file once against the code before the change and once after, alternately.

    PYTHONPATH=<checkout> python host_time.py --runtime static --out after.json
    PYTHONPATH=<checkout> python host_time.py --runtime compiled --mix --out after.json   # the regions compiled
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch

from dynatree_core import generate
from dynatree_core.drafters import LookupMix
from dynatree_core.pairs.tiny import tiny_pair
from dynatree_core.policy.config import DynaTreeConfig, Eagle2Config, LinearConfig

POLICIES = {"linear": ("linear", LinearConfig(k=3)), "dynatree:cpu": ("dynatree", DynaTreeConfig.cpu()),
            "dynatree:gpu": ("dynatree", DynaTreeConfig.gpu()), "eagle2": ("eagle2", Eagle2Config())}
PROMPT = [5, 9, 14, 3, 22, 7, 31, 12, 18, 4, 9, 14, 3, 22, 7, 31, 12, 5, 9, 14]


def measure(runtime: str, tokens: int, repeats: int, mix: bool = False) -> dict:
    torch.manual_seed(0)
    pair = tiny_pair("llama", noise=0.05)
    if mix:  # prompt lookup mixed into the draft, as in the default pair
        pair = dataclasses.replace(pair, lookup=LookupMix())
    out = {}
    for name, (method, cfg) in POLICIES.items():
        generate(pair, PROMPT, method, cfg, max_new_tokens=tokens, ignore_eos=True, runtime=runtime)  # builds
        rows = []
        for _ in range(repeats):
            before = time.perf_counter()
            res = generate(pair, PROMPT, method, cfg, max_new_tokens=tokens, ignore_eos=True, runtime=runtime)
            m = res.metrics
            rows.append({"wall_s": time.perf_counter() - before, "draft_s": m.draft_time_s,
                         "iterations": m.iterations, "draft_forwards": m.draft_forwards,
                         "syncs_per_iteration": m.host_syncs_per_iteration, "tokens": res.tokens})
        best = min(rows, key=lambda r: r["draft_s"])
        out[name] = {"draft_ms_per_iteration": 1e3 * best["draft_s"] / best["iterations"],
                     "draft_ms_per_level": 1e3 * best["draft_s"] / max(1, best["draft_forwards"]),
                     "levels_per_iteration": best["draft_forwards"] / best["iterations"],
                     "syncs_per_iteration": best["syncs_per_iteration"], "tokens": best["tokens"], "runs": rows}
        print(f"{name:14s} draft {out[name]['draft_ms_per_iteration']:7.3f} ms/it  "
              f"{out[name]['draft_ms_per_level']:6.3f} ms/level  levels/it {out[name]['levels_per_iteration']:5.2f}  "
              f"syncs/it {out[name]['syncs_per_iteration']:.2f}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", default="static")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mix", action="store_true", help="mix prompt lookup into the draft (LookupMix)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    res = {"runtime": args.runtime, "tokens": args.tokens, "repeats": args.repeats, "torch": torch.__version__,
           "mix": args.mix, "policies": measure(args.runtime, args.tokens, args.repeats, args.mix)}
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()

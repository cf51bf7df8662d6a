"""Decode-step cost of the embedded target and its feature draft on each linear kernel.

The same measurement as ``dynatree distill --kind feature --eval-only`` (one cached token, median of
40 steps, the better of two runs), on the same 128-token context of training text (WikiText-2
validation), alternating torch's kernels and prepacked oneDNN so that drift hits both alike.
Usage: python docs/bench/2026-11-27-linear-kernels/step_cost_by_kernel.py [--rounds 2] [--threads 2]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from dynatree_core import ModelPair
from dynatree_core.distill import evaluation as ev
from dynatree_core.distill.feature import feature_step_cost


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = ModelPair.default(draft="feature", linear_kernel="torch")
    root = Path(__file__).resolve().parents[4] / "shared" / "data" / "wikitext-2-raw" / "wiki.valid.raw"
    ctx = pair.tokenizer(root.read_text(encoding="utf-8")[20000:30000])["input_ids"][:128]
    for _ in range(args.rounds):
        for kernel in ("torch", "onednn"):
            pair.use_linear_kernel(kernel)
            ct = min(ev._step_cost(pair.target, ctx, 40), ev._step_cost(pair.target, ctx, 40))
            cd = min(feature_step_cost(pair.draft, pair.target, ctx, 40),
                     feature_step_cost(pair.draft, pair.target, ctx, 40))
            print(f"{kernel:>7}: target {1e3 * ct:.2f} ms, feature draft {1e3 * cd:.2f} ms = {100 * cd / ct:.1f}%",
                  flush=True)


if __name__ == "__main__":
    main()

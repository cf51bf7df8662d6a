"""Tune the CPU preset on *training* text (WikiText-2 validation), never on the test split.

Runs AR, linear (several K), fixed trees and DynaTree variants on a few validation passages with
the default pair and prints throughput ratios against AR measured in the same run, L-bar and
forward counts. Usage: python scripts/tune_cpu_preset.py [--prompts 2] [--tokens 96] [--drafter auto|feature|model|feature+lookup|...]
       [--n-max 8,12] [--b-max 2,3] [--b-min 1,2]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from dynatree_core import DynaTreeConfig, FixedTreeConfig, LinearConfig, ModelPair, generate
from dynatree_core.pairs.choices import PAIR_DRAFTS
from dynatree_core.policy.config import ARConfig


def passages(tok, n: int, length: int) -> list[list[int]]:
    root = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikitext-2-raw" / "wiki.valid.raw"
    text = root.read_text(encoding="utf-8")
    arts = [a for a in text.split("\n = ") if len(a) > 4000]
    return [tok(a)["input_ids"][:length] for a in arts[1:1 + n]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--drafter", choices=PAIR_DRAFTS, default="auto")
    ap.add_argument("--n-max", default="8,12,16,24,32,48", help="DynaTree N_max values to try")
    ap.add_argument("--b-max", default="2,3", help="DynaTree B_max values to try")
    ap.add_argument("--b-min", default="1", help="DynaTree B_min values to try (B_mid is max(2, B_min))")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = ModelPair.named("default", drafter=args.drafter, device="cpu")
    print(f"drafter: {pair.drafter_kind}", flush=True)
    prompts = passages(pair.tokenizer, args.prompts, args.prompt_len)
    cells = [("ar", ARConfig())]
    cells += [("linear", LinearConfig(k=k)) for k in (2, 3, 4, 5, 6)]
    cells += [("fixed_tree", FixedTreeConfig(d=d, b=b, n_max=n)) for d, b, n in ((3, 2, 256), (4, 2, 256), (5, 2, 256))]
    cells += [("dynatree", DynaTreeConfig.paper())]
    for n_max in (int(x) for x in args.n_max.split(",")):
        for b_max in (int(x) for x in args.b_max.split(",")):
            for b_min in (int(x) for x in args.b_min.split(",")):
                if b_min <= b_max:
                    cells.append(("dynatree", DynaTreeConfig.cpu(n_max=n_max, b_min=b_min, b_mid=max(2, b_min),
                                                                 b_max=b_max)))
    generate(pair, prompts[0], "ar", max_new_tokens=8, ignore_eos=True)  # warm up
    base = None
    ar_tokens = {}
    for method, cfg in cells:
        tps, lbar, tfw, dfw, exact = [], [], [], [], True
        for i, p in enumerate(prompts):
            r = generate(pair, p, method, cfg, max_new_tokens=args.tokens, ignore_eos=True)
            tps.append(r.metrics.tokens_per_s)
            lbar.append(r.metrics.tokens_per_iteration)
            tfw.append(r.metrics.target_forwards_per_token)
            dfw.append(r.metrics.draft_forwards_per_iteration or 0)
            if method == "ar":
                ar_tokens[i] = r.tokens
            exact &= r.tokens == ar_tokens[i]
        t = statistics.mean(tps)
        base = base or t
        desc = {k: v for k, v in cfg.to_dict().items() if k not in ("kv_mode", "trace_top_k", "history", "method")}
        print(f"{method:10s} x{t / base:5.2f} tps={t:6.2f} L={statistics.mean(lbar):5.2f} "
              f"tfw/tok={statistics.mean(tfw):.3f} dfw/it={statistics.mean(dfw):4.1f} exact={exact} {desc}", flush=True)


if __name__ == "__main__":
    main()

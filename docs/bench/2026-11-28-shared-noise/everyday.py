"""Everyday prompts at temperature 0.7: the held-out distillation prompts (topics never in any training
prompt), in the chat template an instruct model's users send, decoded by AR, linear (K = 3) and
DynaTree's cpu preset with shared and with independent draft noise, under verify="match" (every output
must equal seeded AR's). Prompt by prompt, every method in turn (as the benchmark does), the first W
prompts warm-up; speedup = a method's mean tokens/s over AR's, in one run. Run it on an idle machine.

    python docs/bench/2026-11-28-shared-noise/everyday.py [--prompts 17] [--warmup 1] [--tokens 96]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
from pathlib import Path

import numpy as np
import torch
import transformers
from tqdm import tqdm

from dynatree_core import DynaTreeConfig, ModelPair, generate
from dynatree_core.distill.prompts import EVAL_PROMPTS, chat_ids
from dynatree_core.policy.config import LinearConfig
from dynatree_core.policy.sampling import SamplingConfig

METHODS = [("ar", "ar", None, None), ("linear:k=3", "linear", LinearConfig(k=3), "shared"),
           ("linear:k=3", "linear", LinearConfig(k=3), "none"), ("dynatree:cpu", "dynatree", DynaTreeConfig.cpu(), "shared"),
           ("dynatree:cpu", "dynatree", DynaTreeConfig.cpu(), "none")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=17)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--temperature", type=float, default=0.7)
    args = ap.parse_args()
    torch.set_num_threads(2)
    pair = ModelPair.default()
    prompts = [chat_ids(pair.tokenizer, p) for p in EVAL_PROMPTS[:args.prompts]]
    rows = []
    for i, ids in enumerate(tqdm(prompts, desc="prompts")):
        ar_tokens = None
        for label, method, config, noise in METHODS:
            cfg = SamplingConfig(temperature=args.temperature, seed=i, draft_noise=noise)
            res = generate(pair, ids, method, config, max_new_tokens=args.tokens, ignore_eos=True, sampling=cfg)
            ar_tokens = res.tokens if method == "ar" else ar_tokens
            m = res.metrics
            rows.append({"prompt": i, "label": label, "draft_noise": noise, "tokens_per_s": m.tokens_per_s,
                         "L_bar": m.tokens_per_iteration, "acceptance": m.acceptance_rate,
                         "equal_to_ar": res.tokens == ar_tokens})
    measured = [r for r in rows if r["prompt"] >= args.warmup]
    table = []
    ar_speed = np.mean([r["tokens_per_s"] for r in measured if r["label"] == "ar"])
    for label, _, _, noise in METHODS:
        cell = [r for r in measured if r["label"] == label and r["draft_noise"] == noise]
        table.append({"label": label, "draft_noise": noise, "tokens_per_s": float(np.mean([r["tokens_per_s"] for r in cell])),
                      "speedup": float(np.mean([r["tokens_per_s"] for r in cell]) / ar_speed),
                      "L_bar": float(np.mean([r["L_bar"] for r in cell])),
                      "acceptance": float(np.mean([r["acceptance"] or 0.0 for r in cell]))})
        print(table[-1], flush=True)
    out = {"schema_version": 1, "kind": "everyday-prompts-sampling", "created": datetime.datetime.utcnow().isoformat() + "Z",
           "config": {**vars(args), "form": "chat template", "prompts_source": "dynatree_core.distill.prompts.EVAL_PROMPTS",
                      "verify": "match", "pair": "default"},
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
           "machine": platform.platform(), "all_equal_to_ar": all(r["equal_to_ar"] for r in rows),
           "table": table, "rows": rows}
    Path(__file__).with_name("everyday.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

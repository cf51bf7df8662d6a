"""How well softmax(s / beta) of the draft's perturbed scores s = log q + g predicts where the target's
coupled draw lands, and which beta fits: on *training* text (never the evaluation passages), the
default pair, linear drafting (one node per level, so each draft row pairs with the target's draw
after it), temperatures 0.7 and 1.0. Writes fit.json beside this file.

    python docs/bench/2026-11-28-shared-noise/fit_coupling_scale.py [--passages 6] [--tokens 96]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import random
from pathlib import Path

import numpy as np
import torch
import transformers
from tqdm import tqdm

from dynatree_core import ModelPair, generate
from dynatree_core.paths import data_dir_candidates
from dynatree_core.policy.config import LinearConfig
from dynatree_core.policy.sampling import SamplingConfig, coupling_scale
from dynatree_core.runtime import sampling as rs

BETAS = [0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0, 3.0]


def training_prompts(n: int, seed: int = 0) -> list[str]:
    root = next(d / "gutenberg-train" for d in data_dir_candidates() if (d / "gutenberg-train").is_dir())
    files = sorted(root.glob("*.txt"))
    rng = random.Random(seed)
    out = []
    for f in rng.sample(files, n):
        text = f.read_text(errors="ignore")
        start = rng.randrange(len(text) // 5, len(text) - 3000)
        out.append(text[start:start + 1200])
    return out


def collect(pair: ModelPair, prompts: list[str], temperature: float, tokens: int) -> tuple[list, list]:
    """(score rows, target draws): each linear level's perturbed scores and the target's draw there."""
    rows, draws, level_rows = [], [], []
    orig_coupled, orig_choose = rs.DraftSampler.coupled, rs.TargetSampler.choose

    def coupled(self, logq, k, vocab_ids, position):
        level_rows.append(self.perturbed(logq, vocab_ids, position)[0].float())
        return orig_coupled(self, logq, k, vocab_ids, position)

    def choose(self, logits, depths, deepest, prefix_len, draft=None):
        out = orig_choose(self, logits, depths, deepest, prefix_len, draft)
        for i, r in enumerate(level_rows):  # node i's row: the draft's scores for the token after node i
            rows.append(r)
            draws.append(int(out.tokens[i]))
        level_rows.clear()
        return out

    rs.DraftSampler.coupled, rs.TargetSampler.choose = coupled, choose
    try:
        for i, p in enumerate(tqdm(prompts, desc=f"T={temperature}")):
            cfg = SamplingConfig(temperature=temperature, seed=i)
            generate(pair, p, "linear", LinearConfig(k=4), max_new_tokens=tokens, ignore_eos=True, sampling=cfg)
    finally:
        rs.DraftSampler.coupled, rs.TargetSampler.choose = orig_coupled, orig_choose
    return rows, draws


def ece(pred: np.ndarray, hit: np.ndarray, bins: int = 10) -> float:
    idx = np.minimum((pred * bins).astype(int), bins - 1)
    return float(sum(abs(pred[idx == b].mean() - hit[idx == b].mean()) * (idx == b).sum()
                     for b in range(bins) if (idx == b).any()) / len(pred))


def evaluate(rows: list, draws: list, temperature: float) -> dict:
    s = torch.stack(rows).double()
    y = torch.tensor(draws)
    top = s.argmax(-1)
    hit = (top == y).numpy().astype(float)
    out = {"positions": len(draws), "first_child_agreement": float(hit.mean()), "by_beta": {}}
    for beta in BETAS + [coupling_scale(temperature)]:  # the last: the engine's beta_0 / T
        logc = torch.log_softmax(s / beta, -1)
        conf = logc.gather(1, top[:, None])[:, 0].exp().numpy()
        out["by_beta"][str(beta)] = {"nll": float(-logc.gather(1, y[:, None]).mean()),
                                     "conf_mean": float(conf.mean()), "ece": ece(conf, hit)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--passages", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=96)
    args = ap.parse_args()
    torch.manual_seed(0)
    pair = ModelPair.default()
    prompts = training_prompts(args.passages)
    res = {"schema_version": 1, "kind": "coupling-scale-fit", "created": datetime.datetime.utcnow().isoformat() + "Z",
           "config": {"passages": args.passages, "tokens": args.tokens, "method": "linear k=4", "pair": "default",
                      "text": "gutenberg-train (training text)", "betas": BETAS},
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
           "machine": platform.platform(), "results": {}}
    for t in (0.7, 1.0):
        res["results"][str(t)] = evaluate(*collect(pair, prompts, t, args.tokens), t)
        print(t, json.dumps(res["results"][str(t)], indent=1), flush=True)
    Path(__file__).with_name("fit.json").write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()

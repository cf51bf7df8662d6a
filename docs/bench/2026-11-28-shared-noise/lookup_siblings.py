"""How prompt lookup's proposals should enter under shared draft noise: *coupled* (the shipped rule:
the mixture q = λ r + (1 - λ) q_D is ranked by log q + g like any draft's) or kept as *extra siblings*
(the model draft's q_D alone is ranked by log q_D + g, and the lookup's most frequent follower takes
the last candidate slot when it is not already among the first B - 1, with λ r as its probability).
Acceptance and L̄ only (no timings: they do not depend on the machine's load), DynaTree's cpu preset,
the default pair, on the benchmark's seed-0 passages of both datasets, temperatures 0.7 and 1.0.

    python docs/bench/2026-11-28-shared-noise/lookup_siblings.py [--prompts 6] [--tokens 96]
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
from dynatree_core.bench.data import hf_tokenize, load_corpus, select_prompts
from dynatree_core.drafters import Proposal
from dynatree_core.drafters import mix as mix_module
from dynatree_core.policy.sampling import SamplingConfig
from dynatree_core.runtime.sampling import dense


def sibling_mix(self, tree, ids, level):
    """The variant: the model draft ranked by its own perturbed scores, the lookup's top follower
    as the last sibling (its probability λ r), the rest unchanged."""
    s = self.ctx.sampler
    scores, vocab_ids = self.base.level_scores(tree, ids, level)
    m = self.lookup.matches(tree, ids, level)
    first = self._sampled(tree, ids, level, scores, vocab_ids)
    tokens, logc = first.tokens, first.logps
    lam = self.mix.weights(m)
    r = dense(s.log_q(m.log_shares()).exp(), m.tokens, s.vocab_size, 0.0)
    best = r.argmax(-1)
    weight = lam * r.gather(1, best[:, None])[:, 0]
    k = tokens.shape[1]
    already = (tokens[:, :max(k - 1, 1)] == best[:, None]).any(-1)
    use = (weight > 0) & ~already
    tokens, logc = tokens.clone(), logc.clone()
    tokens[:, -1] = torch.where(use, best, tokens[:, -1])
    logc[:, -1] = torch.where(use, weight.log().float(), logc[:, -1])
    order = logc.argsort(-1, descending=True)  # the tree reads candidates sorted by probability
    return Proposal(tokens.gather(1, order), logc.gather(1, order))


def run(pair, prompts, temperature, tokens, variant):
    original = mix_module.MixDrafter._sampled_mix
    if variant == "siblings":
        mix_module.MixDrafter._sampled_mix = sibling_mix
    try:
        out = []
        for i, p in enumerate(tqdm(prompts, desc=f"{variant} T={temperature}")):
            res = generate(pair, p, "dynatree", DynaTreeConfig.cpu(), max_new_tokens=tokens, ignore_eos=True,
                           sampling=SamplingConfig(temperature=temperature, seed=i))
            out.append((res.metrics.tokens_per_iteration, res.metrics.acceptance_rate))
    finally:
        mix_module.MixDrafter._sampled_mix = original
    return {"L_bar": float(np.mean([o[0] for o in out])), "acceptance": float(np.mean([o[1] for o in out]))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=96)
    args = ap.parse_args()
    pair = ModelPair.default()
    tok = hf_tokenize(pair.tokenizer)
    res = {"schema_version": 1, "kind": "lookup-under-shared-noise",
           "created": datetime.datetime.utcnow().isoformat() + "Z",
           "config": {"prompts": args.prompts, "tokens": args.tokens, "method": "dynatree cpu", "pair": "default",
                      "text": "benchmark passages (seed 0), L_max 256"},
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
           "machine": platform.platform(), "results": {}}
    for ds in ("wikitext2", "pg19"):
        prompts = [p.token_ids for p in select_prompts(load_corpus(ds), tok, args.prompts, 256, seed=0)[0]]
        for t in (0.7, 1.0):
            for variant in ("coupled", "siblings"):
                res["results"][f"{ds} T={t} {variant}"] = r = run(pair, prompts, t, args.tokens, variant)
                print(ds, t, variant, r, flush=True)
    Path(__file__).with_name("lookup_siblings.json").write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()

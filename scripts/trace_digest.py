"""Every method's trace on the tiny pairs, timings stripped: a behaviour fingerprint for refactors.

A refactor that claims "behaviour unchanged" runs this before and after and compares the two files
(``cmp`` or ``--compare``): the same tokens, trees, masks, target predictions, history states and
counters, for every method, drafter kind and both tiny architectures, greedy and sampled. Wall-clock fields (timings,
peak memory, versions, tokens/s) are dropped: they are the only things allowed to differ.

    python scripts/trace_digest.py --out /tmp/before.json
    python scripts/trace_digest.py --out /tmp/after.json --compare /tmp/before.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

import torch

from dynatree_core import generate
from dynatree_core.policy.config import (DynaTreeConfig, Eagle2Config, FixedTreeConfig, LinearConfig,
                                  SequoiaConfig)
from dynatree_core.policy.cost_model import CostModel
from dynatree_core.drafters import LookupMix, PromptLookup
from dynatree_core.pairs.tiny import tiny_feature_pair, tiny_pair

#: keys whose values are measurements of the machine, not of the algorithm
VOLATILE = {"timings", "wall_s", "tokens_per_s", "peak_memory", "versions", "elapsed_s", "created",
            "time_s", "ms", "host", "machine", "prefill_s", "draft_s_measured"}
#: repeats, so prompt lookup finds n-grams
PROMPT = [5, 9, 14, 3, 22, 7, 31, 12, 18, 4, 9, 14, 3, 22, 7, 31, 12, 5, 9, 14]
#: greedy, and sampled under both verifications (shared and independent draft noise under match)
SAMPLING = {"greedy": {},
            "match": {"temperature": 0.8, "seed": 3},
            "match-none": {"temperature": 0.8, "seed": 3, "draft_noise": "none"},
            "rejection": {"temperature": 0.8, "seed": 3, "verify": "rejection"}}
COST = CostModel(verify_s=(0.010, 0.011, 0.012, 0.014, 0.016, 0.019, 0.023, 0.028), draft_s=0.002)


def configs() -> dict[str, tuple[str, object]]:
    """Every policy and the presets, each in a small setting."""
    return {
        "ar": ("ar", None),
        "linear": ("linear", LinearConfig(k=3)),
        "fixed_tree": ("fixed_tree", FixedTreeConfig(d=3, b=2, tau=0.0, n_max=12)),
        "dynatree": ("dynatree", DynaTreeConfig(d0=3, d_max=5, n_max=16)),
        "dynatree:cpu": ("dynatree", DynaTreeConfig.cpu()),
        "dynatree:gpu": ("dynatree", DynaTreeConfig.gpu(n_max=20)),
        "dynatree:cost": ("dynatree", DynaTreeConfig(cost_aware=True, cost=COST, d0=3, d_max=5)),
        "eagle2": ("eagle2", Eagle2Config(k=3, depth=3, n_total=10)),
        "sequoia": ("sequoia", SequoiaConfig(n_max=8, d_max=4, acceptance=(0.5, 0.2, 0.1))),
    }


def volatile(key: str) -> bool:
    return key in VOLATILE or key.endswith(("_s", "_ms", "_bytes")) or "memory" in key


def strip(obj):
    if isinstance(obj, dict):
        return {k: strip(v) for k, v in obj.items() if not volatile(k)}
    if isinstance(obj, list):
        return [strip(v) for v in obj]
    return obj


def digest(n_tokens: int, runtime: str = "eager") -> dict:
    torch.manual_seed(0)
    pairs = {"llama": tiny_pair("llama", noise=0.05), "gpt_neox": tiny_pair("gpt_neox", noise=0.05),
             "feature": tiny_feature_pair()}
    pairs["lookup"] = dataclasses.replace(pairs["llama"], draft=PromptLookup())
    pairs["feature+lookup"] = dataclasses.replace(pairs["feature"], lookup=LookupMix())
    out = {}
    for pname, pair in pairs.items():
        for label, (method, cfg) in configs().items():
            for mode, kw in SAMPLING.items():
                if method == "ar" and kw.get("verify") == "rejection":
                    continue  # refused: AR drafts nothing to reject
                res = generate(pair, PROMPT, method=method, config=cfg, max_new_tokens=n_tokens, trace=True,
                               ignore_eos=True, runtime=runtime, **kw)
                out[f"{pname}/{label}/{mode}"] = {"tokens": res.tokens,
                                                  "trace": strip(json.loads(res.trace.to_json())),
                                                  "metrics": strip(res.metrics.to_dict())}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--runtime", default="eager", help="eager, or a fast path run on this machine (static)")
    ap.add_argument("--compare", help="a digest written earlier: exit 1 if any run differs")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    d = digest(args.tokens, args.runtime)
    with open(args.out, "w") as f:
        json.dump(d, f, sort_keys=True, indent=1)
    if args.compare:
        old = json.load(open(args.compare))
        differ = [k for k in sorted(set(old) | set(d)) if old.get(k) != d.get(k)]
        print(f"{len(d)} runs; {len(differ)} differ" + (": " + ", ".join(differ) if differ else ""))
        return 1 if differ else 0
    print(f"{len(d)} runs written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A/B in one process: cost-aware DynaTree with the draft level priced by a fixed tree (old) vs by
the cost-aware run (new); same prompts, alternating, plus linear K=4 as a yardstick."""
import sys, time, json, statistics as st, dataclasses
import torch
from dynatree_core.pairs.pair import ModelPair
from dynatree_core import generate, calibrate
from dynatree_core.policy.config import DynaTreeConfig, LinearConfig
from dynatree_core.bench.data import load_corpus, select_prompts, hf_tokenize
from dynatree_core.bench.methods import method_specs

pair = ModelPair.default()
new = calibrate.cost_model(pair, recalibrate=True)
old = dataclasses.replace(new, draft_s=new.meta["draft_s_fixed_tree"])
print("draft_s old (fixed tree) %.2f ms, new (cost-aware run) %.2f ms" % (old.draft_s * 1e3, new.draft_s * 1e3), flush=True)
(spec,) = method_specs(["dynatree:cost"])
cfgs = {"old": spec.config.replace(cost=old), "new": spec.config.replace(cost=new), "linear4": LinearConfig(k=4)}
T = int(sys.argv[1]) if len(sys.argv) > 1 else 128
N = int(sys.argv[2]) if len(sys.argv) > 2 else 4
res = {k: [] for k in cfgs}
for ds in ("wikitext2", "pg19"):
    corpus = load_corpus(ds, source="bundled")
    prompts = select_prompts(corpus, hf_tokenize(pair.tokenizer), N + 1, 256)[0]
    for i, p in enumerate(prompts):
        ids = p.token_ids
        order = list(cfgs) if i % 2 == 0 else list(reversed(cfgs))
        for k in order:
            cfg = cfgs[k]
            m = generate(pair, list(ids), cfg.method, cfg, T, ignore_eos=True, trace=False).metrics
            if i == 0:
                continue  # warm-up prompt
            res[k].append((ds, m.tokens_per_s, m.tokens_per_iteration, m.mean_tree_size))
        if i:
            print(ds, i, {k: round(res[k][-1][1], 1) for k in cfgs}, flush=True)
for ds in ("wikitext2", "pg19"):
    print(ds, {k: (round(st.mean(r[1] for r in v if r[0] == ds), 2), round(st.mean(r[2] for r in v if r[0] == ds), 2)) for k, v in res.items()})
json.dump({"old_draft_s": old.draft_s, "new_draft_s": new.draft_s, "rows": res}, open("/tmp/ab/ab.json", "w"))

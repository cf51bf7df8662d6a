import sys, time, torch
from pathlib import Path
from dynatree_core import DynaTreeConfig, LinearConfig, ModelPair, generate
from dynatree_core.policy.config import ARConfig
torch.set_num_threads(2)
pair = ModelPair.default()
text = Path("../shared/data/wikitext-2-raw/wiki.valid.raw").read_text()
arts = [a for a in text.split("\n = ") if len(a) > 4000]
prompts = [pair.tokenizer(a)["input_ids"][:256] for a in arts[1:1 + int(sys.argv[1])]]
T = int(sys.argv[2])
cfgs = {"ar": ("ar", ARConfig())}
for k in (4, 5): cfgs[f"lin{k}"] = ("linear", LinearConfig(k=k))
for k in (5,): cfgs[f"lin{k}+t4"] = ("linear", LinearConfig(k=k, lookup_tail=4, tail_n_max=8))
cfgs["cpu"] = ("dynatree", DynaTreeConfig.cpu())
cfgs["gpu"] = ("dynatree", DynaTreeConfig.gpu())
for m, nm in ((4, 8), (8, 16)):
    cfgs[f"cpu+t{m}/{nm}"] = ("dynatree", DynaTreeConfig.cpu(lookup_tail=m, tail_n_max=nm))
    cfgs[f"gpu+t{m}/{nm}"] = ("dynatree", DynaTreeConfig.gpu(lookup_tail=m, tail_n_max=nm))
res = {k: [0.0, 0, 0] for k in cfgs}
ref = {}
for i, p in enumerate(prompts):
    generate(pair, p, "linear", LinearConfig(k=4), max_new_tokens=16, ignore_eos=True)  # warm
    for name, (meth, cfg) in cfgs.items():
        t = time.perf_counter()
        r = generate(pair, p, meth, cfg, max_new_tokens=T, ignore_eos=True)
        dt = time.perf_counter() - t
        if name == "ar": ref[i] = r.tokens
        assert r.tokens == ref[i], (name, i)
        res[name][0] += dt; res[name][1] += len(r.tokens); res[name][2] += r.metrics.iterations
ar = res["ar"][0]
for name, (t, n, it) in res.items():
    print(f"{name:14s} x{ar / t:5.2f}  {n / t:6.1f} tok/s  L={n / max(it,1):.2f}", flush=True)

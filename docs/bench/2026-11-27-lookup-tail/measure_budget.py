import sys, time, statistics, torch
from pathlib import Path
from dynatree_core import DynaTreeConfig, LinearConfig, ModelPair, generate
from dynatree_core.policy.config import ARConfig
torch.set_num_threads(2)
pair = ModelPair.default()
text = Path("../shared/data/wikitext-2-raw/wiki.valid.raw").read_text()
arts = [a for a in text.split("\n = ") if len(a) > 4000]
n = int(sys.argv[1]); T = int(sys.argv[2])
prompts = [pair.tokenizer(a)["input_ids"][:256] for a in arts[7:7 + n]]
for f in sorted(Path("../shared/data/gutenberg-train").glob("*.txt"))[:n]:
    t = f.read_text(); t = t[len(t)//2:len(t)//2 + 20000]; prompts.append(pair.tokenizer(t)["input_ids"][:256])
cfgs = {"ar": ("ar", ARConfig())}
for k in (3, 4, 5): cfgs[f"lin{k}"] = ("linear", LinearConfig(k=k))
cfgs["lin4+t6/6"] = ("linear", LinearConfig(k=4, lookup_tail=6, tail_n_max=6))
cfgs["cpu"] = ("dynatree", DynaTreeConfig.cpu())
for m in (4, 6, 8):
    cfgs[f"cpu+t{m}/{m}"] = ("dynatree", DynaTreeConfig.cpu(lookup_tail=m, tail_n_max=m))
cfgs["gpu+t6/6"] = ("dynatree", DynaTreeConfig.gpu(lookup_tail=6, tail_n_max=6))
times = {k: [] for k in cfgs}; toks = {k: 0 for k in cfgs}; its = {k: 0 for k in cfgs}
for i, p in enumerate(prompts):
    generate(pair, p, "linear", LinearConfig(k=4), max_new_tokens=16, ignore_eos=True)
    ref = None
    for name, (meth, cfg) in cfgs.items():
        t = time.perf_counter()
        r = generate(pair, p, meth, cfg, max_new_tokens=T, ignore_eos=True)
        times[name].append(time.perf_counter() - t)
        ref = r.tokens if name == "ar" else ref
        assert r.tokens == ref, (name, i)
        toks[name] += len(r.tokens); its[name] += r.metrics.iterations
    print(i, {k: round(times["ar"][-1] / v[-1], 2) for k, v in times.items()}, flush=True)
print("prompts", len(prompts), "T", T)
for name in cfgs:
    per = [a / b for a, b in zip(times["ar"], times[name])]
    print(f"{name:12s} x{sum(times['ar']) / sum(times[name]):5.2f} (per prompt {min(per):.2f}-{max(per):.2f}) "
          f"L={toks[name] / its[name]:.2f}", flush=True)

"""Device re-check after the sync fix: CUDA's sync debug mode against the counted syncs, per method,
on the default pair (fp32, bundled WikiText-2 passage, T=32). Prints and writes one JSON."""
import json, sys, time, datetime as dt
sys.path.insert(0, ".")
import torch
from dynatree_core.pairs.pair import ModelPair
from dynatree_core.bench.methods import method_specs
from dynatree_core.engine.calibrate import prepare_config
from dynatree_core.engine.sync_audit import audit_host_syncs
from dynatree_core.bench.device_check.loading import bench_prompts

t0 = time.time()
pair = ModelPair.default(device="cuda")
prompt = bench_prompts(pair, 1, 64)[0].token_ids
out = {"created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
       "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "draft": pair.draft_name,
       "max_new_tokens": 32, "methods": {}}
specs = method_specs(["ar", "linear", "fixed_tree", "dynatree", "dynatree:cost", "eagle2", "sequoia"], k=[3])
for spec in specs:
    cfg = prepare_config(spec.config, pair) if spec.config is not None else None
    rows = audit_host_syncs(pair, list(prompt), spec.method, cfg, max_new_tokens=32)
    over = [r for r in rows if r["observed"] > r["counted"]]
    m = {"iterations": len(rows), "counted": sum(r["counted"] for r in rows), "observed": sum(r["observed"] for r in rows),
         "max_counted": max(r["counted"] for r in rows), "max_observed": max(r["observed"] for r in rows),
         "iterations_observed_gt_counted": len(over), "uncounted_sources": sorted({s for r in over for s in r["sources"]})}
    out["methods"][spec.label] = m
    print(f"{spec.label:16s} iters {m['iterations']:3d} counted {m['counted']:4d} observed {m['observed']:4d} "
          f"max {m['max_counted']}/{m['max_observed']} over-in {m['iterations_observed_gt_counted']} {m['uncounted_sources']}", flush=True)
out["wall_s"] = round(time.time() - t0, 1)
json.dump(out, open(sys.argv[1], "w"), indent=1)
print("wall", out["wall_s"], "s")

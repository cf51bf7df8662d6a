"""B rows of a dataset under a kept shared budget (finish or rate), alternating with batched AR: per-iteration log."""
import sys, time
from dynatree_core.cli.parser import build_parser
from dynatree_core.cli.resolve import bench_prompts, load_pair, protocol_numbers
from dynatree_core.engine.batch import BatchRun, shared_budget
from dynatree_core.engine.calibrate import prepare_config
from dynatree_core.policy.config import resolve_config, DynaTreeConfig

ds, B, reps, objective = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
args = build_parser().parse_args(["bench", "--batch-size", str(B), "--dataset", ds, "--methods", "ar,dynatree"])
pair = load_pair(args)
n, _, t, l_max = protocol_numbers(args, [ds])
prompts = bench_prompts(args, pair, ds, max(n, 16), l_max[ds])[:B]  # the bench's selection
config = resolve_config("dynatree", DynaTreeConfig.cpu())
budget = shared_budget(pair, config, B, objective=objective)

def one(kind, T=64, show=False):
    if kind == "ar":
        run = BatchRun(pair, prompts, "ar", None, max_new_tokens=T, ignore_eos=True, prepare=prepare_config)
    else:
        run = BatchRun(pair, prompts, "dynatree", DynaTreeConfig.cpu(), max_new_tokens=T, ignore_eos=True,
                       prepare=prepare_config, budget=budget)
    t0 = time.perf_counter(); last = t0
    lines = []
    for it in run:
        now = time.perf_counter()
        recs = it.records
        bud = next(iter(recs.values())).batch.get("budget") or {}
        lines.append(f"  {'D' if bud.get('drafted') else '.'} W={it.padded_width:2d} L={it.draft_forwards} "
                     f"{(now-last)*1000:6.1f}ms c={[len(r.committed) for r in recs.values()]} "
                     f"w={[round(x, 2) for x in bud.get('weights') or []]}")
        last = now
    run.finish(); wall = time.perf_counter() - t0
    dec = wall - run.prefill_s
    if show:
        print("\n".join(lines))
    return dec

one("ar", 8); one("b", 8)
for i in range(reps):
    for k in (("ar", "b") if i % 2 == 0 else ("b", "ar")):
        dec = one(k, show=(k == "b" and i == reps - 1))
        print(f"{k:3s} decode {dec:.3f} s  {B*64/dec:.1f} tok/s  spec rate {budget.rate(B, True) or 0:.1f} ar rate {budget.rate(B, False) or 0:.1f}", flush=True)

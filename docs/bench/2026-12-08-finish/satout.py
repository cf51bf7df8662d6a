"""B rows decoded by batched AR and by DynaTree under a budget that always sits out, alternating: what a sat-out
iteration costs over an AR step (decode seconds only; the prefill apart)."""
import sys, time, math, statistics as st
from dynatree_core.cli.parser import build_parser
from dynatree_core.cli.resolve import bench_prompts, load_pair, protocol_numbers
from dynatree_core.engine.batch import BatchRun, shared_budget
from dynatree_core.engine.calibrate import prepare_config
from dynatree_core.policy.batch_budget import BatchBudget
from dynatree_core.policy.config import resolve_config, DynaTreeConfig

ds, B, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
args = build_parser().parse_args(["bench", "--batch-size", str(B), "--dataset", ds, "--methods", "ar,dynatree"])
pair = load_pair(args)
n, _, t, l_max = protocol_numbers(args, [ds])
prompts = bench_prompts(args, pair, ds, max(n, 16), l_max[ds])[:B]  # the bench's selection

class Never(BatchBudget):
    def drafts(self, rows):
        return False

cost = shared_budget(pair, resolve_config("dynatree", DynaTreeConfig.cpu()), B).cost

def one(kind, T=64):
    if kind == "ar":
        run = BatchRun(pair, prompts, "ar", None, max_new_tokens=T, ignore_eos=True, prepare=prepare_config)
    else:
        run = BatchRun(pair, prompts, "dynatree", DynaTreeConfig.cpu(), max_new_tokens=T, ignore_eos=True,
                       prepare=prepare_config, budget=Never(cost))
    t0 = time.perf_counter(); list(run); run.finish(); wall = time.perf_counter() - t0
    return run.prefill_s, wall - run.prefill_s

one("ar", 8); one("sat", 8)
ratios = {"prefill": [], "decode": []}
for i in range(reps):
    got = {}
    for k in (("ar", "sat") if i % 2 == 0 else ("sat", "ar")):
        got[k] = one(k)
    ratios["prefill"].append(math.log(got["sat"][0] / got["ar"][0]))
    ratios["decode"].append(math.log(got["sat"][1] / got["ar"][1]))
    print(f"round {i}: ar prefill {got['ar'][0]:.3f} decode {got['ar'][1]:.3f} | sat-out prefill {got['sat'][0]:.3f} "
          f"decode {got['sat'][1]:.3f}", flush=True)
for k, xs in ratios.items():
    m, se = st.mean(xs), st.stdev(xs) / len(xs) ** 0.5
    print(f"{k}: sat-out / AR seconds {math.exp(m):.3f} (±2se {math.exp(m - 2 * se):.3f}-{math.exp(m + 2 * se):.3f})")

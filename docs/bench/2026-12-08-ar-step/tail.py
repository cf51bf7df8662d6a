"""Why a kept budget sits out in the tail (rows ahead finished): each iteration's B and the budget's reason."""
import collections, sys, time
from dynatree_core.cli.parser import build_parser
from dynatree_core.cli.resolve import bench_prompts, load_pair, protocol_numbers
from dynatree_core.engine.batch import BatchRun, shared_budget
from dynatree_core.engine.calibrate import prepare_config
from dynatree_core.policy.config import resolve_config, DynaTreeConfig
from dynatree_core.policy.batch_budget import MIN_SAMPLES

ds, B, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
args = build_parser().parse_args(["bench", "--batch-size", str(B), "--dataset", ds, "--methods", "ar,dynatree"])
pair = load_pair(args)
n, _, t, l_max = protocol_numbers(args, [ds])
prompts = bench_prompts(args, pair, ds, max(n, 16), l_max[ds])[:B]
budget = shared_budget(pair, resolve_config("dynatree", DynaTreeConfig.cpu()), B)
why = []
drafts, choose = budget.drafts, budget.choose

def noted_drafts(rows):
    skip, probe = budget.skip, budget._probe
    ar, spec = budget.rate(rows, False, MIN_SAMPLES), budget.rate(rows, True, MIN_SAMPLES)
    out = drafts(rows)
    if not out:
        why.append((rows, "skip" if skip > 0 else "gated probe" if probe else f"measured ar {ar:.1f} > spec {spec:.1f}"))
    else:
        why.append((rows, "probe" if probe else "draft" if spec is None or ar is None else f"measured spec {spec:.1f} >= ar {ar:.1f}"))
    return out

def noted_choose(probs, levels, weights=None):
    before = budget.skip
    c = choose(probs, levels, weights)
    if budget.skip > before:
        why[-1] = (why[-1][0], why[-1][1] + f" -> model: W={c.width}, AR wins, sit out {budget.skip}")
    return c

budget.drafts, budget.choose = noted_drafts, noted_choose
for i in range(reps):
    why.clear()
    run = BatchRun(pair, prompts, "dynatree", DynaTreeConfig.cpu(), max_new_tokens=64, ignore_eos=True,
                   prepare=prepare_config, budget=budget)
    run.finish()
    tail = [(b, w) for b, w in why if b < B]
    print(f"run {i}: {len(why)} iterations, {len(tail)} in the tail")
    last = None
    for b, w in tail:
        key = (b, w.split(' ')[0])
        print(f"   B={b} {w}")

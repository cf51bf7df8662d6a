"""The budget's per-B waits (each B waits and backs off on its own) against one wait for every B (the budget
before, a subclass whose ``_at`` does nothing), each kept across its runs as the bench keeps it, alternating with
batched AR in one process: decode seconds per round and the ratios, paired by round."""
import math, statistics as st, sys, time
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
prompts = bench_prompts(args, pair, ds, max(n, 16), l_max[ds])[:B]


class OneWait(BatchBudget):
    """The budget before: one wait and back-off whatever B."""
    def _at(self, rows):
        pass


cost = shared_budget(pair, resolve_config("dynatree", DynaTreeConfig.cpu()), B).cost
budgets = {"per-B": BatchBudget(cost), "one wait": OneWait(cost)}


def one(kind, T=64):
    kw = dict(max_new_tokens=T, ignore_eos=True, prepare=prepare_config)
    run = (BatchRun(pair, prompts, "ar", None, **kw) if kind == "ar" else
           BatchRun(pair, prompts, "dynatree", DynaTreeConfig.cpu(), budget=budgets[kind], **kw))
    t0 = time.perf_counter(); res = run.finish(); wall = time.perf_counter() - t0
    return wall - run.prefill_s


kinds = ("ar", "per-B", "one wait")
for k in kinds:
    one(k, 16)
got = {k: [] for k in kinds}
for i in range(reps):
    order = kinds[i % 3:] + kinds[:i % 3]
    for k in order:
        got[k].append(one(k))
    print(f"round {i}: " + " | ".join(f"{k} {got[k][-1]:.3f}" for k in kinds), flush=True)
for a, b in (("per-B", "ar"), ("one wait", "ar"), ("per-B", "one wait")):
    xs = [math.log(x / y) for x, y in zip(got[a], got[b])]
    m, se = st.mean(xs), st.stdev(xs) / len(xs) ** 0.5
    print(f"{a} / {b} decode seconds: {math.exp(m):.3f} (±2se {math.exp(m - 2 * se):.3f}-{math.exp(m + 2 * se):.3f})")

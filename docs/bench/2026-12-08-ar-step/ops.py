"""Tensor ops per batch iteration outside the models (by engine function) and Python calls: batched AR against
an always-sat-out budget, B = 8 on the bench's prompts, T = 24."""
import cProfile, io, pstats, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))  # the repository's scripts/
from count_ops import OpCounter
from dynatree_core.cli.parser import build_parser
from dynatree_core.cli.resolve import bench_prompts, load_pair, protocol_numbers
from dynatree_core.engine.batch import BatchRun, shared_budget
from dynatree_core.engine.calibrate import prepare_config
from dynatree_core.policy.batch_budget import BatchBudget
from dynatree_core.policy.config import resolve_config, DynaTreeConfig
B = 8
args = build_parser().parse_args(["bench", "--batch-size", str(B), "--dataset", "prompts", "--methods", "ar,dynatree"])
pair = load_pair(args)
n, _, t, l_max = protocol_numbers(args, ["prompts"])
prompts = bench_prompts(args, pair, "prompts", max(n, 16), l_max["prompts"])[:B]
class Never(BatchBudget):
    def drafts(self, rows): return False
cost = shared_budget(pair, resolve_config("dynatree", DynaTreeConfig.cpu()), B).cost
def make(kind, T=24):
    if kind == "ar":
        return BatchRun(pair, prompts, "ar", None, max_new_tokens=T, ignore_eos=True, prepare=prepare_config)
    return BatchRun(pair, prompts, "dynatree", DynaTreeConfig.cpu(), max_new_tokens=T, ignore_eos=True,
                    prepare=prepare_config, budget=Never(cost))
for kind in ("ar", "sat"):
    run = make(kind); next(run)
    with OpCounter() as c:
        its = sum(1 for _ in run)
    print(kind, "iterations", its, {k: v / its for k, v in c.kinds.items()})
    for w, k in c.where.most_common(25):
        print(f"   {k/its:8.1f}  {w}")
    run = make(kind); next(run)
    pr = cProfile.Profile(); pr.enable(); its = sum(1 for _ in run); pr.disable()
    st = pstats.Stats(pr); print(kind, "calls/iteration", st.total_calls / its)
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("ncalls").print_stats(25); print(s.getvalue()[:5000])

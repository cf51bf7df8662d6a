"""Where a drafting batch iteration's host time goes (B rows, DynaTree cpu, no budget): ops by engine function,
cProfile by own time, seconds outside the forwards."""
import cProfile, io, pstats, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))  # the repository's scripts/
from count_ops import OpCounter
from dynatree_core.cli.parser import build_parser
from dynatree_core.cli.resolve import bench_prompts, load_pair, protocol_numbers
from dynatree_core.engine.batch import BatchRun
from dynatree_core.engine.calibrate import prepare_config
from dynatree_core.policy.config import DynaTreeConfig
B, ds = int(sys.argv[1]), sys.argv[2]
args = build_parser().parse_args(["bench", "--batch-size", str(B), "--dataset", ds, "--methods", "dynatree"])
pair = load_pair(args)
n, _, t, l_max = protocol_numbers(args, [ds])
prompts = bench_prompts(args, pair, ds, max(n, 16), l_max[ds])[:B]
def make(T=32):
    return BatchRun(pair, prompts, "dynatree", DynaTreeConfig.cpu(), max_new_tokens=T, ignore_eos=True, prepare=prepare_config)
run = make(); run.finish()
run = make(); next(run); next(run)
t1, f1 = time.perf_counter(), run.clock.seconds()
its = list(run)
t2 = time.perf_counter()
print(f"B={B} {ds}: {len(its)} iterations, {(t2-t1)/len(its)*1e3:.1f} ms each, outside the forwards "
      f"{((t2-t1)-(run.clock.seconds()-f1))/len(its)*1e3:.1f} ms, levels/it {sum(i.draft_forwards for i in its)/len(its):.2f}")
run = make(); next(run); next(run)
with OpCounter() as c:
    its = list(run)
print("ops/it", {k: round(v / len(its)) for k, v in c.kinds.items()})
for w, k in c.where.most_common(30):
    print(f"   {k/len(its):8.1f}  {w}")
run = make(); next(run); next(run)
pr = cProfile.Profile(); pr.enable(); its = list(run); pr.disable()
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(40); print(s.getvalue()[:9000])

"""Batched AR at B rows: the AR step (one read, no per-row trees) against the per-row path it replaced, in the
same process, alternating; plus an always-sat-out budget on the AR step. Decode seconds (prefill apart)."""
import hashlib, math, statistics as st, sys, time
from dynatree_core.cli.parser import build_parser
from dynatree_core.cli.resolve import bench_prompts, load_pair, protocol_numbers
from dynatree_core.engine.batch import BatchRun, shared_budget
from dynatree_core.engine.calibrate import prepare_config
from dynatree_core.policy.batch_budget import BatchBudget
from dynatree_core.policy.config import resolve_config, DynaTreeConfig

B, reps = int(sys.argv[1]), int(sys.argv[2])
args = build_parser().parse_args(["bench", "--batch-size", str(B), "--dataset", "prompts", "--methods", "ar"])
pair = load_pair(args)
n, _, t, l_max = protocol_numbers(args, ["prompts"])
prompts = bench_prompts(args, pair, "prompts", max(n, 16), l_max["prompts"])[:B]

class PerRow(BatchRun):
    """The path before: a DeviceTree per row per step, its select (one read per row), a commit per row."""
    def _step_trees(self, rows):
        self._draft(rows, None, self.clock, drafting=False)
    def _step(self, rows, target, clock):
        return self._verify(rows, target, clock)
    def _commit(self, rows, sels, start, target, draft, clock, at):
        return super()._commit(rows, sels, start, target, draft, clock, dict(at, step=False))

class Never(BatchBudget):
    def drafts(self, rows):
        return False

cost = shared_budget(pair, resolve_config("dynatree", DynaTreeConfig.cpu()), B).cost

def one(kind, T=64):
    if kind in ("step", "per-row"):
        cls = BatchRun if kind == "step" else PerRow
        run = cls(pair, prompts, "ar", None, max_new_tokens=T, ignore_eos=True, prepare=prepare_config)
    else:
        run = BatchRun(pair, prompts, "dynatree", DynaTreeConfig.cpu(), max_new_tokens=T, ignore_eos=True,
                       prepare=prepare_config, budget=Never(cost))
    t0 = time.perf_counter(); next(run)  # the prefill and the first iteration
    t1, f1 = time.perf_counter(), run.clock.seconds()
    res = run.finish(); t2 = time.perf_counter()
    outside = (t2 - t1) - (run.clock.seconds() - f1)  # after the first iteration: seconds outside the forwards
    return t2 - t0 - run.prefill_s, hashlib.sha1(str([r.tokens for r in res]).encode()).hexdigest()[:12], outside

kinds = ("step", "per-row", "sat")
for k in kinds:
    one(k, 8)
got = {k: [] for k in kinds}
out = {k: [] for k in kinds}
for i in range(reps):
    order = kinds[i % 3:] + kinds[:i % 3]
    row = {}
    for k in order:
        row[k] = one(k)
        got[k].append(row[k][0])
        out[k].append(row[k][2])
    print(f"round {i}: " + " | ".join(f"{k} {row[k][0]:.3f} (outside the forwards {row[k][2]:.3f}; {row[k][1]})"
                                      for k in kinds), flush=True)
for a, b in (("step", "per-row"), ("sat", "step")):
    xs = [math.log(x / y) for x, y in zip(got[a], got[b])]
    m, se = st.mean(xs), st.stdev(xs) / len(xs) ** 0.5
    print(f"{a} / {b} decode seconds: {math.exp(m):.3f} (±2se {math.exp(m - 2 * se):.3f}-{math.exp(m + 2 * se):.3f})"
          f" over {len(xs)} rounds")
for k in kinds:
    print(f"{k}: seconds outside the forwards after the first iteration, median {st.median(out[k]):.3f} "
          f"(min {min(out[k]):.3f}, max {max(out[k]):.3f})")

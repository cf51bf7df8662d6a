"""B = 4 on WikiText-2 under a kept shared budget, each run against batched AR (alternating): how much of each run's
decode the budget's iteration seconds cover, the rates it measured, and (last round) every iteration of the budget's run."""
import sys, time
from dynatree_core.cli.parser import build_parser
from dynatree_core.cli.resolve import load_pair, protocol_numbers
from dynatree_core.bench.data import corpus_tokenize, load_corpus, select_prompts
from dynatree_core.engine.batch import BatchRun, shared_budget
from dynatree_core.engine.calibrate import prepare_config
from dynatree_core.policy.batch_budget import BatchBudget
from dynatree_core.policy.config import resolve_config, DynaTreeConfig

ds, B, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
args = build_parser().parse_args(["bench", "--batch-size", str(B), "--dataset", ds, "--methods", "ar,dynatree"])
pair = load_pair(args)
n, _, t, l_max = protocol_numbers(args, [ds])
corpus = load_corpus(ds, args.data_dir, args.data_source, form=args.prompt_form)
chosen, _ = select_prompts(corpus, corpus_tokenize(corpus, pair.tokenizer), max(n, 16), l_max[ds], seed=args.seed)
prompts = [list(p.token_ids) for p in chosen][:B]
log = []
orig = BatchBudget.observe_time
def spy(self, rows, drafted, committed, seconds, forwards_s=None):
    log.append((drafted, committed, seconds, self._exploring))
    return orig(self, rows, drafted, committed, seconds, forwards_s)
BatchBudget.observe_time = spy
fw = []
orig_f = BatchBudget.observe_forwards
def spy_f(self, rows, width, levels, verify_s, draft_s):
    fw.append((width, levels, verify_s, draft_s))
    return orig_f(self, rows, width, levels, verify_s, draft_s)
BatchBudget.observe_forwards = spy_f
config = resolve_config("dynatree", DynaTreeConfig.cpu())
budget = shared_budget(pair, config, B)

def one(kind, T=64):
    log.clear(); fw.clear()
    if kind == "ar":
        run = BatchRun(pair, prompts, "ar", None, max_new_tokens=T, ignore_eos=True, prepare=prepare_config)
    else:
        run = BatchRun(pair, prompts, "dynatree", DynaTreeConfig.cpu(), max_new_tokens=T, ignore_eos=True,
                       prepare=prepare_config, budget=budget)
    t0 = time.perf_counter(); its = list(run); run.finish(); wall = time.perf_counter() - t0
    dec = wall - run.prefill_s
    return dec, list(zip(log, fw))

one("ar", 8); one("sat", 8)
for i in range(reps):
    for k in (("ar", "b") if i % 2 == 0 else ("b", "ar")):
        dec, both = one(k)
        lg = [a for a, _ in both]
        if k != "ar":
            for (d, c, sec, ex), (w, lv, vs, ds_) in (both if i == reps - 1 else []):
                print(f"  {'D' if d else '.'}{'x' if ex else ' '} c={c:2d} s={sec*1000:6.1f}ms W={w:2d} L={lv} verify={vs*1000:6.1f} draft={ds_*1000:6.1f}")
        if k == "ar":
            print(f"ar   decode {dec:.3f}  {B*64/dec:.1f} tok/s", flush=True)
        else:
            d = [x for x in lg if x[0]]; s = [x for x in lg if not x[0]]
            cov = sum(x[2] for x in lg)
            rate = lambda xs: sum(x[1] for x in xs) / sum(x[2] for x in xs) if xs else float('nan')
            print(f"bud  decode {dec:.3f}  {B*64/dec:.1f} tok/s  covered {cov:.3f} ({cov/dec:.3f})  drafted {len(d)} "
                  f"(explore {sum(x[3] for x in d)}) rate {rate(d):.1f}  sat {len(s)} rate {rate(s):.1f}  "
                  f"budget's rates spec {budget.rate(B, True) or 0:.1f} ar {budget.rate(B, False) or 0:.1f}", flush=True)

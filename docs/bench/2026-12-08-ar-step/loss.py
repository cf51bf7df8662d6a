"""Where a budgeted batch loses against batched AR: every iteration of B rows under a kept shared budget (as the
bench keeps it), classed as an AR step (sat out), an exploring drafting iteration, a probe, or a drafting
iteration the measured rates chose; each class's seconds against what AR steps at the same B would have taken
for the same tokens (a row's mean progress: Σ_b c_b / B steps of the run's own AR step at that B)."""
import collections, statistics as st, sys, time
from dynatree_core.cli.parser import build_parser
from dynatree_core.cli.resolve import bench_prompts, load_pair, protocol_numbers
from dynatree_core.engine.batch import BatchRun, shared_budget
from dynatree_core.engine.calibrate import prepare_config
from dynatree_core.policy.config import resolve_config, DynaTreeConfig

ds, B, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
args = build_parser().parse_args(["bench", "--batch-size", str(B), "--dataset", ds, "--methods", "ar,dynatree"])
pair = load_pair(args)
n, _, t, l_max = protocol_numbers(args, [ds])
prompts = bench_prompts(args, pair, ds, max(n, 16), l_max[ds])[:B]  # the bench's selection
budget = shared_budget(pair, resolve_config("dynatree", DynaTreeConfig.cpu()), B)
kinds: list[str] = []  # what the budget decided for each iteration, in order

drafts, levels = budget.drafts, budget.levels


def noted_drafts(rows):
    probe = budget._probe and budget.skip == 0
    out = drafts(rows)
    kinds.append("sat out" if not out else "probe" if probe else "drafted")
    return out


def noted_levels(rows, d_max):
    out = levels(rows, d_max)
    if budget._exploring:
        kinds[-1] = "explored"
    return out


budget.drafts, budget.levels = noted_drafts, noted_levels


def one(kind, T=64):
    cls_args = dict(max_new_tokens=T, ignore_eos=True, prepare=prepare_config)
    run = (BatchRun(pair, prompts, "ar", None, **cls_args) if kind == "ar" else
           BatchRun(pair, prompts, "dynatree", DynaTreeConfig.cpu(), budget=budget, **cls_args))
    kinds.clear()
    log, t0 = [], time.perf_counter()
    last = None
    for it in run:
        now = time.perf_counter()
        if last is not None:  # the first iteration's time holds the prefill: left out
            log.append((len(it.records), [len(r.committed) for r in it.records.values()], now - last))
        last = now
    run.finish()
    return time.perf_counter() - t0 - run.prefill_s, log, list(kinds[1:])


one("ar", 8), one("b", 8)
totals = collections.defaultdict(lambda: [0, 0.0, 0.0, 0])  # class -> iterations, seconds, AR-equivalent s, tokens
decodes = {"ar": [], "b": []}
full = []  # each run's AR step at the full batch (its median sat-out iteration at B rows)
for i in range(reps):
    for k in (("ar", "b") if i % 2 == 0 else ("b", "ar")):
        dec, log, ks = one(k)
        decodes[k].append(dec)
        if k == "ar":
            continue
        step = collections.defaultdict(list)  # this run's AR steps (sat-out iterations) by B
        for (rows, c, s), kd in zip(log, ks):
            if kd == "sat out":
                step[rows].append(s)
        ar_step = {r: st.median(v) for r, v in step.items()}
        for (rows, c, s), kd in zip(log, ks):
            t_ar = ar_step.get(rows) or ar_step.get(min(ar_step, key=lambda r: abs(r - rows))) if ar_step else None
            tot = totals[(rows, kd)]
            tot[0] += 1
            tot[1] += s
            tot[2] += (sum(c) / rows) * t_ar if t_ar else float("nan")
            tot[3] += sum(c)
        full.append(ar_step.get(B))
        print(f"round {i}: AR decode {decodes['ar'][-1] if decodes['ar'] else float('nan'):.3f} s | budget decode "
              f"{dec:.3f} s | " + " ".join(f"{x}:{ks.count(x)}" for x in ("sat out", "drafted", "probe", "explored")),
              flush=True)
print(f"decode seconds, median: AR {st.median(decodes['ar']):.3f}, budget {st.median(decodes['b']):.3f}")
t_full = st.median([x for x in full if x])
print(f"the full batch's AR step (median over the runs): {t_full * 1e3:.1f} ms")
print("B  class      iterations  seconds  tokens  AR at that B  lost (s)  AR at the full B  lost (s)")
lost = 0.0
for (rows, kd), (its, s, eq, tok) in sorted(totals.items()):
    at_full = tok * t_full / B
    lost += s - at_full
    print(f"{rows}  {kd:10s} {its:10d} {s:8.2f} {tok:7d} {eq:13.2f} {s - eq:9.2f} {at_full:17.2f} {s - at_full:9.2f}")
print(f"lost against the full batch's AR steps, all classes: {lost:.2f} s over {reps} runs "
      f"({lost / reps:.3f} s a run, against AR's median decode {st.median(decodes['ar']):.3f} s)")
for rows in range(1, B + 1):  # what the kept budget knows at each B after the runs
    spec, ar = budget.rate(rows, True), budget.rate(rows, False)
    model = max((r for _, r in budget._depth_rates(rows)), default=None)
    print(f"B={rows}: measured tok/s drafting {spec or float('nan'):.1f} ({budget.spent.get((rows, True), (0, 0, 0))[2]} "
          f"iterations), AR {ar or float('nan'):.1f} ({budget.spent.get((rows, False), (0, 0, 0))[2]}); the model's best "
          f"drafting rate {model or float('nan'):.1f}; drafting iterations measured {budget.measured.get(rows, 0)}")

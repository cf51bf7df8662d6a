"""The batch benchmark (``dynatree bench --batch-size 1,2,4``): where speculation stops paying.

Per dataset, batch size B and method, the first B selected prompts are decoded together
(:class:`~dynatree_core.engine.batch.BatchRun`), EOS ignored, T tokens each: a fixed batch, which takes as long as
its last row (nothing refills a finished row); every method with a draft runs with and without the batch's shared
node budget (label ``+budget``; ``+widths``: the budget choosing the verify's widths only, the rows' rules their
depth; ``+rate``: the budget counting every token alike, not serving the batch's finish). Runs are interleaved
(every method at one B, then the next B; then the whole round again, a B's points turned by one place each round:
``order`` is a run's place) and repeated,
after one untimed warm-up per (B, method); a point's shared budget keeps what it measured from one run to the
next (the warm-up's included), as a batch that keeps decoding would. A row records total and per-row tok/s,
p50/p90 time to finish, L̄ per row (committed tokens per iteration), padding efficiency (Σ n_b / (B_active ·
W)), target tokens per committed token and the ratio to batched AR in the same round (of the whole run, and of
the decode alone: the prompts' prefill left out); every row's tokens are checked against batched AR's, and
batched AR's against batch-1 AR (batched kernels need not be batch-invariant: the difference is reported, not
hidden). Batched AR also runs a second time in each round (``ar#2``, the A/A control; ``--no-ar-control`` leaves
it out): each method is read against both AR runs of its rounds, a 95% interval on its speed relative to AR's
(:mod:`dynatree_core.bench.spread`). ``--runtime eager,static`` runs every point on each (label ``@static``;
its ratio is to batched AR on the same runtime). At B = 1 every method also runs through the batch-1 loop
(:class:`~dynatree_core.engine.loop.DecodingRun`, label ``@loop``) in the same round: what keeping two loops is
worth. The result is JSON with a schema version and the config.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Sequence

from dynatree_core.bench.methods import MethodSpec
from dynatree_core.bench.spread import against_control
from dynatree_core.policy.config import ARConfig

#: the batch result's format
BATCH_SCHEMA_VERSION = "1"


@dataclass(frozen=True)
class BatchPoint:
    """One cell: ``spec`` at batch size ``rows``, with or without the shared budget (``depth``: the budget
    chooses how deep the trees grow, as well as how wide they are verified)."""

    spec: MethodSpec
    rows: int
    budget: bool = False
    depth: bool = True
    #: what the budget serves (:data:`~dynatree_core.policy.batch_budget.OBJECTIVES`): this fixed batch's
    #: finish, or every token alike (label ``+rate``: what a server that refills finished rows would want)
    objective: str = "finish"

    #: run through the batch-1 loop (DecodingRun) instead of the batch (B = 1 only)
    loop: bool = False
    #: the batch's runtime: eager (dynamic caches) or static (static target buffers, bucketed verifies)
    runtime: str = "eager"
    #: batched AR's second run in each round, the A/A control (label ``ar#2``, :mod:`dynatree_core.bench.spread`)
    control: bool = False

    @property
    def label(self) -> str:
        mode = "+rate" if self.objective == "rate" else "+budget" if self.depth else "+widths"
        budget = mode if self.budget else ""
        at = "@loop" if self.loop else "" if self.runtime == "eager" else f"@{self.runtime}"
        return self.spec.label + ("#2" if self.control else "") + budget + at


#: ``--batch-budget``'s values: how each drafting method runs (without the budget, with it, with it choosing
#: widths only, with it counting every token alike instead of serving the batch's finish); ``both`` is off,on
BUDGET_MODES = {"off": (False, True, "finish"), "on": (True, True, "finish"), "widths": (True, False, "finish"),
                "rate": (True, True, "rate")}


def batch_points(specs: Sequence[MethodSpec], sizes: Sequence[int], budget: str = "both",
                 runtimes: Sequence[str] = ("eager",), control: bool = False) -> list[BatchPoint]:
    """AR first at every B (the reference), then each method in each budget mode (``budget``: a comma list
    of :data:`BUDGET_MODES`, or ``both``); ``control``: AR again last at every B, the A/A control (the rounds
    turn the order: every point, AR's two runs included, takes every place)."""
    if not sizes or any(b < 1 for b in sizes):
        raise ValueError(f"--batch-size takes batch sizes >= 1, got {list(sizes)}")
    modes = ["off", "on"] if budget == "both" else str(budget).split(",")
    if not modes or any(m not in BUDGET_MODES for m in modes) or len(set(modes)) < len(modes):
        raise ValueError(f"--batch-budget takes both or distinct values among {', '.join(BUDGET_MODES)} "
                         f"(comma-separated), got {budget!r}")
    from dynatree_core.engine.batch import BATCH_RUNTIMES

    bad = [r for r in runtimes if r not in BATCH_RUNTIMES]
    if not runtimes or bad or len(set(runtimes)) < len(runtimes):
        raise ValueError(f"--runtime: a batch runs on the runtimes {', '.join(BATCH_RUNTIMES)} (distinct, "
                         f"comma-separated), got {list(runtimes)}")
    ar = [s for s in specs if s.method == "ar"] or [MethodSpec("ar", "ar", ARConfig())]
    rest = [s for s in specs if s.method != "ar"]
    loops = [BatchPoint(s, 1, loop=True) for s in rest] if 1 in sizes else []
    controls = [BatchPoint(ar[0], b, runtime=r, control=True) for b in sizes for r in runtimes] if control else []
    return [BatchPoint(s, b, runtime=r) for b in sizes for r in runtimes for s in ar[:1]] + [
        BatchPoint(s, b, *BUDGET_MODES[m], runtime=r) for b in sizes for r in runtimes for s in rest
        for m in modes] + controls + loops


def run_batch_point(pair: Any, point: BatchPoint, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                    budgets: dict[Any, Any] | None = None) -> dict[str, Any]:
    """One timed batched decode of ``point``; its measurements (and the rows' tokens). ``budgets``:
    the shared budget of each point, kept from one run of it to the next (what a server that keeps
    decoding would know: its measured rates carry over; a new point starts afresh)."""
    from dynatree_core.engine.batch import BatchRun, run_buckets, shared_budget
    from dynatree_core.engine.calibrate import prepare_config
    from dynatree_core.policy.config import resolve_config

    if point.loop:
        return _run_loop_point(pair, point, prompts[0], max_new_tokens)
    kept = None if budgets is None or not point.budget else budgets.get(point)
    if point.budget and kept is None:
        config = resolve_config(point.spec.method, point.spec.config)
        kept = shared_budget(pair, config, point.rows, choose_depth=point.depth,
                             buckets=run_buckets(config, point.runtime), objective=point.objective)
    run = BatchRun(pair, [list(p) for p in prompts[:point.rows]], point.spec.method, point.spec.config,
                   max_new_tokens=max_new_tokens, ignore_eos=True, prepare=prepare_config,
                   budget=kept if point.budget else None, runtime=point.runtime)
    if budgets is not None and run.budget is not None:
        budgets[point] = run.budget
    t0 = time.perf_counter()
    its = list(run)
    results = run.finish()
    wall = time.perf_counter() - t0
    return measure(point, its, results, wall, max_new_tokens, run.prefill_s)


def _run_loop_point(pair: Any, point: BatchPoint, prompt: Sequence[int], max_new_tokens: int) -> dict[str, Any]:
    """B = 1 through the batch-1 loop (:class:`~dynatree_core.engine.loop.DecodingRun`), eager as the batch."""
    from dynatree_core.engine.calibrate import prepare_config
    from dynatree_core.engine.loop import DecodingRun

    run = DecodingRun(pair, list(prompt), point.spec.method, point.spec.config, max_new_tokens=max_new_tokens,
                      ignore_eos=True, prepare=prepare_config, runtime="eager")
    t0 = time.perf_counter()
    result = run.finish()
    wall = time.perf_counter() - t0
    m = result.metrics
    decode = wall - m.prefill_time_s
    return {"label": point.label, "method": point.spec.method, "batch_size": 1, "budget": False, "loop": True,
            "runtime": "eager",
            "tokens_per_s": max_new_tokens / wall, "row_tokens_per_s": max_new_tokens / wall,
            "decode_tokens_per_s": max_new_tokens / decode, "prefill_s": m.prefill_time_s,
            "finish_p50_s": wall, "finish_p90_s": wall, "wall_s": wall,
            "mean_accepted_per_row": m.new_tokens / max(1, m.iterations), "padding_efficiency": 1.0,
            "target_tokens_per_committed": None, "iterations": m.iterations, "draft_forwards": m.draft_forwards,
            "sat_out": 0, "tokens": [list(result.tokens)]}


def measure(point: BatchPoint, its: Sequence[Any], results: Sequence[Any], wall: float, t: int,
            prefill: float = 0.0) -> dict[str, Any]:
    """A row's numbers from the batch iterations and the per-row results (``prefill``: the seconds the
    prompts' prefill took, left out of the decode rate)."""
    finish = sorted(r.metrics.wall_time_s for r in results)
    nodes = sum(rec.batch["nodes"] for i in its for rec in i.records.values())
    slots = sum(i.padded_width * len(i.records) for i in its)
    committed = sum(len(rec.committed) for i in its for rec in i.records.values())
    sat = sum(1 for i in its if any(rec.batch.get("budget", {}).get("drafted") is False for rec in i.records.values()))
    return {"label": point.label, "method": point.spec.method, "batch_size": point.rows, "budget": point.budget,
            "runtime": point.runtime, "control": point.control, "tokens_per_s": point.rows * t / wall,
            "row_tokens_per_s": statistics.mean(t / f for f in finish),
            "decode_tokens_per_s": point.rows * t / (wall - prefill), "prefill_s": prefill,
            "finish_p50_s": _quantile(finish, 0.5), "finish_p90_s": _quantile(finish, 0.9), "wall_s": wall,
            "mean_accepted_per_row": statistics.mean(r.metrics.new_tokens / max(1, r.metrics.iterations)
                                                     for r in results),
            "padding_efficiency": nodes / slots if slots else None,
            "target_tokens_per_committed": slots / committed if committed else None,
            "iterations": len(its), "draft_forwards": sum(i.draft_forwards for i in its),
            "sat_out": sat, "tokens": [list(r.tokens) for r in results]}


def _quantile(xs: Sequence[float], q: float) -> float:
    """The q-quantile of sorted ``xs`` (linear between neighbours)."""
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def round_order(points: Sequence[BatchPoint], rep: int) -> list[BatchPoint]:
    """The order of one B's points in round ``rep``: turned by one place each round, so that over n rounds every
    point runs once in every place (a run's place, first after another B or between two others, must not lean
    on the ratios), and reversed in every other n rounds, so that who runs right before whom changes too."""
    n = len(points)
    turned = list(points[rep % n:]) + list(points[:rep % n])
    return turned[::-1] if (rep // n) % 2 else turned


def run_batch_bench(pair: Any, prompts: dict[str, list[list[int]]], points: Sequence[BatchPoint], max_new_tokens: int,
                    repeats: int = 2, progress: bool = True) -> dict[str, Any]:
    """Every point on every dataset, interleaved and repeated (see the module docstring)."""
    from dynatree_core.engine.api import generate

    for ds, ps in prompts.items():
        need = max(p.rows for p in points)
        if len(ps) < need:
            raise ValueError(f"{ds}: batch size {need} needs {need} prompts, got {len(ps)} (raise --num-prompts)")
    bar = _bar(progress, len(prompts) * len(points) * (repeats + 1))
    rows: list[dict[str, Any]] = []
    batch1 = {}
    for ds, ps in prompts.items():
        sizes = sorted({p.rows for p in points})
        batch1[ds] = [generate(pair, p, "ar", max_new_tokens=max_new_tokens, ignore_eos=True).tokens
                      for p in ps[:max(sizes)]]
        budgets: dict[BatchPoint, Any] = {}  # per point on this dataset: the budget's measurements carry over
        for p in points:  # untimed warm-up: allocator, kernels, the budget's calibration and first rates
            run_batch_point(pair, p, ps, min(8, max_new_tokens), budgets)
            _tick(bar, f"{ds} warm-up {p.label} B={p.rows}")
        for rep in range(repeats):
            for b in sizes:
                here = [p for p in points if p.rows == b]
                done = []
                for p in round_order(here, rep):
                    row = run_batch_point(pair, p, ps, max_new_tokens, budgets)
                    row.update(dataset=ds, repeat=rep, order=len(done))
                    done.append((p, row))
                    _tick(bar, f"{ds} rep {rep} {p.label} B={b}")
                # batched AR per runtime (not its control: that is AR read against AR)
                ars = {p.runtime: row for p, row in done if p.spec.method == "ar" and not p.control}
                for p, row in sorted(done, key=lambda d: here.index(d[0])):
                    ar = ars[p.runtime]
                    row.update(speedup_vs_batched_ar=row["tokens_per_s"] / ar["tokens_per_s"],
                               decode_speedup_vs_batched_ar=row["decode_tokens_per_s"] / ar["decode_tokens_per_s"],
                               matches_batched_ar=row["tokens"] == ar["tokens"])
                    if p.spec.method == "ar":
                        row["rows_differing_from_batch1_ar"] = [i for i, t in enumerate(row["tokens"])
                                                                if t != batch1[ds][i]]
                    rows.append(row)
    if bar is not None:
        bar.close()
    return {"rows": [{k: v for k, v in r.items() if k != "tokens"} for r in rows], "summary": summarize(rows),
            "checks": {"every_row_matches_batched_ar": all(r["matches_batched_ar"] for r in rows)}}


def summarize(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (dataset, B, label): the mean and spread (min, max) of tok/s and of the ratio to batched AR; where
    the run has AR's control at that B and runtime, each method's ratios against the control's
    (:func:`~dynatree_core.bench.spread.against_control`, of the whole run and of the decode alone)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    controls: dict[tuple, dict[Any, dict[str, Any]]] = {}  # by (dataset, B, runtime): the control's row per round
    for r in rows:
        groups.setdefault((r["dataset"], r["batch_size"], r["label"]), []).append(r)
        if r.get("control"):
            controls.setdefault((r["dataset"], r["batch_size"], r["runtime"]), {})[r.get("repeat")] = r
    out = []
    for (ds, b, label), rs in groups.items():
        ctl = controls.get((ds, b, rs[0].get("runtime", "eager")), {})
        # each round's run against the control of the same round (AR itself is not read against its control)
        paired = [] if rs[0].get("method") == "ar" else [(r, ctl[r.get("repeat")]) for r in rs
                                                         if r.get("repeat") in ctl]
        ratio = [r["speedup_vs_batched_ar"] for r in rs]
        decode = [r["decode_speedup_vs_batched_ar"] for r in rs]
        out.append({"dataset": ds, "batch_size": b, "label": label, "runs": len(rs),
                    "tokens_per_s": statistics.mean(r["tokens_per_s"] for r in rs),
                    "speedup_vs_batched_ar": statistics.mean(ratio), "speedup_min": min(ratio),
                    "speedup_max": max(ratio), "decode_speedup_vs_batched_ar": statistics.mean(decode),
                    "decode_speedup_min": min(decode), "decode_speedup_max": max(decode),
                    "padding_efficiency": _mean(r["padding_efficiency"] for r in rs),
                    "mean_accepted_per_row": statistics.mean(r["mean_accepted_per_row"] for r in rs),
                    "finish_p90_s": statistics.mean(r["finish_p90_s"] for r in rs),
                    "vs_ar_control": _against(paired, "speedup_vs_batched_ar"),
                    "decode_vs_ar_control": _against(paired, "decode_speedup_vs_batched_ar")})
    return out


def _against(paired: list[tuple[dict[str, Any], dict[str, Any]]], key: str) -> dict[str, Any] | None:
    """A method's rounds against the control's in the same rounds (None: no control, or too few rounds)."""
    return against_control([m[key] for m, _ in paired], [c[key] for _, c in paired])


def _mean(xs: Any) -> float | None:
    got = [x for x in xs if x is not None]
    return statistics.mean(got) if got else None


def to_markdown(summary: Sequence[dict[str, Any]]) -> str:
    """The summary as a table: one line per (dataset, B, method)."""
    head = ("| dataset | B | method | tok/s | × batched AR (min–max) | decode × batched AR (min–max) | padding eff. | "
            "L̄ per row | p90 finish s | × AR's control (95%) |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for s in sorted(summary, key=lambda s: (s["dataset"], s["batch_size"], s["label"])):
        pad = "—" if s["padding_efficiency"] is None else f"{s['padding_efficiency']:.2f}"
        lines.append(f"| {s['dataset']} | {s['batch_size']} | {s['label']} | {s['tokens_per_s']:.1f} | "
                     f"{s['speedup_vs_batched_ar']:.2f} ({s['speedup_min']:.2f}–{s['speedup_max']:.2f}) | "
                     f"{s['decode_speedup_vs_batched_ar']:.2f} ({s['decode_speedup_min']:.2f}–"
                     f"{s['decode_speedup_max']:.2f}) | {pad} | "
                     f"{s['mean_accepted_per_row']:.2f} | {s['finish_p90_s']:.2f} | "
                     f"{_reading(s.get('vs_ar_control'))} |")
    return "\n".join(lines)


def _reading(v: dict[str, Any] | None) -> str:
    return "—" if v is None else f"{v['ratio']:.2f} ({v['low']:.2f}–{v['high']:.2f}) {v['verdict']}"


def _bar(progress: bool, total: int) -> Any:
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="run", dynamic_ncols=True)


def _tick(bar: Any, what: str) -> None:
    if bar is not None:
        bar.set_description(what)
        bar.update(1)

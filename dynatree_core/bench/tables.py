"""The paper's tables as pandas DataFrames and Markdown (torch-free).

Input: aggregate rows from :func:`dynatree_core.bench.results.aggregate`. Speedup is taken from
there, i.e. always recomputed as TPS / TPS_AR of the same run and dataset. Every table also
carries the cost counters: target forwards per generated token, draft forwards per generated
token and per iteration.

* Table 1: throughput (tokens/s) and speedup, engine overhead per iteration (wall time minus the
  time inside model forwards, over iterations) and host syncs per iteration
* Table 2: TTFT and TPOT (ms)
* Table 3: acceptance rate, L̄ (tokens per iteration), ℓ̄ (accepted length), #iterations
* Table 4: ablation: fixed backbone, + dynamic breadth & depth, + history adaptation
* Table 5: peak memory
* Table 6: tree policies side by side: L̄, throughput, speedup, tree size and the gap to the best
  possible tree of the same size (:mod:`dynatree_core.records.oracle`)
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import pandas as pd

from dynatree_core.records.metrics import explain_speedup
from dynatree_core.bench.methods import ABLATION_LABELS, COST_LABEL, PRESET_LABELS
from dynatree_core.bench.results import HF_ASSISTED, baseline_key

TABLES: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7)
TITLES: dict[int, str] = {
    1: "Table 1: throughput and speedup",
    2: "Table 2: latency (TTFT, TPOT)",
    3: "Table 3: acceptance and tokens per iteration",
    4: "Table 4: ablation (progressive)",
    5: "Table 5: peak memory",
    6: "Table 6: tree policies and the gap to the best possible tree",
    7: "Table 7: speculative sampling by temperature",
}
COST_COLUMNS: dict[str, str] = {"target_forwards_per_token": "target_fwd/token",
                                "draft_forwards_per_token": "draft_fwd/token",
                                "draft_forwards_per_iteration": "draft_fwd/iter"}
ABLATION_NAMES: dict[str, str] = dict(zip(ABLATION_LABELS, ("Fixed backbone", "+ Breadth & Depth",
                                                            "+ History (full)")))
#: what a person reads in a table header, for the DataFrames' machine-friendly column names
#: (the DataFrames and CSV keep the latter)
HEADERS: dict[str, str] = {
    "throughput_tok_s": "tok/s", "speedup": "speedup vs AR", "speedup_best_ar": "speedup vs fastest AR",
    "ttft_ms": "TTFT (ms)", "tpot_ms": "TPOT (ms)",
    "acceptance": "acceptance", "L_bar": "L̄ (tok/iter)", "l_bar": "ℓ̄ (accepted/iter)", "iterations": "iterations",
    "peak_memory_mib": "peak memory (MiB)", "memory_kind": "measured as", "delta_vs_fixed_pct": "Δ vs fixed (%)",
    "n": "prompts", "L_max": "L_max", "target_fwd/token": "target fwd/token", "draft_fwd/token": "draft fwd/token",
    "draft_fwd/iter": "draft fwd/iter", "overhead_ms_iter": "overhead ms/iter", "syncs_iter": "syncs/iter",
    "tree_size": "nodes/iter", "oracle_n": "oracle n", "oracle_l": "oracle ℓ at n", "oracle_gap": "oracle gap",
    "conf_mean": "c(u) mean", "conf_observed": "top-1 = target", "conf_ece": "ECE",
    "temperature": "temperature", "verify": "verify", "draft_noise": "draft noise",
}
_DATASET_ORDER = ["wikitext2", "pg19", "prompts"]
_METHOD_ORDER = ["ar", "linear", "fixed_tree", "dynatree", *ABLATION_LABELS, *PRESET_LABELS, COST_LABEL,
                 "eagle2", "sequoia", HF_ASSISTED]


def _order(a: dict[str, Any]) -> tuple:
    lab = str(a.get("label"))
    # linear:k=K rows sit with linear by K, fixed_tree:d=D,b=B rows with the fixed tree by (D, B)
    base, _, params = lab.partition(":") if lab.startswith(("linear:", "fixed_tree:")) else (lab, "", "")
    i = _METHOD_ORDER.index(base) if base in _METHOD_ORDER else len(_METHOD_ORDER)
    ds = str(a.get("dataset"))
    d = _DATASET_ORDER.index(ds) if ds in _DATASET_ORDER else len(_DATASET_ORDER)
    nums = tuple(int(v.split("=", 1)[1]) for v in params.split(",") if "=" in v)
    return (str(a.get("run_id")), d, ds, a.get("max_prompt_len") or 0, a.get("max_new_tokens") or 0,
            a.get("temperature") or 0.0, i, nums, str(a.get("verify")),
            str(a.get("draft_noise")))  # stable: sweep points keep their run order


def _scale(v: Any, f: float) -> Any:
    return None if v is None else v * f


def _id_columns(aggs: Sequence[dict[str, Any]], a: dict[str, Any]) -> dict[str, Any]:
    """dataset + method, plus run / T / L_max when they vary across the rows."""
    cols: dict[str, Any] = {}
    if len({x.get("run_id") for x in aggs}) > 1:
        cols["run"] = a.get("run_id")
    cols["dataset"] = a.get("dataset")
    for key, name in (("max_new_tokens", "T"), ("max_prompt_len", "L_max"), ("temperature", "temperature"),
                      ("top_p", "top_p"), ("top_k", "top_k"), ("verify", "verify"), ("draft_noise", "draft_noise"),
                      ("runtime", "runtime")):
        if len({x.get(key) for x in aggs}) > 1:
            cols[name] = a.get(key)
    cols["method"] = a.get("label")
    cols["n"] = a.get("n")
    return cols


def _costs(a: dict[str, Any]) -> dict[str, Any]:
    return {name: a.get(key) for key, name in COST_COLUMNS.items()}


def _frame(aggs: Sequence[dict[str, Any]], body) -> pd.DataFrame:
    rows = [{**_id_columns(aggs, a), **body(a), **_costs(a)} for a in sorted(aggs, key=_order)]
    return pd.DataFrame(rows)


def _best_ar_ratio(aggs: Sequence[dict[str, Any]], a: dict[str, Any]) -> dict[str, Any]:
    """The speedup against the fastest AR of any runtime, as a second column where the rows ran on
    more than one runtime (with one runtime it equals ``speedup``)."""
    if len({x.get("runtime") for x in aggs}) < 2:
        return {}
    return {"speedup_best_ar": a.get("speedup_best_ar")}


def table1(aggs: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Throughput (tokens/s, mean and std), speedup over AR, engine overhead per iteration (ms) and
    host syncs per iteration (None where not measured: older files, HF's loop's syncs)."""
    return _frame(aggs, lambda a: {"throughput_tok_s": a.get("tokens_per_s"),
                                   "throughput_tok_s_std": a.get("tokens_per_s_std"),
                                   "speedup": a.get("speedup"),
                                   **_best_ar_ratio(aggs, a),
                                   "overhead_ms_iter": a.get("engine_overhead_ms"),
                                   "syncs_iter": a.get("host_syncs_per_iteration")})


def table2(aggs: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Time to first token and time per output token (ms, mean and std)."""
    return _frame(aggs, lambda a: {"ttft_ms": _scale(a.get("ttft_s"), 1e3),
                                   "ttft_ms_std": _scale(a.get("ttft_s_std"), 1e3),
                                   "tpot_ms": _scale(a.get("tpot_s"), 1e3),
                                   "tpot_ms_std": _scale(a.get("tpot_s_std"), 1e3)})


def table3(aggs: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Acceptance rate, L̄ (committed tokens per iteration), ℓ̄ (accepted length), #iterations."""
    return _frame(aggs, lambda a: {"acceptance": a.get("acceptance_rate"),
                                   "L_bar": a.get("tokens_per_iteration"),
                                   "l_bar": a.get("mean_accepted_length"),
                                   "iterations": a.get("iterations")})


def table4(aggs: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The progressive ablation: throughput, speedup over AR, change vs the fixed backbone (%)."""
    abl = [a for a in aggs if a.get("label") in ABLATION_LABELS]
    base = {baseline_key(a): a.get("tokens_per_s") for a in abl if a.get("label") == ABLATION_LABELS[0]}

    def body(a: dict[str, Any]) -> dict[str, Any]:
        tps = a.get("tokens_per_s")
        fixed = base.get(baseline_key(a))
        return {"variant": ABLATION_NAMES[a["label"]], "throughput_tok_s": tps,
                "throughput_tok_s_std": a.get("tokens_per_s_std"), "speedup": a.get("speedup"),
                "delta_vs_fixed_pct": 100.0 * (tps / fixed - 1.0) if tps is not None and fixed else None}

    return _frame(abl, body).drop(columns=["method"], errors="ignore")


def table5(aggs: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Peak memory (MiB) and what was measured (CUDA max allocated or process max RSS)."""
    return _frame(aggs, lambda a: {"peak_memory_mib": _scale(a.get("peak_memory_bytes"), 1 / 2 ** 20),
                                   "memory_kind": a.get("peak_memory_kind")})


def table6(aggs: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Tree policies: L̄, throughput, speedup, mean tree size, and the best possible tree of the
    method's own mean size (oracle n): the accepted length it reaches and the gap to the method's
    ℓ̄; and the draft's calibration over the nodes it was fed: mean confidence c(u), how often its
    top-1 was the target's token, and the ECE (only rows with oracle evidence: engine methods of
    runs that recorded it)."""
    rows = [a for a in aggs if a.get("oracle_gap") is not None]
    return _frame(rows, lambda a: {"L_bar": a.get("tokens_per_iteration"),
                                   "throughput_tok_s": a.get("tokens_per_s"),
                                   "throughput_tok_s_std": a.get("tokens_per_s_std"), "speedup": a.get("speedup"),
                                   "tree_size": a.get("mean_tree_size"), "l_bar": a.get("mean_accepted_length"),
                                   "oracle_n": a.get("oracle_n"), "oracle_l": a.get("oracle_mean"),
                                   "oracle_gap": a.get("oracle_gap"), "conf_mean": a.get("confidence_mean"),
                                   "conf_observed": a.get("confidence_observed"),
                                   "conf_ece": a.get("confidence_ece")})


def table7(aggs: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Speculative sampling: for every temperature (0 = greedy) and verification rule, acceptance,
    L̄ and speedup over AR at the same temperature (only runs with a sampled cell)."""
    if not any(a.get("temperature") for a in aggs):
        return pd.DataFrame()
    rows = [a for a in aggs if a.get("temperature") is not None]

    def body(a: dict[str, Any]) -> dict[str, Any]:
        return {"temperature": a.get("temperature"), "verify": a.get("verify") or "greedy",
                "draft_noise": a.get("draft_noise") or "-", "acceptance": a.get("acceptance_rate"),
                "L_bar": a.get("tokens_per_iteration"),
                "throughput_tok_s": a.get("tokens_per_s"), "speedup": a.get("speedup")}

    return _frame(rows, body)


BUILDERS = {1: table1, 2: table2, 3: table3, 4: table4, 5: table5, 6: table6, 7: table7}


def make_tables(aggs: Sequence[dict[str, Any]], which: Sequence[int] = TABLES) -> dict[int, pd.DataFrame]:
    """The requested tables (Table 4 only if the ablation variants were run)."""
    out = {}
    for t in which:
        if t not in BUILDERS:
            raise ValueError(f"unknown table {t}; choose from {TABLES}")
        df = BUILDERS[t](aggs)
        if t in (4, 6, 7) and df.empty:
            continue
        out[t] = df
    return out


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:.1f}"
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.2f}"
    return str(v)


def to_markdown(df: pd.DataFrame, title: str | None = None) -> str:
    """A GitHub Markdown table; a column with a ``<name>_std`` partner prints as ``mean ± std``."""
    cols = [c for c in df.columns if not (c.endswith("_std") and c[:-4] in df.columns)]
    lines = [f"**{title}**", ""] if title else []
    lines.append("| " + " | ".join(HEADERS.get(c, c) for c in cols) + " |")
    lines.append("|" + "|".join("---" for _ in cols) + "|")
    for _, r in df.iterrows():
        cells = []
        for c in cols:
            v = r[c]
            s = _fmt(v)
            if c == "speedup" and s != "-":
                s = f"{v:.2f}×"
            if f"{c}_std" in df.columns and s != "-":
                s += f" ± {_fmt(r[c + '_std'])}"
            cells.append(s)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(aggs: Sequence[dict[str, Any]], which: Sequence[int] = (1, 2, 3, 4, 6)) -> str:
    """All requested tables as Markdown, separated by blank lines (and, for rows that several
    workers produced, a note on how their speedups were formed)."""
    text = "\n\n".join(to_markdown(df, TITLES[t]) for t, df in make_tables(aggs, which).items())
    note = worker_note(aggs)
    return text + (f"\n\n{note}" if note else "")


def compile_note(result: dict[str, Any]) -> str | None:
    """One line on what compiling cost a run (its ``compile`` section, schema 1.1), the forwards and the
    compiled regions apart, and the graphs compiled inside timed decodes; None when nothing compiled."""
    c = result.get("compile") or {}
    if not c.get("forward_graphs") and not c.get("regions") and not c.get("timed_compiles"):
        return None
    graphs = f", {c['graphs']} CUDA graphs captured in {c.get('capture_s', 0.0):.1f} s" if c.get("graphs") else ""
    again = f" ({c['recompiled_rows']} rows decoded again warm)" if c.get("recompiled_rows") else ""
    return (f"compile, outside the timed decodes: {c.get('forwards', 0)} forwards in {c.get('compile_s', 0.0):.1f} s"
            f"{graphs}, {c.get('regions', 0)} region graphs in {c.get('region_s', 0.0):.1f} s; "
            f"{c.get('timed_compiles', 0)} graphs compiled inside timed decodes{again}")


def worker_note(aggs: Sequence[dict[str, Any]]) -> str | None:
    """With rows from several workers: speedups compare each method with AR on the same worker
    (one device), weighted by prompts; the per-worker values are in the JSON. None otherwise."""
    workers = {w for a in aggs for w in (a.get("speedup_by_worker") or {})}
    if len(workers) < 2:
        return None
    return (f"speedup: each method against AR measured on the same worker, then weighted by prompts, over "
            f"{len(workers)} workers ({', '.join(sorted(workers))}); per-worker values: speedup_by_worker in the JSON")


def speed_notes(aggs: Sequence[dict[str, Any]], only_slower: bool = True) -> list[str]:
    """One line per method slower than AR in its cell (dataset, T, L_max, run), saying why with
    the measured draft and verify costs (:func:`dynatree_core.records.metrics.explain_speedup`)."""
    ar = {baseline_key(a): a for a in aggs if a.get("method") == "ar"}
    notes = []
    for a in sorted(aggs, key=_order):
        ref = ar.get(baseline_key(a))
        if a.get("method") == "ar" or ref is None or a.get("speedup") is None:
            continue
        if only_slower and a["speedup"] >= 1:
            continue
        notes.append(f"{a.get('dataset')}: " + explain_speedup(a, ref, str(a.get("label"))))
    return notes


def overhead_notes(aggs: Sequence[dict[str, Any]]) -> list[str]:
    """One line per method in a cell (dataset, T, L_max, run) that has an ``hf_assisted`` row: its
    engine overhead per iteration against HF assisted generation's, same run and pair, and the
    ratio (:func:`dynatree_core.bench.results.aggregate` computes it). Empty without such a row."""
    notes = []
    for a in sorted(aggs, key=_order):
        ref, own = a.get("hf_overhead_ms"), a.get("engine_overhead_ms")
        if a.get("method") == HF_ASSISTED or ref is None or own is None:
            continue
        ratio = a.get("overhead_ratio_vs_hf")
        more = ", ".join(f"{k}={v}" for k, v in _id_columns(aggs, a).items() if k not in ("dataset", "method", "n"))
        cell = f"{a.get('dataset')}" + (f" ({more})" if more else "")
        notes.append(f"{cell}: {a.get('label')}: engine overhead per iteration: {own:.2f} ms vs HF assisted "
                     f"{ref:.2f} ms (ratio {'-' if ratio is None else f'{ratio:.2f}'})")
    return notes

"""View: the policy table, one row per (dataset, method) of a benchmark result (L̄, tokens/s, speedup, mean
tree size, oracle gap), the fastest per dataset in bold: :func:`policy_rows` the facts, :func:`policy_table`
the HTML. Reads result documents only, no torch."""

from __future__ import annotations

import html
import json
import math
import os
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from dynatree_viz.views.compare import load_results
from dynatree_viz.views.policy_common import MISSING, fmt

#: the policy table's oracle column: n is the mean tree size rounded (the oracle needs whole nodes)
ORACLE_GAP_HEAD = "oracle gap (at n = mean size, rounded)"
#: keys of one :func:`policy_rows` row
ROW_KEYS: tuple[str, ...] = ("dataset", "method", "family", "n", "L_bar", "accepted_length",
                             "tokens_per_s", "tokens_per_s_std", "speedup", "mean_tree_size",
                             "oracle_gap", "oracle_n", "oracle_mean", "oracle_gap_own", "fastest")



def _aggregates(result: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """(aggregate rows, sweep parameter keys) of a result document, its path, a list of
    aggregate rows or a DataFrame of them."""
    if isinstance(result, (str, os.PathLike)):
        try:
            result = json.loads(Path(result).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"result: cannot read {str(result)!r}: {e}") from e
    if isinstance(result, pd.DataFrame):
        # a frame writes NaN for a field a row lacks; a document would leave it out (None)
        result = [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()}
                  for r in load_results(result).to_dict("records")]
    keys: list[str] = []
    if isinstance(result, Mapping):
        keys = list((result.get("sweep") or {}).get("param_keys", []) or [])
        if isinstance(result.get("aggregates"), list):
            aggs = result["aggregates"]
        elif isinstance(result.get("rows"), list):
            # a document without aggregates: recompute them as `dynatree bench` does (imported
            # here: only such a document needs the bench package, torch-free as it is)
            from dynatree_core.bench.results import aggregate

            aggs = aggregate(result["rows"], run_id=result.get("run_id"), param_keys=keys)
        else:
            raise ValueError("result: a benchmark document needs an 'aggregates' or 'rows' list; "
                             f"got keys {sorted(map(str, result))}")
    elif isinstance(result, (list, tuple)) and all(isinstance(r, Mapping) for r in result):
        aggs = [r for r in result if not r.get("warmup")]
    else:
        raise ValueError("result must be a benchmark result document (dict), a path to its JSON, "
                         f"a list of aggregate rows or a DataFrame; got {type(result).__name__}")
    aggs = [dict(a) for a in aggs]
    if not aggs:
        raise ValueError("result holds no aggregate rows")
    if any("method" not in a for a in aggs):
        raise ValueError("result: every aggregate row needs a 'method'")
    return aggs, keys


def _num(v: Any) -> float | None:
    """A finite float or None (DataFrame rows carry NaN for missing values)."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _names(aggs: list[dict[str, Any]], keys: list[str]) -> list[str]:
    """Display names, one per aggregate: the label, plus the cell fields that tell apart rows
    sharing a (dataset, label) (several runs, T, L_max or sweep points in one file)."""
    base = [str(a.get("label") or a["method"]) for a in aggs]
    fields = [("run_id", "run"), ("max_new_tokens", "T"), ("max_prompt_len", "L_max")] + [(k, k) for k in keys]
    groups: dict[tuple, list[int]] = {}
    for i, a in enumerate(aggs):
        groups.setdefault((a.get("dataset"), base[i]), []).append(i)
    names = list(base)
    for idx in groups.values():
        if len(idx) < 2:
            continue
        varying = [(k, short) for k, short in fields if len({json.dumps(aggs[i].get(k), default=str)
                                                              for i in idx}) > 1]
        for i in idx:
            extra = ", ".join(f"{short}={aggs[i].get(k)}" for k, short in varying)
            names[i] = f"{base[i]} ({extra})" if extra else f"{base[i]} #{idx.index(i) + 1}"
    return names


def policy_rows(result: Any, dataset: str | None = None) -> list[dict[str, Any]]:
    """One row per (dataset, method label) of a benchmark result (:data:`ROW_KEYS`).

    ``result``: the document ``dynatree bench`` writes (its ``aggregates``; recomputed from
    ``rows`` if it has none), a path to it, a list of aggregate rows or a DataFrame of them.
    Row fields: ``L_bar`` = tokens committed per iteration, ``accepted_length`` = ℓ̄,
    ``tokens_per_s`` (+ ``_std``), ``speedup`` over AR, ``mean_tree_size``, ``oracle_gap`` and
    ``oracle_n`` (with ``oracle_mean`` and ``oracle_gap_own``; None where the aggregate lacks them) and ``fastest`` (highest tokens/s of its
    dataset; ties all count). Rows keep the file's order, grouped by dataset."""
    aggs, keys = _aggregates(result)
    datasets = list(dict.fromkeys(a.get("dataset") for a in aggs))
    if dataset is not None:
        if dataset not in datasets:
            raise ValueError(f"dataset {dataset!r} is not in the result; it has {datasets}")
        datasets = [dataset]
    names = _names(aggs, keys)
    rows: list[dict[str, Any]] = []
    for ds in datasets:
        sub = [(names[i], a) for i, a in enumerate(aggs) if a.get("dataset") == ds]
        best = max((_num(a.get("tokens_per_s")) for _, a in sub if _num(a.get("tokens_per_s")) is not None),
                   default=None)
        for name, a in sub:
            tps = _num(a.get("tokens_per_s"))
            rows.append({
                "dataset": ds, "method": name, "family": a.get("method"), "n": a.get("n"),
                "L_bar": _num(a.get("tokens_per_iteration")),
                "accepted_length": _num(a.get("mean_accepted_length")),
                "tokens_per_s": tps, "tokens_per_s_std": _num(a.get("tokens_per_s_std")),
                "speedup": _num(a.get("speedup")), "mean_tree_size": _num(a.get("mean_tree_size")),
                "oracle_gap": _num(a.get("oracle_gap")), "oracle_n": _num(a.get("oracle_n")),
                "oracle_mean": _num(a.get("oracle_mean")), "oracle_gap_own": _num(a.get("oracle_gap_own")),
                "fastest": tps is not None and tps == best})
    return rows


def policy_table(result: Any, dataset: str | None = None) -> str:
    """:func:`policy_rows` as an HTML table: method, L̄, tokens/s (mean ± std), speedup over AR,
    mean tree size (when any row has it) and the oracle gap at the method's own mean tree size
    ("–" where not measured); the fastest method of each dataset in bold."""
    rows = policy_rows(result, dataset)
    with_size = any(r["mean_tree_size"] is not None for r in rows)
    head = ["dataset", "method", "L̄ (tok/iter)", "tokens/s", "speedup vs AR"]
    head += ["mean tree size"] if with_size else []
    head += [ORACLE_GAP_HEAD]
    out = ["<table class='dt-policy-table' style='border-collapse:collapse;font-size:13px'>",
           "<thead><tr>" + "".join(f"<th style='text-align:left;padding:2px 8px;border-bottom:1px solid #999'>"
                                   f"{html.escape(h)}</th>" for h in head) + "</tr></thead>", "<tbody>"]
    for r in rows:
        tps = fmt(r["tokens_per_s"], 1)
        if r["tokens_per_s"] is not None and r["tokens_per_s_std"] is not None:
            tps += f" ± {r['tokens_per_s_std']:.1f}"
        cells = [MISSING if r["dataset"] is None else str(r["dataset"]), r["method"], fmt(r["L_bar"]), tps,
                 MISSING if r["speedup"] is None else f"{r['speedup']:.2f}×"]
        cells += [fmt(r["mean_tree_size"], 1)] if with_size else []
        gap = fmt(r["oracle_gap"])
        cells.append(gap if r["oracle_n"] is None or gap == MISSING else f"{gap} (n = {r['oracle_n']:g})")
        attrs = " class='dt-fastest' style='font-weight:bold'" if r["fastest"] else ""
        out.append(f"<tr{attrs}>" + "".join(f"<td style='padding:2px 8px'>{html.escape(str(c))}</td>"
                                            for c in cells) + "</tr>")
    out += ["</tbody>", "<caption style='caption-side:bottom;font-size:11px;color:#666;text-align:left'>"
            "bold: fastest per dataset · L̄ = tokens committed per iteration · speedup = tokens/s ÷ AR's "
            "(same run and dataset) · oracle gap = what the best tree of n nodes accepts minus the method's "
            "accepted length, n = its mean number of drafted nodes rounded to whole nodes</caption>", "</table>"]
    return "\n".join(out)

"""The device check's verdict (only exactness fails a run) and its text summary, from the JSON document."""

from __future__ import annotations

from typing import Any


DTYPES = ("float32", "float16", "bfloat16")
#: how the summary writes a dtype
SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def verdict(doc: dict[str, Any]) -> dict[str, Any]:
    s = doc["sections"]
    problems, notes = [], []
    ex = s.get("exactness", {})
    if ex.get("status") == "failed":
        problems.append(f"exactness tests failed: {ex.get('failed')} failed, {ex.get('errors')} errors")
    bench = s.get("bench", {})
    if bench.get("outputs_identical_across_methods") is False:
        dtype = bench_dtype(bench)
        if dtype == "float32":  # greedy exactness is promised in fp32; a low-precision bench flips near-ties
            problems.append(f"fp32 bench outputs differ from AR: {bench.get('mismatching_cells')}")
        else:
            notes.append(f"{SHORT.get(dtype, dtype)} bench outputs differ from AR in {bench.get('mismatching_cells')} "
                         "(expected off fp32: another tree size is another kernel shape, which can flip a near-tie; "
                         "exactness is checked in fp32)")
    exact = s.get("exact", {})
    if exact.get("outputs_identical_across_methods") is False:  # the fp32 exactness bench
        problems.append(f"fp32 exactness bench: outputs differ from AR: {exact.get('mismatching_cells')}")
    for name in ("bench", "exact"):
        timed = (s.get(name, {}).get("compile") or {}).get("timed_compiles")
        if timed:
            notes.append(f"{name}: {timed} graphs compiled inside timed decodes (their rows' times include it)")
    prec = s.get("precision", {}).get("aggregate", {})
    if prec.get("float32", {}).get("prompts") and prec["float32"]["dynatree_equals_ar"] < prec["float32"]["prompts"]:
        problems.append("fp32 DynaTree differs from fp32 AR in the precision section")
    for name in ("float16", "bfloat16"):
        a = prec.get(name)
        if a and a["prompts"] and a["dynatree_equals_ar"] < a["prompts"]:
            notes.append(f"{name}: DynaTree equals same-dtype AR on {a['dynatree_equals_ar']}/{a['prompts']} prompts "
                         "(low-precision tree verification is not bit-identical to step-by-step AR)")
    for row in bench.get("table") or []:
        if row.get("host_sync_excess") is not None and row["host_sync_excess"] > 0:
            notes.append(f"host_sync_excess > 0: {row['dataset']} {row['label']} ({row['host_sync_excess']})")
    for label, m in ((bench.get("sync_audit") or {}).get("methods") or {}).items():
        if m.get("iterations_observed_gt_counted"):
            notes.append(f"sync audit: {label}: CUDA saw uncounted syncs in {m['iterations_observed_gt_counted']} "
                         f"iterations at {m['uncounted_sources']}")
    for name, sec in s.items():
        if sec.get("status") in ("error", "timeout", "skipped"):
            why = sec.get("reason") or (sec.get("error") or {}).get("message", "")
            notes.append(f"section {name}: {sec['status']}: {why}"[:400])
    failed = bool(problems)
    # exactness is established by the tests' section or by the fp32 exactness bench
    established = ex.get("status") in ("ok", "failed") or exact.get("outputs_identical_across_methods") is not None
    ok = not failed if established or failed else None
    return {"exactness_ok": ok, "exit_code": 1 if failed else 0, "problems": problems, "notes": notes}


def bench_dtype(bench: dict[str, Any]) -> str:
    """The dtype the bench section ran in (sections written before it was recorded ran in fp32)."""
    return bench.get("dtype") or "float32"


def _verdict_word(ok: bool | None) -> str:
    return "OK" if ok else "FAILED" if ok is False else "not established (no exactness result)"


def _f(x: Any, spec: str = ".2f", none: str = "-") -> str:
    return none if x is None else format(x, spec)


def summary(doc: dict[str, Any]) -> str:
    s, env, v = doc["sections"], doc["sections"].get("environment", {}), doc["verdict"]
    e = env.get("info", {})
    lines = [f"dynatree gpu_check {doc['created']}: {e.get('device', '?')} = {e.get('device_name', '?')}"
             f" (capability {e.get('cuda_capability')}), torch {e.get('torch')}, transformers {e.get('transformers')}",
             f"verdict: exactness {_verdict_word(v['exactness_ok'])}"
             f" (exit {v['exit_code']}); total {doc['total_s']:.0f} s of a {doc['config']['budget_s']:.0f} s budget"]
    lines += [f"  problem: {p}" for p in v["problems"]]
    lines += summary_exactness(s.get("exactness", {}))
    lines += summary_precision(s.get("precision", {}))
    lines += summary_bench(s.get("bench", {}))
    lines += summary_exact(s.get("exact", {}))
    lines += summary_fastpath(s.get("fastpath", {}))
    lines += [f"  note: {n}" for n in v["notes"]]
    lines.append("section wall times: " + ", ".join(f"{k} {_f(x.get('wall_s'), '.0f')} s ({x.get('status')})"
                                                    for k, x in s.items()))
    return "\n".join(lines)


def summary_exactness(x: dict[str, Any]) -> list[str]:
    head = f"[a] exactness ({x.get('status')}, {_f(x.get('wall_s'), '.0f')} s)"
    if "pytest" not in x:
        return [f"{head}: {x.get('reason') or (x.get('error') or {}).get('message', '')}"]
    out = [f"{head}: fp32 on {x['test_device']}: {' '.join(x['files'])}: {x['passed']} passed, {x['failed']} failed, "
           f"{x['errors']} errors, {x['skipped']} skipped (pytest {_f(x.get('duration_s'), '.1f')} s)"]
    out += [f"    {f}" for f in x["pytest"]["failures"][:5]]
    out += [f"    not run on the GPU: {f}: {why}" for f, why in (x.get("not_run") or {}).items()]
    return out


def summary_precision(x: dict[str, Any]) -> list[str]:
    head = f"[b] precision ({x.get('status')}, {_f(x.get('wall_s'), '.0f')} s)"
    agg = x.get("aggregate")
    if not agg:
        return [f"{head}: {x.get('reason') or (x.get('error') or {}).get('message', '')}"]
    n = len(x.get("per_prompt", []))
    out = [f"{head}: {x.get('target_name')}, {n} bundled passages (wikitext2+pg19, L_max {x['max_prompt_len']}), "
           f"T={x['max_new_tokens']}, DynaTree preset {x['dynatree_preset']}"
           + (f"; {x['truncated']}" if x.get("truncated") else ""),
           "    dtype     AR!=fp32AR  first diff at (median)  fp32 margin@diff (min/med/max)  own margin@diff (med)"
           "  DynaTree==AR same dtype"]
    for name in DTYPES:
        a = agg.get(name)
        if a is None:
            continue
        fm, om, fd = a.get("fp32_margin_at_diff"), a.get("own_margin_at_diff"), a.get("first_diff_position")
        margins = f"{_f(fm['min'], '.3f')}/{_f(fm['median'], '.3f')}/{_f(fm['max'], '.3f')}" if fm else "-"
        differ = f"{a['differs_from_fp32']}/{a['prompts']}" if "differs_from_fp32" in a else "(ref)"
        out.append(f"    {name:9s} {differ:>10s}  {_f(fd['median'] if fd else None, '.0f'):>22s}  {margins:>30s}  "
                   f"{_f(om['median'] if om else None, '.3f'):>21s}  {a['dynatree_equals_ar']}/{a['prompts']}")
    fp = agg.get("fp32_margins")
    if fp:
        out.append(f"    fp32 top-2 margins over all positions: min {fp['min']:.4f}, "
                   f"median {fp['median_of_medians']:.2f}, "
                   f"{fp['positions_below_0_1']} positions < 0.1; full-forward argmax differs from AR at "
                   f"{fp['full_forward_disagrees_with_ar']} positions")
    for name, err in (x.get("load_errors") or {}).items():
        out.append(f"    {name}: not loaded: {err['message'][:200]}")
    return out


#: the bench table's columns: header, row key, format (ms per iteration: device time on CUDA, host time
#: issuing the phase beside it)
BENCH_COLUMNS = (("tok/s", "tokens_per_s", "7.1f"), ("speedup", "speedup", "6.2f"), ("L̄", "L_bar", "4.2f"),
                 ("draft ms/it", "draft_ms_per_iteration", ".2f"), ("(host)", "draft_host_ms_per_iteration", ".2f"),
                 ("verify ms/it", "verify_ms_per_iteration", ".2f"),
                 ("(host)", "verify_host_ms_per_iteration", ".2f"),
                 ("overhead ms/it", "engine_overhead_ms", ".2f"), ("syncs/it", "host_syncs_per_iteration", ".2f"),
                 ("sync excess", "host_sync_excess", "d"), ("peak MiB", "peak_mib", ".0f"))


def bench_rows(table: list[dict[str, Any]]) -> list[str]:
    """The bench table as aligned text (the header, then a line per dataset, runtime and method)."""
    heads = "    " + f"{'dataset':9s} {'runtime':8s} {'method':22s}" + "".join(f" {h:>{max(len(h), 7)}s}"
                                                                           for h, _, _ in BENCH_COLUMNS)
    out = [heads]
    for r in table:
        r = {**r, "peak_mib": r["peak_memory_bytes"] / 2 ** 20 if r.get("peak_memory_bytes") else None}
        cells = "".join(f" {_f(r.get(k), spec):>{max(len(h), 7)}s}" for h, k, spec in BENCH_COLUMNS)
        out.append(f"    {r['dataset']:9s} {str(r.get('runtime')):8s} {r['label']:22s}{cells}")
    return out


def summary_bench(x: dict[str, Any], tag: str = "[c] bench") -> list[str]:
    head = f"{tag} ({x.get('status')}, {_f(x.get('wall_s'), '.0f')} s)"
    if not x.get("table"):
        return [f"{head}: {x.get('reason') or (x.get('error') or {}).get('message', '')}"]
    dtype = bench_dtype(x)
    out = [f"{head}: {x.get('target_name')}, {SHORT.get(dtype, dtype)}, N={x['num_prompts']} (W={x['warmup']}), T={x['max_new_tokens']}, "
           f"L_max {x['max_prompt_len']}; outputs identical across methods: {x['outputs_identical_across_methods']}"
           + (f"; {x['truncated']}" if x.get("truncated") else "")]
    out += bench_rows(x["table"])
    if x.get("compile"):
        out.append(f"    compile (outside the timed decodes): {_compiled(x['compile'])}")
    audit = x.get("sync_audit") or {}
    if audit.get("methods"):
        out.append("    sync audit (CUDA sync debug mode): " + "; ".join(
            f"{k}: observed max {m.get('max_observed')} vs counted max {m.get('max_counted')}"
            if "error" not in m else f"{k}: error {m['error']['message'][:80]}" for k, m in audit["methods"].items()))
    out.append(f"    result file: {x.get('result_file')}")
    return out


def summary_exact(x: dict[str, Any]) -> list[str]:
    """The fp32 exactness bench: one line (its verdict, runtimes and sizes), the rows that differ."""
    head = f"[e] fp32 exactness ({x.get('status')}, {_f(x.get('wall_s'), '.0f')} s)"
    if not x.get("table"):
        return [] if x.get("status") in (None, "skipped") and "reason" not in x else \
            [f"{head}: {x.get('reason') or (x.get('error') or {}).get('message', '')}"]
    ok = x.get("outputs_identical_across_methods")
    return [f"{head}: {', '.join(sorted({r['label'] for r in x['table']}))} on {', '.join(x.get('runtimes') or [])}, "
            f"N={x['num_prompts']}, T={x['max_new_tokens']}: every method's tokens equal AR's: {ok}"
            + ("" if ok else f" (differ: {x.get('mismatching_cells')})")
            + (f"; compile: {_compiled(x['compile'])}" if x.get("compile") else "")]


def summary_fastpath(x: dict[str, Any]) -> list[str]:
    head = f"[d] fast path ({x.get('status')}, {_f(x.get('wall_s'), '.0f')} s)"
    if not x.get("runtimes") and x.get("status") != "ok":
        return [f"{head}: {x.get('reason') or (x.get('error') or {}).get('message', '')}"]
    out = [f"{head}: weights {_f((x.get('weights_bytes') or 0) / 2 ** 20, '.0f')} MiB, device bandwidth "
           f"{_f((x.get('bandwidth_bytes_s') or 0) / 1e9, '.0f')} GB/s: a weights-bound step would run at "
           f"{_f(x.get('weights_bound_tok_s'), '.0f')} tok/s; AR reached {x.get('ar_tok_s')}"]
    for rt, r in (x.get("runtimes") or {}).items():
        curve = ", ".join(f"{b}: {s * 1e3:.2f}" for b, s in r["verify_s"].items())
        built = f"; {_compiled(r['compile'])}" if (r.get("compile") or {}).get("forwards") else ""
        out.append(f"    {rt}: capture {r['capture_s']:.1f} s{built}; verify c(n) ms by bucket {curve}")
    return out


def _compiled(c: dict[str, Any]) -> str:
    """The forwards' compile seconds, the CUDA graphs' capture seconds and the compiled regions' compile
    seconds, apart (:func:`~dynatree_core.bench.compile_ledger.compile_delta`), and the graphs compiled
    inside timed decodes (0: every timed decode ran warm)."""
    graphs = f", then {c['graphs']} CUDA graphs captured in {c['capture_s']:.1f} s" if c.get("graphs") else ""
    regions = (f"; {c['regions']} region graphs compiled in {c.get('region_s', 0.0):.1f} s"
               if c.get("regions") is not None else "")
    timed = f"; {c['timed_compiles']} compiled inside timed decodes" if c.get("timed_compiles") is not None else ""
    again = f" ({c['recompiled_rows']} rows decoded again warm)" if c.get("recompiled_rows") else ""
    return (f"{c['forwards']} forwards compiled in {c['compile_s']:.1f} s (FX cache hits {c.get('cache_hits')}, "
            f"misses {c.get('cache_misses')}){graphs}{regions}{timed}{again}")

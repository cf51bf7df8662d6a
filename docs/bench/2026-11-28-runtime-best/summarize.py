"""Tables of issue 42's quiet measurement from the four runs' JSON (run.sh beside this file):
tok/s per method and runtime, compiled / eager per method, speedup against AR on the same runtime
and against the fastest AR, and what compiling cost (first-call seconds, FX-cache hits / misses /
bypasses) in each process. ``python summarize.py > tables.md``."""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATASETS = {"wikitext2": "WikiText-2", "pg19": "PG-19"}


def cells(doc: dict) -> dict[tuple[str, str, str], dict]:
    return {(a["dataset"], a["label"], a["runtime"]): a for a in doc["aggregates"]}


def compile_cost(doc: dict) -> dict:
    """The last compiled row's process totals (cumulative over the run) and the largest capture_s."""
    rows = [r for r in doc["rows"] if r.get("runtime") == "compiled"]
    last = rows[-1].get("compile", {}) if rows else {}
    return {"capture_s_max": max((r.get("capture_s") or 0 for r in rows), default=0),
            "capture_s_sum": round(sum(r.get("capture_s") or 0 for r in rows if r.get("warmup")), 1), **last}


def main() -> None:
    for f in sorted(f for f in HERE.glob("*-*.json") if not f.name.startswith("profile")):
        doc = json.loads(f.read_text())
        c = cells(doc)
        print(f"## {f.stem}\n")
        print(f"outputs identical across methods and runtimes: {doc['checks'].get('outputs_identical_across_methods')}; "
              f"compile: {json.dumps(compile_cost(doc))}\n")
        print("| dataset | method | eager tok/s | compiled tok/s | compiled / eager | L̄ | speedup (same runtime, eager → compiled) "
              "| speedup vs fastest AR (best runtime) |")
        print("|---|---|---|---|---|---|---|---|")
        for ds, name in DATASETS.items():
            labels = sorted({lab for d, lab, _ in c if d == ds}, key=lambda s: (s != "ar", s))
            for lab in labels:
                e, k = c.get((ds, lab, "eager")), c.get((ds, lab, "compiled"))
                if not e or not k:
                    continue
                best = max((e, k), key=lambda a: a["tokens_per_s"])
                sb = best.get("speedup_best_ar")
                vs_best = "" if sb is None else f"{sb:.2f}× ({best['runtime']})"
                print(f"| {name} | {lab} | {e['tokens_per_s']:.1f} | {k['tokens_per_s']:.1f} | "
                      f"{k['tokens_per_s'] / e['tokens_per_s']:.2f}× | {e['tokens_per_iteration']:.2f} | "
                      f"{e['speedup']:.2f}× → {k['speedup']:.2f}× | "
                      f"{vs_best} |")
        print()


if __name__ == "__main__":
    main()

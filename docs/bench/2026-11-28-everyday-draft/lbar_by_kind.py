"""L̄ by prompt kind and form on the everyday prompts (issue 40, part 4): untimed, L̄ only.

DynaTree's ``cpu`` preset, greedy, on the default pair (the shipped feature draft with prompt lookup, or
``--draft DIR``, a candidate feature draft, with the same lookup) over the 72 bundled everyday prompts in
chat and raw form; a candidate's tokens are checked against AR's (``--ar-check``; the shipped draft's are
checked by the benchmark on the same prompts, so by default it skips AR and takes half the time).
``--passages N`` adds the first N prompts of WikiText-2 and of PG-19 as the main job selects them (seed 0,
L_max 256, T 128 new tokens): the "does not lose on the passages" check on more prompts than the main job's 4.
L̄ = committed tokens per iteration, pooled (tokens / iterations) per group. Writes JSON (schema version,
config, per-prompt rows, summary)::

    python docs/bench/2026-11-28-everyday-draft/lbar_by_kind.py --out lbar-shipped.json
    python docs/bench/2026-11-28-everyday-draft/lbar_by_kind.py --draft .distill/everyday/draft --out lbar-tuned.json
    python docs/bench/2026-11-28-everyday-draft/lbar_by_kind.py --passages 16 --no-everyday --out lbar-passages.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from dynatree_core import ModelPair, generate
from dynatree_core.bench.data import corpus_tokenize, load_corpus, select_prompts
from dynatree_core.bench.everyday import PROMPT_FORMS, PROMPT_KINDS, form_ids, read_everyday
from dynatree_core.policy.config import DynaTreeConfig

SCHEMA_VERSION = 2  # 2: passages (--passages) beside the everyday prompts
PASSAGE_DATASETS = ("wikitext2", "pg19")
PASSAGE_L_MAX, PASSAGE_T = 256, 128  # the main job's (QUICK in dynatree_core/cli/args.py)


def pooled(rows: list[dict[str, Any]]) -> float | None:
    it = sum(r["iterations"] for r in rows)
    return round(sum(r["new_tokens"] for r in rows) / it, 3) if it else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draft", default=None, help="a feature draft folder (default: the shipped one)")
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True)
    ap.add_argument("--everyday", action=argparse.BooleanOptionalAction, default=True,
                    help="the 72 everyday prompts in both forms (default on)")
    ap.add_argument("--passages", type=int, default=0,
                    help="also the first N prompts of WikiText-2 and of PG-19 (main job's selection; default 0)")
    ap.add_argument("--data-dir", default=None, help="WikiText-2 / PG-19 text (default: the bench's search)")
    ap.add_argument("--ar-check", action=argparse.BooleanOptionalAction, default=None,
                    help="decode AR too and check DynaTree's tokens equal it (default: with --draft)")
    a = ap.parse_args()
    check = bool(a.draft) if a.ar_check is None else a.ar_check
    if a.passages < 0:
        raise SystemExit(f"--passages must be >= 0 (got {a.passages})")
    if not a.everyday and not a.passages:
        raise SystemExit("nothing to measure: --no-everyday needs --passages N (N >= 1)")
    torch.set_num_threads(a.threads)
    t0 = time.time()
    pair = ModelPair.named("default", feature_draft=a.draft)  # None: the shipped draft
    config = DynaTreeConfig.cpu()
    # (id, kind, form, token ids, new tokens): everyday prompts by kind and form, passages as kind "passage"
    runs: list[tuple[str, str, str, list[int], int]] = []
    if a.everyday:
        runs += [(p.id, p.kind, f, form_ids(pair.tokenizer, p.text, f), a.new_tokens)
                 for f in PROMPT_FORMS for p in read_everyday()]
    for ds in PASSAGE_DATASETS if a.passages else ():
        corpus = load_corpus(ds, a.data_dir)
        chosen, _ = select_prompts(corpus, corpus_tokenize(corpus, pair.tokenizer), a.passages, PASSAGE_L_MAX)
        runs += [(f"{ds}-{p.index}", "passage", ds, p.token_ids, PASSAGE_T) for p in chosen]
    rows: list[dict[str, Any]] = []
    for pid, kind, form, ids, new in tqdm(runs, desc="prompts", mininterval=10):
        dt = generate(pair, ids, "dynatree", config, max_new_tokens=new, ignore_eos=True)
        if check and dt.tokens != generate(pair, ids, "ar", None, max_new_tokens=new, ignore_eos=True).tokens:
            raise AssertionError(f"{pid} ({form}): DynaTree's tokens differ from AR's")
        rows.append({"id": pid, "kind": kind, "form": form, "prompt_tokens": len(ids),
                     "new_tokens": dt.metrics.new_tokens, "iterations": dt.metrics.iterations})
    summary: dict[str, Any] = {}
    for form in PROMPT_FORMS if a.everyday else ():
        summary[form] = {"all": pooled([r for r in rows if r["form"] == form]),
                         **{k: pooled([r for r in rows if r["form"] == form and r["kind"] == k]) for k in PROMPT_KINDS}}
    for ds in PASSAGE_DATASETS if a.passages else ():
        summary[ds] = pooled([r for r in rows if r["form"] == ds])
    doc = {"schema_version": SCHEMA_VERSION,
           "config": {"pair": "default", "draft": a.draft or "shipped", "method": "dynatree", "preset": "cpu",
                      "dynatree": repr(config),
                      "new_tokens": a.new_tokens, "passages": a.passages, "passage_l_max": PASSAGE_L_MAX,
                      "passage_new_tokens": PASSAGE_T, "eos": "ignored", "threads": a.threads, "ar_check": check,
                      "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "seconds": round(time.time() - t0, 1)},
           "summary": summary, "rows": rows}
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()

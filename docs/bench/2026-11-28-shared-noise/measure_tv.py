"""How much the shipped drafts limit shared-noise sampling (issue 39, part 3): TV(p, q) of each draft
against the target at temperature 0.7 and 1.0 (and 0, greedy top-1, for reference), the coupled
agreement it predicts, and what independent top-1 / top-4 drafting reaches, on held-out text.

    python docs/bench/2026-11-28-shared-noise/measure_tv.py     # about 10 minutes on an idle 2-core CPU

Text: the target's own continuations (greedy at T = 0, sampled at T otherwise, seed 0) after the
benchmark's bundled WikiText-2 and PG-19 passages (their ``--seed 0`` prompts, the first 128 tokens) and
after the held-out distillation prompts (the first 24 of 48, raw text and chat form); teacher-forced, every continuation position
scored. The drafts alone (no prompt-lookup mixture); the feature draft at depth 1 (the target's real
features, as a tree's root reads them). The logic is :mod:`dynatree_core.distill.divergence`.
Writes ``tv.json`` beside this script and prints the Markdown table of the README.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch
from tqdm import tqdm

from dynatree_core.bench.data import bundled_corpus, hf_tokenize, select_prompts
from dynatree_core.distill.decode import eos_ids
from dynatree_core.distill.divergence import TOP_B, continuations, measure
from dynatree_core.distill.prompts import EVAL_PROMPTS, chat_ids, raw_ids
from dynatree_core.pairs.default_pair import load_default_draft, load_default_feature_draft, load_target

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 1


def prompt_sets(tok, passages: int, prompt_len: int, heldout: int) -> dict[str, list[list[int]]]:
    sets = {}
    for ds in ("wikitext2", "pg19"):
        chosen, _ = select_prompts(bundled_corpus(ds), hf_tokenize(tok), passages, prompt_len, seed=0)
        sets[ds] = [p.token_ids for p in chosen]
    prompts = EVAL_PROMPTS[:heldout]
    sets["heldout"] = [raw_ids(tok, p) for p in prompts] + [chat_ids(tok, p) for p in prompts]
    return sets


def table(cells: list[dict]) -> str:
    head = ("| draft | T | dataset | positions | TV(p, q) | coupled agreement | (1-TV)/(1+TV) | p(top-1 of q) | "
            f"p(top-{TOP_B} of q) | coupled top-1 hit (seed 0) | coupled top-{TOP_B} hit (seed 0) |")
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for c in cells:
        f = [f"{c[k]:.3f}" for k in ("tv", "coupled", "tv_bound", "p_top1", "p_topb", "hit_coupled1", "hit_coupledb")]
        lines.append(f"| {c['draft']} | {c['temperature']:g} | {c['dataset']} | {c['positions']} | " + " | ".join(f) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--temperatures", default="0,0.7,1.0")
    ap.add_argument("--passages", type=int, default=8, help="bundled passages per dataset")
    ap.add_argument("--prompt-len", type=int, default=128, help="passage tokens before the continuation")
    ap.add_argument("--heldout-prompts", type=int, default=24, help="the first N held-out prompts, raw and chat form")
    ap.add_argument("--new-tokens", type=int, default=96, help="continuation tokens after a passage")
    ap.add_argument("--heldout-new-tokens", type=int, default=24, help="continuation tokens after a held-out prompt")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(HERE / "tv.json"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    t0 = time.time()
    target, tok = load_target()
    drafts = {"feature": load_default_feature_draft(target, tokenizer=tok), "model": load_default_draft(target)}
    eos = eos_ids(target, tok)
    sets = prompt_sets(tok, a.passages, a.prompt_len, a.heldout_prompts)
    cells = []
    for T in [float(x) for x in a.temperatures.split(",")]:
        for ds, prompts in sets.items():
            n_new = a.heldout_new_tokens if ds == "heldout" else a.new_tokens
            items = continuations(target, prompts, n_new, eos, T, seed=a.seed)
            with tqdm(total=sum(len(c) for _, c in items), desc=f"T={T:g} {ds}", mininterval=5) as bar:
                res = measure(target, drafts, items, T, seed=a.seed, progress=bar.update)
            cells += [{"draft": d, "temperature": T, "dataset": ds, **r} for d, r in res.items()]
    cells.sort(key=lambda c: (c["draft"], c["temperature"]))
    record = {"schema_version": SCHEMA_VERSION, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "seconds": round(time.time() - t0, 1), "config": vars(a) | {"top_b": TOP_B},
              "text": "target continuations (greedy at T=0, sampled at T with torch seed `seed`), teacher-forced; "
                      "drafts alone (no prompt lookup); feature draft at depth 1",
              "machine": {"platform": platform.platform(), "processor": platform.processor(),
                          "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads()},
              "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
              "cells": cells}
    Path(a.out).write_text(json.dumps(record, indent=2))
    print(table(cells))
    print(f"wrote {a.out} in {record['seconds']} s")


if __name__ == "__main__":
    main()

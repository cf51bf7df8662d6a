"""Two feature drafts, prompt by prompt in one process (issue 34): which one decodes faster?

Two ``dynatree bench`` runs at different times meet different machine states (on this 2-core VM, AR
itself moved from 15 to 18.5 tok/s between two runs an hour apart), so their tok/s ratios mix the
drafts with the machine. Here one process loads the target once and, for every prompt of the
benchmark's selection (the same N, L_max and seed), decodes it with AR and with each method once per
draft, the drafts' order alternating from prompt to prompt; the per-prompt ratio of the drafts'
speeds is then paired. Every run is checked equal to AR's tokens. DynaTree's history starts fresh at
every prompt (the same for both drafts).

    flock /tmp/cpu.lock python docs/bench/2026-11-27-h100-draft/paired_draft_bench.py --a dynatree_core/assets/smollm2-135m-feature-draft \\
        --b ../shared/drafts/smollm2-135m-feature-draft-h100 --out docs/bench/<dir>/paired.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from dynatree_core import ModelPair, generate
from dynatree_core.bench.data import corpus_tokenize, load_corpus, select_prompts
from dynatree_core.bench.methods import method_specs
from dynatree_core.drafters import LookupMix
from dynatree_core.drafters.feature_draft import load_feature_draft


def pairs(a: str, b: str) -> dict[str, ModelPair]:
    base = ModelPair.default(draft="feature+lookup", feature_draft=a)
    other = load_feature_draft(b, base.target, tokenizer=base.tokenizer)
    return {"a": base, "b": ModelPair(target=base.target, draft=other, tokenizer=base.tokenizer, lookup=LookupMix(),
                                      target_name=base.target_name, draft_name=f"feature draft {b}")
            .use_linear_kernel("auto")}


def run_prompt(ps: dict[str, ModelPair], ids: list[int], specs, order: list[str], new: int) -> dict:
    ar = generate(ps["a"], ids, "ar", max_new_tokens=new, ignore_eos=True)
    out = {"ar": {"tok_s": ar.metrics.tokens_per_s}}
    for spec in specs:
        for who in order:
            r = generate(ps[who], ids, spec.method, config=spec.config, max_new_tokens=new, ignore_eos=True)
            assert r.tokens == ar.tokens, (spec.label, who)
            out[f"{spec.label}/{who}"] = {"tok_s": r.metrics.tokens_per_s, "L": r.metrics.tokens_per_iteration}
    return out


def summary(rows: list[dict], labels: list[str]) -> dict:
    res = {"ar_tok_s": statistics.mean(r["ar"]["tok_s"] for r in rows)}
    for lab in labels:
        ratio = [r[f"{lab}/b"]["tok_s"] / r[f"{lab}/a"]["tok_s"] for r in rows]
        res[lab] = {who: {"tok_s": statistics.mean(r[f"{lab}/{who}"]["tok_s"] for r in rows),
                          "x_ar": statistics.mean(r[f"{lab}/{who}"]["tok_s"] / r["ar"]["tok_s"] for r in rows),
                          "L": statistics.mean(r[f"{lab}/{who}"]["L"] for r in rows)} for who in ("a", "b")}
        res[lab]["b_over_a"] = {"mean": statistics.mean(ratio), "std": statistics.stdev(ratio) if len(ratio) > 1
                                else 0.0, "b_faster_on": sum(x > 1 for x in ratio), "prompts": len(ratio)}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="feature-draft directory A (e.g. the shipped one)")
    ap.add_argument("--b", required=True, help="feature-draft directory B (the candidate)")
    ap.add_argument("--methods", default="dynatree:cpu,linear")
    ap.add_argument("--linear-k", type=int, default=4)
    ap.add_argument("--datasets", default="wikitext2,pg19")
    ap.add_argument("--num-prompts", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--max-prompt-len", type=int, default=256)
    ap.add_argument("--data-dir", default=None, help="as dynatree bench's (default: shared/data if found)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(2)
    ps = pairs(a.a, a.b)
    specs = method_specs(a.methods.split(","), preset="cpu", k=a.linear_k)
    res = {"a": a.a, "b": a.b, "methods": [s.label for s in specs], "protocol": vars(a), "datasets": {}}
    for ds in a.datasets.split(","):
        corpus = load_corpus(ds, a.data_dir)  # "prompts": the everyday prompts, in chat form as the benchmark sends them
        prompts, _ = select_prompts(corpus, corpus_tokenize(corpus, ps["a"].tokenizer), a.num_prompts, a.max_prompt_len)
        rows = []
        for i, p in enumerate(prompts):
            row = run_prompt(ps, p.token_ids, specs, ["a", "b"] if i % 2 else ["b", "a"], a.max_new_tokens)
            print(ds, i, json.dumps({k: round(v["tok_s"], 2) for k, v in row.items()}), flush=True)
            if i >= a.warmup:
                rows.append(row)
        res["datasets"][ds] = {"summary": summary(rows, [s.label for s in specs]), "prompts": rows}
        print(ds, json.dumps(res["datasets"][ds]["summary"], indent=1), flush=True)
    res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()

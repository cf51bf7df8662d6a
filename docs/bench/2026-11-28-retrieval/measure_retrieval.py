"""L̄ (tokens per iteration) of DynaTree's ``cpu`` preset with and without the retrieval datastore mixed into
the default pair's draft (feature + prompt lookup), on everyday prompts and on WikiText-2 / PG-19 passages.

Untimed: L̄ and acceptance do not depend on machine load. Every run with retrieval must give the tokens of
the run without (both equal the target's greedy output; the tests prove it on tiny pairs). Writes a
results JSON (schema version, config, per-prompt rows, summary).

    nice -n 19 python docs/bench/2026-11-28-retrieval/measure_retrieval.py --forms chat --time-limit 540 \
        --out docs/bench/2026-11-28-retrieval/results.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

import torch

from dynatree_core import ModelPair, generate
from dynatree_core.bench.data import hf_tokenize, load_corpus, select_prompts
from dynatree_core.distill.prompts import chat_ids, raw_ids, read_topics
from dynatree_core.drafters import RetrievalMix
from dynatree_core.policy.config import DynaTreeConfig

SCHEMA = 1
#: everyday prompts of our own (the bench's prompts dataset had not landed): instructions, questions,
#: stories, lists, code, dialogue; none names a distillation topic (checked in :func:`everyday_prompts`)
EVERYDAY = (
    "Give me a simple recipe for guacamole.", "How do I unclog a bathroom drain?", "What is a mortgage?",
    "Define the word 'irony' and give an example.", "Write a Python function that returns the n-th Fibonacci number.",
    "Write a news lead about a new ferry line opening between two towns.",
    "Write a polite email asking my landlord to fix the heating.", "List five ideas for a quiet weekend at home.",
    "What is the difference between a virus and a bacterium?", "Explain what a JSON file is.",
    "Write a haiku about a morning commute.", "How should I prepare for a salary negotiation?",
    "Tell me a joke about a lazy sloth.", "Summarize the plot of Cinderella in three sentences.",
    "What are good habits for keeping a tidy desk?", "Translate 'Good morning, how are you?' into Spanish.",
    "Write a SQL query that counts the orders of each customer.",
    "Write a short dialogue between a shopkeeper and a customer returning a broken umbrella.",
    "What does a project manager do?", "Give me three tips for writing clear instructions.",
    "Why does bread go stale?", "How does a thermostat work?", "Write a limerick about a goat who loves hats.",
    "What should I pack for a weekend trip to a big city?", "Explain what compound interest is.",
    "Write a bash command that finds all .txt files in a folder.",
    "Describe a busy laundromat on a Sunday morning.", "What are the symptoms of dehydration?",
)


def everyday_prompts() -> list[str]:
    """:data:`EVERYDAY` without any prompt that names a distillation topic (whole words)."""
    topics = [t.lower() for t in read_topics()]
    keep = [p for p in EVERYDAY if not any(f" {t} " in f" {p.lower().strip('.?!')} " for t in topics)]
    return keep


def run_pair(pair: ModelPair, ids: list[int], new_tokens: int) -> dict:
    res = generate(pair, ids, "dynatree", DynaTreeConfig.cpu(), max_new_tokens=new_tokens)
    m = res.metrics
    return {"tokens": res.tokens, "iterations": m.iterations, "L": m.tokens_per_iteration,
            "accepted": m.mean_accepted_length}


def measure(pairs: dict[str, ModelPair], items: list[tuple[str, str, list[int]]], new_tokens: int,
            deadline: float = 0.0, save=None) -> list[dict]:
    """Each item run by every pair (``save(rows)`` after each); no new item after ``deadline`` (time.time())."""
    rows: list[dict] = []
    for kind, name, ids in items:
        if deadline and time.time() > deadline:
            break
        row: dict = {"set": kind, "prompt": name, "prompt_tokens": len(ids)}
        runs = {label: run_pair(p, ids, new_tokens) for label, p in pairs.items()}
        base = runs["without"]["tokens"]
        row["equal_tokens"] = all(r["tokens"] == base for r in runs.values())
        row["new_tokens"] = len(base)
        for label, r in runs.items():
            row[label] = {k: v for k, v in r.items() if k != "tokens"}
        print(json.dumps({k: row[k] if not isinstance(row[k], dict) else round(row[k]["L"], 2) for k in row
                          if k != "prompt"}), flush=True)
        rows.append(row)
        if save is not None:
            save(rows)
    return rows


def summary(rows: list[dict], labels: list[str]) -> dict:
    out = {}
    for s in sorted({r["set"] for r in rows}):
        sel = [r for r in rows if r["set"] == s]
        out[s] = {"n": len(sel), "all_equal": all(r["equal_tokens"] for r in sel)}
        for label in labels:  # L̄ pooled (tokens / iterations) and the mean of per-prompt L̄
            tok = sum(r["new_tokens"] for r in sel)
            it = sum(r[label]["iterations"] for r in sel)
            mean = statistics.mean(r[label]["L"] for r in sel)
            out[s][label] = {"L_pooled": round(tok / it, 3), "L_mean": round(mean, 3)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--passages", type=int, default=2, help="per dataset (WikiText-2, PG-19)")
    ap.add_argument("--max-prompt-len", type=int, default=256)
    ap.add_argument("--forms", default="chat,raw", help="everyday prompt forms")
    ap.add_argument("--priors", default="256,256,16,4,2", help="retrieval κ_n lists, ';' between variants")
    ap.add_argument("--time-limit", type=float, default=0.0, help="seconds: no new prompt after it (0: none)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    torch.set_num_threads(2)
    base = ModelPair.named("default", drafter="feature+lookup", device="cpu")
    pairs = {"without": base}
    for spec in a.priors.split(";"):
        prior = tuple(float(x) for x in spec.split(","))
        pairs[f"retrieval {spec}"] = dataclasses.replace(base, lookup=RetrievalMix(retrieval_prior=prior))
    tok = base.tokenizer
    forms = {"chat": chat_ids, "raw": raw_ids}
    items: list[tuple[str, str, list[int]]] = []
    for ds in ("wikitext2", "pg19"):  # passages first: the time limit cuts everyday prompts, not them
        ps, _ = select_prompts(load_corpus(ds, source="bundled"), hf_tokenize(tok), a.passages, a.max_prompt_len)
        items += [(ds, f"{ds}[{i}]", list(p.token_ids)) for i, p in enumerate(ps)]
    items += [(f"everyday-{f}", p, forms[f](tok, p)) for f in a.forms.split(",") for p in everyday_prompts()]
    t0 = time.time()
    config = {"method": "dynatree", "preset": "cpu", "greedy": True, "new_tokens": a.new_tokens,
              "pair": "ModelPair.named('default', drafter='feature+lookup')", "max_prompt_len": a.max_prompt_len,
              "passages_per_dataset": a.passages, "passage_source": "bundled excerpts", "forms": a.forms,
              "time_limit_s": a.time_limit, "drafters": {k: _drafter_settings(p) for k, p in pairs.items()},
              "command": vars(a) | {"out": str(a.out)}}

    def save(rows: list[dict]) -> None:
        res = {"schema_version": SCHEMA, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "config": config, "items_planned": len(items), "seconds": round(time.time() - t0, 1),
               "summary": summary(rows, list(pairs)), "rows": rows}
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(res, indent=1) + "\n")

    rows = measure(pairs, items, a.new_tokens, t0 + a.time_limit if a.time_limit else 0.0, save)
    print(json.dumps(summary(rows, list(pairs)), indent=1))
    return 0


def _drafter_settings(pair: ModelPair) -> dict:
    from dynatree_core.drafters import make_drafter

    return make_drafter(pair.draft, pair.lookup).settings()


if __name__ == "__main__":
    raise SystemExit(main())

"""Draft-target agreement on the everyday prompts (issue 40, part 4): untimed, correctness only.

On the default pair (SmolLM2-135M-Instruct + the shipped feature draft): for each of the 72
bundled everyday prompts in chat and raw form, and for a few WikiText-2 / PG-19 passages (the
bundled excerpts, 256-token prompts), the target's greedy continuation (48 new tokens, EOS ignored as
the benchmark ignores it); then at every position of it, teacher-forced:

* whether the draft's top-1 equals the target's token at depth 1, 2, 3 (depth d reads features
  the draft itself predicted d - 1 steps before, as a tree node at depth d - 1 does);
* the same with prompt lookup mixed in (``LookupMix()``, the default pair's ``feature+lookup``);
* the target's probability mass outside the draft's 8k-token head, and whether the target's
  token is inside the head (a token outside it can never be drafted).

Run once, at low priority (``nice -n 19``), about 10 minutes on one CPU thread::

    nice -n 19 python docs/bench/2026-11-28-everyday-prompts/measure_agreement.py

``--draft DIR`` measures another feature draft (a candidate) on the same positions; ``--continuations
FILE`` keeps the target's continuations there (written on the first run, read on later ones: the
target's 48-token answers are most of the time, and they do not depend on the draft).

Writes ``agreement.json`` beside this script (schema version, config, per-item records and the
summary tables the README shows).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from dynatree_core.bench.data import bundled_corpus, hf_tokenize, select_prompts
from dynatree_core.bench.everyday import PROMPT_KINDS, form_ids, read_everyday
from dynatree_core.distill.decode import _decode_equal_length
from dynatree_core.distill.lookup_fit import _hits, position_records
from dynatree_core.drafters import LookupMix, PromptLookup
from dynatree_core.drafters.feature_draft import load_feature_draft, target_states, unrolled_forward
from dynatree_core.pairs.default_pair import load_default_pair

SCHEMA_VERSION = 1
HERE = Path(__file__).resolve().parent
#: continuation-position buckets of the tables (0-based positions in the target's continuation)
BUCKETS = ((0, 4), (4, 8), (8, 16), (16, 32), (32, 48))


@torch.no_grad()
def measure_item(model: Any, target: Any, prompt: list[int], cont: list[int], depths: int, mix: LookupMix
                 ) -> dict[str, Any]:
    """Per continuation position: hits at each depth, the mixture's hit, the target's mass outside
    the head and whether its token is in the head."""
    ids = prompt + cont
    x = torch.tensor([ids])
    f = target_states(target, x, model.config.target_layers).to(model.fc_emb.weight.dtype)
    outs = unrolled_forward(model, x, f, depths)
    P, n = len(prompt), len(cont)
    head = model.head.vocab_ids
    in_head_vocab = torch.zeros(model.config.vocab_size, dtype=torch.bool)
    in_head_vocab[head] = True
    hits = []
    for s, out in enumerate(outs, start=1):
        pred = head[model.head.forward_compact(out[0]).argmax(-1)].tolist()
        # output index i is position j = i + 1 and predicts ids[j + 1]; continuation token i is ids[P + i]
        hits.append([None if P - 1 + i < s else int(pred[P - 2 + i] == ids[P + i]) for i in range(n)])
    probs = torch.softmax(target(input_ids=x).logits[0, P - 1:P - 1 + n].float(), -1)
    outside = (1 - probs[:, in_head_vocab].sum(-1)).tolist()
    rec = position_records(model, target, prompt, cont, PromptLookup())
    h = _hits(rec, mix)
    return {"n": n, "hits": hits, "mix": h["mix"].int().tolist(), "lookup": h["lookup"].int().tolist(),
            "outside_mass": [round(v, 5) for v in outside], "in_head": [int(in_head_vocab[t]) for t in cont]}


def rate(items: list[dict[str, Any]], key: str = "d1", lo: int = 0, hi: int = 10 ** 9) -> dict[str, Any]:
    """Pooled rate over the positions lo <= i < hi of ``items``: agreement at a depth (d1..d3), of
    the mixture (mix), the head's miss rate (outside: target token not in head), the mean mass
    outside the head (mass_out), or agreement where the target's token is in the head (d1_in_head)."""
    num = den = 0.0
    for it in items:
        for i in range(min(hi, it["n"])):
            if i < lo:
                continue
            if key.startswith("d") and key[1:].isdigit():
                v = it["hits"][int(key[1:]) - 1][i]
            elif key == "mix":
                v = it["mix"][i]
            elif key == "outside":
                v = 1 - it["in_head"][i]
            elif key == "mass_out":
                v = it["outside_mass"][i]
            else:  # d1_in_head
                v = it["hits"][0][i] if it["in_head"][i] else None
            if v is not None:
                num, den = num + v, den + 1
    return {"rate": round(num / den, 4) if den else None, "positions": int(den)}


def summarize(groups: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    keys = ("d1", "d2", "d3", "mix", "d1_in_head", "outside", "mass_out")
    out: dict[str, Any] = {"by_group": {g: {k: rate(v, k) for k in keys} for g, v in groups.items()}}
    out["by_position"] = {g: {f"{lo}-{hi - 1}": rate(v, "d1", lo, hi)["rate"] for lo, hi in BUCKETS}
                          for g, v in groups.items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--passages", type=int, default=6, help="per passage dataset")
    ap.add_argument("--depths", type=int, default=3)
    ap.add_argument("--limit", type=int, default=0, help="first N prompts only (0: all)")
    ap.add_argument("--out", default=str(HERE / "agreement.json"))
    ap.add_argument("--draft", default=None, help="a feature draft folder (default: the shipped one)")
    ap.add_argument("--continuations", default=None, help="a JSON file of the target's continuations (read "
                    "if it exists, else written)")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    t0 = time.time()
    target, model, tok = load_default_pair(draft="feature")
    if a.draft:
        model = load_feature_draft(a.draft, target, tokenizer=tok)
    cache_path = Path(a.continuations) if a.continuations else None
    conts: dict[str, list[int]] = json.loads(cache_path.read_text()) if cache_path and cache_path.exists() else {}
    mix = LookupMix()
    prompts = read_everyday()[: a.limit or None]
    items: list[dict[str, Any]] = []

    def run(ids: list[int], **meta: Any) -> None:
        key = f"{meta['id']}:{meta['form']}:{a.new_tokens}"
        if key not in conts:  # EOS ignored
            conts[key] = _decode_equal_length(target, [ids], a.new_tokens, set(), False, 1.0, 1.0)[0]
        cont = conts[key]
        if cont:
            items.append({**meta, "prompt_tokens": len(ids), **measure_item(model, target, ids, cont, a.depths, mix)})

    for form in ("chat", "raw"):
        for p in prompts:
            run(form_ids(tok, p.text, form), group="prompts", form=form, kind=p.kind, id=p.id)
        print(f"{form}: done at {time.time() - t0:.0f}s", flush=True)
    for ds in ("wikitext2", "pg19"):
        chosen, _ = select_prompts(bundled_corpus(ds), hf_tokenize(tok), a.passages, 256, seed=0)
        for q in chosen:
            run(q.token_ids, group="passages", form="raw", kind=ds, id=f"{ds}-{q.index}")
    if cache_path and not cache_path.exists():
        cache_path.write_text(json.dumps(conts))
    groups: dict[str, list[dict[str, Any]]] = {}
    for it in items:
        for g in (f"{it['group']}:{it['form']}", f"{it['group']}:{it['form']}:{it['kind']}"):
            groups.setdefault(g, []).append(it)
    groups["passages:all"] = [it for it in items if it["group"] == "passages"]
    doc = {"schema_version": SCHEMA_VERSION,
           "config": {"pair": "default (SmolLM2-135M-Instruct, shipped feature draft)", "draft": a.draft or "shipped", "new_tokens": a.new_tokens,
                      "eos": "ignored (as in the benchmark): 48 tokens each", "depths": a.depths,
                      "passages_per_dataset": a.passages, "passage_prompt_tokens": 256, "kinds": list(PROMPT_KINDS),
                      "head_ids": int(model.head.vocab_ids.numel()), "lookup_mix": repr(mix), "threads": a.threads,
                      "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "seconds": round(time.time() - t0, 1)},
           "summary": summarize(groups), "items": items}
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["summary"]["by_group"], indent=1))


if __name__ == "__main__":
    main()

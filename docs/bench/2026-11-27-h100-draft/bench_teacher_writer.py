"""Teacher-data writers in tokens per second (issue 34): who writes the target's continuations fastest?

Writers, all greedy (the target's own tokens; the data stage's ``--gen-dtype`` for the batched ones):

* ``generate``: Hugging Face's ``generate`` with left padding, what the data stage ran on prompts of
  different lengths until 2026-11-27 (``_continue(writer="generate")``);
* ``loop``: :func:`dynatree_core.distill.decode._decode_batch`, the data stage's writer now: the same
  left-padded batch under an attention mask in a KV-cached loop, logits at the last position only;
* ``dynatree``: this project's decoder (DynaTree, ``cpu`` preset, the shipped feature+lookup draft,
  fp32, one prompt at a time): exactly the fp32 target's greedy tokens, without batching.

Counts the tokens kept (each row cut after its first EOS, as the data stage stores them).

    flock /tmp/cpu.lock python docs/bench/2026-11-27-h100-draft/bench_teacher_writer.py --out docs/bench/<dir>/writer.json
"""

from __future__ import annotations

import argparse
import copy
import json
import time

import torch

from dynatree_core.distill.decode import _continue, eos_ids
from dynatree_core.distill.prompts import chat_ids, raw_ids, read_prompts


def prompt_batch(tok, n: int) -> list[list[int]]:
    """The first ``n`` bundled prompts (raw and chat form: different lengths), sorted by length."""
    items = []
    for p in read_prompts()[: n // 2]:
        items += [raw_ids(tok, p), chat_ids(tok, p)]
    return sorted(items, key=len)


def time_batched(writer: str, model, tok, items, batch: int, new: int, eos) -> tuple[dict, list]:
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    t0 = time.perf_counter()
    rows = []
    for i in range(0, len(items), batch):
        rows += _continue(model, pad, items[i:i + batch], new, eos, False, 1.0, 1.0, writer=writer)
    s = time.perf_counter() - t0
    kept = sum(len(r) - c for r, c in rows)
    return {"seconds": round(s, 2), "tokens": kept, "tokens_per_s": round(kept / s, 1)}, rows


def time_dynatree(items, new: int, n: int) -> dict:
    from dynatree_core import ModelPair, generate
    from dynatree_core.bench.methods import method_specs

    pair = ModelPair.default()
    spec = method_specs(["dynatree:cpu"], preset="cpu")[0]
    generate(pair, items[0], spec.method, config=spec.config, max_new_tokens=8)  # warm-up
    t0 = time.perf_counter()
    kept = 0
    for p in items[:n]:
        kept += len(generate(pair, p, spec.method, config=spec.config, max_new_tokens=new).tokens)
    s = time.perf_counter() - t0
    return {"seconds": round(s, 2), "tokens": kept, "tokens_per_s": round(kept / s, 1), "prompts": n,
            "batch": 1, "dtype": "float32", "draft": "shipped feature+lookup"}


def main() -> None:
    from dynatree_core.pairs.default_pair import load_target

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--dynatree-prompts", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    target, tok = load_target()
    model = copy.deepcopy(target).to(getattr(torch, a.dtype))
    eos = eos_ids(target, tok)
    items = prompt_batch(tok, a.prompts)
    res = {"prompts": len(items), "batch": a.batch, "new_tokens": a.new_tokens, "dtype": a.dtype,
           "threads": a.threads, "prompt_lengths": [len(items[0]), len(items[-1])]}
    res["generate"], ref = time_batched("generate", model, tok, items, a.batch, a.new_tokens, eos)
    res["loop"], got = time_batched("loop", model, tok, items, a.batch, a.new_tokens, eos)
    res["loop_rows_equal_generate"] = sum(x == y for x, y in zip(ref, got)) / len(ref)
    print(json.dumps(res), flush=True)
    res["dynatree"] = time_dynatree(items, a.new_tokens, a.dynatree_prompts)
    res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()

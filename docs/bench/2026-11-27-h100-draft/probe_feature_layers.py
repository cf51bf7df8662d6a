"""Which target layers could a feature draft read besides the final one? A linear probe per layer.

The feature draft predicts the token after x_j from (f_{j-1}, x_j): the target's final state one
position back and the token's embedding. This probe asks how much a lower layer's state at j-1 adds:
on training text (never the evaluation text), it fits by ridge regression the target's final state
at j (what the draft's head must read) from

    base:    [f_{j-1}; emb(x_j)]                      (what today's draft reads)
    + l:     [f_{j-1}; emb(x_j); h^l_{j-1}]            (plus the state after target layer l)
    + l, m:  [f_{j-1}; emb(x_j); h^l_{j-1}; h^m_{j-1}] (a low and a middle layer, the EAGLE-3 idea)

and reports the top-1 agreement of the target's head on the probe's output with the target's greedy
token, on held-out tokens. Every block is RMS-normalised first. One Gram matrix over all blocks is
built once, so each probe is a small solve.

    flock /tmp/cpu.lock python docs/bench/2026-11-27-h100-draft/probe_feature_layers.py --out docs/bench/<dir>/probe.json
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import random
import time

import torch

from dynatree_core.distill.data import find_data_dir, training_text_files
from dynatree_core.distill.prompts import raw_ids
from dynatree_core.pairs.default_pair import load_target

LAYERS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 18, 21, 24, 27, 29)


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


@torch.no_grad()
def blocks(target, tok, tokens: int, seq: int, seed: int, threads: int, data_dir=None
           ) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Normalised inputs per block ([f_{j-1}], [emb(x_j)], then h^l_{j-1} for each layer of LAYERS),
    each [N, H] fp32, and the target's final state at j [N, H] (the regression target)."""
    torch.set_num_threads(threads)
    files = training_text_files(find_data_dir(data_dir))
    stream = [t for f in files for t in raw_ids(tok, f.read_text(encoding="utf-8", errors="replace"))]
    rng = random.Random(seed)
    starts = sorted(rng.sample(range(0, len(stream) - seq, seq), tokens // seq))
    bf = copy.deepcopy(target).to(torch.bfloat16)  # the fp32 target's head scores the probes
    emb = target.get_input_embeddings()
    xs: list[list[torch.Tensor]] = [[] for _ in range(2 + len(LAYERS))]
    ys = []
    for i in range(0, len(starts), 8):
        x = torch.tensor([stream[s:s + seq] for s in starts[i:i + 8]])
        out = bf.base_model(input_ids=x, output_hidden_states=True)
        f = out.last_hidden_state.float()
        xs[0].append(_rms(f[:, :-1]).flatten(0, 1))
        xs[1].append(_rms(emb(x[:, 1:]).float()).flatten(0, 1))
        for k, layer in enumerate(LAYERS):
            xs[2 + k].append(_rms(out.hidden_states[layer][:, :-1].float()).flatten(0, 1))
        ys.append(f[:, 1:].flatten(0, 1))
    return [torch.cat(b) for b in xs], torch.cat(ys)


def agreement(pred: torch.Tensor, y: torch.Tensor, head: torch.Tensor) -> float:
    hits = 0
    for i in range(0, len(pred), 2048):
        hits += int(((pred[i:i + 2048] @ head.T).argmax(-1) == (y[i:i + 2048] @ head.T).argmax(-1)).sum())
    return hits / len(pred)


def probe(gram: torch.Tensor, xty: torch.Tensor, test_x: list[torch.Tensor], y_test: torch.Tensor,
          head: torch.Tensor, which: list[int], H: int, ridge: float) -> float:
    idx = torch.cat([torch.arange(b * H, (b + 1) * H) for b in which])
    g = gram[idx][:, idx].double()
    g += ridge * g.diagonal().mean() * torch.eye(len(idx), dtype=torch.float64)
    w = torch.linalg.solve(g, xty[idx].double()).float()
    x = torch.cat([test_x[b] for b in which], dim=-1)
    return agreement(x @ w, y_test, head)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=65536, help="training-text tokens read (3/4 fit, 1/4 held out)")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--ridge", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data-dir", default=None, help="training text (default: shared/data if found)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    t0 = time.time()
    target, tok = load_target()
    xs, y = blocks(target, tok, a.tokens, a.seq, a.seed, a.threads, a.data_dir)
    n = len(y) * 3 // 4
    z = torch.cat([b[:n] for b in xs], dim=-1)
    gram, xty = z.T @ z, z.T @ y[:n]
    del z
    H = y.shape[1]
    head = target.get_output_embeddings().weight.float()
    test = [b[n:] for b in xs]
    res = {"tokens_fit": n, "tokens_held_out": len(y) - n, "ridge": a.ridge, "seed": a.seed,
           "base": probe(gram, xty, test, y[n:], head, [0, 1], H, a.ridge), "plus_layer": {}, "plus_pair": {}}
    print(f"base [f; emb]: {res['base']:.4f}", flush=True)
    for k, layer in enumerate(LAYERS):
        res["plus_layer"][layer] = probe(gram, xty, test, y[n:], head, [0, 1, 2 + k], H, a.ridge)
        print(f"+ layer {layer}: {res['plus_layer'][layer]:.4f}", flush=True)
    for lo, mid in itertools.product([l for l in LAYERS if l <= 6], [l for l in LAYERS if 8 <= l <= 21]):
        which = [0, 1, 2 + LAYERS.index(lo), 2 + LAYERS.index(mid)]
        res["plus_pair"][f"{lo},{mid}"] = probe(gram, xty, test, y[n:], head, which, H, a.ridge)
        print(f"+ layers {lo},{mid}: {res['plus_pair'][f'{lo},{mid}']:.4f}", flush=True)
    res["seconds"] = round(time.time() - t0, 1)
    res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(res, fh, indent=1)
    print(json.dumps({k: v for k, v in res.items() if k not in ("plus_layer", "plus_pair")}))


if __name__ == "__main__":
    main()

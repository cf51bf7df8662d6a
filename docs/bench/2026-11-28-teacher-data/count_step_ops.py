"""What one decode step of the data stage dispatches, before (the dynamic loop) and after (the static loop):
operator calls by name from torch.profiler, per step, on a SmolLM2-shaped Llama (30 layers, 9 heads, 3 KV heads,
hidden 576, vocabulary 49,152; random weights, so nothing is loaded) at batch 64, greedy and sampled.

    python docs/bench/2026-11-28-teacher-data/count_step_ops.py --out docs/bench/2026-11-28-teacher-data/step-ops.json

Host reads are the ``aten::_local_scalar_dense`` calls (``.item()``, ``bool(t)``): on a GPU each one waits
for the device. ``aten::cat`` is the growing cache (one per layer and K/V per step in a ``DynamicCache``).
"""

from __future__ import annotations

import argparse
import json

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import LlamaConfig, LlamaForCausalLM

from dynatree_core.distill.decode import decode

WATCH = ("aten::_local_scalar_dense", "aten::cat", "aten::multinomial", "aten::index_copy_", "aten::exponential_")


def smollm2_shaped(layers: int) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=layers,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                      tie_word_embeddings=True, attn_implementation="sdpa")
    return LlamaForCausalLM(cfg).eval()


def per_step(model, batch, new: int, runtime: str, sample: bool) -> dict:
    """Operator calls of a whole batch minus those of a one-token batch, over the new - 1 steps between."""
    def calls(n: int) -> dict:
        torch.manual_seed(0)
        with profile(activities=[ProfilerActivity.CPU]) as p:
            decode(model, batch, n, set(), sample, 0.8, 0.95, runtime=runtime, stop_every=16)
        return {e.key: e.count for e in p.key_averages()}

    one, full = calls(1), calls(new)
    step = {k: (full.get(k, 0) - one.get(k, 0)) / (new - 1) for k in set(full) | set(one)}
    return {"ops_per_step": round(sum(v for v in step.values()), 1),
            **{k: round(step.get(k, 0.0), 2) for k in WATCH}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--new", type=int, default=17)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    model = smollm2_shaped(a.layers)
    g = torch.Generator().manual_seed(0)
    batch = [torch.randint(5, 40000, (int(n),), generator=g).tolist() for n in torch.randint(20, 60, (a.rows,))]
    res = {"layers": a.layers, "rows": a.rows, "new_tokens": a.new, "torch": torch.__version__, "steps": {}}
    for sample in (False, True):
        for runtime in ("dynamic", "static"):
            key = f"{runtime}/{'sampled' if sample else 'greedy'}"
            res["steps"][key] = per_step(model, batch, a.new, runtime, sample)
            print(key, json.dumps(res["steps"][key]), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()

"""Tune the GPU preset without a GPU: rank configs by the ops they dispatch per generated token.

On a launch-bound GPU host (the H100 of docs/gpu/2026-11-27-h100: a 135M target forward of
~1,700 ops took ~25 ms, ~14 us per op, whatever the tree's width) an iteration costs the ops it
dispatches plus its host syncs; the GPU's arithmetic hardly shows. Both counts and the tokens each
iteration commits are the same on a CPU (greedy decoding is exact, so the trees are the same), so
this script measures them here, on *training* text only (WikiText-2 validation passages and the
gutenberg-train books, never the test split), and predicts each config's speed over AR:

    predicted time per token = (ops per token * OP_US + host syncs per token * SYNC_US) / 1e6

Usage: python scripts/tune_gpu_preset.py [--prompts 3] [--tokens 128] [--out results/tune_gpu.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SCHEMA_VERSION = 1
DATA = ROOT.parent / "shared" / "data"


def passages(tok, n: int, length: int) -> list[tuple[str, list[int]]]:
    """n WikiText-2 validation articles and n gutenberg-train book passages (from the middle)."""
    text = (DATA / "wikitext-2-raw" / "wiki.valid.raw").read_text(encoding="utf-8")
    arts = [a for a in text.split("\n = ") if len(a) > 4000]
    out = [("wikitext2-valid", tok(a)["input_ids"][:length]) for a in arts[1:1 + n]]
    for book in sorted((DATA / "gutenberg-train").glob("*.txt"))[:n]:
        body = book.read_text(encoding="utf-8")
        mid = len(body) // 2
        out.append((f"gutenberg:{book.stem[:24]}", tok(body[mid:mid + 6 * length])["input_ids"][:length]))
    return out


def cells(args) -> list[tuple[str, object]]:
    from dynatree_core import DynaTreeConfig, FixedTreeConfig, LinearConfig
    from dynatree_core.policy.config import ARConfig

    out: list[tuple[str, object]] = [("ar", ARConfig())]
    out += [("linear", LinearConfig(k=k)) for k in (2, 3, 4, 5)]
    out += [("fixed_tree", FixedTreeConfig(d=d, b=b, n_max=256)) for d, b in ((4, 2), (5, 2), (4, 3))]
    out += [("dynatree", DynaTreeConfig.paper()), ("dynatree", DynaTreeConfig.cpu())]
    for spec in args.grid.split(";"):
        fields = dict(kv.split("=") for kv in spec.split(","))
        out.append(("dynatree", DynaTreeConfig.paper(**{k: (float(v) if "." in v else int(v)) for k, v in fields.items()})))
    return out


DEFAULT_GRID = ";".join([
    "b_min=1,b_mid=2,b_max=4,n_max=32",
    "b_min=2,b_mid=2,b_max=3,n_max=32",
    "b_min=2,b_mid=3,b_max=4,n_max=32",
    "b_min=2,b_mid=3,b_max=4,n_max=64",
    "b_min=2,b_mid=3,b_max=5,n_max=64",
    "b_min=3,b_mid=4,b_max=5,n_max=64",
    "b_min=2,b_mid=3,b_max=4,n_max=32,d0=4",
    "b_min=2,b_mid=3,b_max=4,n_max=32,d0=4,d_max=6",
    "b_min=2,b_mid=3,b_max=4,n_max=32,tau=0.02",
    "b_min=2,b_mid=3,b_max=4,n_max=32,rho_stop=0.05",
])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=3, help="passages per source (default 3)")
    p.add_argument("--tokens", type=int, default=128, help="new tokens per passage (default 128)")
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--op-us", type=float, default=14.0, help="host cost of one op in us (default 14: the H100 run)")
    p.add_argument("--sync-us", type=float, default=50.0, help="cost of one host sync in us (default 50)")
    p.add_argument("--grid", default=DEFAULT_GRID, help="';'-separated DynaTree overrides of the paper preset")
    p.add_argument("--out", default=None, help="JSON file for the results")
    args = p.parse_args(argv)

    import torch
    from tqdm import tqdm

    from count_ops import OpCounter
    from dynatree_core import ModelPair, iterate

    torch.set_num_threads(args.threads)
    pair = ModelPair.named("default", device="cpu")
    texts = passages(pair.tokenizer, args.prompts, args.prompt_len)
    todo = cells(args)
    rows, ar_tokens = [], {}
    bar = tqdm(total=len(todo) * len(texts), desc="configs x passages")
    for method, cfg in todo:
        ops = syncs = tokens = iterations = levels = 0
        exact = True
        t0 = time.perf_counter()
        for i, (_, prompt) in enumerate(texts):
            run = iterate(pair, prompt, method, cfg, max_new_tokens=args.tokens, ignore_eos=True)
            out = list(next(run).committed)  # the first iteration also reads the prompt: not counted
            with OpCounter() as c:
                for rec in run:
                    out += rec.committed
                    iterations += 1
                    tokens += len(rec.committed)
                    levels += rec.draft_forwards
                    syncs += rec.host_syncs
            ops += c.total
            if method == "ar":
                ar_tokens[i] = out
            exact &= out == ar_tokens[i]
            bar.update()
        per_tok_us = (ops * args.op_us + syncs * args.sync_us) / tokens
        desc = {k: v for k, v in cfg.to_dict().items() if k not in ("kv_mode", "trace_top_k", "history", "method")}
        rows.append({"method": method, "config": desc, "exact": exact, "tokens_per_iteration": tokens / iterations,
                     "levels_per_iteration": levels / iterations, "ops_per_token": ops / tokens,
                     "syncs_per_token": syncs / tokens, "predicted_us_per_token": per_tok_us,
                     "cpu_s": time.perf_counter() - t0})
    bar.close()
    ar = rows[0]["predicted_us_per_token"]
    best_linear = min(r["predicted_us_per_token"] for r in rows if r["method"] == "linear")
    print(f"predicted launch-bound speed (op {args.op_us} us, sync {args.sync_us} us); passages: "
          + ", ".join(name for name, _ in texts))
    print(f"{'method':10s} {'xAR':>5s} {'xlin':>5s} {'L':>5s} {'lv/it':>5s} {'ops/tok':>7s} {'sync/tok':>8s}  config")
    for r in sorted(rows, key=lambda r: r["predicted_us_per_token"]):
        print(f"{r['method']:10s} {ar / r['predicted_us_per_token']:5.2f} {best_linear / r['predicted_us_per_token']:5.2f} "
              f"{r['tokens_per_iteration']:5.2f} {r['levels_per_iteration']:5.2f} {r['ops_per_token']:7.0f} "
              f"{r['syncs_per_token']:8.2f}  {'' if r['exact'] else 'NOT EXACT '}"
              f"{json.dumps({k: v for k, v in r['config'].items() if k in ('k', 'd', 'b', 'd0', 'd_max', 'b_min', 'b_mid', 'b_max', 'n_max', 'tau', 'rho_stop', 'tau_h')})}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({
            "schema_version": SCHEMA_VERSION, "kind": "tune_gpu_preset",
            "settings": {k: v for k, v in vars(args).items() if k != "out"},
            "pair": [pair.target_name, pair.draft_name], "passages": [name for name, _ in texts],
            "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

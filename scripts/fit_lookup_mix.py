"""Fit LookupMix's pseudo-counts κ_n on training text (never the evaluation text) and report the
mixture's teacher-forced agreement there, for the embedded pair's drafts.

    python scripts/fit_lookup_mix.py --out docs/bench/2026-11-27-lookup-mix/fit.json

Data: passages of the training books (``gutenberg-train/``, and ``wiki.valid.raw`` when present)
continued greedily by the fp32 target, and the distillation prompts (raw and chat form), continued
the same way. The default κ in :class:`dynatree_core.drafters.LookupMix` come from this script.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from dynatree_core.pairs.default_pair import load_default_pair
from dynatree_core.distill.data import find_data_dir, training_text_files
from dynatree_core.distill.decode import _decode_equal_length, _first_eos_cut, eos_ids
from dynatree_core.distill.data import _length_batches
from dynatree_core.distill.lookup_fit import PositionRecords, agreement, fit_prior, mix_likelihood, position_records
from dynatree_core.distill.prompts import chat_ids, raw_ids, read_prompts
from dynatree_core.drafters import LookupMix, PromptLookup


def continuations(target, items: list[list[int]], n_new: int, eos: set[int]) -> list[tuple[list[int], list[int]]]:
    out = []
    for batch in tqdm(_length_batches(items, 16), desc=f"continuations (+{n_new})", mininterval=10):
        for p, g in zip(batch, _decode_equal_length(target, batch, n_new, eos, False, 1.0, 1.0)):
            g = g[:_first_eos_cut(g, eos)]
            if g:
                out.append((p, g))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--passages-per-file", type=int, default=2)
    ap.add_argument("--passage-len", type=int, default=256)
    ap.add_argument("--prompts", type=int, default=48, help="distillation prompts used (raw and chat form each)")
    ap.add_argument("--max-ngram", type=int, nargs="+", default=[3, 4])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.time()
    target, feature, tok = load_default_pair(draft="feature")
    _, model_draft, _ = load_default_pair(draft="model")
    eos = eos_ids(target, tok)
    rng = random.Random(args.seed)
    files = training_text_files(find_data_dir(args.data_dir))
    passages = []
    for f in files:
        ids = raw_ids(tok, f.read_text(encoding="utf-8", errors="replace"))
        for _ in range(args.passages_per_file):
            st = rng.randrange(0, len(ids) - args.passage_len - 1)
            passages.append(ids[st:st + args.passage_len])
    prompts = read_prompts()[: args.prompts]
    short = [raw_ids(tok, p) for p in prompts] + [chat_ids(tok, p) for p in prompts]
    sets = {"passages": continuations(target, passages, 64, eos), "prompts": continuations(target, short, 48, eos)}
    result: dict = {"schema_version": 1, "script": "scripts/fit_lookup_mix.py", "argv": sys.argv[1:],
                    "data": {"files": [f.name for f in files], "passages": len(sets["passages"]),
                             "prompts": len(sets["prompts"])}, "fits": {}}
    for n in args.max_ngram:
        source = PromptLookup(max_ngram=n)
        for name, draft in (("feature", feature), ("model", model_draft)):
            recs = {k: PositionRecords.cat([position_records(draft, target, p, c, source) for p, c in v])
                    for k, v in sets.items()}
            both = PositionRecords.cat(list(recs.values()))
            prior = fit_prior(both, source)
            mix = LookupMix(source, prior=prior)
            row = {"prior": list(prior), "positions": len(both),
                   "log_likelihood": round(mix_likelihood(both, mix), 4),
                   "agreement": {k: {"draft": round(agreement(r, None), 4), "mix": round(agreement(r, mix), 4)}
                                 for k, r in recs.items()}}
            result["fits"][f"{name}/max_ngram={n}"] = row
            print(f"{name} max_ngram={n}: κ={prior} {json.dumps(row['agreement'])} ll={row['log_likelihood']}",
                  flush=True)
    result["seconds"] = round(time.time() - t0, 1)
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out} ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

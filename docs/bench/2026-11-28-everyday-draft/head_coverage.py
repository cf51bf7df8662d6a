"""How much a re-chosen 8k head would cover on the everyday prompts (issue 40: "a wider head if the head is the limit").

No model runs: token counts only. The shipped feature draft's sparse head holds 8,192 token ids, chosen by how often
the target's greedy tokens used them in its (passage-heavy) training data; a token outside the head can never be
drafted. This script counts the target's greedy tokens in the everyday fine-tune's data (the ``seqs/`` shards of
``dynatree distill``'s work folders: continuations of the six kinds' prompts ``k``, of the bundled distillation
prompts ``p`` and of training passages ``x``; training text ``text``) and asks, on the target's continuations of the
*benchmark's* prompts (``measure_agreement.py --continuations``, never used for choosing), what share lies inside:

* the shipped head;
* a head of the same size re-chosen from the fine-tune data (every pool weighted equally);
* the shipped head with its ``n`` least-used ids (by that data) swapped for the ``n`` most used ids outside it.

    python docs/bench/2026-11-28-everyday-draft/head_coverage.py --seqs .distill/everyday2/seqs \
        --continuations /tmp/everyday-conts.json --out docs/bench/2026-11-28-everyday-draft/head-coverage.json
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import torch
from safetensors.torch import load_file

from dynatree_core.drafters.feature_draft import FEATURE_CONFIG_FILE
from dynatree_core.pairs.default_pair import FEATURE_DRAFT_ASSET_DIR

SCHEMA_VERSION = 1
SPECIAL_IDS = (0, 1, 2)  # kept in every head, as distill does (EOS among them)


def pool_of(shard: Path, kind: str) -> str:
    """The data pool of a ``seqs/`` shard: ``text``, or the generation job's letter (``k``, ``p``, ``x``, ...)."""
    if kind == "text":
        return "text"
    name = shard.stem.split("_", 1)[1] if shard.stem.startswith("r0_") else shard.stem  # r0_: an earlier run's shard
    return name[0]


def greedy_counts(seq_dirs: list[Path], vocab: int) -> dict[str, torch.Tensor]:
    """Counts of the target's tokens per pool: continuation tokens (the target's greedy output) of generated rows,
    every token of training-text rows."""
    counts: dict[str, torch.Tensor] = {}
    for d in seq_dirs:
        for f in sorted(d.glob("*.pt")):
            s = torch.load(f, weights_only=True)
            pool = pool_of(f, s["kind"])
            c = counts.setdefault(pool, torch.zeros(vocab))
            toks, off = s["tokens"].long(), 0
            for n, start in zip(s["lens"].tolist(), s["cont"].tolist()):
                row = toks[off:off + n]
                off += n
                c += torch.bincount(row if pool == "text" else row[start:], minlength=vocab).float()
    return counts


def mask_of(ids: torch.Tensor, vocab: int) -> torch.Tensor:
    m = torch.zeros(vocab, dtype=torch.bool)
    m[ids] = True
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", nargs="+", required=True, help="distill work folders' seqs/ directories")
    ap.add_argument("--continuations", required=True, help="measure_agreement.py's continuations JSON")
    ap.add_argument("--swaps", default="512,1024,2048")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    weights = load_file(str(FEATURE_DRAFT_ASSET_DIR / "model.safetensors"))
    head = weights["head.vocab_ids"].long()
    vocab = json.loads((FEATURE_DRAFT_ASSET_DIR / FEATURE_CONFIG_FILE).read_text())["config"]["vocab_size"]
    size = len(head)
    counts = greedy_counts([Path(p) for p in a.seqs], vocab)
    usage = sum(c / c.sum() for c in counts.values())  # every pool weighs the same
    usage[list(SPECIAL_IDS)] = float("inf")
    shipped = mask_of(head, vocab)
    heads = {"shipped": shipped, "rechosen": mask_of(usage.argsort(descending=True)[:size], vocab)}
    for n in (int(x) for x in a.swaps.split(",")):
        inside = torch.where(shipped, usage, torch.tensor(-1.0))
        outside = torch.where(shipped, torch.tensor(-1.0), usage)
        keep, add = inside.argsort(descending=True)[:size - n], outside.argsort(descending=True)[:n]
        heads[f"swap{n}"] = mask_of(torch.cat([keep, add]), vocab)
    groups: dict[str, list[int]] = defaultdict(list)
    for key, toks in json.loads(Path(a.continuations).read_text()).items():
        item, form, _ = key.split(":")
        kind = item.split("-")[0]
        if kind in ("wikitext2", "pg19"):  # the passages' continuations (raw text)
            groups["passages"] += toks
        else:
            groups[form] += toks
            groups[f"{form}/{kind}"] += toks
    table = {name: {g: round(float(m[torch.tensor(t)].float().mean()), 4) for g, t in sorted(groups.items())}
             for name, m in heads.items()}
    doc = {"schema_version": SCHEMA_VERSION,
           "config": {"seqs": a.seqs, "continuations": a.continuations, "head_size": size, "swaps": a.swaps,
                      "pool_tokens": {p: int(c.sum()) for p, c in counts.items()}},
           "coverage": table}
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    groups_shown = ["chat", "raw", "passages", "chat/code", "raw/code"]
    print("| head | " + " | ".join(groups_shown) + " |")
    for name, row in table.items():
        print(f"| {name} | " + " | ".join(f"{100 * row[g]:.1f}%" for g in groups_shown) + " |")


if __name__ == "__main__":
    main()

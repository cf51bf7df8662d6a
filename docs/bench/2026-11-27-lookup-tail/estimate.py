"""Offline estimate: how many extra tokens per iteration a free prompt-lookup tail under the
accepted leaf would have added (DynaTree, default pair, WikiText-2 validation passages)."""
import sys, statistics, torch
from pathlib import Path
from collections import Counter
from dynatree_core import DynaTreeConfig, ModelPair, generate
torch.set_num_threads(2)
pair = ModelPair.default()
text = Path("../shared/data/wikitext-2-raw/wiki.valid.raw").read_text()
arts = [a for a in text.split("\n = ") if len(a) > 4000]
prompts = [pair.tokenizer(a)["input_ids"][:256] for a in arts[1:7]]
g = list(Path("../shared/data/gutenberg-train").glob("*.txt"))[:3]
for f in g:
    t = f.read_text()[50000:70000]; prompts.append(pair.tokenizer(t)["input_ids"][:256])

def lookup_next(seq, min_n=2, max_n=5):
    L = len(seq)
    for n in range(max_n, min_n - 1, -1):
        if L < n + 1: continue
        pat = seq[L - n:]
        c = Counter(); last = {}
        for i in range(0, L - n):
            if seq[i:i + n] == pat:
                c[seq[i + n]] += 1; last[seq[i + n]] = i
        if c:
            return max(c, key=lambda t: (c[t], last[t])), n, sum(c.values())
    return None, 0, 0

MINN = int(sys.argv[1])
for preset in sys.argv[2:] or ["cpu", "gpu"]:
    cfg = getattr(DynaTreeConfig, preset)()
    iters = leaf_end = nodes = 0; extra = [0]; gains = {m: 0 for m in (1, 2, 4, 8)}; Ls = []
    for p in prompts:
        r = generate(pair, p, "dynatree", cfg, max_new_tokens=128, trace=True, ignore_eos=True)
        out = r.tokens; pos = 0
        for rec in r.trace.iterations:
            iters += 1; nodes += len(rec.tree.tokens) - 1; Ls.append(len(rec.committed))
            path = rec.accepted_path
            end = path[-1] if path else 0
            children = [i for i, q in enumerate(rec.tree.parents) if q == end]
            pos_next = pos + len(rec.committed)
            leaves = [u for u in range(len(rec.tree.tokens)) if u not in set(rec.tree.parents)]
            def anc(u):
                ps = []
                while u > 0:
                    ps.append(u); u = rec.tree.parents[u]
                return ps[::-1]
            for u in leaves:
                c = p + out[:pos] + [rec.tree.tokens[v] for v in anc(u)]
                for j in range(4):
                    t, n, C = lookup_next(c, MINN)
                    if t is None: break
                    extra[0] += 1; c.append(t)
            if not children:  # accepted down to a leaf: a tail there could continue
                leaf_end += 1
                ctx = p + out[:pos] + [rec.tree.tokens[u] for u in path]
                truth = out[pos + len(path):]   # bonus and later tokens
                for m in gains:
                    c = list(ctx); k = 0
                    for j in range(m):
                        t, n, C = lookup_next(c, MINN)
                        if t is None or j >= len(truth) or t != truth[j]: break
                        k += 1; c.append(t)
                    gains[m] += k
            pos = pos_next
    print(preset, f"iters {iters} L {statistics.mean(Ls):.2f} leaf-ended {leaf_end/iters:.2f}",
          {m: round(v / iters, 3) for m, v in gains.items()}, "tail nodes/iter (m=4)", round(extra[0]/iters, 2), "tree nodes/iter", round(nodes/iters,2), flush=True)

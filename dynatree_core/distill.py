"""Reproducible distillation of the default draft from the SmolLM2-135M-Instruct target.

Pipeline (``dynatree distill`` / ``python -m dynatree_core.distill``):

1. **data** - label text with the target (teacher):

   * *gen-prompts*: greedy continuations of the bundled prompt set
     (``dynatree_core/data/distill_prompts.txt``), both as raw text and in the chat template;
   * *gen-passages*: greedy continuations of passages of the training text;
   * *tf*: teacher-forced next-token distributions over chunks of natural text
     (``wikitext-2-raw/wiki.valid.raw`` and ``gutenberg-train/*.txt``; never
     ``wiki.test.raw`` or ``pg19/``, which are evaluation text).

   Per labelled position the target's top-K ids + probabilities (fp16) are stored;
   the greedy token is the top-1 id.  Data shards go to ``<work-dir>/data`` and are
   skipped when already present (resumable).
2. **train** - initialise the 2-layer student from the target (layers 0-1, final norm,
   head rows of the H most frequent greedy tokens) and train it with
   ``alpha * CE(target top-K probs) + (1-alpha) * CE(greedy token)``, AdamW + cosine,
   seeded; checkpoints under ``<work-dir>/ckpt`` (resumable).
3. **export** - write fp16 weights to ``dynatree_core/assets/smollm2-135m-draft/``.
4. **evaluate** (``--evaluate``) - agreement with the target's greedy tokens on held-out
   prompts and on continuations of ``wiki.test.raw`` / ``pg19`` passages, decode-step cost
   ratio, shipped size and pair load time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
PROMPTS_FILE = Path(__file__).resolve().parent / "data" / "distill_prompts.txt"
DEFAULT_WORK_DIR = REPO_ROOT / ".distill"
FORBIDDEN_TRAIN_NAMES = ("wiki.test.raw", "pg19")

# Held-out evaluation prompts: topics deliberately absent from distill_prompts.txt.
EVAL_PROMPTS = [
    "Write a short paragraph about volcanoes.",
    "Explain the rules of chess to a beginner.",
    "What are three interesting facts about beekeeping?",
    "Describe how to fold a paper crane in origami.",
    "Give a brief history of submarines.",
    "Why is jazz music important to American culture?",
    "How do glaciers shape mountain valleys?",
    "Explain public-key cryptography in simple terms.",
    "Tell me a short story about a lighthouse keeper.",
    "Describe the Japanese tea ceremony.",
    "What was the Silk Road and why did it matter?",
    "Why are coral reefs in danger?",
    "What should a beginner know about marathon running?",
    "How did the printing press change Europe?",
    "Explain black holes to a ten-year-old.",
    "How do you bake sourdough bread at home?",
    "The history of windmills",
    "Many people are surprised to learn that penguins",
    "An introduction to Roman aqueducts:",
    "What makes a good video game design?",
    "Describe the sound of a violin.",
    "How do tornadoes form?",
    "How do vaccines train the immune system?",
    "Chapter 1. The bonsai gardener",
]


# ----------------------------------------------------------------------------- helpers

def _set_threads(n: int) -> None:
    torch.set_num_threads(max(1, int(n)))


def find_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    cands = []
    if data_dir:
        cands.append(Path(data_dir))
    cands += [REPO_ROOT / "shared" / "data", REPO_ROOT.parent / "shared" / "data", Path.cwd() / "shared" / "data",
              Path.cwd().parent / "shared" / "data"]
    for c in cands:
        if (c / "wikitext-2-raw").is_dir() or (c / "gutenberg-train").is_dir():
            return c.resolve()
    raise FileNotFoundError(f"no data dir found (tried {[str(c) for c in cands]}); pass --data-dir")


def training_text_files(data_dir: Path) -> list[Path]:
    files = []
    wv = data_dir / "wikitext-2-raw" / "wiki.valid.raw"
    if wv.is_file():
        files.append(wv)
    files += sorted((data_dir / "gutenberg-train").glob("*.txt"))
    for f in files:
        if any(x in f.parts or f.name == x for x in FORBIDDEN_TRAIN_NAMES):
            raise RuntimeError(f"refusing to train on evaluation text {f}")
    if not files:
        raise FileNotFoundError(f"no training text under {data_dir}")
    return files


def read_prompts(path: Path = PROMPTS_FILE) -> list[str]:
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def chat_ids(tok, prompt: str) -> list[int]:
    out = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                  tokenize=True)
    if isinstance(out, dict) or hasattr(out, "keys"):
        out = out["input_ids"]
    return list(out)


def eos_ids(model, tok) -> set[int]:
    s = set()
    e = model.generation_config.eos_token_id
    if isinstance(e, int):
        s.add(e)
    elif e:
        s.update(e)
    if tok.eos_token_id is not None:
        s.add(tok.eos_token_id)
    return s


def _topk_from_logits(logits: torch.Tensor, k: int):
    """logits [N, V] -> (ids int16-packed [N,k], probs fp16 [N,k])."""
    lp = torch.log_softmax(logits.float(), dim=-1)
    v, i = lp.topk(k, dim=-1)
    return i.to(torch.int32).to(torch.int16), v.exp().to(torch.float16)


def _unpack_ids(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.int64) & 0xFFFF


def _save_rows(path: Path, rows: list[dict]) -> None:
    toks = torch.cat([torch.as_tensor(r["tokens"], dtype=torch.int32) for r in rows])
    ids = torch.cat([r["ids"] for r in rows])
    probs = torch.cat([r["probs"] for r in rows])
    mask = torch.cat([r["mask"] for r in rows])
    lens = torch.tensor([len(r["tokens"]) for r in rows], dtype=torch.int64)
    tmp = path.with_suffix(".tmp")
    torch.save({"tokens": toks, "ids": ids, "probs": probs, "mask": mask, "lens": lens}, tmp)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- data

@torch.no_grad()
def _generate_rows(model, tok, batch: list[list[int]], max_new: int, k: int, eos: set[int]) -> list[dict]:
    """Greedy-continue a batch of prompts (left-padded); label the continuation positions."""
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    P = max(len(p) for p in batch)
    ids = torch.full((len(batch), P), pad, dtype=torch.long)
    att = torch.zeros((len(batch), P), dtype=torch.long)
    for j, p in enumerate(batch):
        ids[j, P - len(p):] = torch.tensor(p)
        att[j, P - len(p):] = 1
    out = model.generate(input_ids=ids, attention_mask=att, max_new_tokens=max_new, do_sample=False,
                         output_logits=True, return_dict_in_generate=True, pad_token_id=pad,
                         temperature=None, top_p=None, top_k=None)
    gen = out.sequences[:, P:]
    logits = torch.stack(out.logits, dim=1)  # [B, G, V]
    rows = []
    for j, p in enumerate(batch):
        g = gen[j].tolist()
        n = len(g)
        for t, x in enumerate(g):
            if x in eos:
                n = t + 1
                break
        n = min(n, logits.shape[1])
        if n == 0:
            continue
        tid, tp = _topk_from_logits(logits[j, :n], k)
        tokens = list(p) + g[:n]
        L = len(tokens)
        idsf = torch.zeros((L, k), dtype=torch.int16)
        pf = torch.zeros((L, k), dtype=torch.float16)
        m = torch.zeros(L, dtype=torch.bool)
        s = len(p) - 1
        idsf[s:s + n] = tid
        pf[s:s + n] = tp
        m[s:s + n] = True
        rows.append({"tokens": tokens, "ids": idsf, "probs": pf, "mask": m})
    return rows


@torch.no_grad()
def _tf_rows(model, chunks: list[list[int]], k: int) -> list[dict]:
    x = torch.tensor(chunks, dtype=torch.long)
    logits = model(input_ids=x).logits
    rows = []
    for j in range(x.shape[0]):
        L = x.shape[1]
        tid, tp = _topk_from_logits(logits[j], k)
        m = torch.ones(L, dtype=torch.bool)
        rows.append({"tokens": chunks[j], "ids": tid, "probs": tp, "mask": m})
    return rows


def _token_streams(tok, files: list[Path]) -> list[list[int]]:
    streams = []
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        # tokenize in paragraphs-sized pieces to keep memory and time moderate
        ids = tok(text, add_special_tokens=False)["input_ids"]
        streams.append(ids)
    return streams


def build_data(args, target=None, tok=None) -> Path:
    work = Path(args.work_dir)
    ddir = work / "data"
    ddir.mkdir(parents=True, exist_ok=True)
    _set_threads(args.threads)
    from tqdm import tqdm
    from .default_pair import load_target

    dtype = torch.bfloat16 if args.teacher_dtype == "bfloat16" else torch.float32
    if target is None or tok is None:
        target, tok = load_target(dtype=dtype)
    eos = eos_ids(target, tok)
    rng = random.Random(args.seed)
    data_dir = find_data_dir(args.data_dir)
    files = training_text_files(data_dir)
    streams = _token_streams(tok, files)
    n_text = sum(len(s) for s in streams)
    print(f"[distill] training text: {len(files)} files, {n_text} tokens, from {data_dir}", flush=True)
    k = args.topk

    # ---- jobs: (name, kind, payload)
    jobs = []
    prompts = read_prompts()
    if args.max_prompts:
        prompts = prompts[: args.max_prompts]
    pitems = []
    for p in prompts:
        pitems.append(tok(p, add_special_tokens=False)["input_ids"])
        pitems.append(chat_ids(tok, p))
    pitems.sort(key=len)
    bs = args.gen_batch
    for i in range(0, len(pitems), bs):
        jobs.append((f"genp_{i // bs:05d}", "gen", pitems[i:i + bs], args.gen_new_tokens))
    # passages: one prompt length per batch (no padding)
    weights = [len(s) for s in streams]
    for b in range(math.ceil(args.passages / bs)):
        plen = rng.randint(args.passage_min, args.passage_max)
        batch = []
        for _ in range(min(bs, args.passages - b * bs)):
            s = rng.choices(streams, weights=weights)[0]
            if len(s) <= plen + 1:
                continue
            st = rng.randrange(0, len(s) - plen)
            batch.append(s[st:st + plen])
        if batch:
            jobs.append((f"genx_{b:05d}", "gen", batch, args.gen_new_tokens))
    # teacher-forced chunks
    L = args.chunk_len
    chunks = [s[i:i + L] for s in streams for i in range(0, len(s) - L + 1, L)]
    rng.shuffle(chunks)
    chunks = chunks[: args.tf_chunks]
    tb = args.tf_batch
    for i in range(0, len(chunks), tb):
        jobs.append((f"tf_{i // tb:05d}", "tf", chunks[i:i + tb], 0))
    # interleave so a partial run already has a mix of everything
    order = list(range(len(jobs)))
    random.Random(args.seed + 1).shuffle(order)
    todo = [jobs[i] for i in order if not (ddir / f"{jobs[i][0]}.pt").exists()]
    print(f"[distill] data jobs: {len(jobs)} total, {len(todo)} to do", flush=True)
    t0 = time.time()
    ntok = 0
    for name, kind, payload, mx in tqdm(todo, desc="teacher data", mininterval=5):
        if kind == "gen":
            rows = _generate_rows(target, tok, payload, mx, k, eos)
        else:
            rows = _tf_rows(target, payload, k)
        ntok += sum(int(r["mask"].sum()) for r in rows)
        _save_rows(ddir / f"{name}.pt", rows)
    dt = time.time() - t0
    print(f"[distill] labelled {ntok} new positions in {dt:.0f}s", flush=True)
    meta = {"files": [str(f.relative_to(data_dir)) for f in files], "text_tokens": n_text, "jobs": len(jobs),
            "seconds_last_run": dt}
    (work / "data_meta.json").write_text(json.dumps(meta, indent=2))
    del target
    return ddir


# ----------------------------------------------------------------------------- training

class Pools:
    """Rows grouped by source ('gen' / 'tf'); batches of padded rows."""

    def __init__(self, ddir: Path, max_len: int):
        self.pools: dict[str, list[dict]] = {"gen": [], "tf": []}
        for f in sorted(ddir.glob("*.pt")):
            d = torch.load(f, weights_only=True)
            pool = "tf" if f.name.startswith("tf_") else "gen"
            off = 0
            for n in d["lens"].tolist():
                sl = slice(off, off + n)
                off += n
                m = d["mask"][sl]
                if not bool(m.any()):
                    continue
                r = {"tokens": d["tokens"][sl][:max_len], "ids": d["ids"][sl][:max_len],
                     "probs": d["probs"][sl][:max_len], "mask": m[:max_len]}
                self.pools[pool].append(r)
        self.pools = {k: v for k, v in self.pools.items() if v}

    def stats(self) -> dict:
        return {k: {"rows": len(v), "labelled": int(sum(int(r["mask"].sum()) for r in v)),
                    "tokens": int(sum(len(r["tokens"]) for r in v))} for k, v in self.pools.items()}

    def greedy_counts(self, vocab: int) -> torch.Tensor:
        c = torch.zeros(vocab, dtype=torch.float64)
        for v in self.pools.values():
            for r in v:
                g = _unpack_ids(r["ids"][r["mask"], 0])
                c += torch.bincount(g, minlength=vocab).double()
                c += 0.1 * torch.bincount(r["tokens"].long(), minlength=vocab).double()
        return c

    @staticmethod
    def collate(rows: list[dict]):
        L = max(len(r["tokens"]) for r in rows)
        B, K = len(rows), rows[0]["ids"].shape[1]
        x = torch.zeros((B, L), dtype=torch.long)
        ids = torch.zeros((B, L, K), dtype=torch.long)
        p = torch.zeros((B, L, K), dtype=torch.float32)
        m = torch.zeros((B, L), dtype=torch.bool)
        for j, r in enumerate(rows):
            n = len(r["tokens"])
            x[j, :n] = r["tokens"].long()
            ids[j, :n] = _unpack_ids(r["ids"])
            p[j, :n] = r["probs"].float()
            m[j, :n] = r["mask"]
        return x, ids, p, m


def _batch_plan(pools: Pools, tokens_per_batch: int, seed: int):
    """Infinite deterministic iterator of (pool, rows) batches."""
    names = sorted(pools.pools)
    cycles = {n: 0 for n in names}
    perms = {}
    pos = {n: 0 for n in names}

    def perm(n):
        g = torch.Generator().manual_seed(seed * 1000 + names.index(n) * 100 + cycles[n])
        return torch.randperm(len(pools.pools[n]), generator=g).tolist()

    for n in names:
        perms[n] = perm(n)

    def take(n):
        rows, ntok = [], 0
        while ntok < tokens_per_batch:
            if pos[n] >= len(perms[n]):
                cycles[n] += 1
                perms[n] = perm(n)
                pos[n] = 0
            r = pools.pools[n][perms[n][pos[n]]]
            pos[n] += 1
            rows.append(r)
            ntok += len(r["tokens"])
        return rows

    return take


def _distill_loss(draft, x, ids, p, m, lut, alpha: float):
    h = draft.model(input_ids=x, use_cache=False).last_hidden_state
    hm = h[m]  # [N, d]
    logits = draft.lm_head.forward_compact(hm).float()
    logq = torch.log_softmax(logits, dim=-1)
    idx = lut[ids[m]]  # [N, K] head index or -1
    valid = idx >= 0
    g = logq.gather(1, idx.clamp(min=0))
    pk = p[m] * valid
    soft = -(pk * g).sum(-1).mean()
    greedy = idx[:, 0]
    hard = torch.nn.functional.cross_entropy(logits, greedy.clamp(min=0), reduction="none")
    gv = greedy >= 0
    hard = (hard * gv).sum() / gv.sum().clamp(min=1)
    acc = ((logits.argmax(-1) == greedy) & gv).float().mean()
    return alpha * soft + (1 - alpha) * hard, acc


def train(args, target=None):
    from tqdm import tqdm
    from .default_pair import load_target
    from .draft_model import build_draft_from_target, load_draft, save_draft

    _set_threads(args.threads)
    torch.manual_seed(args.seed)
    work = Path(args.work_dir)
    ddir = work / "data"
    ckdir = work / "ckpt"
    ckdir.mkdir(parents=True, exist_ok=True)
    if target is None:
        target, _ = load_target(dtype=torch.float32, with_tokenizer=False)
    V = target.config.vocab_size
    pools = Pools(ddir, args.max_len)
    stats = pools.stats()
    print(f"[distill] training data: {json.dumps(stats)}", flush=True)
    head_path = work / "head_ids.pt"
    if head_path.exists():
        head_ids = torch.load(head_path, weights_only=True)
    else:
        counts = pools.greedy_counts(V)
        from .default_pair import smollm2_dir  # noqa: F401
        special = [0, 1, 2]
        counts[special] = counts.max() + 1
        head_ids = counts.argsort(descending=True)[: args.head_size].sort().values
        torch.save(head_ids, head_path)
    cover = pools.greedy_counts(V)
    print(f"[distill] head {len(head_ids)} ids covering {float(cover[head_ids].sum() / cover.sum()):.4f} "
          f"of (weighted) greedy labels", flush=True)
    draft = build_draft_from_target(target, head_ids, num_layers=args.layers, dtype=torch.float32,
                                    attn_implementation="sdpa")
    draft.train()
    lut = torch.full((V,), -1, dtype=torch.long)
    lut[draft.lm_head.vocab_ids] = torch.arange(len(head_ids))
    params = [p for n, p in draft.named_parameters() if p.requires_grad and not n.startswith("model.embed_tokens")]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.98), weight_decay=args.weight_decay)
    warm = max(1, int(args.warmup))

    def lr_at(step):
        if step < warm:
            return (step + 1) / warm
        q = (step - warm) / max(1, args.steps - warm)
        return args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, q)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    take = _batch_plan(pools, args.batch_tokens, args.seed)
    names = sorted(pools.pools)
    pool_rng = random.Random(args.seed + 7)
    step = 0
    elapsed_prev = 0.0
    ck = ckdir / "last.pt"
    plan_log = []
    if ck.exists() and not args.restart:
        st = torch.load(ck, weights_only=False)
        draft.load_state_dict(st["model"], strict=False)
        opt.load_state_dict(st["opt"])
        sched.load_state_dict(st["sched"])
        step = st["step"]
        elapsed_prev = st.get("elapsed", 0.0)
        # replay the deterministic batch plan up to `step`
        for _ in range(step):
            n = _pick_pool(pool_rng, names, args.gen_frac)
            take(n)
        print(f"[distill] resumed from step {step}", flush=True)
    t0 = time.time()
    ema = None
    pbar = tqdm(total=args.steps, initial=step, desc="distill", mininterval=10)
    ac = torch.autocast("cpu", dtype=torch.bfloat16) if args.train_bf16 else _nullctx()
    while step < args.steps:
        n = _pick_pool(pool_rng, names, args.gen_frac)
        x, ids, p, m = Pools.collate(take(n))
        with ac:
            loss, acc = _distill_loss(draft, x, ids, p, m, lut, args.alpha)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        step += 1
        a = float(acc)
        ema = a if ema is None else 0.98 * ema + 0.02 * a
        pbar.update(1)
        if step % 20 == 0:
            pbar.set_postfix(loss=f"{float(loss.detach()):.3f}", acc_ema=f"{ema:.3f}", lr=f"{sched.get_last_lr()[0]:.2e}")
        if step % args.log_every == 0:
            print(f"[distill] step {step} loss {float(loss.detach()):.4f} acc_ema {ema:.4f} "
                  f"elapsed {elapsed_prev + time.time() - t0:.0f}s", flush=True)
        if step % args.ckpt_every == 0 or step == args.steps:
            tmp = ck.with_suffix(".tmp")
            torch.save({"model": {k: v for k, v in draft.state_dict().items() if not k.startswith("model.embed_tokens")},
                        "opt": opt.state_dict(), "sched": sched.state_dict(), "step": step,
                        "elapsed": elapsed_prev + time.time() - t0}, tmp)
            os.replace(tmp, ck)
    pbar.close()
    train_s = elapsed_prev + time.time() - t0
    draft.eval()
    meta = {
        "command": args.command_line,
        "seed": args.seed,
        "steps": args.steps,
        "batch_tokens": args.batch_tokens,
        "train_seconds": round(train_s, 1),
        "data": stats,
        "head_size": int(len(head_ids)),
        "layers": args.layers,
        "date": time.strftime("%Y-%m-%d"),
    }
    (work / "train_meta.json").write_text(json.dumps(meta, indent=2))
    out = Path(args.out_dir)
    save_draft(draft, out, dtype=torch.float16, metadata=meta)
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    print(f"[distill] exported draft to {out} ({size / 1e6:.1f} MB); training took {train_s:.0f}s", flush=True)
    # sanity reload
    load_draft(out, target)
    return draft, target


def export_checkpoint(args, target=None):
    """Export the draft from ``<work-dir>/ckpt/last.pt`` without further training."""
    from .default_pair import load_target
    from .draft_model import build_draft_from_target, save_draft

    work = Path(args.work_dir)
    if target is None:
        target, _ = load_target(dtype=torch.float32, with_tokenizer=False)
    head_ids = torch.load(work / "head_ids.pt", weights_only=True)
    draft = build_draft_from_target(target, head_ids, num_layers=args.layers)
    st = torch.load(work / "ckpt" / "last.pt", weights_only=False)
    draft.load_state_dict(st["model"], strict=False)
    meta = {"command": args.command_line, "seed": args.seed, "steps": st["step"], "planned_steps": args.steps,
            "batch_tokens": args.batch_tokens, "train_seconds": round(st.get("elapsed", 0.0), 1),
            "head_size": int(len(head_ids)), "layers": args.layers, "date": time.strftime("%Y-%m-%d"),
            "note": "exported from checkpoint"}
    (work / "train_meta.json").write_text(json.dumps(meta, indent=2))
    save_draft(draft.eval(), Path(args.out_dir), dtype=torch.float16, metadata=meta)
    print(f"[distill] exported checkpoint step {st['step']} to {args.out_dir}", flush=True)
    return draft


class _nullctx:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _pick_pool(rng: random.Random, names: list[str], gen_frac: float) -> str:
    if len(names) == 1:
        return names[0]
    return "gen" if rng.random() < gen_frac else "tf"


# ----------------------------------------------------------------------------- evaluation

@torch.no_grad()
def _greedy_continue(model, ids: list[int], n: int, eos: set[int]) -> list[int]:
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    x = torch.tensor([ids])
    out = []
    logits = model(input_ids=x, cache=cache, use_cache=True).logits[:, -1]
    for _ in range(n):
        t = int(logits.argmax(-1))
        out.append(t)
        if t in eos:
            break
        logits = model(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True).logits[:, -1]
    return out


@torch.no_grad()
def _agreement(draft, prompt: list[int], cont: list[int]) -> tuple[int, int]:
    x = torch.tensor([prompt + cont])
    logits = draft(input_ids=x).logits[0]
    P = len(prompt)
    pred = logits[P - 1:P - 1 + len(cont)].argmax(-1).tolist()
    return sum(int(a == b) for a, b in zip(pred, cont)), len(cont)


def _passages(tok, path: Path, n: int, plen: int, rng: random.Random) -> list[list[int]]:
    text = path.read_text(encoding="utf-8", errors="replace")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    out = []
    for _ in range(n):
        st = rng.randrange(0, len(ids) - plen - 1)
        out.append(ids[st:st + plen])
    return out


@torch.no_grad()
def _step_cost(model, ctx: list[int], steps: int) -> float:
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    model(input_ids=torch.tensor([ctx]), cache=cache, use_cache=True)
    t = ctx[-1]
    times = []
    for i in range(steps):
        s = time.perf_counter()
        lg = model(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True).logits
        t = int(lg[0, -1].argmax())
        times.append(time.perf_counter() - s)
    return statistics.median(times[3:])


def evaluate_draft(draft_dir=None, data_dir=None, n_passages: int = 10, passage_len: int = 256,
                   new_tokens: int = 64, prompt_new_tokens: int = 48, threads_gen: int = 1,
                   threads_timing: int = 2, seed: int = 0, verbose: bool = True) -> dict:
    """Measure the draft against the fp32 target; returns a dict of numbers."""
    from .default_pair import DRAFT_ASSET_DIR, load_default_pair, load_target
    from .draft_model import load_draft

    res: dict = {}
    draft_dir = Path(draft_dir) if draft_dir else DRAFT_ASSET_DIR
    _set_threads(threads_timing)
    t = time.time()
    if draft_dir == DRAFT_ASSET_DIR:
        target, draft, tok = load_default_pair()
    else:
        target, tok = load_target()
        draft = load_draft(draft_dir, target)
    res["pair_load_seconds"] = round(time.time() - t, 2)
    res["draft_size_mb"] = round(sum(f.stat().st_size for f in draft_dir.iterdir() if f.is_file()) / 1e6, 2)
    eos = eos_ids(target, tok)
    _set_threads(threads_gen)
    log = (lambda *a: print(*a, flush=True)) if verbose else (lambda *a: None)

    def run(items, n_new):
        hit = tot = 0
        for p in items:
            cont = _greedy_continue(target, p, n_new, eos)
            h, n = _agreement(draft, p, cont)
            hit += h
            tot += n
        return hit / max(1, tot), tot

    a_raw, n1 = run([tok(p, add_special_tokens=False)["input_ids"] for p in EVAL_PROMPTS], prompt_new_tokens)
    a_chat, n2 = run([chat_ids(tok, p) for p in EVAL_PROMPTS], prompt_new_tokens)
    res["agree_heldout_prompts_raw"] = round(a_raw, 4)
    res["agree_heldout_prompts_chat"] = round(a_chat, 4)
    res["agree_heldout_prompts"] = round((a_raw * n1 + a_chat * n2) / (n1 + n2), 4)
    log(f"[eval] held-out prompts: raw {a_raw:.3f} ({n1} tok), chat {a_chat:.3f} ({n2} tok)")
    ddir = find_data_dir(data_dir)
    rng = random.Random(seed)
    per = {}
    tot_hit = tot_n = 0
    srcs = [ddir / "wikitext-2-raw" / "wiki.test.raw"] + sorted((ddir / "pg19").glob("*.txt"))
    for s in srcs:
        npass = n_passages if s.name == "wiki.test.raw" else max(1, n_passages // 2)
        items = _passages(tok, s, npass, passage_len, rng)
        a, n = run(items, new_tokens)
        per[s.name] = round(a, 4)
        tot_hit += a * n
        tot_n += n
        log(f"[eval] {s.name}: {a:.3f} ({n} tok)")
    res["agree_passages_by_file"] = per
    res["agree_passages"] = round(tot_hit / max(1, tot_n), 4)
    res["agree_wikitext_test"] = per.get("wiki.test.raw")
    # decode-step cost
    _set_threads(threads_timing)
    ctx = _passages(tok, srcs[0], 1, 128, rng)[0]
    ct = _step_cost(target, ctx, 40)
    cd = _step_cost(draft, ctx, 40)
    ct = min(ct, _step_cost(target, ctx, 40))
    cd = min(cd, _step_cost(draft, ctx, 40))
    res["target_step_ms"] = round(ct * 1e3, 3)
    res["draft_step_ms"] = round(cd * 1e3, 3)
    res["cost_ratio"] = round(cd / ct, 4)
    res["timing_threads"] = threads_timing
    res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    log(f"[eval] {json.dumps(res)}")
    return res


# ----------------------------------------------------------------------------- CLI

def _add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--work-dir", default=str(DEFAULT_WORK_DIR), help="data + checkpoints (default: .distill/)")
    p.add_argument("--data-dir", default=None, help="folder with wikitext-2-raw/ and gutenberg-train/")
    p.add_argument("--out-dir", default=str(Path(__file__).resolve().parent / "assets" / "smollm2-135m-draft"))
    p.add_argument("--stage", choices=["all", "data", "train", "export"], default="all",
                   help="export: write the draft from the last checkpoint (e.g. after an interrupted training)")
    p.add_argument("--evaluate", action="store_true", help="evaluate the draft in --out-dir (after training if any)")
    p.add_argument("--eval-only", action="store_true", help="only evaluate, do not build data or train")
    p.add_argument("--eval-passages", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    # data
    p.add_argument("--teacher-dtype", choices=["bfloat16", "float32"], default="bfloat16")
    p.add_argument("--topk", type=int, default=32)
    p.add_argument("--max-prompts", type=int, default=0, help="use only the first N bundled prompts (0 = all)")
    p.add_argument("--gen-batch", type=int, default=48)
    p.add_argument("--gen-new-tokens", type=int, default=128)
    p.add_argument("--passages", type=int, default=288, help="training-text passages to continue with the target")
    p.add_argument("--passage-min", type=int, default=32)
    p.add_argument("--passage-max", type=int, default=256)
    p.add_argument("--chunk-len", type=int, default=512)
    p.add_argument("--tf-chunks", type=int, default=940, help="teacher-forced text chunks")
    p.add_argument("--tf-batch", type=int, default=4)
    # training
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--head-size", type=int, default=8192)
    p.add_argument("--steps", type=int, default=1600)
    p.add_argument("--batch-tokens", type=int, default=2048)
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr-frac", type=float, default=0.05)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--alpha", type=float, default=0.5, help="weight of the soft (top-K) loss")
    p.add_argument("--gen-frac", type=float, default=0.4, help="share of batches from target-generated rows")
    p.add_argument("--train-bf16", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--restart", action="store_true", help="ignore an existing checkpoint")
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--ckpt-every", type=int, default=200)


def run_distill(args, target=None, tok=None) -> int:
    if not getattr(args, "command_line", None):
        args.command_line = "dynatree distill " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not args.eval_only:
        if args.stage in ("all", "data"):
            build_data(args, target=target, tok=tok)
        if args.stage in ("all", "train"):
            train(args, target=target)
        if args.stage == "export":
            export_checkpoint(args, target=target)
    if args.evaluate or args.eval_only:
        res = evaluate_draft(args.out_dir, args.data_dir, n_passages=args.eval_passages, seed=args.seed)
        Path(args.work_dir).mkdir(parents=True, exist_ok=True)
        (Path(args.work_dir) / "eval.json").write_text(json.dumps(res, indent=2))
        print(json.dumps(res, indent=2))
    return 0


def add_distill_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``distill`` subcommand on an argparse ``subparsers`` object."""
    p = subparsers.add_parser("distill", help="build teacher data, train and export the default draft",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_args(p)
    p.set_defaults(func=run_distill)
    return p


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dynatree_core.distill", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_args(parser)
    args = parser.parse_args(argv)
    args.command_line = "python -m dynatree_core.distill " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    return run_distill(args)


if __name__ == "__main__":
    sys.exit(main())

"""The data stage: token sequences for training, written as resumable shards under ``<work-dir>/seqs``
(target continuations of prompts and passages, chunks of the training text), and reading them back."""

from __future__ import annotations

import copy
import json
import math
import os
import random
import time
from pathlib import Path

import torch

from dynatree_core.pairs.pair import resolve_device, resolve_dtype
from dynatree_core.paths import data_dir_candidates
from dynatree_core.distill.decode import _continue, eos_ids, self_prompts
from dynatree_core.distill.static_decode import resolve_gen_runtime
from dynatree_core.distill.prompts import chat_ids, kind_bank, prompt_bank, raw_ids, read_prompts
from dynatree_core.distill.runtime import set_threads

FORBIDDEN_TRAIN_NAMES = ("wiki.test.raw", "pg19")


def find_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    cands = [Path(data_dir)] if data_dir else []
    cands += data_dir_candidates()  # the benchmark's search too
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


def _length_batches(items: list[list[int]], bs: int) -> list[list[list[int]]]:
    """Batches of at most ``bs`` prompts of exactly equal length (for the padding-free decode loop)."""
    by_len: dict[int, list[list[int]]] = {}
    for it in items:
        by_len.setdefault(len(it), []).append(it)
    return [v[i:i + bs] for n in sorted(by_len) for v in [by_len[n]] for i in range(0, len(v), bs)]


def _save_seqs(path: Path, rows: list[tuple[list[int], int]], kind: str) -> int:
    """One shard: concatenated int32 tokens, per-row lengths and continuation starts."""
    toks = torch.tensor([t for r, _ in rows for t in r], dtype=torch.int32)
    lens = torch.tensor([len(r) for r, _ in rows], dtype=torch.int64)
    cont = torch.tensor([c for _, c in rows], dtype=torch.int64)
    tmp = path.with_suffix(".tmp")
    torch.save({"tokens": toks, "lens": lens, "cont": cont, "kind": kind}, tmp)
    os.replace(tmp, path)  # atomic: a killed run never leaves a half-written shard
    return int(lens.sum())


def _token_streams(tok, files: list[Path]) -> list[list[int]]:
    return [raw_ids(tok, f.read_text(encoding="utf-8", errors="replace")) for f in files]


def _prompt_jobs(prefix: str, items: list[list[int]], bs: int, max_new: int, samples: int) -> list[tuple]:
    """Batches of prompts, continued greedily (repeat 0) and ``samples`` times sampled: sampling
    multiplies a few hundred prompts into many distinct target-style texts (the labels are always
    the target's greedy tokens)."""
    return [(f"{prefix}{rep:02d}_{i // bs:05d}", "prompt", items[i:i + bs], max_new, rep > 0)
            for rep in range(1 + samples if items else 0) for i in range(0, len(items), bs)]


def _data_jobs(args, tok, streams: list[list[int]], own_prompts: list[str] = ()) -> list[tuple]:
    """The deterministic job list: ``(name, kind, prompts, max_new, sample)``.  ``own_prompts``
    are the target's self-written requests (``--self-prompts``), continued in both forms."""
    rng = random.Random(args.seed)
    jobs = []
    prompts = read_prompts() if args.bundled_prompts else []
    if args.max_prompts:
        prompts = prompts[: args.max_prompts]
    pitems = []
    for p in prompts:
        pitems.append(raw_ids(tok, p))
        pitems.append(chat_ids(tok, p))
    pitems.sort(key=len)  # similar lengths per batch: little left padding
    bs = args.gen_batch
    jobs += _prompt_jobs("p", pitems, bs, args.gen_new_tokens, args.samples_per_prompt)
    bank = prompt_bank(args.prompt_bank, args.text_prompts, tok, streams, args.seed)
    bitems = [chat_ids(tok, p) if chat else raw_ids(tok, p) for p, chat in bank]
    bitems.sort(key=len)
    jobs += _prompt_jobs("b", bitems, bs, args.bank_new_tokens, args.bank_samples)
    # the six kinds of everyday prompts, each in both forms (a user sends the chat template; raw text too)
    kitems = [ids for _, p in kind_bank(args.kind_prompts, args.seed) for ids in (chat_ids(tok, p), raw_ids(tok, p))]
    kitems.sort(key=len)
    jobs += _prompt_jobs("k", kitems, bs, args.bank_new_tokens, args.bank_samples)
    # self-written requests: equal-length batches, so the fast padding-free decode loop runs
    sitems = [chat_ids(tok, p) for p in own_prompts] + [raw_ids(tok, p) for p in own_prompts]
    for rep in range(1 + args.bank_samples if sitems else 0):
        for k, b in enumerate(_length_batches(sitems, bs)):
            jobs.append((f"s{rep:02d}_{k:05d}", "prompt", b, args.bank_new_tokens, rep > 0))
    weights = [len(s) for s in streams]
    pbs = max(1, args.passage_batch or bs)
    for b in range(math.ceil(args.passages / pbs)):
        plen = rng.randint(args.passage_min, args.passage_max)  # one length per batch: no padding
        batch = []
        for _ in range(min(pbs, args.passages - b * pbs)):
            s = rng.choices(streams, weights=weights)[0]
            if len(s) <= plen + 1:
                continue
            st = rng.randrange(0, len(s) - plen)
            batch.append(s[st:st + plen])
        if batch:
            jobs.append((f"x_{b:05d}", "passage", batch, args.passage_new_tokens, False))
    return jobs


def build_data(args, target=None, tok=None) -> Path:
    """Stage 1: token sequences for training (the teacher labels them online while training)."""
    from dynatree_core.pairs.default_pair import load_target

    work = Path(args.work_dir)
    sdir = work / "seqs"
    sdir.mkdir(parents=True, exist_ok=True)
    set_threads(args.threads)
    dev = resolve_device(args.device)
    t_start = time.time()
    if target is None or tok is None:
        target, tok = load_target(dtype=torch.float32)
    data_dir = find_data_dir(args.data_dir)
    files = training_text_files(data_dir)
    streams = _token_streams(tok, files)
    n_text = sum(len(s) for s in streams)
    print(f"[distill] training text: {len(files)} files, {n_text} tokens, from {data_dir}", flush=True)
    _write_text_chunks(sdir, streams, args.chunk_len)
    gen_dtype = resolve_dtype(args.gen_dtype)
    writer = _writer(args, target, dev, gen_dtype)
    own = _own_prompts(args, work, writer, tok)
    jobs = _data_jobs(args, tok, streams, own)
    order = list(range(len(jobs)))
    random.Random(args.seed + 1).shuffle(order)  # a partial run already holds a mix of everything
    todo = [(i, jobs[i]) for i in order if not (sdir / f"{jobs[i][0]}.pt").exists()]
    print(f"[distill] generation jobs: {len(jobs)} total, {len(todo)} to do, device {dev}", flush=True)
    if args.generator == "draft":
        # on-policy data: the draft writes the text, the target still labels every position while
        # training, so the draft learns from exactly the contexts its own proposals lead into
        from dynatree_core.drafters.draft_model import load_draft

        gen_model = load_draft(args.init_from, target, device=dev, dtype=gen_dtype)
    else:
        gen_model = writer
    t_run = getattr(args, "start_time", None) or t_start
    deadline = (t_run + args.time_limit * args.data_share) if args.time_limit else None
    runtime = gen_runtime(args, dev)
    if runtime == "graphs":
        check_graphs_writer(gen_model)
    speed = _run_jobs(args, sdir, todo, gen_model, tok, eos_ids(target, tok), deadline, runtime)
    dt = time.time() - t_start
    print(f"[distill] wrote {speed['tokens']} tokens in {speed['jobs']} jobs, {dt:.0f}s; generated "
          f"{speed['new_tokens']} new tokens in {speed['decode_s']:.1f} s of decoding: "
          f"{speed['new_tokens'] / max(speed['decode_s'], 1e-9):.0f} tokens/s ({runtime}, batch {args.gen_batch})",
          flush=True)
    meta = {"files": [str(f.relative_to(data_dir)) for f in files], "text_tokens": n_text, "jobs": len(jobs),
            "jobs_done": len(jobs) - len(todo) + speed["jobs"], "seconds_last_run": round(dt, 1), "device": str(dev),
            "generator": args.generator, "self_prompts_kept": len(own), "gen_runtime": runtime,
            "new_tokens_last_run": speed["new_tokens"], "decode_seconds_last_run": round(speed["decode_s"], 2)}
    (work / "data_meta.json").write_text(json.dumps(meta, indent=2))
    return sdir


def _write_text_chunks(sdir: Path, streams: list[list[int]], L: int) -> None:
    """Natural text, teacher-forced at training time: fixed-length chunks of every training file."""
    if not (sdir / "text_00000.pt").exists():
        chunks = [(s[i:i + L], 0) for s in streams for i in range(0, len(s) - L + 1, L)]
        _save_seqs(sdir / "text_00000.pt", chunks, "text")


def _writer(args, target, dev, gen_dtype):
    """The target at ``--gen-dtype`` on the device; copied only when it writes something."""
    if args.generator == "target" or args.self_prompts:
        if gen_dtype == torch.float32 and dev == target.device:
            return target
        return copy.deepcopy(target).to(device=dev, dtype=gen_dtype)
    return None


def _own_prompts(args, work: Path, writer, tok) -> list[str]:
    """The target's self-written requests (``--self-prompts``), kept in ``self_prompts.json`` (resumable)."""
    own: list[str] = []
    if args.self_prompts:
        sp_path = work / "self_prompts.json"
        if sp_path.exists():
            own = json.loads(sp_path.read_text())
        else:
            own = self_prompts(writer, tok, args.self_prompts, args.seed, batch=args.gen_batch,
                               runtime=gen_runtime(args, next(writer.parameters()).device))
            tmp = sp_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(own, indent=0, ensure_ascii=False))
            os.replace(tmp, sp_path)
        print(f"[distill] self-written prompts: {len(own)} kept of {args.self_prompts}", flush=True)
    return own


def gen_runtime(args, dev: torch.device) -> str:
    """The decode loop's runtime (``--gen-runtime``, ``auto`` resolved; a draft writer runs the dynamic loop)."""
    if args.generator == "draft":
        return "dynamic"  # the independent draft is not a Hugging Face model with .model/.lm_head
    return resolve_gen_runtime(getattr(args, "gen_runtime", "auto"), dev)


def check_graphs_writer(model) -> bool:
    """The CUDA-graph writer against the eager static writer with the same (bucketed) views, so the same
    kernels, on a small batch, greedy and sampled, from one seed (printed: a capture that replayed another
    random stream would write other text)."""
    from dynatree_core.distill.static_decode import StaticWriter

    batch = [[11 + (7 * j + 3 * i) % 500 for i in range(8 + j % 5)] for j in range(8)]
    same = []
    for sample in (False, True):
        outs = []
        for runtime in ("static", "graphs"):
            torch.manual_seed(0)
            outs.append(StaticWriter(model, batch, 24, set(), sample, 0.8, 0.95, runtime, views="bucketed").run())
        same.append(outs[0] == outs[1])
    print(f"[distill] the graphs writer writes what the static writer does on a check batch: greedy {same[0]}, "
          f"sampled {same[1]}", flush=True)
    return all(same)


def _run_jobs(args, sdir: Path, todo, gen_model, tok, eos: set[int], deadline, runtime: str = "static") -> dict:
    """Continue each job's prompts and write its shard, until done or past ``deadline``. Returns the
    tokens written, the jobs done, the new (generated) tokens and the seconds spent decoding them."""
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    speed = {"tokens": 0, "jobs": 0, "new_tokens": 0, "decode_s": 0.0}
    for i, (name, kind, payload, mx, sample) in todo:
        if deadline is not None and time.time() > deadline:
            print(f"[distill] data time share used up: {speed['jobs']}/{len(todo)} jobs done (rerun to resume)",
                  flush=True)
            break
        torch.manual_seed(args.seed * 1_000_003 + i)  # per-job seed: resumable runs sample the same text
        t0 = time.perf_counter()
        rows = _continue(gen_model, pad, payload, mx, eos, sample, args.gen_temperature, args.gen_top_p,
                         writer=runtime)
        dt = time.perf_counter() - t0  # _continue ends with the tokens on the host: the device is done
        new = sum(len(r) - c for r, c in rows)
        speed["tokens"] += _save_seqs(sdir / f"{name}.pt", rows, kind)
        speed["jobs"] += 1
        speed["new_tokens"] += new
        speed["decode_s"] += dt
        print(f"[distill] job {name}: {len(payload)} x {mx} tokens, {new} new in {dt:.2f} s ({new / dt:.0f} tokens/s)"
              f"; {speed['jobs']}/{len(todo)} done", flush=True)
    return speed


def seq_rows(sdir: Path):
    """Every row of the data stage's shards: ``(pool, tokens, continuation_start)``, pool ``"text"``
    for training-text chunks and ``"gen"`` for prompt/passage continuations."""
    for f in sorted(sdir.glob("*.pt")):
        d = torch.load(f, weights_only=True)
        pool = "text" if d["kind"] == "text" else "gen"
        off = 0
        for n, c in zip(d["lens"].tolist(), d["cont"].tolist()):
            yield pool, d["tokens"][off:off + n], c
            off += n


class SeqPools:
    """Token rows by pool: ``gen`` (target continuations with their context) and ``text``."""

    def __init__(self, sdir: Path, max_len: int, val_rows: int = 0, seed: int = 0):
        self.pools: dict[str, list[torch.Tensor]] = {"gen": [], "text": []}
        self.cont: list[tuple[torch.Tensor, int]] = []  # for head-id counts
        for pool, r, c in seq_rows(sdir):
            if pool == "gen":
                self.cont.append((r, c))
            # keep the tail: the continuation is what the draft is mostly asked to predict
            self.pools[pool].append(r[-max_len:])
        if not any(self.pools.values()):
            raise FileNotFoundError(f"no training sequences in {sdir}; run --stage data first")
        self.val: list[torch.Tensor] = []
        if val_rows and len(self.pools["gen"]) > 4 * val_rows:
            g = torch.Generator().manual_seed(seed + 99)
            perm = torch.randperm(len(self.pools["gen"]), generator=g).tolist()
            held = set(perm[:val_rows])
            self.val = [r for i, r in enumerate(self.pools["gen"]) if i in held]
            self.pools["gen"] = [r for i, r in enumerate(self.pools["gen"]) if i not in held]
        self.pools = {k: v for k, v in self.pools.items() if v}

    def stats(self) -> dict:
        out = {k: {"rows": len(v), "tokens": int(sum(len(r) for r in v))} for k, v in self.pools.items()}
        out["gen_continuation_tokens"] = int(sum(len(r) - c for r, c in self.cont))
        out["val_rows"] = len(self.val)
        return out

    def token_counts(self, vocab: int) -> torch.Tensor:
        """Continuation tokens (the target's own outputs) weigh 1, other tokens 0.1."""
        c = torch.zeros(vocab, dtype=torch.float64)
        for r, s in self.cont:
            c += torch.bincount(r[s:].long(), minlength=vocab).double()
        for v in self.pools.values():
            for r in v:
                c += 0.1 * torch.bincount(r.long(), minlength=vocab).double()
        return c

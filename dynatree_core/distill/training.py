"""The train and export stages of the independent draft.

The student is a copy of the target's first ``--layers`` layers with its final norm and the head
rows of the ``--head-size`` most frequent target ids, or an exported draft (``--init-from``). Training is
online: each batch is labelled by the target as it is drawn (its greedy token and its distribution
over the head), minimising ``alpha * KL(teacher || draft) + (1 - alpha) * CE(greedy token)`` at
``--temperature`` with AdamW on a cosine schedule (compressed to ``--time-limit``); checkpoints are
resumable and the export writes fp16 weights.
"""

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
from dynatree_core.distill.data import SeqPools
from dynatree_core.distill.runtime import autocast, device_name, dir_size, head_lut, set_threads


def _collate(rows: list[torch.Tensor], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad: with a causal mask no real position ever sees a pad, so no attention mask is needed."""
    L = max(len(r) for r in rows)
    x = torch.zeros((len(rows), L), dtype=torch.long)
    m = torch.zeros((len(rows), L), dtype=torch.bool)
    for j, r in enumerate(rows):
        x[j, :len(r)] = r.long()
        m[j, :len(r)] = True
    return x.to(device), m.to(device)


def _micro_batches(rows: list, max_padded: int, length=len) -> list[list]:
    """Split a batch into length-sorted groups of at most ``max_padded`` padded positions (0: one
    group).  Short continuation rows padded to a 512-token text row would otherwise waste most
    of the teacher's compute on padding - decisive on a CPU."""
    if max_padded <= 0:
        return [rows]
    groups, cur = [], []
    for r in sorted(rows, key=length, reverse=True):
        if cur and (len(cur) + 1) * length(cur[0]) > max_padded:
            groups.append(cur)
            cur = []
        cur.append(r)
    return groups + [cur] if cur else groups


def _batch_plan(pools: SeqPools, tokens_per_batch: int, seed: int):
    """Deterministic infinite sampler: ``take(pool) -> rows`` (reshuffled every epoch)."""
    names = sorted(pools.pools)
    cycles = {n: 0 for n in names}
    pos = {n: 0 for n in names}

    def perm(n):
        g = torch.Generator().manual_seed(seed * 1000 + names.index(n) * 100 + cycles[n])
        return torch.randperm(len(pools.pools[n]), generator=g).tolist()

    perms = {n: perm(n) for n in names}

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
            ntok += len(r)
        return rows

    return take


def cosine_lr(step: int, progress: float, warmup: int, min_frac: float) -> float:
    """Learning-rate factor: linear warmup over ``warmup`` steps, then cosine from 1 to ``min_frac``
    over ``progress`` in [0, 1] (steps or wall-clock, whichever the run is budgeted by)."""
    if step < warmup:
        return (step + 1) / warmup
    return min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def _pick_pool(rng: random.Random, names: list[str], gen_frac: float) -> str:
    if len(names) == 1:
        return names[0]
    return "gen" if rng.random() < gen_frac else "text"


def loss_temperature(args) -> float:
    """The soft loss's temperature of a run (``--temperature``; 1 for settings written before it)."""
    return float(getattr(args, "temperature", 1.0))


def tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``logits / temperature`` (float32), or the logits themselves at 1 (the default loss, op for op)."""
    logits = logits.float()
    return logits if temperature == 1.0 else logits / temperature


def tempered_kl(teacher_probs: torch.Tensor, student_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Mean over rows of KL(p_T || q_T): ``teacher_probs`` is p_T (each row over the head, already at
    ``temperature``), q_T = softmax(student_logits / T). No T^2 factor: the draft is trained for the
    temperature it will serve at, so the KL at T is the objective itself (AdamW makes the overall scale
    of the gradient nearly irrelevant; --alpha and --reg-weight set the weights of the other terms).
    At T = 1 its gradient is the old soft cross-entropy's: they differ by the teacher's entropy, a
    constant."""
    logq = torch.log_softmax(tempered(student_logits, temperature), dim=-1)
    return (torch.xlogy(teacher_probs, teacher_probs) - teacher_probs * logq).sum(-1).mean()


@torch.no_grad()
def _teacher_targets(target, x: torch.Tensor, m: torch.Tensor, head_ids: torch.Tensor, chunk: int = 8192,
                     temperature: float = 1.0):
    """The target's greedy token (full vocabulary) and its distribution at ``temperature``
    renormalised over the head ids, at every real position of the batch."""
    h = target.model(input_ids=x).last_hidden_state[m]
    W = target.get_output_embeddings().weight
    greedy, probs = [], []
    for i in range(0, h.shape[0], chunk):
        lg = h[i:i + chunk] @ W.T
        # argmax in the teacher's own dtype: a full-vocabulary fp32 copy of low-precision logits
        # would cost more memory traffic than the matmul, and cannot change a bf16 argmax anyway
        greedy.append(lg.argmax(-1))
        probs.append(torch.softmax(tempered(lg[:, head_ids], temperature), dim=-1))
    return torch.cat(greedy), torch.cat(probs)


def _draft_head_logits(draft, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """The draft's logits over its head ids at every real position of the batch."""
    h = draft.model(input_ids=x, use_cache=False).last_hidden_state[m]
    return draft.lm_head.forward_compact(h)


def _distill_loss(draft, x, m, greedy, probs, lut, alpha: float, temperature: float = 1.0):
    """``alpha * KL(teacher probs || draft) over the head at the temperature + (1 - alpha) * CE(greedy
    token)``; also top-1 agreement with the full-vocabulary greedy token (a greedy token outside the
    head counts as a miss)."""
    logits = _draft_head_logits(draft, x, m).float()
    soft = tempered_kl(probs, logits, temperature)
    idx = lut[greedy]
    gv = idx >= 0
    hard = torch.nn.functional.cross_entropy(logits, idx.clamp(min=0), reduction="none")
    hard = (hard * gv).sum() / gv.sum().clamp(min=1)
    acc = ((logits.argmax(-1) == idx) & gv).float().mean()
    return alpha * soft + (1 - alpha) * hard, acc


def _backward_batch(draft, teacher, rows, micro_tokens: int, head_dev, lut, alpha: float, dev,
                    bf16: bool, temperature: float = 1.0) -> tuple[float, float]:
    """Label ``rows`` with the teacher and accumulate the draft's gradients over length-sorted
    micro-batches; returns the batch's (loss, top-1 agreement), both position-weighted means."""
    n_all = sum(len(r) for r in rows)
    loss_v = acc_v = 0.0
    for group in _micro_batches(rows, micro_tokens):
        x, m = _collate(group, dev)
        greedy, probs = _teacher_targets(teacher, x, m, head_dev, temperature=temperature)
        with autocast(dev, bf16):
            loss, acc = _distill_loss(draft, x, m, greedy, probs, lut, alpha, temperature)
        w = int(m.sum()) / n_all  # position-weighted: the same mean loss as one big batch
        (loss * w).backward()
        loss_v += float(loss.detach()) * w
        acc_v += float(acc) * w
    return loss_v, acc_v



def train(args, target=None):
    """Stage 2: online distillation - each batch is labelled by the target as it is drawn."""
    from dynatree_core.pairs.default_pair import load_target

    set_threads(args.threads)
    torch.manual_seed(args.seed)
    dev = resolve_device(args.device)
    if dev.type == "cuda":
        # TF32 for the teacher: labels stay those of an fp32 model up to near-ties
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    t_start = time.time()
    work = Path(args.work_dir)
    (work / "ckpt").mkdir(parents=True, exist_ok=True)
    if target is None:
        target, _ = load_target(dtype=torch.float32, with_tokenizer=False)
    target = target.to(dev)
    teacher_dtype = resolve_dtype(args.teacher_dtype)
    # a low-precision teacher copy (bf16 runs on CPU AMX units ~6x faster than fp32); its labels
    # can differ from the fp32 target's at near-ties, which the export metadata records
    teacher = target if teacher_dtype == torch.float32 else copy.deepcopy(target).to(dtype=teacher_dtype)
    pools = SeqPools(work / "seqs", args.max_len, val_rows=args.val_rows, seed=args.seed)
    print(f"[distill] training sequences: {json.dumps(pools.stats())}", flush=True)
    draft, head_ids = _student(args, work, pools.token_counts(target.config.vocab_size), target, dev)
    loop = _TrainLoop(args, draft, teacher, pools, head_ids, dev)
    loop.resume(work / "ckpt" / "last.pt")
    # time budget for training: what the data stage left of --time-limit, minus room for the export
    budget = None
    if args.time_limit:
        t_run = getattr(args, "start_time", None) or t_start
        budget = max(1.0, args.time_limit - (time.time() - t_run) - args.export_reserve)
    loop.run(budget)
    draft.eval()
    _export(args, draft, head_ids, loop.stats, loop.step, loop.elapsed(), partial=False,
            stopped_by_time=loop.stopped_by_time)
    return draft, target


def _student(args, work: Path, counts: torch.Tensor, target, dev):
    """The draft to train and its head ids: ``--init-from`` (its head, grown to ``--head-size``), or
    a fresh 2-layer copy of the target with the ``--head-size`` most frequent ids (kept in
    ``head_ids.pt`` for resumed runs)."""
    from dynatree_core.drafters.draft_model import build_draft_from_target, extend_head, load_draft

    head_path = work / "head_ids.pt"
    init = None
    if args.init_from:
        init = load_draft(args.init_from, target, device=dev, dtype=torch.float32, attn_implementation="sdpa")
        n_init = init.lm_head.num_head_ids
        if args.head_size > n_init:
            # grow the head by the ids the training data uses most that it lacks (ties: lower id, i.e.
            # earlier BPE merge); a smaller --head-size keeps the draft's own head
            have = init.lm_head.vocab_ids.cpu()
            c = counts.double().clone()
            c[have] = -1.0
            order = torch.argsort(-c, stable=True)  # stable: ties keep id order
            extend_head(init, order[: args.head_size - n_init].tolist(), target)
        head_ids = init.lm_head.vocab_ids.cpu()  # fine-tuning keeps (or grows) the head it starts from
    elif head_path.exists():
        head_ids = torch.load(head_path, weights_only=True)
    else:
        c = counts.clone()
        c[[0, 1, 2]] = c.max() + 1  # special tokens (EOS among them) always in the head
        head_ids = c.argsort(descending=True)[: args.head_size].sort().values
        torch.save(head_ids, head_path)
    print(f"[distill] head: {len(head_ids)} ids covering {float(counts[head_ids].sum() / counts.sum()):.4f} "
          f"of (weighted) target tokens", flush=True)
    if init is not None:
        return init, head_ids
    draft = build_draft_from_target(target, head_ids, num_layers=args.layers, device=dev, dtype=torch.float32,
                                    attn_implementation="sdpa")
    return draft, head_ids


class _TrainLoop:
    """The optimisation loop: AdamW on a cosine schedule driven by ``progress`` in [0, 1] (steps, or
    wall-clock under ``--time-limit``), a deterministic batch plan, checkpoints and partial exports."""

    def __init__(self, args, draft, teacher, pools: SeqPools, head_ids: torch.Tensor, dev):
        self.args, self.draft, self.teacher, self.pools, self.dev = args, draft, teacher, pools, dev
        self.head_ids, self.stats = head_ids, pools.stats()
        draft.train()
        self.head_dev = head_ids.to(dev)
        self.lut = head_lut(head_ids, teacher.config.vocab_size, dev)
        self.params = [p for n, p in draft.named_parameters()
                       if p.requires_grad and not n.startswith("model.embed_tokens")]
        self.opt = torch.optim.AdamW(self.params, lr=args.lr, betas=(0.9, 0.98), weight_decay=args.weight_decay)
        self.warm = max(1, int(args.warmup))
        self.take = _batch_plan(pools, args.batch_tokens, args.seed)
        self.names = sorted(pools.pools)
        self.pool_rng = random.Random(args.seed + 7)
        self.step, self.elapsed_prev, self.progress = 0, 0.0, 0.0
        self.ck: Path | None = None
        self.t0 = time.time()
        self.stopped_by_time = False

    def lr_factor(self, step: int, progress: float) -> float:
        return cosine_lr(step, progress, self.warm, self.args.min_lr_frac)

    def next_rows(self) -> list:
        return self.take(_pick_pool(self.pool_rng, self.names, self.args.gen_frac))

    def elapsed(self) -> float:
        return self.elapsed_prev + time.time() - self.t0

    def resume(self, ck: Path) -> None:
        """Continue from ``ck`` unless ``--restart``: weights, optimiser, step, and the batch plan replayed."""
        self.ck = ck
        if not ck.exists() or self.args.restart:
            return
        st = torch.load(ck, weights_only=False, map_location=self.dev)
        self.draft.load_state_dict(st["model"], strict=False)
        self.opt.load_state_dict(st["opt"])
        self.step, self.elapsed_prev, self.progress = st["step"], st.get("elapsed", 0.0), st.get("progress", 0.0)
        if self.progress >= 1.0:  # a finished run resumed with more --steps goes on along the longer schedule
            self.progress = self.step / self.args.steps
        for _ in range(self.step):  # replay the deterministic batch plan up to `step`
            self.next_rows()
        print(f"[distill] resumed from step {self.step}", flush=True)

    def save(self) -> None:
        tmp = self.ck.with_suffix(".tmp")
        model = {k: v for k, v in self.draft.state_dict().items() if not k.startswith("model.embed_tokens")}
        torch.save({"model": model, "opt": self.opt.state_dict(), "step": self.step, "progress": self.progress,
                    "elapsed": self.elapsed()}, tmp)
        os.replace(tmp, self.ck)

    def run(self, budget: float | None) -> None:
        from tqdm import tqdm

        args = self.args
        self.t0 = time.time()
        progress0 = self.progress  # a resumed run anneals the rest of the schedule within its own budget
        ema = None
        pbar = tqdm(total=args.steps, initial=self.step, desc="distill", mininterval=10)
        while self.progress < 1.0:
            self.progress = max(self.progress, (self.step + 1) / args.steps)
            if budget is not None:
                tp = progress0 + (1 - progress0) * (time.time() - self.t0) / budget
                if tp > self.progress:
                    self.stopped_by_time = True
                    self.progress = tp
            loss, acc = self.one_step()
            ema = acc if ema is None else 0.98 * ema + 0.02 * acc
            pbar.update(1)
            self.report(loss, ema)
        pbar.close()

    def one_step(self) -> tuple[float, float]:
        args = self.args
        for g in self.opt.param_groups:
            g["lr"] = args.lr * self.lr_factor(self.step, self.progress)
        self.opt.zero_grad(set_to_none=True)
        loss, acc = _backward_batch(self.draft, self.teacher, self.next_rows(), args.micro_tokens, self.head_dev,
                                    self.lut, args.alpha, self.dev, args.train_bf16, loss_temperature(args))
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        self.step += 1
        return loss, float(acc)

    def report(self, loss: float, ema: float) -> None:
        """Log every ``--log-every`` steps; checkpoint (and export a partial draft) every ``--ckpt-every``."""
        args, step, progress = self.args, self.step, self.progress
        if step % args.log_every == 0 or progress >= 1.0:
            msg = (f"[distill] step {step} progress {min(progress, 1.0):.3f} loss {loss:.4f} "
                   f"acc_ema {ema:.4f} lr {args.lr * self.lr_factor(step, progress):.2e} "
                   f"elapsed {self.elapsed():.0f}s")
            if self.pools.val:
                acc = _val_accuracy(self.draft, self.teacher, self.pools.val, self.head_dev, self.lut, self.dev, args)
                msg += f" val_acc {acc:.4f}"
            print(msg, flush=True)
        if step % args.ckpt_every == 0 or progress >= 1.0:
            self.save()
            if progress < 1.0 and args.export_every_ckpt:
                _export(args, self.draft, self.head_ids, self.stats, step, self.elapsed(), partial=True)


@torch.no_grad()
def _val_accuracy(draft, target, rows, head_dev, lut, dev, args) -> float:
    was = draft.training
    draft.eval()
    hit = tot = 0
    for i in range(0, len(rows), 16):
        x, m = _collate(rows[i:i + 16], dev)
        greedy, _ = _teacher_targets(target, x, m, head_dev)
        with autocast(dev, args.train_bf16):
            pred = _draft_head_logits(draft, x, m).argmax(-1)
        hit += int((pred == lut[greedy]).sum())
        tot += int(greedy.numel())
    draft.train(was)
    return hit / max(1, tot)



def _export(args, draft, head_ids, stats, step, train_s, partial: bool, stopped_by_time: bool = False):
    from dynatree_core.drafters.draft_model import save_draft

    dev = resolve_device(args.device)
    meta = {
        "command": args.command_line,
        "seed": args.seed,
        "steps_done": step,
        "steps_planned": args.steps,
        "batch_tokens": args.batch_tokens,
        "train_seconds": round(train_s, 1),
        "device": str(dev),
        "device_name": device_name(dev),
        "data": stats,
        "head_size": int(len(head_ids)),
        "layers": int(draft.config.num_hidden_layers),
        "teacher_dtype": args.teacher_dtype,
        "alpha": args.alpha,
        "temperature": loss_temperature(args),  # the soft loss's: KL(p_T || q_T)
        "date": time.strftime("%Y-%m-%d"),
    }
    if args.init_from:
        prev = json.loads((Path(args.init_from) / "draft_config.json").read_text()).get("metadata", {})
        meta["init_from"] = {"dir": str(args.init_from), "metadata": prev}
    if stopped_by_time:
        meta["note"] = f"--time-limit {args.time_limit}s reached: cosine schedule compressed into {step} steps"
    if partial:
        meta["partial"] = True
    out = Path(args.out_dir)
    was = draft.training
    save_draft(draft.eval(), out, dtype=torch.float16, metadata=meta)
    draft.train(was)
    if not partial:
        (Path(args.work_dir) / "train_meta.json").write_text(json.dumps(meta, indent=2))
        size = dir_size(out)
        print(f"[distill] exported draft to {out} ({size / 1e6:.1f} MB); training took {train_s:.0f}s", flush=True)


def export_checkpoint(args, target=None):
    """Export the draft from ``<work-dir>/ckpt/last.pt`` without further training."""
    from dynatree_core.pairs.default_pair import load_target
    from dynatree_core.drafters.draft_model import build_draft_from_target

    work = Path(args.work_dir)
    if target is None:
        target, _ = load_target(dtype=torch.float32, with_tokenizer=False)
    head_ids = torch.load(work / "head_ids.pt", weights_only=True)
    draft = build_draft_from_target(target, head_ids, num_layers=args.layers)
    st = torch.load(work / "ckpt" / "last.pt", weights_only=False, map_location=target.device)
    draft.load_state_dict(st["model"], strict=False)
    _export(args, draft, head_ids, {"note": "exported from checkpoint"}, st["step"], st.get("elapsed", 0.0),
            partial=False)
    return draft

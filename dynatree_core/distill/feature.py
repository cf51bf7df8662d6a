"""Training the feature draft (``dynatree distill --kind feature``).

Stages after the shared ``data`` stage of :mod:`dynatree_core.distill.data` (the same token sequences:
target continuations of prompts and passages, plus chunks of the training text; never
``wiki.test.raw`` or ``pg19/``):

1. **features** - the target reads every sequence once; its final (post-norm) hidden state and
   its greedy token at every position are stored (``<work-dir>/features``, fp16, resumable).
   ``--feature-text-tokens`` caps how much plain training text joins the continuations.
2. **train** - the feature draft learns, at every position j, to predict the target's greedy
   token after ``x_j`` from ``(f_{j-1}, x_j)``. Training runs the draft *unrolled* for
   ``--unroll`` steps (training-time test): step s feeds the features step s-1 predicted, under the
   attention pattern a tree node at depth s-1 sees (:func:`~dynatree_core.drafters.feature_draft.unrolled_mask`),
   so deeper tree levels are trained on the inputs they get at decode time. Loss per step:
   ``alpha * KL(teacher distribution over the head || draft) + (1-alpha) * CE(greedy token)
   + reg_weight * SmoothL1(predicted feature, target feature)``, steps weighted 0.8^(s-1); the KL
   between both distributions at ``--temperature`` T (both logits / T; 1 by default).
   With ``--time-limit`` the cosine schedule follows the wall-clock budget.
3. **export** - fp16 weights and ``feature_draft_config.json`` to
   ``dynatree_core/assets/smollm2-135m-feature-draft/`` with the command, data and timing.
4. **evaluate** - :func:`evaluate_feature_draft`: agreement with the fp32 target's greedy tokens
   on the same held-out prompts and passages as the independent draft (teacher-forced, depth 1),
   plus depth-2 and depth-3 agreement on predicted features, and the decode-step cost.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from dynatree_core.drafters.feature_draft import (FeatureDraftModel, build_feature_draft, feature_draft_from_model_draft,
                                                 is_feature_draft_dir, load_feature_draft, save_feature_draft,
                                                 target_states, unrolled_forward)
from dynatree_core.pairs.pair import resolve_device, resolve_dtype
from dynatree_core.distill import evaluation as ev
from dynatree_core.distill.data import seq_rows
from dynatree_core.distill.runtime import autocast, device_name, dir_size, head_lut, set_threads
from dynatree_core.distill.training import _micro_batches, cosine_lr, loss_temperature, tempered, tempered_kl

STEP_DECAY = 0.8


# ----------------------------------------------------------------------------- features

def _rows_from_seqs(sdir: Path, max_len: int, text_tokens: int, seed: int) -> list[tuple[str, torch.Tensor]]:
    """(kind, tokens) rows: every continuation row (its tail of ``max_len``), then text chunks drawn
    at random until ``text_tokens`` tokens."""
    gen, text = [], []
    for pool, r, _ in seq_rows(sdir):
        (text if pool == "text" else gen).append(r[-max_len:])
    if not gen and not text:
        raise FileNotFoundError(f"no training sequences in {sdir}; run the data stage first")
    random.Random(seed + 3).shuffle(text)
    picked, n = [], 0
    for r in text:
        if n >= text_tokens:
            break
        picked.append(r[:max_len])
        n += len(picked[-1])
    return [("gen", r) for r in gen] + [("text", r) for r in picked]


def target_layers(args) -> tuple[int, ...]:
    """``--target-layers`` as a tuple (``"4,15"`` -> ``(4, 15)``; ``""`` -> ``()``)."""
    v = getattr(args, "target_layers", "") or ()
    return tuple(int(s) for s in v.split(",") if s.strip()) if isinstance(v, str) else tuple(v)


@torch.no_grad()
def target_features(target, x: torch.Tensor, layers: tuple[int, ...] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden states [B, T, (len(layers) + 1) * H] (after ``layers``, then the final state) and greedy
    tokens [B, T] of equal-length rows ``x``."""
    h = target_states(target, x, layers)
    final = h[..., -int(target.config.hidden_size):]
    return h, target.get_output_embeddings()(final).argmax(-1)


def build_features(args, target) -> Path:
    """Stage: run the target (``--teacher-dtype``) over the sequences; store features + labels. Shards run
    in a shuffled order (a run stopped by its time share, ``--feature-share``, holds rows of every length)."""
    work = Path(args.work_dir)
    fdir = work / "features"
    fdir.mkdir(parents=True, exist_ok=True)
    layers = _layers_to_store(fdir, target_layers(args))
    rows = _rows_from_seqs(work / "seqs", args.max_len, args.feature_text_tokens, args.seed)
    shards = _feature_shards(rows, args.feature_batch_tokens)
    dt = resolve_dtype(args.teacher_dtype)
    dev = next(target.parameters()).device
    teacher = target if dt == torch.float32 else _copy_as(target, dt)
    todo = [i for i in range(len(shards)) if not (fdir / f"feat_{i:05d}.pt").exists()]
    random.Random(args.seed + 7).shuffle(todo)
    print(f"[distill] features: {len(rows)} rows, {sum(len(r) for _, r in rows)} tokens in {len(shards)} shards "
          f"({len(todo)} to do), teacher {args.teacher_dtype}, target layers {list(layers) or 'final only'}",
          flush=True)
    deadline = _feature_deadline(args)
    t0, ntok, done = time.perf_counter(), 0, 0
    for i in todo:
        if deadline is not None and time.time() > deadline:
            print(f"[distill] feature time share used up: {done}/{len(todo)} shards done", flush=True)
            break
        ntok += _write_feature_shard(fdir / f"feat_{i:05d}.pt", shards[i], teacher, layers, dev)
        done += 1
    secs = time.perf_counter() - t0
    print(f"[distill] features: {ntok} tokens in {done} shards, {secs:.1f} s ({ntok / max(secs, 1e-9):.0f} "
          f"tokens/s)", flush=True)
    (work / "features_meta.json").write_text(json.dumps(
        {"shards": len(shards), "shards_done": len(shards) - len(todo) + done, "tokens_last_run": ntok,
         "seconds_last_run": round(secs, 1), "teacher_dtype": args.teacher_dtype}, indent=2))
    return fdir


def _feature_deadline(args) -> float | None:
    """When the features stage stops (``--time-limit`` x (``--data-share`` + ``--feature-share``) after the
    run's start), or None: no limit, or no share (the stage runs to the end, as before)."""
    share = getattr(args, "feature_share", 0)
    if not args.time_limit or not share:
        return None
    return (getattr(args, "start_time", None) or time.time()) + args.time_limit * (args.data_share + share)


@torch.no_grad()
def _write_feature_shard(path: Path, groups: list[list[torch.Tensor]], teacher, layers: tuple[int, ...], dev
                         ) -> int:
    """One shard: per group of equal-length rows one forward and one copy to the host of each of its
    tokens, features (fp16) and labels (rows of a group are contiguous, so a group is its rows in
    order); returns its tokens."""
    toks, feats, labels, lens = [], [], [], []
    for g in groups:
        x = torch.stack([r.long() for r in g]).to(dev)
        h, y = target_features(teacher, x, layers)
        toks.append(x.int().reshape(-1).cpu())
        feats.append(h.to(torch.float16).reshape(-1, h.shape[-1]).cpu())
        labels.append(y.int().reshape(-1).cpu())
        lens += [x.shape[1]] * x.shape[0]
    tmp = path.with_suffix(".tmp")
    torch.save({"tokens": torch.cat(toks), "features": torch.cat(feats), "labels": torch.cat(labels),
                "lens": torch.tensor(lens), "layers": torch.tensor(layers, dtype=torch.long)}, tmp)
    os.replace(tmp, path)
    return sum(lens)


def _feature_shards(rows: list[tuple[str, torch.Tensor]], batch_tokens: int) -> list[list[list[torch.Tensor]]]:
    """Equal-length groups of at most ``batch_tokens`` tokens (no padding, so no attention mask and
    every position is real), in shards of about 64k tokens (the resumable unit)."""
    by_len: dict[int, list[torch.Tensor]] = {}
    for _, r in rows:
        if len(r) >= 3:
            by_len.setdefault(len(r), []).append(r)
    groups = []
    for n in sorted(by_len):
        rs = by_len[n]
        per = max(1, batch_tokens // n)
        groups += [rs[i:i + per] for i in range(0, len(rs), per)]
    shards, cur, ntok = [], [], 0
    for g in groups:
        cur.append(g)
        ntok += sum(len(r) for r in g)
        if ntok >= 65536:
            shards.append(cur)
            cur, ntok = [], 0
    return shards + [cur] if cur else shards


def _stored_layers(d: dict) -> tuple[int, ...]:
    """The target layers a feature shard holds besides the final state (older shards: none)."""
    return tuple(d["layers"].tolist()) if "layers" in d else ()


def _layers_to_store(fdir: Path, layers: tuple[int, ...]) -> tuple[int, ...]:
    """The layers new shards hold: ``layers``, or those of the shards already in ``fdir`` (a run
    resumes or reuses them), which must include every layer asked for."""
    first = next(iter(sorted(fdir.glob("feat_*.pt"))), None)
    if first is None:
        return layers
    have = _stored_layers(torch.load(first, weights_only=True))
    if not set(layers) <= set(have):
        raise ValueError(f"the features in {fdir} hold target layers {list(have)}, not {list(layers)} "
                         f"(--target-layers): use another --work-dir or delete {fdir}")
    return have


def _copy_as(model, dtype):
    import copy

    return copy.deepcopy(model).to(dtype=dtype)


class FeatureRows:
    """All feature rows in memory: (tokens int64 [n], features fp16 [n, (len(layers) + 1) * H],
    labels int64 [n]); ``layers``: the stored target layers to keep besides the final state (the
    shards may hold more: one feature store serves drafts reading fewer layers)."""

    def __init__(self, fdir: Path, val_rows: int = 0, seed: int = 0, layers: tuple[int, ...] = ()):
        self.rows: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for f in sorted(fdir.glob("feat_*.pt")):
            d = torch.load(f, weights_only=True)
            feats = _select_layers(d["features"], _stored_layers(d), tuple(layers), f)
            off = 0
            for n in d["lens"].tolist():
                self.rows.append((d["tokens"][off:off + n].long(), feats[off:off + n],
                                  d["labels"][off:off + n].long()))
                off += n
        if not self.rows:
            raise FileNotFoundError(f"no feature shards in {fdir}; run the features stage first")
        g = torch.Generator().manual_seed(seed + 99)
        perm = torch.randperm(len(self.rows), generator=g).tolist()
        self.val = [self.rows[i] for i in perm[:val_rows]]
        self.rows = [self.rows[i] for i in perm[val_rows:]]

    @property
    def tokens(self) -> int:
        return sum(len(r[0]) for r in self.rows)

    def label_counts(self, vocab: int) -> torch.Tensor:
        c = torch.zeros(vocab, dtype=torch.float64)
        for _, _, y in self.rows:
            c += torch.bincount(y, minlength=vocab).double()
        return c


def _select_layers(feats: torch.Tensor, have: tuple[int, ...], want: tuple[int, ...], where) -> torch.Tensor:
    """The blocks of ``want`` (then the final state) out of features stored for ``have``."""
    if want == have:
        return feats
    if not set(want) <= set(have):
        raise ValueError(f"{where} holds target layers {list(have)}, not {list(want)}")
    blocks = feats.chunk(len(have) + 1, dim=-1)
    return torch.cat([blocks[have.index(i)] for i in want] + [blocks[-1]], dim=-1)


def collate(rows, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded x [B, T], f [B, T, H] (fp32), y [B, T], mask [B, T]."""
    T = max(len(r[0]) for r in rows)
    H = rows[0][1].shape[1]
    x = torch.zeros((len(rows), T), dtype=torch.long)
    f = torch.zeros((len(rows), T, H), dtype=torch.float32)
    y = torch.zeros((len(rows), T), dtype=torch.long)
    m = torch.zeros((len(rows), T), dtype=torch.bool)
    for j, (t, h, lab) in enumerate(rows):
        n = len(t)
        x[j, :n], f[j, :n], y[j, :n], m[j, :n] = t, h.float(), lab, True
    return x.to(device), f.to(device), y.to(device), m.to(device)


# ----------------------------------------------------------------------------- the unrolled forward

def step_valid(m: torch.Tensor, s: int) -> torch.Tensor:
    """Positions j = 1..T-1 where step s is defined: x_{j-s+1..j} real (mask [B, T] -> [B, T-1])."""
    v = m[:, 1:] & m[:, :-1]
    if s > 1:
        v = v.clone()
        v[:, : s - 1] = False
    return v


def feature_loss(model: FeatureDraftModel, x, f, y, m, steps: int, alpha: float, reg_weight: float,
                 teacher_w: torch.Tensor, lut: torch.Tensor, temperature: float = 1.0):
    """Total loss and per-step top-1 agreement (with the full-vocabulary greedy token); the soft term
    is KL(p_T || q_T) over the head at ``temperature`` (:func:`~dynatree_core.distill.training.tempered_kl`)."""
    outs = unrolled_forward(model, x, f, steps)
    tgt_f = f[:, 1:, -model.config.hidden_size:]  # the target's final state: the teacher and the regression target
    labels = lut[y[:, 1:]]  # -1: the greedy token is outside the head (counts as a miss)
    with torch.no_grad():
        teacher = torch.softmax(tempered(tgt_f @ teacher_w.T, temperature), dim=-1)
    total = 0.0
    accs = []
    for s, out in enumerate(outs, start=1):
        v = step_valid(m, s)
        logits = model.head.forward_compact(out).float()[v]
        soft = tempered_kl(teacher[v], logits, temperature)
        lab = labels[v]
        ok = lab >= 0
        hard = nn.functional.cross_entropy(logits, lab.clamp(min=0), reduction="none")
        hard = (hard * ok).sum() / ok.sum().clamp(min=1)
        reg = nn.functional.smooth_l1_loss(out[v].float(), tgt_f[v].float())
        w = STEP_DECAY ** (s - 1)
        total = total + w * (alpha * soft + (1 - alpha) * hard + reg_weight * reg)
        accs.append(float(((logits.argmax(-1) == lab) & ok).float().mean()))
    return total, accs


# ----------------------------------------------------------------------------- training

def train_feature(args, target, tok=None) -> FeatureDraftModel:
    from tqdm import tqdm

    torch.manual_seed(args.seed)
    dev = resolve_device(args.device)
    work = Path(args.work_dir)
    t_start = time.time()
    data = FeatureRows(work / "features", val_rows=args.val_rows, seed=args.seed, layers=target_layers(args))
    V = int(target.config.vocab_size)
    counts = data.label_counts(V)
    model, head_ids = _feature_model(args, target, counts, dev)
    cover = float(counts[head_ids].sum() / counts.sum())
    print(f"[distill] feature rows: {len(data.rows)} ({data.tokens} tokens), val {len(data.val)}; head "
          f"{len(head_ids)} ids cover {cover:.4f} of the target's greedy tokens; {len(model.layers)} layer(s)"
          f"{', warm start from ' + str(args.init_from) if args.init_from else ''}", flush=True)
    lut = head_lut(head_ids, V, dev)
    curve: list = []  # (step, positions, held-out agreement by step): the learning curve in the metadata
    if data.val:
        curve.append([0, 0, val_accuracy(model, data.val, args.unroll, lut, dev)])
        print(f"[distill] val_acc_by_step at the start: {curve[-1][2]}", flush=True)
    model.train()
    teacher_w = target.get_output_embeddings().weight.detach()[head_ids.to(dev)].float()
    opt, params = _feature_optimizer(args, model)
    warm = max(1, int(args.warmup))
    budget = _train_budget(args, t_start)
    rng = random.Random(args.seed + 5)
    order: list[int] = []
    step, progress, ema, positions = 0, 0.0, None, 0
    t0 = time.time()
    pbar = tqdm(total=args.steps, desc="feature draft", mininterval=10)
    while progress < 1.0:
        progress = (step + 1) / args.steps
        if budget is not None:
            progress = max(progress, (time.time() - t0) / budget)
        f_lr = cosine_lr(step, progress, warm, args.min_lr_frac)
        for g in opt.param_groups:
            g["lr"] = args.lr * f_lr * g["scale"]
        batch, ntok = _draw_batch(data.rows, order, rng, args.batch_tokens)
        loss, accs = _feature_step(args, model, opt, params, batch, ntok, teacher_w, lut, dev)
        step, positions = step + 1, positions + ntok
        ema = accs[0] if ema is None else 0.98 * ema + 0.02 * accs[0]
        pbar.update(1)
        if step % args.log_every == 0 or progress >= 1.0:
            msg = (f"[distill] step {step} progress {min(progress, 1.0):.3f} loss {loss:.4f} "
                   f"acc1_ema {ema:.4f} acc_by_step {[round(a, 3) for a in accs]} "
                   f"lr {args.lr * f_lr:.2e} elapsed {time.time() - t0:.0f}s")
            if data.val:
                curve.append([step, positions, val_accuracy(model, data.val, args.unroll, lut, dev)])
                msg += f" val_acc_by_step {curve[-1][2]}"
            print(msg, flush=True)
    pbar.close()
    train_s = time.time() - t0
    model.eval()
    meta = _feature_meta(args, model, data, head_ids, cover, lut, step, train_s, dev)
    meta["val_curve"] = curve
    meta["positions_trained"] = positions
    if budget is not None and step < args.steps:
        meta["note"] = f"--time-limit {args.time_limit}s reached: cosine schedule compressed into {step} steps"
    _export_feature(args, model, tok, meta, train_s)
    return model


def _train_budget(args, t_start: float) -> float | None:
    """Seconds left for training under ``--time-limit`` (counted from the run's start), or None."""
    if not args.time_limit:
        return None
    t_run = getattr(args, "start_time", None) or t_start
    return max(1.0, args.time_limit - (time.time() - t_run) - args.export_reserve)


def _warm_from_feature(args) -> bool:
    """``--init-from`` is a feature draft: fine-tune it (every weight at ``--lr``), rather than seed a new
    one from an independent draft."""
    return bool(args.init_from) and is_feature_draft_dir(args.init_from)


def _feature_model(args, target, counts: torch.Tensor, dev) -> tuple[FeatureDraftModel, torch.Tensor]:
    """A fresh feature draft with the ``--head-size`` most frequent greedy tokens; one warm-started
    from the ``--init-from`` independent draft (its layers, norm and head; the feature input at 0); or
    the ``--init-from`` feature draft itself, to fine-tune (its head and target layers are kept)."""
    layers = target_layers(args)
    if _warm_from_feature(args):
        model = load_feature_draft(args.init_from, target, device=dev)
        if tuple(model.config.target_layers) != tuple(layers):
            raise ValueError(f"--init-from {args.init_from} reads target layers {list(model.config.target_layers)}, "
                             f"--target-layers says {list(layers)}: give the draft's own")
        for name, p in model.named_parameters():
            p.requires_grad_(not name.startswith("embed."))
        return model.train(), model.head.vocab_ids.cpu()
    if args.init_from:
        from dynatree_core.drafters.draft_model import load_draft

        model = feature_draft_from_model_draft(load_draft(args.init_from, target, device=dev), target, layers)
        return model.to(dev), model.head.vocab_ids.cpu()
    c = counts.clone()
    c[[0, 1, 2]] = c.max() + 1  # special tokens (EOS among them) always in the head
    head_ids = c.argsort(descending=True)[: args.head_size].sort().values
    return build_feature_draft(target, head_ids, seed=args.seed, num_layers=args.layers,
                               target_layers=layers).to(dev), head_ids


def _feature_optimizer(args, model: FeatureDraftModel):
    """AdamW with a ``scale`` per group. A warm start keeps the seeded layers and the embedding path
    close to where they were (``--warm-lr-frac`` of the learning rate) while the new feature path
    learns at the full rate."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad and not n.startswith("embed.")]
    slow = args.init_from is not None and not _warm_from_feature(args)
    new_path = ("fc_feat.", "feat_norm.", "fc_layers.", "layer_norms.")
    groups = [{"params": [p for n, p in named if n.startswith(new_path) or not slow], "scale": 1.0},
              {"params": [p for n, p in named if slow and not n.startswith(new_path)], "scale": args.warm_lr_frac}]
    opt = torch.optim.AdamW([g for g in groups if g["params"]], lr=args.lr, betas=(0.9, 0.98),
                            weight_decay=args.weight_decay)
    return opt, [p for _, p in named]


def _draw_batch(rows: list, order: list[int], rng: random.Random, batch_tokens: int) -> tuple[list, int]:
    """Rows until ``batch_tokens`` tokens, in a reshuffled order every epoch (``order`` is consumed)."""
    batch, ntok = [], 0
    while ntok < batch_tokens:
        if not order:
            order.extend(range(len(rows)))
            rng.shuffle(order)
        r = rows[order.pop()]
        batch.append(r)
        ntok += len(r[0])
    return batch, ntok


def _feature_step(args, model, opt, params, batch: list, ntok: int, teacher_w, lut, dev) -> tuple[float, list[float]]:
    """One optimiser step over ``batch`` (micro-batches, gradients accumulated); the last micro-batch's
    loss and the position-weighted per-step agreement."""
    opt.zero_grad(set_to_none=True)
    accs_sum = None
    for group in _micro_batches(batch, args.micro_tokens, length=lambda r: len(r[0])):
        x, f, y, m = collate(group, dev)
        with autocast(dev, args.train_bf16):
            loss, accs = feature_loss(model, x, f, y, m, args.unroll, args.alpha, args.reg_weight, teacher_w, lut,
                                      loss_temperature(args))
        w = int(m.sum()) / ntok
        (loss * w).backward()
        accs_sum = [a * w for a in accs] if accs_sum is None else [s + a * w for s, a in zip(accs_sum, accs)]
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    return float(loss.detach()), accs_sum


def _feature_meta(args, model, data: FeatureRows, head_ids, cover: float, lut, step: int, train_s: float,
                  dev) -> dict:
    return {"command": args.command_line, "seed": args.seed, "steps_done": step, "steps_planned": args.steps,
            "batch_tokens": args.batch_tokens, "unroll": args.unroll, "lr": args.lr, "alpha": args.alpha,
            "temperature": loss_temperature(args),  # the soft loss's: KL(p_T || q_T)
            "reg_weight": args.reg_weight,
            "warm_lr_frac": args.warm_lr_frac if args.init_from and not _warm_from_feature(args) else None,
            "train_seconds": round(train_s, 1), "device": str(dev), "device_name": device_name(dev),
            "teacher_dtype": args.teacher_dtype, "data": {"rows": len(data.rows), "tokens": data.tokens,
                                                          "val_rows": len(data.val)},
            "head_size": int(len(head_ids)), "head_coverage": round(cover, 4), "layers": len(model.layers),
            "init_from": str(args.init_from) if args.init_from else None,
            "val_acc_by_step": val_accuracy(model, data.val, args.unroll, lut, dev) if data.val else None,
            "date": time.strftime("%Y-%m-%d")}


def _export_feature(args, model, tok, meta: dict, train_s: float) -> None:
    from dynatree_core.pairs.default_pair import DEFAULT_TARGET_NAME

    out = Path(args.out_dir)
    save_feature_draft(model, out, dtype=torch.float16, target_name=DEFAULT_TARGET_NAME, tokenizer=tok, metadata=meta,
                       part_mb=getattr(args, "part_mb", 0) or None)
    (Path(args.work_dir) / "train_meta.json").write_text(json.dumps(meta, indent=2))
    print(f"[distill] exported feature draft to {out} ({dir_size(out) / 1e6:.1f} MB); training took "
          f"{train_s:.0f}s", flush=True)


@torch.no_grad()
def val_accuracy(model: FeatureDraftModel, rows, steps: int, lut: torch.Tensor, dev) -> list[float]:
    was = model.training
    model.eval()
    hits = [0] * steps
    tots = [0] * steps
    for i in range(0, len(rows), 8):
        x, f, y, m = collate(rows[i:i + 8], dev)
        outs = unrolled_forward(model, x, f, steps)
        for s, out in enumerate(outs, start=1):
            v = step_valid(m, s)
            pred = model.head.forward_compact(out).argmax(-1)
            hits[s - 1] += int(((pred == lut[y[:, 1:]]) & v).sum())
            tots[s - 1] += int(v.sum())
    model.train(was)
    return [round(h / max(1, t), 4) for h, t in zip(hits, tots)]


# ----------------------------------------------------------------------------- evaluation

@torch.no_grad()
def agreement_by_depth(model: FeatureDraftModel, target, prompt: list[int], cont: list[int], depths: int = 3
                       ) -> list[tuple[int, int]]:
    """(hits, tokens) per depth d = 1..depths on the continuation, teacher-forced on tokens.

    Depth 1 reads the target's real feature of the previous position (what the root of every
    tree gets); depth d > 1 reads features the draft predicted d - 1 steps before, as a tree node
    at depth d - 1 does.
    """
    ids = prompt + cont
    x = torch.tensor([ids], device=next(target.parameters()).device)
    f = target_states(target, x, model.config.target_layers).to(model.fc_emb.weight.dtype)
    outs = unrolled_forward(model, x, f, depths)
    P = len(prompt)
    res = []
    for s, out in enumerate(outs, start=1):
        pred = model.head.vocab_ids[model.head.forward_compact(out[0]).argmax(-1)].tolist()
        # output index i is position j = i + 1 and predicts ids[j + 1]; the continuation starts at P
        hit = n = 0
        for j in range(max(P - 1, s), len(ids) - 1):
            hit += int(pred[j - 1] == ids[j + 1])
            n += 1
        res.append((hit, n))
    return res


@torch.no_grad()
def feature_step_cost(model: FeatureDraftModel, target, ctx: list[int], steps: int) -> float:
    """Median seconds of one cached decode step (one token through fusion, layer and head, top-k)."""
    from dynatree_core.policy.config import GrowthRule
    from dynatree_core.runtime.tree.tree import DeviceTree
    from dynatree_core.drafters import DraftContext, FeatureDrafter

    dev = next(target.parameters()).device
    h = target_states(target, torch.tensor([ctx[:-1]], device=dev), model.config.target_layers)[0]
    d = FeatureDrafter(model)
    d.start(ctx, DraftContext(top_k=3), h)
    d.prefill()
    times = []
    tok = ctx[-1]
    root = torch.zeros(1, dtype=torch.long, device=dev)
    for i in range(steps):
        tree = DeviceTree(tok, GrowthRule.chain(1), 3, dev)
        s = time.perf_counter()
        tok = int(d.propose(tree, root, level=0).tokens[0, 0])  # the read-back ends the step (a GPU finishes its work here)
        times.append(time.perf_counter() - s)
        d.commit([], [tok], h[-1:])  # the real feature does not matter for timing
    return statistics.median(times[3:])


def evaluate_feature_draft(draft_dir=None, data_dir=None, n_passages: int = 10, passage_len: int = 256,
                           new_tokens: int = 64, prompt_new_tokens: int = 48, threads_gen: int = 1,
                           threads_timing: int = 2, seed: int = 0, verbose: bool = True, lookup=None,
                           device: str = "cpu", n_prompts: int = 0, loaded: tuple | None = None) -> dict:
    """The independent draft's evaluation (:func:`dynatree_core.distill.evaluate_draft`) for a feature
    draft: same prompts, passages, continuations and bootstrap; agreement reported per depth.

    ``lookup`` (a :class:`~dynatree_core.drafters.LookupMix`): also the top-1 agreement of the draft
    with prompt lookup mixed in, on the same continuations (``res["with_lookup"]``). ``device``:
    where the fp32 target and the draft run (the step cost is that device's); ``n_prompts``: the
    first that many held-out prompts only (0: all); ``loaded``: ``(target, tokenizer)``, the fp32 target
    already loaded on ``device`` (else it is loaded here)."""
    from dynatree_core.distill.lookup_fit import hit_counts, position_records

    from dynatree_core.pairs.default_pair import FEATURE_DRAFT_ASSET_DIR, load_target

    res: dict = {}
    draft_dir = Path(draft_dir) if draft_dir else FEATURE_DRAFT_ASSET_DIR
    set_threads(threads_timing)
    t = time.time()
    target, tok = loaded if loaded is not None else load_target(device=device)
    model = load_feature_draft(draft_dir, target, tokenizer=tok)
    res["pair_load_seconds"] = round(time.time() - t, 2)
    res["target_reused"] = loaded is not None
    res["device"] = device_name(resolve_device(device))
    res["draft_size_mb"] = round(dir_size(draft_dir) / 1e6, 2)
    eos = ev.eos_ids(target, tok)
    set_threads(threads_gen)
    log = ev._logger(verbose)

    mixed: list[dict] = []  # per item, in call order: (hits, tokens) of the draft, lookup, either, mixture

    def counts(items, n_new):
        out = []
        for p in items:
            cont = ev._greedy_continue(target, p, n_new, eos)
            out.append(agreement_by_depth(model, target, p, cont))
            if lookup is not None:
                mixed.append(hit_counts(position_records(model, target, p, cont, lookup.lookup), lookup))
        return out

    raw, chat = ev.heldout_counts(counts, tok, prompt_new_tokens, n_prompts)
    _heldout_by_depth(res, raw, chat, seed, log)
    heldout_mixed, mixed[:] = mixed[:], []
    rng = random.Random(seed)
    srcs = ev.eval_sources(data_dir)
    _passages_by_depth(res, ev.passage_counts(counts, tok, srcs, n_passages, passage_len, new_tokens, rng), log)
    if lookup is not None:
        res["with_lookup"] = _mixed_summary(lookup, heldout_mixed, mixed, seed, log)
    set_threads(threads_timing)
    ctx = ev._passages(tok, srcs[0], 1, 128, rng)[0]
    ct = min(ev._step_cost(target, ctx, 40), ev._step_cost(target, ctx, 40))
    cd = min(feature_step_cost(model, target, ctx, 40), feature_step_cost(model, target, ctx, 40))
    ev.record_cost(res, ct, cd, threads_timing)
    res["kind"] = "feature"
    res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    log(f"[eval] {json.dumps(res)}")
    return res


def _passages_by_depth(res: dict, by_file, log) -> None:
    """Passage agreement per file (depth 1), pooled, and pooled per depth, into ``res``."""
    per, allp = {}, []
    for name, c in by_file:
        per[name] = round(ev.pooled_rate([u[0] for u in c]), 4)
        allp += c
        log(f"[eval] {name}: {per[name]:.3f}")
    res["agree_passages_by_file"] = per
    res["agree_passages"] = round(ev.pooled_rate([u[0] for u in allp]), 4)
    res["agree_passages_by_depth"] = [round(ev.pooled_rate([u[d] for u in allp]), 4) for d in range(len(allp[0]))]
    res["agree_wikitext_test"] = per.get("wiki.test.raw")


def _heldout_by_depth(res: dict, raw: list, chat: list, seed: int, log) -> None:
    """Held-out prompt agreement (depth 1, with its bootstrap interval) and per depth, into ``res``."""
    per_prompt = [[(a[0] + b[0], a[1] + b[1]) for a, b in zip(r, c)] for r, c in zip(raw, chat)]
    d1 = [u[0] for u in per_prompt]
    res["agree_heldout_prompts"] = round(ev.pooled_rate(d1), 4)
    res["agree_heldout_prompts_ci95"] = [round(x, 4) for x in ev.bootstrap_ci(d1, seed=seed)]
    res["agree_heldout_prompts_raw"] = round(ev.pooled_rate([u[0] for u in raw]), 4)
    res["agree_heldout_prompts_chat"] = round(ev.pooled_rate([u[0] for u in chat]), 4)
    res["agree_heldout_prompts_first24"] = round(ev.pooled_rate(d1[:ev.N_EVAL_PROMPTS_V1]), 4)
    res["agree_heldout_prompts_by_depth"] = [round(ev.pooled_rate([u[d] for u in per_prompt]), 4)
                                             for d in range(len(per_prompt[0]))]
    res["heldout_prompts"] = len(per_prompt)
    lo, hi = res["agree_heldout_prompts_ci95"]
    log(f"[eval] held-out prompts: {res['agree_heldout_prompts']:.3f} (95% CI {lo:.3f}-{hi:.3f}); by depth "
        f"{res['agree_heldout_prompts_by_depth']}")


def _mixed_summary(lookup, heldout: list[dict], passages: list[dict], seed: int, log) -> dict:
    """Agreement of the draft, the lookup, either of them, and the mixture: held-out prompts (raw then
    chat per prompt, pooled per prompt; the mixture with its bootstrap interval) and passages."""
    n = len(heldout) // 2

    def units(items: list[dict], key: str) -> list[tuple[int, int]]:
        return [u[key] for u in items]

    per_prompt = {k: [(a[0] + b[0], a[1] + b[1]) for a, b in zip(units(heldout[:n], k), units(heldout[n:], k))]
                  for k in ("draft", "lookup", "either", "mix")}
    out = {"kind": "feature+lookup", **lookup.settings(),
           "agree_heldout_prompts": round(ev.pooled_rate(per_prompt["mix"]), 4),
           "agree_heldout_prompts_ci95": [round(x, 4) for x in ev.bootstrap_ci(per_prompt["mix"], seed=seed)],
           "agree_passages": round(ev.pooled_rate(units(passages, "mix")), 4),
           # the parts: the draft alone, the lookup alone (no match = miss), either one right
           "parts": {k: {"heldout_prompts": round(ev.pooled_rate(per_prompt[k]), 4),
                         "passages": round(ev.pooled_rate(units(passages, k)), 4)}
                     for k in ("draft", "lookup", "either")}}
    log(f"[eval] with prompt lookup mixed in: held-out prompts {out['agree_heldout_prompts']:.3f} "
        f"(95% CI {out['agree_heldout_prompts_ci95'][0]:.3f}-{out['agree_heldout_prompts_ci95'][1]:.3f}), "
        f"passages {out['agree_passages']:.3f}; parts {json.dumps(out['parts'])}")
    return out

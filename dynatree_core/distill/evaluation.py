"""Evaluation: agreement of a draft with the fp32 target's greedy tokens on held-out prompts (with a
bootstrap interval over prompts) and on continuations of evaluation-text passages, and the decode-step
cost. :func:`dynatree_core.distill.feature.evaluate_feature_draft` reuses the prompt and passage sets."""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path

import torch

from dynatree_core.runtime.model.compat import cache_kwargs
from dynatree_core.distill.data import find_data_dir
from dynatree_core.distill.decode import _decode_equal_length, _first_eos_cut, eos_ids
from dynatree_core.distill.prompts import EVAL_PROMPTS, N_EVAL_PROMPTS_V1, chat_ids, raw_ids
from dynatree_core.distill.runtime import dir_size, set_threads

# eval.json layout; 2 added the 48-prompt set, its bootstrap interval and the first-24 number
EVAL_SCHEMA_VERSION = 2


@torch.no_grad()
def _greedy_continue(model, ids: list[int], n: int, eos: set[int]) -> list[int]:
    g = _decode_equal_length(model, [ids], n, eos, False, 1.0, 1.0)[0]
    return g[:_first_eos_cut(g, eos)]


@torch.no_grad()
def _agreement(draft, prompt: list[int], cont: list[int]) -> tuple[int, int]:
    x = torch.tensor([prompt + cont])
    logits = draft(input_ids=x).logits[0]
    P = len(prompt)
    pred = logits[P - 1:P - 1 + len(cont)].argmax(-1).tolist()
    return sum(int(a == b) for a, b in zip(pred, cont)), len(cont)


def _passages(tok, path: Path, n: int, plen: int, rng: random.Random) -> list[list[int]]:
    text = path.read_text(encoding="utf-8", errors="replace")
    ids = raw_ids(tok, text)
    out = []
    for _ in range(n):
        st = rng.randrange(0, len(ids) - plen - 1)
        out.append(ids[st:st + plen])
    return out


def pooled_rate(units: list[tuple[int, int]]) -> float:
    """Hits over tokens, pooled across ``(hits, tokens)`` units."""
    return sum(h for h, _ in units) / max(1, sum(n for _, n in units))


def bootstrap_ci(units: list[tuple[int, int]], n_boot: int = 2000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of :func:`pooled_rate`, resampling whole units (prompts):
    tokens of one answer are correlated, so a per-token interval would be too narrow."""
    if not units:
        raise ValueError("bootstrap_ci needs at least one unit")
    rng = random.Random(seed)
    stats = sorted(pooled_rate([units[rng.randrange(len(units))] for _ in units]) for _ in range(n_boot))
    a = (1 - level) / 2
    return stats[int(a * (n_boot - 1))], stats[int(round((1 - a) * (n_boot - 1)))]


@torch.no_grad()
def _step_cost(model, ctx: list[int], steps: int) -> float:
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    dev = next(model.parameters()).device
    model(input_ids=torch.tensor([ctx], device=dev), **cache_kwargs(model, cache), use_cache=True)
    t = ctx[-1]
    times = []
    for i in range(steps):
        s = time.perf_counter()
        lg = model(input_ids=torch.tensor([[t]], device=dev), **cache_kwargs(model, cache), use_cache=True).logits
        t = int(lg[0, -1].argmax())
        times.append(time.perf_counter() - s)
    return statistics.median(times[3:])


def evaluate_draft(draft_dir=None, data_dir=None, n_passages: int = 10, passage_len: int = 256,
                   new_tokens: int = 64, prompt_new_tokens: int = 48, threads_gen: int = 1,
                   threads_timing: int = 2, seed: int = 0, verbose: bool = True) -> dict:
    """Measure the draft against the fp32 target; returns a dict of numbers."""
    from dynatree_core.pairs.default_pair import DRAFT_ASSET_DIR, load_default_pair, load_target
    from dynatree_core.drafters.draft_model import load_draft

    res: dict = {}
    draft_dir = Path(draft_dir) if draft_dir else DRAFT_ASSET_DIR
    set_threads(threads_timing)
    t = time.time()
    if draft_dir == DRAFT_ASSET_DIR:
        target, draft, tok = load_default_pair(draft="model")
    else:
        target, tok = load_target()
        draft = load_draft(draft_dir, target)
    res["pair_load_seconds"] = round(time.time() - t, 2)
    res["draft_size_mb"] = round(dir_size(draft_dir) / 1e6, 2)
    eos = eos_ids(target, tok)
    set_threads(threads_gen)
    log = _logger(verbose)

    def counts(items, n_new):  # (hits, tokens) per item
        return [_agreement(draft, p, _greedy_continue(target, p, n_new, eos)) for p in items]

    raw, chat = heldout_counts(counts, tok, prompt_new_tokens)
    _heldout_summary(res, raw, chat, seed, log)
    rng = random.Random(seed)
    srcs = eval_sources(data_dir)
    per = {}
    tot_hit = tot_n = 0
    for name, c in passage_counts(counts, tok, srcs, n_passages, passage_len, new_tokens, rng):
        a, n = pooled_rate(c), sum(n for _, n in c)
        per[name] = round(a, 4)
        tot_hit += a * n
        tot_n += n
        log(f"[eval] {name}: {a:.3f} ({n} tok)")
    res["agree_passages_by_file"] = per
    res["agree_passages"] = round(tot_hit / max(1, tot_n), 4)
    res["agree_wikitext_test"] = per.get("wiki.test.raw")
    # decode-step cost
    set_threads(threads_timing)
    ctx = _passages(tok, srcs[0], 1, 128, rng)[0]
    ct = _step_cost(target, ctx, 40)
    cd = _step_cost(draft, ctx, 40)
    ct = min(ct, _step_cost(target, ctx, 40))
    cd = min(cd, _step_cost(draft, ctx, 40))
    record_cost(res, ct, cd, threads_timing)
    res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    log(f"[eval] {json.dumps(res)}")
    return res


def _heldout_summary(res: dict, raw: list, chat: list, seed: int, log) -> None:
    """Held-out prompt agreement (raw, chat, pooled with its bootstrap interval, first 24) into ``res``."""
    # one unit per prompt (raw + chat form): the bootstrap resamples topics, not correlated tokens
    per_prompt = [(hr + hc, nr + nc) for (hr, nr), (hc, nc) in zip(raw, chat)]
    n1, n2 = sum(n for _, n in raw), sum(n for _, n in chat)
    a_raw, a_chat = pooled_rate(raw), pooled_rate(chat)
    res["agree_heldout_prompts_raw"] = round(a_raw, 4)
    res["agree_heldout_prompts_chat"] = round(a_chat, 4)
    res["agree_heldout_prompts"] = round(pooled_rate(per_prompt), 4)
    res["agree_heldout_prompts_ci95"] = [round(x, 4) for x in bootstrap_ci(per_prompt, seed=seed)]
    res["agree_heldout_prompts_first24"] = round(pooled_rate(per_prompt[:N_EVAL_PROMPTS_V1]), 4)
    res["heldout_prompts"] = len(EVAL_PROMPTS)
    lo, hi = res["agree_heldout_prompts_ci95"]
    log(f"[eval] held-out prompts ({len(EVAL_PROMPTS)}): {res['agree_heldout_prompts']:.3f} "
        f"(95% CI {lo:.3f}-{hi:.3f}); raw {a_raw:.3f} ({n1} tok), chat {a_chat:.3f} ({n2} tok); "
        f"first {N_EVAL_PROMPTS_V1} prompts {res['agree_heldout_prompts_first24']:.3f}")


def _logger(verbose: bool):
    return (lambda *a: print(*a, flush=True)) if verbose else (lambda *a: None)


def heldout_counts(counts, tok, n_new: int, limit: int = 0) -> tuple[list, list]:
    """``counts(items, n_new)`` on the held-out prompts (the first ``limit``; 0: all) in raw-text and
    in chat form."""
    prompts = EVAL_PROMPTS[:limit] if limit else EVAL_PROMPTS
    raw = counts([raw_ids(tok, p) for p in prompts], n_new)
    chat = counts([chat_ids(tok, p) for p in prompts], n_new)
    return raw, chat


def eval_sources(data_dir) -> list[Path]:
    """The evaluation text: ``wiki.test.raw`` first, then the PG-19 books."""
    ddir = find_data_dir(data_dir)
    return [ddir / "wikitext-2-raw" / "wiki.test.raw"] + sorted((ddir / "pg19").glob("*.txt"))


def passage_counts(counts, tok, srcs: list[Path], n_passages: int, passage_len: int, new_tokens: int,
                   rng: random.Random):
    """``(file name, counts(passages, new_tokens))`` per source: ``n_passages`` random passages of
    ``wiki.test.raw``, half as many (at least one) of each book."""
    for s in srcs:
        npass = n_passages if s.name == "wiki.test.raw" else max(1, n_passages // 2)
        yield s.name, counts(_passages(tok, s, npass, passage_len, rng), new_tokens)


def record_cost(res: dict, target_s: float, draft_s: float, threads: int) -> None:
    """The decode-step times, their ratio and the date, into ``res``."""
    res["target_step_ms"] = round(target_s * 1e3, 3)
    res["draft_step_ms"] = round(draft_s * 1e3, 3)
    res["cost_ratio"] = round(draft_s / target_s, 4)
    res["timing_threads"] = threads

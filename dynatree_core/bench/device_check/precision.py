"""The device check's precision section: the pair in fp32, fp16 and bf16, greedy AR against fp32 AR, the
top-2 logit margins where they first differ (near-ties explain mismatches), and whether DynaTree
equals AR within each dtype."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from dynatree_core.bench.device_check.harness import error_summary
from dynatree_core.bench.device_check.loading import bench_prompts, free_memory, load_pair


def _margins(model: Any, prompt: list[int], tokens: list[int]) -> tuple[list[float], list[int]]:
    """Top-2 logit margin and argmax before every generated token, from ONE forward over
    prompt + tokens[:-1] (position L-1+j predicts token j)."""
    import torch

    dev = next(model.parameters()).device
    ids = torch.tensor([prompt + tokens[:-1]], device=dev)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:].float()
    top = logits.topk(2, dim=-1)
    return (top.values[:, 0] - top.values[:, 1]).tolist(), top.indices[:, 0].tolist()


def _margin_at(model: Any, prompt: list[int], tokens: list[int], i: int) -> dict[str, Any]:
    """The logits before token i of ``tokens`` (prefix prompt + tokens[:i]): top-2 and margin."""
    import torch

    dev = next(model.parameters()).device
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([prompt + tokens[:i]], device=dev)).logits[0, -1].float()
    top = logits.topk(2)
    return {"margin": float(top.values[0] - top.values[1]), "top2": top.indices.tolist()}


def _first_diff(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def precision_prompt(pairs: dict[str, Any], prompt: list[int], T: int, dt_config: Any) -> dict[str, Any]:
    """One prompt: AR in every dtype against fp32 AR, DynaTree against AR within each dtype."""
    from dynatree_core import generate

    rec: dict[str, Any] = {"dtypes": {}}
    toks: dict[str, list[int]] = {}
    for name, pair in pairs.items():
        t = time.monotonic()
        ar = generate(pair, prompt, "ar", max_new_tokens=T, ignore_eos=True)
        t_ar = time.monotonic() - t
        t = time.monotonic()
        dyn = generate(pair, prompt, "dynatree", dt_config, max_new_tokens=T, ignore_eos=True)
        toks[name] = ar.tokens
        d = _first_diff(dyn.tokens, ar.tokens)
        r: dict[str, Any] = {"ar_s": round(t_ar, 3), "dynatree_s": round(time.monotonic() - t, 3),
                             "dynatree_equals_ar": d is None, "dynatree_first_diff": d,
                             "dynatree_tokens_per_iteration": dyn.metrics.tokens_per_iteration}
        if d is not None:  # the same-dtype AR's own margin where DynaTree left it
            r["ar_margin_at_dynatree_diff"] = _margin_at(pair.target, prompt, ar.tokens, d)["margin"]
        rec["dtypes"][name] = r
    if "float32" not in pairs:
        return rec
    ref = pairs["float32"]
    margins, argmax = _margins(ref.target, prompt, toks["float32"])
    rec.update(fp32_min_margin=min(margins), fp32_median_margin=statistics.median(margins),
               fp32_positions_below_0_1=sum(m < 0.1 for m in margins),
               fp32_full_forward_disagrees=sum(a != b for a, b in zip(argmax, toks["float32"])))
    for name, pair in pairs.items():
        if name == "float32":
            continue
        r, i = rec["dtypes"][name], _first_diff(toks[name], toks["float32"])
        r.update(ar_equals_fp32=i is None, first_diff=i)
        if i is not None:
            own = _margin_at(pair.target, prompt, toks[name], i)
            fp32_top = _margin_at(ref.target, prompt, toks["float32"], i)
            r.update(fp32_margin_at_diff=fp32_top["margin"], fp32_top2_at_diff=fp32_top["top2"],
                     own_margin_at_diff=own["margin"], own_top2_at_diff=own["top2"],
                     fp32_token=toks["float32"][i], own_token=toks[name][i])
    return rec


def section_precision(sec: dict[str, Any], deadline: float, args: argparse.Namespace,
                      pairs_out: dict[str, Any]) -> None:
    from tqdm.auto import tqdm

    from dynatree_core.bench.methods import auto_preset, dynatree_config

    preset = auto_preset(args.device)  # the CLI's auto preset
    sec.update(target=args.target, drafter=args.drafter, dtypes=list(args.dtypes), max_new_tokens=args.precision_tokens,
               max_prompt_len=args.precision_prompt_len, dynatree_preset=preset,
               prompts_source="bundled benchmark passages (dynatree_core/data/excerpts): half wikitext2, half pg19, "
                              "seed 0, as bench selects them", load_s={}, load_errors={})
    pairs: dict[str, Any] = {}
    for name in args.dtypes:
        t = time.monotonic()
        try:
            pairs[name] = load_pair(args, name)
        except Exception as e:  # e.g. bf16 on a GPU without it: the other dtypes still run
            sec["load_errors"][name] = error_summary(e)
            print(f"precision: {name}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        sec["load_s"][name] = round(time.monotonic() - t, 2)
    if not pairs:
        raise RuntimeError(f"no model pair loaded: {next(iter(sec['load_errors'].values()))['message']}")
    if "float32" in pairs:
        pairs_out["float32"] = pairs["float32"]
    any_pair = next(iter(pairs.values()))
    sec["target_name"], sec["draft_name"] = any_pair.target_name, any_pair.draft_name
    prompts = bench_prompts(any_pair, args.precision_prompts, args.precision_prompt_len)
    sec["prompts"] = [{"dataset": p.dataset, "index": p.index, "n_tokens": p.n_tokens, "preview": p.preview}
                      for p in prompts]
    cfg = dynatree_config(preset)
    rows: list[dict[str, Any]] = []
    sec["per_prompt"] = rows
    for p in tqdm(prompts, desc="precision (prompts x dtypes)", unit="prompt", dynamic_ncols=True,
                  disable=args.no_progress):
        t = time.monotonic()
        if rows and t + _mean_unit(sec) > deadline:
            sec["truncated"] = (f"time limit: {len(rows)} of {len(prompts)} prompts run "
                                f"({_mean_unit(sec):.0f} s per prompt)")
            break
        rows.append({"dataset": p.dataset, "index": p.index, **precision_prompt(pairs, list(p.token_ids),
                                                                                args.precision_tokens, cfg)})
        sec.setdefault("_unit_s", []).append(time.monotonic() - t)
    sec["aggregate"] = precision_aggregate(rows, list(pairs))
    sec.pop("_unit_s", None)
    for name in list(pairs):
        if name != "float32":
            del pairs[name]
    free_memory()


def _mean_unit(sec: dict[str, Any]) -> float:
    units = sec.get("_unit_s") or [0.0]
    return sum(units) / len(units)


def _stats(xs: list[float]) -> dict[str, Any] | None:
    if not xs:
        return None
    return {"n": len(xs), "min": min(xs), "median": statistics.median(xs), "max": max(xs)}


def precision_aggregate(rows: list[dict[str, Any]], dtypes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in dtypes:
        rs = [r["dtypes"][name] for r in rows if name in r.get("dtypes", {})]
        a: dict[str, Any] = {"prompts": len(rs),
                             "dynatree_equals_ar": sum(bool(r["dynatree_equals_ar"]) for r in rs),
                             "ar_margin_at_dynatree_diff": _stats([r["ar_margin_at_dynatree_diff"] for r in rs
                                                                  if "ar_margin_at_dynatree_diff" in r])}
        if name != "float32":
            diff = [r for r in rs if r.get("ar_equals_fp32") is False]
            a.update(differs_from_fp32=len(diff), fraction_differs=len(diff) / len(rs) if rs else None,
                     first_diff_position=_stats([float(r["first_diff"]) for r in diff]),
                     fp32_margin_at_diff=_stats([r["fp32_margin_at_diff"] for r in diff]),
                     own_margin_at_diff=_stats([r["own_margin_at_diff"] for r in diff]))
        out[name] = a
    if rows and "fp32_min_margin" in rows[0]:
        out["fp32_margins"] = {"min": min(r["fp32_min_margin"] for r in rows),
                               "median_of_medians": statistics.median(r["fp32_median_margin"] for r in rows),
                               "positions_below_0_1": sum(r["fp32_positions_below_0_1"] for r in rows),
                               "full_forward_disagrees_with_ar": sum(r["fp32_full_forward_disagrees"] for r in rows)}
    return out

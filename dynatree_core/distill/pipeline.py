"""``run_distill``: the stages a :class:`DistillConfig` asks for, in order (data, train, export, evaluate)."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
import time
from pathlib import Path

import torch

from dynatree_core.pairs.pair import resolve_device
from dynatree_core.distill.config import DistillConfig
from dynatree_core.distill.data import build_data
from dynatree_core.distill.evaluation import EVAL_SCHEMA_VERSION, evaluate_draft
from dynatree_core.distill.runtime import set_threads
from dynatree_core.distill.training import export_checkpoint, train


def run_distill(config, target=None, tok=None) -> int:
    """Run ``dynatree distill`` with ``config`` (a :class:`DistillConfig`, or parsed options that are
    converted to one and validated first); ``target``/``tok`` reuse an already loaded target."""
    start = time.time()
    if not isinstance(config, DistillConfig):
        config = DistillConfig.from_namespace(config)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    changes: dict = {"start_time": start}
    if not config.command_line:
        changes["command_line"] = "dynatree distill " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    if config.out_dir is None:
        from dynatree_core.pairs.default_pair import DRAFT_ASSET_DIR, FEATURE_DRAFT_ASSET_DIR

        changes["out_dir"] = str(FEATURE_DRAFT_ASSET_DIR if config.kind == "feature" else DRAFT_ASSET_DIR)
    args = dataclasses.replace(config, **changes)
    if args.kind == "feature":
        return _run_feature(args, target, tok)
    if not args.eval_only:
        if target is None or (tok is None and args.stage in ("all", "data")):
            from dynatree_core.pairs.default_pair import load_target

            target, tok = load_target(dtype=torch.float32)  # once, shared by the stages
        if args.stage in ("all", "data"):
            build_data(args, target=target, tok=tok)
        if args.stage in ("all", "train"):
            train(args, target=target)
        if args.stage == "export":
            export_checkpoint(args, target=target)
    if args.evaluate or args.eval_only:
        _write_eval(args, evaluate_draft(args.out_dir, args.data_dir, n_passages=args.eval_passages, seed=args.seed,
                                         new_tokens=args.eval_new_tokens, prompt_new_tokens=args.eval_prompt_tokens),
                    _eval_sizes(args))
    return 0


def _run_feature(args: DistillConfig, target=None, tok=None) -> int:
    """``--kind feature``: data (shared with the independent draft), features, train + export, evaluate."""
    from dynatree_core.distill.feature import build_features, evaluate_feature_draft, train_feature

    if not args.eval_only:
        set_threads(args.threads)
        if target is None or tok is None:
            from dynatree_core.pairs.default_pair import load_target

            target, tok = load_target(dtype=torch.float32)
        target = target.to(resolve_device(args.device))
        if args.stage in ("all", "data"):
            build_data(args, target=target, tok=tok)
        if args.stage in ("all", "train"):
            build_features(args, target)
            train_feature(args, target, tok)
        if args.stage == "export":
            raise ValueError("--stage export is for --kind model; a feature draft is exported when training ends")
    if args.evaluate or args.eval_only:
        from dynatree_core.drafters import LookupMix

        mix = LookupMix() if args.with_lookup else None
        # the fp32 target already loaded serves the evaluation too, where it sits on the evaluation's device
        # (a second load costs 20-30 s: the GGUF's tokenizer and weights again)
        same = target is not None and _on(target, resolve_device(args.eval_device))
        res = evaluate_feature_draft(args.out_dir, args.data_dir, n_passages=args.eval_passages, seed=args.seed,
                                     lookup=mix, device=args.eval_device, n_prompts=args.eval_prompts,
                                     new_tokens=args.eval_new_tokens, prompt_new_tokens=args.eval_prompt_tokens,
                                     loaded=(target, tok) if same else None)
        _write_eval(args, res, {"kind": "feature", "with_lookup": args.with_lookup, "eval_prompts": args.eval_prompts,
                                **_eval_sizes(args)})
    return 0


def _on(model, dev: torch.device) -> bool:
    """``model`` is in fp32 on ``dev`` ("cuda" and "cuda:0" alike: an unnumbered device is the current one)."""
    p = next(model.parameters())
    here = p.device.index if p.device.index is not None else 0
    there = dev.index if dev.index is not None else (torch.cuda.current_device() if dev.type == "cuda" else 0)
    return p.dtype == torch.float32 and p.device.type == dev.type and here == there


def _eval_sizes(args: DistillConfig) -> dict:
    return {"eval_new_tokens": args.eval_new_tokens, "eval_prompt_tokens": args.eval_prompt_tokens}


def _write_eval(args: DistillConfig, res: dict, config_extra: dict) -> None:
    """``<work-dir>/eval.json`` (schema :data:`EVAL_SCHEMA_VERSION`) and the same JSON on stdout."""
    Path(args.work_dir).mkdir(parents=True, exist_ok=True)
    res = {"schema_version": EVAL_SCHEMA_VERSION, "draft_dir": str(args.out_dir),
           "config": {"eval_passages": args.eval_passages, "seed": args.seed, **config_extra}, **res}
    (Path(args.work_dir) / "eval.json").write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))

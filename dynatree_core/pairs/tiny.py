"""Tiny random model pairs for tests, docs and offline demos (no downloads).

``tiny_pair`` builds a GPT-NeoX or Llama target from a config, a draft that is a noisy copy of
it (so drafts are sometimes right and sometimes wrong, exercising every branch of selection),
and a character-level tokenizer, all in memory (the parts: :mod:`dynatree_core.pairs.tiny_models`).
"""

from __future__ import annotations

from dynatree_core.pairs.pair import ModelPair
from dynatree_core.pairs.tiny_models import (CHARS, VOCAB_SIZE, char_tokenizer, noisy_copy,  # noqa: F401
                                             tiny_feature_pair_of, tiny_model, tiny_pair_of)


def tiny_pair(arch: str = "llama", *, noise: float = 0.05, seed: int = 0, attn: str = "sdpa", **kwargs) -> ModelPair:
    """A tiny target, its noisy-copy draft and the character tokenizer."""
    return tiny_pair_of(ModelPair, arch, noise=noise, seed=seed, attn=attn, **kwargs)


def tiny_feature_pair(*, seed: int = 0, attn: str = "sdpa", head_seed: int = 1, **kwargs) -> ModelPair:
    """A tiny Llama target with a random (untrained) feature draft and the character tokenizer."""
    return tiny_feature_pair_of(ModelPair, seed=seed, attn=attn, head_seed=head_seed, **kwargs)

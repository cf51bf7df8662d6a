"""A model pair by name, the one way every entry point names one: ``ModelPair.named("default")``.

Names (:data:`PAIR_NAMES`): ``"default"`` (the embedded offline SmolLM2-135M pair), a tiny random
test pair (:data:`~dynatree_core.pairs.choices.TINY_TARGETS`), or a Hugging Face hub id / local path
``"target[,draft]"``. The command line, the benchmark's pair recipe, the scripts and the notebooks'
setup cells all come through :func:`named_pair`.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from dynatree_core.pairs.choices import LOOKUP_DRAFT_NAME, PAIR_DRAFTS, TINY_TARGETS
from dynatree_core.pairs.devices import resolve_dtype
from dynatree_core.pairs.tiny_models import tiny_feature_pair_of, tiny_pair_of

#: the names besides hub ids and paths
PAIR_NAMES: tuple[str, ...] = ("default",) + TINY_TARGETS
_VALID = f"one of {PAIR_NAMES}, a Hugging Face id 'owner/target[,owner/draft]' or a local path"


class PairUnavailable(RuntimeError):
    """The embedded default pair cannot be loaded here (its package is not installed)."""


def check_pair_name(name: str, drafter: str = "auto") -> None:
    """Bad names fail before anything loads, naming the valid ones (a hub id is checked when it loads)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"pair name must be {_VALID}, got {name!r}")
    if drafter not in PAIR_DRAFTS:
        raise ValueError(f"drafter must be one of {PAIR_DRAFTS}, got {drafter!r}")
    if name.startswith("tiny") and name not in TINY_TARGETS:
        raise ValueError(f"pair name {name!r} is no tiny pair; the tiny pairs are {TINY_TARGETS}")
    if name in PAIR_NAMES:
        return
    for part in name.split(",", 1):
        if "/" not in part and not os.path.exists(part):
            raise ValueError(f"pair name must be {_VALID}, got {name!r}")


def named_pair(cls: Any, name: str = "default", *, draft: str | None = None, drafter: str = "auto",
               feature_draft: Any = None, device: str = "auto", dtype: Any = None, draft_noise: float = 0.05,
               device_map: str | None = None, linear_kernel: str = "auto") -> Any:
    """The ``cls`` (:class:`~dynatree_core.pairs.pair.ModelPair`, which passes itself) called ``name``.

    Args:
        name: ``"default"``, a tiny pair or ``"target[,draft]"`` (see the module docstring).
        draft: with ``"default"``, a drafter kind as ``ModelPair.default(draft=...)`` takes it, or a
            feature-draft directory used instead of the shipped one; with a hub target, the draft's id
            or path (the same as ``"target,draft"``).
        drafter: :data:`~dynatree_core.pairs.choices.PAIR_DRAFTS`: ``"lookup"`` drafts by prompt lookup,
            ``"...+lookup"`` mixes it into the draft.
        feature_draft: with ``"default"``, a feature-draft directory (as ``ModelPair.default`` takes it).
        draft_noise: how far a tiny pair's draft is from its target.
        device_map: splits a large hub target across GPUs (:meth:`ModelPair.from_pretrained`).
    """
    if name == "default" and draft in PAIR_DRAFTS:  # ModelPair.default's spelling of the drafter
        if drafter not in ("auto", draft):
            raise ValueError(f"draft={draft!r} and drafter={drafter!r} name two drafters; pass one")
        draft, drafter = None, draft
    check_pair_name(name, drafter)
    if name == "default":
        own = {"feature_draft": feature_draft or draft} if (feature_draft or draft) else {}
        try:
            return cls.default(device=device, dtype=dtype, draft=drafter, linear_kernel=linear_kernel, **own)
        except (ImportError, FileNotFoundError) as e:
            raise PairUnavailable(f"the embedded default pair is unavailable ({e})") from e
    if name in TINY_TARGETS:
        pair = _tiny(cls, name, device, dtype, draft_noise).use_linear_kernel(linear_kernel)
    else:
        target, _, own_draft = name.partition(",")
        if own_draft and draft is not None and draft != own_draft:
            raise ValueError(f"pair name {name!r} names the draft {own_draft!r}, but draft={draft!r}; pass one")
        kwargs: dict[str, Any] = {"device_map": device_map} if device_map is not None else {}
        pair = cls.from_pretrained(target, None if drafter == "lookup" else (own_draft or draft), device=device,
                                   dtype=dtype, linear_kernel=linear_kernel, **kwargs)
    return _with_drafter(pair, drafter)


def _with_drafter(pair: Any, drafter: str) -> Any:
    """A named (not the embedded) pair with ``drafter``: prompt lookup instead of its draft, or mixed in."""
    if drafter == "lookup":
        from dynatree_core.drafters import PromptLookup

        return type(pair)(target=pair.target, draft=PromptLookup(), tokenizer=pair.tokenizer,
                          target_name=pair.target_name, draft_name=LOOKUP_DRAFT_NAME)
    if drafter.endswith("+lookup"):
        from dynatree_core.drafters import LookupMix

        if f"{pair.drafter_kind}+lookup" != drafter:
            raise ValueError(f"drafter {drafter!r} names a {drafter.split('+')[0]} draft, but the draft loaded "
                             f"is a {pair.drafter_kind} draft; use {pair.drafter_kind}+lookup")
        return replace(pair, lookup=LookupMix())
    return pair


def _tiny(cls: Any, name: str, device: str, dtype: Any, draft_noise: float) -> Any:
    """A tiny pair built on the CPU in fp32, then moved to ``device`` / ``dtype`` when they say otherwise."""
    pair = tiny_feature_pair_of(cls) if name == "tiny-llama-feature" else \
        tiny_pair_of(cls, name.split("-", 1)[1], noise=draft_noise)
    move: dict[str, Any] = {} if device in ("auto", "cpu") else {"device": device}
    if dtype is not None:
        move["dtype"] = resolve_dtype(dtype)
    if move:
        pair.target.to(**move)
        pair.draft.to(**move)
    return pair

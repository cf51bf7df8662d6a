"""Differences between the transformers 5.x releases this project supports (``>=5.0,<6``).

The one that matters: the keyword a model's ``forward`` takes its KV cache under.

* up to about 5.17 it is ``past_key_values=``;
* by 5.24 it is ``cache=`` (``past_key_values=`` is still accepted, with a deprecation warning,
  until 5.40).

Passing ``cache=`` to an older model is the dangerous case: ``forward`` swallows it in
``**kwargs``, runs *without* the cache, and returns wrong logits without any error. So every call
that hands our ``DynamicCache`` to a Hugging Face model spells the keyword through
:func:`cache_kwargs`, which reads it off the model's own ``forward`` signature.

Everything else the package uses (``DynamicCache()``, ``.layers[i].keys/.values``, ``.crop``,
``.get_seq_length``, ``from_pretrained(..., dtype=, attn_implementation=, gguf_file=)``,
``generate``) behaves the same in 5.17 and 5.24.
"""

from __future__ import annotations

import inspect
from typing import Any

#: model class -> the keyword its forward takes the cache under
_CACHE_KEYWORD: dict[type, str] = {}

_KEYWORDS = ("cache", "past_key_values")


def _keyword_of(fn: Any) -> str | None:
    """``"cache"`` / ``"past_key_values"`` if ``fn``'s signature names one of them (explicitly,
    not through ``**kwargs``), else None."""
    try:
        params = inspect.signature(fn).parameters  # follows __wrapped__ through HF's decorators
    except (TypeError, ValueError):
        return None
    for name in _KEYWORDS:
        p = params.get(name)
        if p is not None and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            return name
    return None


def _installed_keyword() -> str:
    """The keyword of the installed transformers, read off ``LlamaModel.forward``."""
    try:
        from transformers import LlamaModel
    except Exception:  # pragma: no cover - transformers without Llama
        return "past_key_values"
    # an unreadable signature: past_key_values works everywhere in 5.x (with a warning in new ones)
    return _keyword_of(LlamaModel.forward) or "past_key_values"


def cache_keyword(model: Any) -> str:
    """The keyword ``model``'s forward takes its KV cache under (memoized per class).

    Looked up on ``model.forward``, then ``model.base_model.forward`` (wrappers whose forward is
    just ``**kwargs``), then on the installed transformers' ``LlamaModel``."""
    cls = type(model)
    kw = _CACHE_KEYWORD.get(cls)
    if kw is None:
        kw = _keyword_of(getattr(model, "forward", None))
        if kw is None:
            base = getattr(model, "base_model", None)
            if base is not None and base is not model:
                kw = _keyword_of(getattr(base, "forward", None))
        if kw is None:
            kw = _installed_keyword()
        _CACHE_KEYWORD[cls] = kw
    return kw


def cache_kwargs(model: Any, cache: Any) -> dict:
    """``{"cache": cache}`` or ``{"past_key_values": cache}``, whichever ``model`` takes.

    Use as ``model(input_ids=..., **cache_kwargs(model, cache), use_cache=True)``. The same
    keyword serves ``model.base_model`` (one transformers version names it alike everywhere)."""
    return {cache_keyword(model): cache}

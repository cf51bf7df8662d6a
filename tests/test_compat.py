"""compat.cache_kwargs: the KV cache goes under the keyword the model's forward takes
(``past_key_values=`` up to about transformers 5.17, ``cache=`` by 5.24). Passing the wrong one is
silent - the model swallows it in ``**kwargs`` and runs without the cache - so the tests check both
the keyword and that the cache really fills, under whichever transformers is installed."""

from __future__ import annotations

import inspect

import pytest
import torch
from transformers import DynamicCache, GPTNeoXModel, LlamaModel

from dynatree_core.runtime.cache.dynamic import cache_length
from dynatree_core.runtime.model import compat, forwards as pl
from dynatree_core.pairs.tiny import tiny_model


def installed_keyword() -> str:
    params = inspect.signature(LlamaModel.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class OldStyle(torch.nn.Module):  # transformers <= 5.17
    def forward(self, input_ids=None, attention_mask=None, past_key_values=None, use_cache=None, **kwargs):
        return past_key_values


class NewStyle(torch.nn.Module):  # transformers 5.24
    def forward(self, input_ids=None, attention_mask=None, cache=None, use_cache=None, **kwargs):
        return cache


class Wrapper(torch.nn.Module):
    """A forward that only says ``**kwargs`` (e.g. an adapter wrapper): its base model decides."""

    def __init__(self, base):
        super().__init__()
        self.base_model = base

    def forward(self, *args, **kwargs):
        return self.base_model(*args, **kwargs)


class Opaque(torch.nn.Module):
    def forward(self, *args, **kwargs):
        return None


def test_fake_old_and_new_style_models():
    cache = object()
    assert compat.cache_kwargs(OldStyle(), cache) == {"past_key_values": cache}
    assert compat.cache_kwargs(NewStyle(), cache) == {"cache": cache}
    # the model really receives it
    assert OldStyle()(input_ids=None, **compat.cache_kwargs(OldStyle(), cache)) is cache


def test_wrapper_defers_to_base_model_and_opaque_falls_back_to_installed():
    class OldWrapper(Wrapper):
        pass

    class NewWrapper(Wrapper):
        pass

    assert compat.cache_keyword(OldWrapper(OldStyle())) == "past_key_values"
    assert compat.cache_keyword(NewWrapper(NewStyle())) == "cache"
    assert compat.cache_keyword(Opaque()) == installed_keyword()


def test_memoized_per_class():
    class Once(OldStyle):
        pass

    m = Once()
    assert compat.cache_keyword(m) == "past_key_values"
    assert compat._CACHE_KEYWORD[Once] == "past_key_values"
    Once.forward = NewStyle.forward  # not looked at again
    assert compat.cache_keyword(Once()) == "past_key_values"


@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])
def test_installed_transformers_models(arch):
    model = tiny_model(arch, seed=0)
    kw = installed_keyword()
    assert compat.cache_keyword(model) == kw
    assert compat.cache_keyword(model.base_model) == kw
    base_cls = LlamaModel if arch == "llama" else GPTNeoXModel
    assert kw in inspect.signature(base_cls.forward).parameters


@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])
def test_cache_is_really_used(arch):
    """Through the forwards, the cache fills and a cached step gives the uncached logits."""
    model = tiny_model(arch, seed=0)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    cache = DynamicCache()
    pl.forward(model, ids[:, :4], cache)
    assert cache_length(cache) == 4
    step = pl.forward(model, ids[:, 4:], cache)
    assert cache_length(cache) == 5
    full = pl.forward(model, ids, DynamicCache())
    torch.testing.assert_close(step[-1], full[-1], rtol=1e-4, atol=1e-5)
    # and the base model takes the same keyword
    cache = DynamicCache()
    with torch.no_grad():
        model.base_model(input_ids=ids, **compat.cache_kwargs(model, cache), use_cache=True)
    assert cache_length(cache) == 5

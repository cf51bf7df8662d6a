"""``runtime="compiled"`` compiles through a scoped, persistent inductor cache (freezing on the CPU)
and still decodes exactly as eager; the scope leaves no global setting behind."""

from __future__ import annotations

import os

import torch

from dynatree_core import generate
from dynatree_core.policy.config import DynaTreeConfig
from dynatree_core.runtime import compile_cache as cc

from helpers import cached_pair


def test_cache_dir_is_keyed_by_torch_version_and_overridable(monkeypatch, tmp_path):
    monkeypatch.delenv(cc.CACHE_ENV, raising=False)
    monkeypatch.setenv("DYNATREE_CACHE_DIR", str(tmp_path))
    assert cc.compile_cache_dir() == tmp_path / "inductor" / f"torch-{torch.__version__.replace('+', '-')}"
    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path / "mine"))
    assert cc.compile_cache_dir() == tmp_path / "mine"


def test_compile_scope_sets_cache_and_freezing_only_inside(monkeypatch, tmp_path):
    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    before = torch._inductor.config.freezing
    with cc.compile_scope("cpu"):
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path)
        assert torch._inductor.config.freezing and torch._inductor.config.fx_graph_cache
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ and torch._inductor.config.freezing == before
    monkeypatch.setenv(cc.FREEZING_ENV, "noprepack")
    assert cc.compile_options("cpu") == {"fx_graph_cache": True, "freezing": True, "cpp.weight_prepack": False}
    monkeypatch.setenv(cc.FREEZING_ENV, "off")
    assert cc.compile_options("cpu") == {"fx_graph_cache": True}


def test_compiled_frozen_runtime_decodes_as_eager_and_counts_its_compiles(monkeypatch, tmp_path):
    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path))
    pair = cached_pair("llama", "sdpa", 0.05)
    prompt = [5, 9, 14, 3, 22, 7, 31, 12]
    before = cc.compile_totals()
    for method, config in [("ar", None), ("dynatree", DynaTreeConfig.cpu())]:
        eager = generate(pair, prompt, method, config, max_new_tokens=12, ignore_eos=True, runtime="eager")
        compiled = generate(pair, prompt, method, config, max_new_tokens=12, ignore_eos=True, runtime="compiled")
        assert compiled.tokens == eager.tokens  # the static cache is mutated in place: freezing must not fold it
    after = cc.compile_totals()
    assert after.forwards > before.forwards and after.cache_dir == str(tmp_path)
    assert any(tmp_path.iterdir())  # the graphs went to disk

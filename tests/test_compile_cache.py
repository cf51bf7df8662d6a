"""``runtime="compiled"`` compiles through a scoped, persistent inductor cache (freezing on the CPU)
and still decodes exactly as eager; the scope leaves no global setting behind."""

from __future__ import annotations

import os

import pytest
import torch

from dynatree_core import generate
from dynatree_core.policy.config import DynaTreeConfig
from dynatree_core.runtime.static import compile_cache as cc

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
    monkeypatch.setenv(cc.FREEZING_ENV, "mkl")
    assert cc.compile_options("cpu") == {"fx_graph_cache": True, "freezing": True, "cpp.weight_prepack": True}
    assert cc.compile_options("cpu", freezing=False) == {"fx_graph_cache": True, "freezing": False}  # a whole level
    with cc.compile_scope("cpu", freezing=False):
        assert not torch._inductor.config.freezing
    monkeypatch.setenv(cc.FREEZING_ENV, "off")
    assert cc.compile_options("cpu") == {"fx_graph_cache": True, "freezing": False}
    monkeypatch.setenv(cc.FREEZING_ENV, "banana")
    with pytest.raises(ValueError, match=cc.FREEZING_ENV):
        cc.compile_options("cpu")


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


def test_every_compiled_forward_keeps_its_own_graph_past_dynamos_recompile_limit(monkeypatch, tmp_path):
    """Every bucket's forward is the same closure: compiled as it is, dynamo stops at its recompile limit
    (8 graphs per code object) and runs the rest eagerly; compile_forward gives each its own code object."""
    import torch._dynamo.utils as du

    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path))
    limit = torch._dynamo.config.recompile_limit

    def closure(n: int):
        x = torch.arange(float(n)).reshape(1, n)

        def run() -> torch.Tensor:
            return (x * 2).sin().sum()
        return run

    def graphs_for(compile_one) -> tuple[int, list[bool]]:
        before = du.counters["stats"]["unique_graphs"]
        fns = [(n, compile_one(closure(n))) for n in range(1, limit + 2)]
        ok = [torch.allclose(f(), (torch.arange(float(n)) * 2).sin().sum()) for n, f in fns]
        return du.counters["stats"]["unique_graphs"] - before, ok

    def plain(fn):
        compiled = torch.compile(fn, dynamic=False)
        compiled()
        return compiled

    torch._dynamo.reset()
    assert graphs_for(plain)[0] == limit  # the wrong way: the ninth shape ran eagerly
    n, ok = graphs_for(lambda fn: cc.compile_forward(fn, "cpu"))
    assert n == limit + 1 and all(ok)


def test_prepack_runs_fp32_linears_on_onednn_as_eager_does_and_mkl_mode_on_mkl(monkeypatch, tmp_path):
    """Inductor's own fp32 choice on x86 is MKL's packed GEMM, 1.9-3.6x slower per linear than the
    oneDNN kernel eager runs on this project's CPU (docs/bench/2026-11-28-runtime-best): "prepack" emits
    oneDNN's, "mkl" leaves inductor's choice; both compute what eager does, and the switch is undone."""
    from torch._inductor.fx_passes import mkldnn_fusion

    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path))
    original = mkldnn_fusion.CpuMkldnnDeviceOp.pack_linear
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.SiLU(), torch.nn.Linear(96, 32)).eval()
    x = torch.randn(3, 64)

    def linear_ops(mode: str) -> set[str]:
        monkeypatch.setenv(cc.FREEZING_ENV, mode)
        torch._dynamo.reset()
        with torch.inference_mode():
            fn = cc.compile_forward(lambda: model(x), "cpu")
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                out = fn()
            assert torch.allclose(out, model(x), atol=1e-5)
        return {e.key for e in prof.key_averages() if "linear" in e.key}

    assert linear_ops("prepack") == {"mkldnn::_linear_pointwise"}
    if torch._C.has_mkl:
        assert linear_ops("mkl") == {"mkl::_mkl_linear"}
    assert mkldnn_fusion.CpuMkldnnDeviceOp.pack_linear is original


def test_on_cuda_a_compiled_forward_is_captured_as_one_cuda_graph_timed_apart(monkeypatch, tmp_path):
    """runtime="compiled" on CUDA is inductor, then a CUDA graph of the compiled forward: compile_forward
    hands back the capture's replay and counts its seconds apart from the compile's. The capture itself
    needs a GPU (gpu_check); here it is recorded, and the forward compiles for the CPU's tensors."""
    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path))
    monkeypatch.delenv(cc.CUDA_GRAPHS_ENV, raising=False)
    assert cc.captures_cuda_graphs("cuda:0") and not cc.captures_cuda_graphs("cpu")
    monkeypatch.setenv(cc.CUDA_GRAPHS_ENV, "0")
    assert not cc.captures_cuda_graphs("cuda")
    monkeypatch.setenv(cc.CUDA_GRAPHS_ENV, "yes")
    with pytest.raises(ValueError, match=cc.CUDA_GRAPHS_ENV):
        cc.captures_cuda_graphs("cuda")
    monkeypatch.delenv(cc.CUDA_GRAPHS_ENV)
    captured = []

    def capture(fn, device):
        captured.append((fn(), device))
        return lambda: "replayed"

    monkeypatch.setattr(cc, "capture_cuda_graph", capture)
    x = torch.arange(6.0)
    before = cc.compile_totals()
    with torch.inference_mode():
        cpu_fn = cc.compile_forward(lambda: (x * 3).cos(), "cpu")
        assert not captured and torch.allclose(cpu_fn(), (x * 3).cos())
        cuda_fn = cc.compile_forward(lambda: (x * 2).sin(), "cuda")
    assert cuda_fn() == "replayed" and captured[0][1] == torch.device("cuda")
    assert torch.allclose(captured[0][0], (x * 2).sin())  # what is captured is the compiled forward
    after = cc.compile_totals()
    assert (after.forwards - before.forwards, after.graphs - before.graphs) == (2, 1)
    assert after.capture_s >= before.capture_s and "capture_s" in after.as_dict()

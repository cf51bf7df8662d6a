"""Every documented bad input raises a clear error naming the parameter and its range."""

from __future__ import annotations

import pytest
import torch

from dynatree_core import ModelPair, generate
from dynatree_core.policy.config import DynaTreeConfig, FixedTreeConfig, HistoryConfig, LinearConfig
from dynatree_core.pairs.tiny import tiny_model

from helpers import cached_pair


@pytest.mark.parametrize("kwargs,match", [
    (dict(tau_l=0.9, tau_h=0.9), r"tau_l must be < tau_h"),
    (dict(tau_l=0.95, tau_h=0.9), r"tau_l must be < tau_h"),
    (dict(tau_h=1.0), r"tau_h must be in the open interval \(0, 1\)"),
    (dict(tau_l=0.0), r"tau_l must be in the open interval \(0, 1\)"),
    (dict(rho_stop=0.5, rho_deep=0.5), r"rho_stop must be < rho_deep"),
    (dict(rho_deep=1.5), r"rho_deep must be in the open interval"),
    (dict(tau=1.0), r"tau must be in \[0, 1\)"),
    (dict(d0=8, d_max=8), r"d0 \(D0\) must be in \[1, d_max - 1\]"),
    (dict(d0=0), r"d0 must be >= 1"),
    (dict(b_min=3, b_mid=2, b_max=3), r"b_min <= b_mid <= b_max"),
    (dict(b_min=1, b_mid=3, b_max=2), r"b_min <= b_mid <= b_max"),
    (dict(b_min=0), r"b_min must be >= 1"),
    (dict(n_max=0), r"n_max must be >= 1"),
    (dict(kv_mode="copy"), r"kv_mode must be one of"),
    (dict(b_max=9, trace_top_k=8), r"trace_top_k must be >= the largest breadth \(9\)"),
])
def test_dynatree_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DynaTreeConfig(**kwargs)


def test_type_errors_name_the_parameter():
    with pytest.raises(TypeError, match="n_max must be an integer"):
        DynaTreeConfig(n_max=2.5)
    with pytest.raises(TypeError, match="tau_h must be a number"):
        DynaTreeConfig(tau_h="high")


@pytest.mark.parametrize("factory,match", [
    (lambda: LinearConfig(k=0), r"k must be >= 1"),
    (lambda: FixedTreeConfig(n_max=0), r"n_max must be >= 1"),
    (lambda: FixedTreeConfig(d=0), r"d must be >= 1"),
    (lambda: FixedTreeConfig(b=0), r"b must be >= 1"),
    (lambda: FixedTreeConfig(tau=-0.1), r"tau must be in \[0, 1\)"),
    (lambda: HistoryConfig(window=0), r"window must be >= 1"),
    (lambda: HistoryConfig(target_acceptance=1.0), r"target_acceptance must be in the open interval"),
    (lambda: HistoryConfig(eta_d=2.0), r"eta_d must be in \[0, 1\]"),
    (lambda: DynaTreeConfig.ablation("nope"), r"variant must be one of"),
])
def test_other_config_errors(factory, match):
    with pytest.raises(ValueError, match=match):
        factory()


@pytest.fixture
def pair():
    return cached_pair("llama", "sdpa", 0.02)


def test_unknown_method(pair):
    with pytest.raises(ValueError, match=r"method must be one of \('ar', 'linear', 'fixed_tree', 'dynatree', 'eagle2', 'sequoia'\)"):
        generate(pair, [1, 2], "beam")


def test_config_of_the_wrong_type(pair):
    with pytest.raises(TypeError, match="config for method='linear' must be a LinearConfig"):
        generate(pair, [1, 2], "linear", DynaTreeConfig())


def test_negative_max_new_tokens(pair):
    with pytest.raises(ValueError, match="max_new_tokens must be >= 0"):
        generate(pair, [1, 2], "ar", max_new_tokens=-1)


@pytest.mark.parametrize("prompt", [[], torch.tensor([], dtype=torch.long)])
def test_empty_prompt(pair, prompt):
    with pytest.raises(ValueError, match="prompt must contain at least one token"):
        generate(pair, prompt, "dynatree")


def test_out_of_vocab_prompt(pair):
    with pytest.raises(ValueError, match=r"prompt token ids must be in \[0, "):
        generate(pair, [1, 10_000], "ar")


def test_string_prompt_without_tokenizer(pair):
    with pytest.raises(TypeError, match="no tokenizer"):
        generate(pair, "hello", "ar")


def test_prompt_plus_new_tokens_beyond_context_window():
    target = tiny_model("llama", max_positions=32)
    p = ModelPair(target=target, draft=tiny_model("llama", seed=3, max_positions=32))
    with pytest.raises(ValueError, match=r"prompt length \(20\) \+ max_new_tokens \(13\) = 33 exceeds the target's context window of 32"):
        generate(p, list(range(2, 22)), "dynatree", max_new_tokens=13)
    assert len(generate(p, list(range(2, 22)), "dynatree", max_new_tokens=12, ignore_eos=True).tokens) == 12


def test_draft_with_a_different_vocabulary():
    with pytest.raises(ValueError, match=r"vocabularies differ: target vocab_size=\d+, draft vocab_size=50"):
        ModelPair(target=tiny_model("llama"), draft=tiny_model("llama", vocab_size=50))


def test_models_on_different_devices():
    draft = tiny_model("gpt_neox").to("meta")
    with pytest.raises(ValueError, match="must be on the same device, got target on cpu and draft on meta"):
        ModelPair(target=tiny_model("gpt_neox"), draft=draft)


def test_unsupported_attention_implementation():
    target = tiny_model("llama")
    target.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match=r"attn_implementation must be one of \('eager', 'sdpa'\)"):
        ModelPair(target=target)


def test_speculative_method_without_draft():
    p = ModelPair(target=tiny_model("llama"))
    with pytest.raises(ValueError, match="needs a draft model"):
        generate(p, [1, 2], "linear")
    assert len(generate(p, [3, 4], "ar", max_new_tokens=3, ignore_eos=True).tokens) == 3


def test_not_a_model():
    with pytest.raises(TypeError, match="target must be a Hugging Face causal LM"):
        ModelPair(target="gpt2")


def test_from_pretrained_rejects_bad_dtype_and_attention():
    with pytest.raises(ValueError, match="dtype must be one of"):
        ModelPair.from_pretrained("x", "y", device="cpu", dtype="float8")
    with pytest.raises(ValueError, match="attn_implementation must be one of"):
        ModelPair.from_pretrained("x", "y", device="cpu", attn_implementation="flash_attention_2")


def test_allow_long_context_decodes_past_the_window_exactly():
    """The paper's Pythia runs exceed its 2048-position window; the override is explicit."""
    target = tiny_model("gpt_neox", max_positions=16)
    p = ModelPair(target=target, draft=tiny_model("gpt_neox", seed=3, max_positions=16))
    prompt = list(range(2, 14))
    with pytest.raises(ValueError, match="allow_long_context=True"):
        generate(p, prompt, "dynatree", max_new_tokens=10)
    res = generate(p, prompt, "dynatree", max_new_tokens=10, ignore_eos=True, allow_long_context=True)
    ar = generate(p, prompt, "ar", max_new_tokens=10, ignore_eos=True, allow_long_context=True)
    assert res.tokens == ar.tokens and len(res.tokens) == 10


def test_trace_top_k_follows_the_breadth_unless_given():
    """The recorded top-k defaults to max(8, largest breadth) and follows replace(); an explicit
    value is kept and checked."""
    from dynatree_core.policy.config import FixedTreeConfig

    assert DynaTreeConfig().trace_top_k == 8
    wide = DynaTreeConfig(b_max=9)
    assert wide.trace_top_k == 9 and wide.replace(b_max=12).trace_top_k == 12
    assert wide.replace(b_max=3).trace_top_k == 8
    assert DynaTreeConfig(trace_top_k=16).replace(b_max=4).trace_top_k == 16
    assert FixedTreeConfig(b=10).trace_top_k == 10
    with pytest.raises(ValueError, match="trace_top_k must be >= the largest breadth"):
        DynaTreeConfig(trace_top_k=10).replace(b_max=11)
    assert DynaTreeConfig(b_max=9).to_dict()["trace_top_k"] == 9  # traces record the value used


def test_device_and_dtype_errors_name_the_option(monkeypatch):
    """No GPU, a GPU index that does not exist, a dtype the GPU cannot compute in, a non-float dtype."""
    import torch

    from dynatree_core.pairs.pair import check_dtype_on_device, resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"device='cuda' requested but CUDA is not available"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="device must be"):
        resolve_device("tpu:7")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match=r"device='cuda:3': this machine has 1 CUDA device"):
        resolve_device("cuda:3")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "Tesla T4")
    with pytest.raises(ValueError, match=r"dtype='bfloat16' is not supported on Tesla T4"):
        check_dtype_on_device(torch.bfloat16, torch.device("cuda:0"))
    check_dtype_on_device(torch.float16, torch.device("cuda:0"))  # fine
    check_dtype_on_device(torch.bfloat16, torch.device("cpu"))  # CPUs compute in bf16
    with pytest.raises(ValueError, match="dtype must be a floating-point type"):
        check_dtype_on_device(torch.int8, torch.device("cpu"))


# --- sampling settings (issue 39) -----------------------------------------------------------------
@pytest.mark.parametrize("kwargs,match", [
    # a seed at temperature 0 draws nothing: refused, never silently ignored
    (dict(seed=3), r"seed=3 applies only when sampling \(temperature > 0\)"),
    (dict(temperature=0, seed=0), r"seed=0 applies only when sampling"),
    (dict(temperature=0.0, verify="match"), r"verify='match' applies only when sampling"),
    # below MIN_TEMPERATURE, float32 logits / T overflow (1e-40 gave inf logits): refused, naming the range
    (dict(temperature=1e-40), r"temperature must be 0 \(greedy\) or >= 1e-06, got 1e-40"),
    (dict(temperature=5e-7, verify="rejection"), r"temperature must be 0 \(greedy\) or >= 1e-06, got 5e-07"),
])
def test_bad_sampling_keywords_fail_before_any_model_work(kwargs, match, pair, monkeypatch):
    monkeypatch.setattr(type(pair.target), "forward", lambda *a, **k: pytest.fail("a model ran"))
    monkeypatch.setattr(type(pair.draft), "forward", lambda *a, **k: pytest.fail("a model ran"))
    with pytest.raises(ValueError, match=match):
        generate(pair, [3, 4, 5], "dynatree", max_new_tokens=4, **kwargs)


@pytest.mark.parametrize("kwargs,match", [
    (dict(temperature=0.7, draft_noise="gumbel"), r"draft_noise must be one of \('shared', 'none'\), got 'gumbel'"),
    (dict(draft_noise="shared"), r"draft_noise='shared' applies only when sampling"),
    (dict(temperature=0.7, verify="rejection", draft_noise="none"),
     r"draft_noise='none' applies only under verify='match'"),
    (dict(temperature=0.7, verify="rejection", draft_noise="shared"),
     r"draft_noise='shared' applies only under verify='match'"),
    (dict(temperature=1e-7), r"temperature must be 0 \(greedy\) or >= 1e-06"),
    (dict(temperature=0.7, seed=-1), r"seed must be an integer in \[0, 2\*\*63\)"),
])
def test_bad_sampling_configs_name_the_parameter(kwargs, match):
    from dynatree_core.policy.sampling import SamplingConfig

    with pytest.raises(ValueError, match=match):
        SamplingConfig(**kwargs)

"""Linear layers on oneDNN with prepacked weights: same maths, batch invariant, exact decoding.

The packed kernel changes the last bits of a linear's output (another summation order), so the
exactness properties are checked again with every model of the pair packed, against the packed
target's own sequential greedy decoding (``model.generate``): the promise is that speculation
never changes what the model the user runs would say.
"""

from __future__ import annotations

import copy
import json
import pickle

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynatree_core import generate
from dynatree_core.engine import calibrate
from dynatree_core.policy.config import DynaTreeConfig, LinearConfig
from dynatree_core.policy.cost_model import CostModel
from dynatree_core.drafters.draft_model import SparseLMHead
from dynatree_core.runtime.model.linear_kernels import (PackedLinear, linear_kernel_of, onednn_unavailable,
                                                        resolve_linear_kernel, set_linear_kernel)
from dynatree_core.pairs.pair import ModelPair
from dynatree_core.pairs.tiny import noisy_copy, tiny_feature_pair, tiny_model
from dynatree_core.records.trace import Trace

from helpers import cached_pair, reference_greedy
from helpers.exactness import ARCHS, ATTNS, EDGE_CONFIGS, method_configs, prompts
from helpers.features import greedy

pytestmark = pytest.mark.skipif(onednn_unavailable("cpu", torch.float32) is not None,
                                reason="this torch build has no oneDNN linear kernels")


def _packed(module: torch.nn.Module) -> torch.nn.Module:
    set_linear_kernel(module, "onednn")
    return module


# --------------------------------------------------------------------------- the layer itself

@settings(max_examples=40, deadline=None)
@given(i=st.integers(1, 96), o=st.integers(1, 160), rows=st.integers(0, 40), bias=st.booleans(),
       lead=st.sampled_from([(), (1,), (2,)]), seed=st.integers(0, 2 ** 16))
def test_a_packed_linear_computes_f_linear(i, o, rows, bias, lead, seed):
    g = torch.Generator().manual_seed(seed)
    lin = torch.nn.Linear(i, o, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(o, i, generator=g))
        if bias:
            lin.bias.copy_(torch.randn(o, generator=g))
    x = torch.randn(*lead, rows, i, generator=g)
    with torch.inference_mode():
        ref, got = lin(x), PackedLinear(lin)(x)
    assert got.shape == ref.shape
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-4 * (1 + i ** 0.5))


@pytest.mark.parametrize("o,i", [(49152 // 64, 576), (1536, 576), (64, 32)])
def test_a_packed_linear_is_batch_invariant_where_torchs_is_not_required_to_be(o, i):
    """Each row's output is bitwise the same whatever rows come with it: a token scored alone
    (AR) and in a tree (verification) get the same linear outputs."""
    torch.manual_seed(0)
    layer = PackedLinear(torch.nn.Linear(i, o))
    x = torch.randn(40, i)
    with torch.inference_mode():
        alone = torch.cat([layer(x[r:r + 1]) for r in range(40)])
        for rows in (2, 3, 4, 7, 16, 40):
            assert torch.equal(layer(x[:rows]), alone[:rows]), rows


def test_training_uses_autograd_and_the_packed_copy_follows_an_optimizer_step():
    torch.manual_seed(0)
    ref = torch.nn.Linear(8, 5)
    layer = PackedLinear(copy.deepcopy(ref))
    x = torch.randn(3, 8)
    layer(x).square().sum().backward()
    ref(x).square().sum().backward()
    torch.testing.assert_close(layer.weight.grad, ref.weight.grad)
    with torch.inference_mode():
        before = layer(x)
    torch.optim.SGD(layer.parameters(), lr=0.5).step()  # in place: the weight's version moves
    with torch.inference_mode():
        after = layer(x)
        torch.testing.assert_close(after, torch.nn.functional.linear(x, layer.weight, layer.bias))
    assert not torch.allclose(before, after)


def test_packing_keeps_parameters_ties_and_state_and_round_trips():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2,
                                         tie_word_embeddings=True)).eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    n_params = sum(p.numel() for p in model.parameters())
    x = torch.tensor([[3, 5, 7, 11]])
    with torch.inference_mode():
        ref = model(x).logits
    assert set_linear_kernel(model, "onednn") == 2 * 7 + 1 and linear_kernel_of(model) == "onednn"
    assert isinstance(model.lm_head, PackedLinear)
    assert model.lm_head.weight is model.get_input_embeddings().weight  # still tied
    assert sum(p.numel() for p in model.parameters()) == n_params
    assert model.state_dict().keys() == state.keys()
    with torch.inference_mode():
        torch.testing.assert_close(model(x).logits, ref, rtol=1e-5, atol=1e-5)
    assert set_linear_kernel(model, "onednn") == 0  # already packed
    assert set_linear_kernel(model, "torch") == 15 and linear_kernel_of(model) == "torch"
    assert type(model.lm_head) is torch.nn.Linear and model.lm_head.weight is model.get_input_embeddings().weight
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


def test_a_packed_model_copies_and_pickles():
    model = _packed(tiny_model("llama"))
    x = torch.tensor([[4, 9, 2]])
    with torch.inference_mode():
        ref = model(x).logits
        for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
            assert linear_kernel_of(clone) == "onednn"
            assert torch.equal(clone(x).logits, ref)


def test_the_sparse_head_takes_the_kernel_itself():
    head = SparseLMHead(16, torch.tensor([1, 4, 9]), 12, weight=torch.randn(3, 16))
    h = torch.randn(2, 5, 16)
    with torch.inference_mode():
        ref = head(h)
        assert head.use_linear_kernel("onednn") and head.linear_kernel == "onednn"
        assert not head.use_linear_kernel("onednn")
        got = head(h)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(got[..., 0], ref[..., 0])  # rows outside the head stay dtype-min
    pair = tiny_feature_pair().use_linear_kernel("onednn")
    assert linear_kernel_of(pair.draft) == "onednn" and pair.draft.head.linear_kernel == "onednn"


# --------------------------------------------------------------------------- choosing a kernel

def test_auto_packs_a_cpu_float32_pair_only():
    assert resolve_linear_kernel("auto", "cpu", torch.float32) == "onednn"
    assert resolve_linear_kernel("auto", "cpu", torch.bfloat16) == "torch"
    assert resolve_linear_kernel("auto", "cpu", torch.float32, dispatched=True) == "torch"
    assert resolve_linear_kernel("auto", "cuda", torch.float32) == "torch"
    assert resolve_linear_kernel("torch", "cpu", torch.float32) == "torch"


@pytest.mark.parametrize("kernel, device, dtype, dispatched, message", [
    ("fast", "cpu", torch.float32, False, "linear_kernel must be one of"),
    ("onednn", "cuda", torch.float32, False, "CPU only"),
    ("onednn", "cpu", torch.float16, False, "float32 only"),
    ("onednn", "cpu", torch.float32, True, "device_map"),
])
def test_a_kernel_that_cannot_serve_is_refused_by_name(kernel, device, dtype, dispatched, message):
    with pytest.raises(ValueError, match="linear_kernel") as e:
        resolve_linear_kernel(kernel, device, dtype, dispatched)
    assert message in str(e.value)


def test_from_pretrained_refuses_a_bad_kernel_before_loading_anything(tmp_path):
    with pytest.raises(ValueError, match="linear_kernel must be one of"):
        ModelPair.from_pretrained(str(tmp_path / "nothing-here"), linear_kernel="mkl", device="cpu")
    with pytest.raises(ValueError, match="linear_kernel='onednn'"):
        ModelPair.from_pretrained(str(tmp_path / "nothing-here"), linear_kernel="onednn", device="cpu",
                                  dtype="bfloat16")


def test_the_kernel_is_recorded_in_the_trace_and_keys_its_own_calibration():
    pair = cached_pair("llama", "sdpa", 0.02, "onednn")
    res = generate(pair, [5, 9, 2], "dynatree", DynaTreeConfig(), max_new_tokens=6, trace=True)
    assert res.trace.linear_kernel == "onednn"
    assert Trace.from_json(res.trace.to_json()).linear_kernel == "onednn"
    plain = ModelPair(target=tiny_model("llama"), draft=noisy_copy(tiny_model("llama"), 0.02))
    assert plain.linear_kernel == "torch"  # a pair built by hand is left as given
    assert calibrate.pair_key(pair)["linear_kernel"] == "onednn"
    assert calibrate.pair_key(plain)["linear_kernel"] == "torch"
    curve = CostModel(verify_s=(0.01, 0.012), draft_s=0.001, sizes=(1, 2), **calibrate.pair_key(pair))
    assert curve.matches(**calibrate.pair_key(pair)) and not curve.matches(**calibrate.pair_key(plain))
    assert "onednn linear kernels" in calibrate.describe(curve)


def test_the_cli_records_the_kernel_it_ran_on(tmp_path):
    from helpers.bench import make_data_dir
    from helpers.bench import bench_args

    from dynatree_core.cli import main

    data = make_data_dir(tmp_path / "data")
    for kernel in ("auto", "torch"):
        out = tmp_path / f"{kernel}.json"
        assert main(bench_args(data, out, "--linear-kernel", kernel)) == 0
        models = json.loads(out.read_text())["models"]
        assert models["linear_kernel"] == ("onednn" if kernel == "auto" else "torch")


# --------------------------------------------------------------------------- exactness, packed

@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arch=st.sampled_from(ARCHS), attn=st.sampled_from(ATTNS), noise=st.sampled_from((0.0, 0.02, 1.0)),
       mc=method_configs, prompt=prompts, n=st.integers(0, 20))
def test_every_decoder_on_packed_models_equals_their_greedy_decoding(arch, attn, noise, mc, prompt, n):
    method, config = mc
    pair = cached_pair(arch, attn, noise, "onednn")
    assert pair.linear_kernel == "onednn"
    res = generate(pair, list(prompt), method, config, max_new_tokens=n, ignore_eos=True)
    assert res.tokens == reference_greedy(arch, attn, prompt, n, "onednn")


@settings(max_examples=20, deadline=None)
@given(mc=method_configs, prompt=prompts, cut=st.integers(0, 11))
def test_packed_decoders_stop_at_the_first_eos_inside_an_accepted_path(mc, prompt, cut):
    method, config = mc
    ref = reference_greedy("llama", "sdpa", prompt, 12, "onednn")
    eos = ref[cut]
    res = generate(cached_pair("llama", "sdpa", 0.0, "onednn"), list(prompt), method, config, max_new_tokens=12,
                   eos_token_id=eos)
    assert res.tokens == ref[: ref.index(eos) + 1] and res.metrics.stopped_by == "eos"


@pytest.mark.parametrize("method, config", [("linear", LinearConfig(k=3)), ("dynatree", DynaTreeConfig()),
                                            *EDGE_CONFIGS])
def test_a_packed_feature_pair_is_exact(method, config):
    pair = tiny_feature_pair().use_linear_kernel("onednn")
    prompt = [5, 9, 2, 33, 7]
    res = generate(pair, prompt, method, config, max_new_tokens=16, ignore_eos=True)
    assert res.tokens == greedy(pair.target, prompt, 16)

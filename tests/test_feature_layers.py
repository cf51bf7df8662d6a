"""Feature drafts that read several target layers (the EAGLE-3 idea): the states come from one target
forward, a draft reading them starts as the final-state draft and trains on the final state's
labels, stored features serve drafts reading fewer layers, and the drafter refuses states of the
wrong width."""

from __future__ import annotations

from argparse import Namespace

import pytest
import torch

from dynatree_core.drafters import DraftContext, FeatureDrafter
from dynatree_core.drafters.feature_draft import (FeatureDraftConfig, build_feature_draft, check_feature_target,
                                                  feature_draft_from_model_draft, load_feature_draft,
                                                  save_feature_draft, target_states, unrolled_forward)
from dynatree_core.pairs.tiny import VOCAB_SIZE, tiny_model

X = torch.tensor([[3, 14, 15, 9, 26, 5, 35, 8, 9, 7]])


@pytest.fixture(scope="module")
def target():
    return tiny_model("llama", layers=3)


def test_target_states_are_the_named_layers_then_the_final_state(target):
    H = target.config.hidden_size
    with torch.no_grad():
        out = target.base_model(input_ids=X, output_hidden_states=True)
        f = target_states(target, X, (1, 2))
        final = target_states(target, X)
    assert f.shape == (1, X.shape[1], 3 * H)
    torch.testing.assert_close(final, out.last_hidden_state)
    torch.testing.assert_close(f[..., -H:], out.last_hidden_state)
    torch.testing.assert_close(f[..., :H], out.hidden_states[1])
    torch.testing.assert_close(f[..., H:2 * H], out.hidden_states[2])
    # index i is the state after decoder layer i: index 0 holds the embeddings, one more than the layers
    assert len(out.hidden_states) == target.config.num_hidden_layers + 1
    torch.testing.assert_close(out.hidden_states[0], target.get_input_embeddings()(X))


@pytest.mark.parametrize("start", ["cold", "warm"])
def test_a_draft_reading_more_layers_starts_as_the_final_state_draft(target, start):
    """fc_layers starts at zero and the random init skips it: same seed, same draft, same predictions."""
    if start == "cold":
        base = build_feature_draft(target, torch.arange(VOCAB_SIZE), seed=2)
        multi = build_feature_draft(target, torch.arange(VOCAB_SIZE), seed=2, target_layers=(1, 2))
    else:
        from dynatree_core.drafters.draft_model import build_draft_from_target

        draft = build_draft_from_target(target, torch.arange(VOCAB_SIZE), num_layers=2, device="cpu")
        base = feature_draft_from_model_draft(draft, target)
        multi = feature_draft_from_model_draft(draft, target, (1, 2))
        with torch.no_grad():  # a feature path that is in use, the same in both
            for m in (base, multi):
                m.fc_feat.weight.copy_(0.05 * torch.eye(target.config.hidden_size))
    shared = dict(base.named_parameters())
    for name, p in multi.named_parameters():
        if name in shared:
            torch.testing.assert_close(p, shared[name], rtol=0, atol=0)
        else:
            assert name.startswith(("fc_layers.", "layer_norms.")), name
    assert not multi.fc_layers.weight.any()
    with torch.no_grad():
        a = unrolled_forward(base, X, target_states(target, X), 3)
        b = unrolled_forward(multi, X, target_states(target, X, (1, 2)), 3)
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, rtol=0, atol=0)


def test_target_layers_are_checked(target):
    H = target.config.hidden_size
    kw = dict(hidden_size=H, num_heads=4, num_kv_heads=2, head_dim=H // 4, intermediate_size=2 * H,
              vocab_size=VOCAB_SIZE)
    assert FeatureDraftConfig(**kw, target_layers=[1, 2]).target_layers == (1, 2)  # JSON lists read back
    assert FeatureDraftConfig(**kw, target_layers=(1, 2)).feature_width == 3 * H
    for bad in ((0,), (2, 1), (1, 1), (True,)):
        with pytest.raises(ValueError, match="target_layers"):
            FeatureDraftConfig(**kw, target_layers=bad)
    with pytest.raises(ValueError, match="the target has 3 layers"):
        check_feature_target(FeatureDraftConfig(**kw, target_layers=(3,)), target)


def test_a_saved_multi_layer_draft_loads_with_its_layers(target, tmp_path):
    model = build_feature_draft(target, torch.arange(VOCAB_SIZE), seed=1, target_layers=(2,))
    with torch.no_grad():
        model.fc_layers.weight.normal_(0, 0.1)
    save_feature_draft(model, tmp_path, dtype=torch.float32)
    loaded = load_feature_draft(tmp_path, target)
    assert loaded.config.target_layers == (2,)
    f = target_states(target, X, (2,))
    with torch.no_grad():
        torch.testing.assert_close(loaded.reduce(f), model.reduce(f))


def test_the_drafter_refuses_target_states_of_the_wrong_width(target):
    model = build_feature_draft(target, torch.arange(VOCAB_SIZE), seed=1, target_layers=(1,))
    d = FeatureDrafter(model)
    ids = X[0].tolist()
    with torch.no_grad():
        final = target_states(target, X)[0]
        both = target_states(target, X, (1,))[0]
    with pytest.raises(ValueError, match=r"after layers \[1\]"):
        d.start(ids, DraftContext(top_k=2), final[:-1])
    d.start(ids, DraftContext(top_k=2), both[:-1])  # the right width
    assert d.pending_feats.shape == (len(ids) - 1, target.config.hidden_size)


def test_stored_features_serve_drafts_reading_fewer_layers(tmp_path):
    from dynatree_core.distill.feature import FeatureRows

    H, n = 4, 5
    blocks = [torch.full((n, H), float(v)) for v in (1, 2, 9)]  # layers 1 and 2, then the final state
    torch.save({"tokens": torch.arange(n, dtype=torch.int32), "features": torch.cat(blocks, -1).half(),
                "labels": torch.arange(n, dtype=torch.int32), "lens": torch.tensor([n]),
                "layers": torch.tensor([1, 2])}, tmp_path / "feat_00000.pt")
    assert FeatureRows(tmp_path, layers=(1, 2)).rows[0][1].shape == (n, 3 * H)
    assert FeatureRows(tmp_path, layers=(2,)).rows[0][1][0].tolist() == [2.0] * H + [9.0] * H
    assert FeatureRows(tmp_path).rows[0][1][0].tolist() == [9.0] * H
    with pytest.raises(ValueError, match="holds target layers"):
        FeatureRows(tmp_path, layers=(3,))


def test_training_labels_come_from_the_final_state(target):
    """With fc_layers at zero, the loss and agreement equal the final-state draft's on the same rows."""
    from dynatree_core.distill.feature import feature_loss

    base = build_feature_draft(target, torch.arange(VOCAB_SIZE), seed=3)
    multi = build_feature_draft(target, torch.arange(VOCAB_SIZE), seed=3, target_layers=(1,))
    with torch.no_grad():
        y = target(input_ids=X).logits.argmax(-1)
        m = torch.ones_like(X, dtype=torch.bool)
        w = target.get_output_embeddings().weight.float()
        lut = torch.arange(VOCAB_SIZE)
        a = feature_loss(base, X, target_states(target, X), y, m, 3, 0.5, 0.1, w, lut)
        b = feature_loss(multi, X, target_states(target, X, (1,)), y, m, 3, 0.5, 0.1, w, lut)
    torch.testing.assert_close(a[0], b[0])
    assert a[1] == b[1]


def test_distill_option_target_layers_is_checked():
    from dynatree_core.distill.config import DistillConfig
    from dynatree_core.distill.feature import target_layers

    assert target_layers(DistillConfig(kind="feature", target_layers="4,15")) == (4, 15)
    assert target_layers(Namespace(target_layers="")) == ()
    for bad in ("15,4", "0", "a"):
        with pytest.raises(ValueError, match="--target-layers"):
            DistillConfig(kind="feature", target_layers=bad)
    with pytest.raises(ValueError, match="--target-layers is for a feature draft"):
        DistillConfig(kind="model", target_layers="4")

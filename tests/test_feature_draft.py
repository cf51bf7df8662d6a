"""The feature drafter: exact with every method, fed the right target states, trained the way it
decodes, and loaded only for the target it was built for."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynatree_core import generate
from dynatree_core.policy.config import DynaTreeConfig, GrowthRule
from dynatree_core.runtime.tree.tree import DeviceTree
from dynatree_core.drafters import DraftContext, FeatureDrafter, LookupMix, ModelDrafter, make_drafter
from dynatree_core.drafters.feature_draft import (FEATURE_CONFIG_FILE, FEATURE_WEIGHTS_FILE, FeatureDraftModel,
                                         build_feature_draft, load_feature_draft, save_feature_draft,
                                         unrolled_mask)
from dynatree_core.pairs.pair import ModelPair
from dynatree_core.pairs.tiny import VOCAB_SIZE, char_tokenizer, tiny_model

from helpers import assert_decodes, cached_target, reference_greedy
from helpers.exactness import ATTNS, EDGE_CONFIGS, method_configs, prompts
from helpers.features import _feature_args, _seqs_dir, check_session_regrow, feature_pair, greedy, learnable_target, target_greedy


# ----------------------------------------------------------------------------- exactness

@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attn=st.sampled_from(ATTNS), head_seed=st.sampled_from([0, 1, 3]), target_seed=st.sampled_from([0, 7]),
       mc=method_configs, prompt=prompts, n=st.integers(0, 24))
def test_feature_drafter_is_exact_with_every_method(attn, head_seed, target_seed, mc, prompt, n):
    method, config = mc
    assert_decodes(feature_pair(attn, head_seed, target_seed), prompt, method, config, n,
                   target_greedy(attn, target_seed, prompt, n))


@pytest.mark.parametrize("attn", ATTNS)
@pytest.mark.parametrize("method,config", EDGE_CONFIGS)
def test_feature_drafter_edge_configs_are_exact(attn, method, config):
    pair = feature_pair(attn, 1)
    for prompt in ((5, 9, 2, 33, 7), (11,)):  # a one-token prompt has no target feature yet
        res = generate(pair, list(prompt), method, config, max_new_tokens=30, ignore_eos=True)
        assert res.tokens == reference_greedy("llama", attn, prompt, 30)


def _accepted_tokens(trace) -> list[tuple[int, int]]:
    """(output index, token) of every token committed as part of an accepted path."""
    out, pos = [], 0
    for rec in trace:
        for k, t in enumerate(rec.committed):
            if k < rec.accepted_length:
                out.append((pos + k, t))
        pos += len(rec.committed)
    return out


def test_feature_drafter_stops_at_an_eos_inside_an_accepted_path():
    pair = feature_pair("sdpa", 1)
    cases = 0
    for prompt in ([5, 9, 2, 33, 7], [40, 41, 3, 12, 60, 22], [8, 8, 19, 27], [61, 2, 50, 17, 33, 9, 4]):
        ref = reference_greedy("llama", "sdpa", tuple(prompt), 40)
        run = generate(pair, prompt, "dynatree", DynaTreeConfig(), max_new_tokens=40, ignore_eos=True, trace=True)
        # EOS ids whose first occurrence in the output is a token of an accepted path
        for i, eos in [(i, t) for i, t in _accepted_tokens(run.trace) if ref.index(t) == i][:3]:
            res = generate(pair, prompt, "dynatree", DynaTreeConfig(), max_new_tokens=40, eos_token_id=eos)
            assert res.tokens == ref[: i + 1] and res.metrics.stopped_by == "eos"
            cases += 1
    assert cases >= 2, "the random feature head should get some paths accepted"


def test_target_hidden_states_handed_to_the_drafter_match_a_sequential_run(monkeypatch):
    pair = feature_pair("sdpa", 1)
    prompt = [4, 8, 15, 16, 23, 42]
    seen: list[tuple[list[int], torch.Tensor]] = []
    orig = FeatureDrafter.commit

    def spy(self, path, committed, target_hidden=None, fed=0):
        seen.append((list(committed), target_hidden.clone()))
        return orig(self, path, committed, target_hidden, fed)

    monkeypatch.setattr(FeatureDrafter, "commit", spy)
    res = generate(pair, prompt, "dynatree", DynaTreeConfig(b_min=2, b_mid=3, b_max=3), max_new_tokens=30,
                   ignore_eos=True)
    assert seen
    seq = prompt + res.tokens
    with torch.no_grad():
        full = pair.target.base_model(input_ids=torch.tensor([seq])).last_hidden_state[0]
    pos = len(prompt) - 1  # the root of the first iteration sits at the last prompt position
    for committed, hidden in seen:
        # row k is the state at the position before committed[k]: root, then the accepted path
        assert hidden.shape[0] == len(committed)
        torch.testing.assert_close(hidden, full[pos:pos + len(committed)], atol=1e-5, rtol=1e-4)
        assert seq[pos + 1:pos + 1 + len(committed)] == committed
        pos += len(committed)


# ----------------------------------------------------------------------------- training = decoding

def test_unrolled_training_forward_equals_the_drafter_on_a_tree_path():
    """Step s of the unrolled training forward computes exactly what a depth s-1 tree node gets."""
    from dynatree_core.drafters.feature_draft import unrolled_forward

    pair = feature_pair("sdpa", 3)
    model, target = pair.draft, pair.target
    x = torch.tensor([[3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 3]])
    with torch.no_grad():
        f = target.base_model(input_ids=x).last_hidden_state
        outs = unrolled_forward(model, x, f, 3)
    ids = x[0].tolist()
    for r in (3, 6):  # root at position r
        d = FeatureDrafter(model)
        d.start(ids[:r + 1], DraftContext(top_k=2), f[0, :r])
        tree = DeviceTree(ids[r], GrowthRule.chain(2), 2, torch.device("cpu"))
        d.propose(tree, torch.tensor([0]), level=0)
        torch.testing.assert_close(d.feats[0], outs[0][0, r - 1], atol=1e-5, rtol=1e-4)
        for depth in (1, 2):  # the true continuation as a chain under the root
            tree.tokens[depth], tree.parents[depth], tree.depths[depth] = ids[r + depth], depth - 1, depth
            tree.ancestors[depth] = tree.ancestors[depth - 1]
            tree.ancestors[depth, depth] = True
            tree.n = depth + 1
            d.propose(tree, torch.tensor([depth]), level=depth)
            torch.testing.assert_close(d.feats[depth], outs[depth][0, r + depth - 1], atol=1e-5, rtol=1e-4)


def test_unrolled_mask_matches_tree_ancestry():
    m = unrolled_mask(6, 3)
    # step 3 at position j=4: step-1 keys up to 2, step-2 key at 3, itself (step 3, position 4)
    row = m[4]
    assert row[:6].tolist() == [True, True, True, False, False, False]
    assert row[6:12].tolist() == [False, False, False, True, False, False]
    assert row[12:18].tolist() == [False, False, False, False, True, False]
    assert unrolled_mask(5, 1).equal(torch.tril(torch.ones(5, 5, dtype=torch.bool)))


@functools.lru_cache(maxsize=None)
def _trained(tmp: str) -> tuple[FeatureDraftModel, dict]:
    from dynatree_core.distill.feature import build_features, train_feature

    target = learnable_target()
    work = Path(tmp) / "work"
    _seqs_dir(work, target)
    args = _feature_args(work, Path(tmp) / "draft")
    build_features(args, target)
    model = train_feature(args, target)
    return model, json.loads((work / "train_meta.json").read_text())


_TMP: list[str] = []


def trained_tiny_feature_draft() -> FeatureDraftModel:
    import tempfile

    if not _TMP:
        _TMP.append(tempfile.mkdtemp(prefix="dynatree-feature-"))
    return _trained(_TMP[0])[0]


def test_distill_feature_pipeline_learns_and_exports(tmp_path):
    from dynatree_core.distill.feature import FeatureRows, val_accuracy

    model = trained_tiny_feature_draft()
    meta = _trained(_TMP[0])[1]
    out = Path(_TMP[0]) / "draft"
    assert (out / FEATURE_WEIGHTS_FILE).is_file() and (out / FEATURE_CONFIG_FILE).is_file()
    info = json.loads((out / FEATURE_CONFIG_FILE).read_text())
    assert info["metadata"]["steps_done"] == 150 and info["metadata"]["unroll"] == 3
    # it learned: agreement on held-out rows far above the untrained head's, at every unrolled depth
    target = learnable_target()
    rows = FeatureRows(Path(_TMP[0]) / "work" / "features", val_rows=16).val
    lut = torch.arange(VOCAB_SIZE)
    fresh = build_feature_draft(target, torch.arange(VOCAB_SIZE), seed=0)
    before = val_accuracy(fresh, rows, 3, lut, "cpu")
    after = meta["val_acc_by_step"]
    assert all(a > b + 0.3 for a, b in zip(after, before)), (before, after)
    # the export reloads to the same predictions (fp16 storage: close, not bitwise)
    loaded = load_feature_draft(out, target)
    x = torch.tensor([[3, 14, 15, 9, 26, 5]])
    with torch.no_grad():
        f = target.base_model(input_ids=x).last_hidden_state
        a = model(x, f, torch.arange(6)[None])[0]
        b = loaded(x, f, torch.arange(6)[None])[0]
    torch.testing.assert_close(a, b, atol=2e-2, rtol=2e-2)


def test_trained_feature_draft_beats_an_untrained_one_in_tokens_per_iteration():
    target = learnable_target()
    prompt = [7, 3, 9, 12, 30]
    ref = greedy(target, prompt, 60)
    runs = {}
    for name, draft in (("fresh", build_feature_draft(target, torch.arange(VOCAB_SIZE), seed=0)),
                        ("trained", trained_tiny_feature_draft())):
        pair = ModelPair(target=target, draft=draft)
        r = generate(pair, prompt, "dynatree", DynaTreeConfig(), max_new_tokens=60, ignore_eos=True)
        assert r.tokens == ref
        runs[name] = r.metrics.tokens_per_iteration
    assert runs["trained"] > runs["fresh"] + 0.5, runs


# ----------------------------------------------------------------------------- loading and bad input

def _saved(tmp_path: Path) -> Path:
    target = cached_target("llama", "sdpa")
    d = build_feature_draft(target, torch.arange(VOCAB_SIZE), seed=0)
    return save_feature_draft(d, tmp_path / "fd", tokenizer=char_tokenizer())


def test_feature_draft_for_another_target_is_refused_at_load(tmp_path):
    path = _saved(tmp_path)
    wider = tiny_model("llama", hidden=48)
    with pytest.raises(ValueError, match="hidden size 32.*hidden_size is 48"):
        load_feature_draft(path, wider)
    other_vocab = tiny_model("llama", vocab_size=VOCAB_SIZE + 6)
    with pytest.raises(ValueError, match="vocab_size"):
        load_feature_draft(path, other_vocab)
    with pytest.raises(ValueError, match="Llama-family target.*gpt_neox"):
        load_feature_draft(path, tiny_model("gpt_neox"))


def test_feature_draft_with_another_tokenizer_is_refused(tmp_path):
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models

    path = _saved(tmp_path)
    vocab = {f"t{i}": i for i in range(VOCAB_SIZE)}
    other = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0")))
    with pytest.raises(ValueError, match="another tokenizer"):
        load_feature_draft(path, cached_target("llama", "sdpa"), tokenizer=other)
    load_feature_draft(path, cached_target("llama", "sdpa"), tokenizer=char_tokenizer())  # its own: fine


def test_missing_or_corrupt_feature_weights_fail_clearly(tmp_path):
    path = _saved(tmp_path)
    target = cached_target("llama", "sdpa")
    (path / FEATURE_WEIGHTS_FILE).write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="corrupt"):
        load_feature_draft(path, target)
    (path / FEATURE_WEIGHTS_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="weights missing"):
        load_feature_draft(path, target)
    (path / FEATURE_CONFIG_FILE).write_text("{nope")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_feature_draft(path, target)


def test_model_pair_refuses_a_feature_draft_on_a_non_llama_target():
    draft = build_feature_draft(cached_target("llama", "sdpa"), torch.arange(VOCAB_SIZE))
    with pytest.raises(ValueError, match="Llama-family"):
        ModelPair(target=cached_target("gpt_neox", "sdpa"), draft=draft)


def test_from_pretrained_takes_a_feature_draft_directory(tmp_path):
    target = cached_target("llama", "sdpa")
    target.save_pretrained(tmp_path / "target")
    char_tokenizer().save_pretrained(tmp_path / "target")
    fd = _saved(tmp_path)
    pair = ModelPair.from_pretrained(str(tmp_path / "target"), str(fd), device="cpu")
    assert pair.drafter_kind == "feature"
    prompt = [5, 9, 2, 33]
    res = generate(pair, prompt, "dynatree", DynaTreeConfig(), max_new_tokens=12, ignore_eos=True, trace=True)
    assert res.tokens == reference_greedy("llama", "sdpa", tuple(prompt), 12)
    assert res.trace.drafter["kind"] == "feature" and res.trace.drafter_kind == "feature"


def test_make_drafter_picks_the_drafter_by_draft_kind():
    target = cached_target("llama", "sdpa")
    assert isinstance(make_drafter(build_feature_draft(target, torch.arange(VOCAB_SIZE))), FeatureDrafter)
    assert isinstance(make_drafter(tiny_model("llama", seed=3)), ModelDrafter)
    own = ModelDrafter(tiny_model("llama", seed=3))
    assert make_drafter(own) is own  # a Drafter of one's own is used as it is
    with pytest.raises(TypeError, match="not into a Drafter of one's own"):
        make_drafter(own, LookupMix())


def test_default_pair_draft_choice_is_checked_before_loading():
    with pytest.raises(ValueError, match="draft must be one of"):
        ModelPair.default(draft="eagle")


def test_feature_session_regrow_matches_the_first_iteration_of_generate():
    check_session_regrow(feature_pair("sdpa", 1), [7, 3, 9, 12], "feature")


def test_warm_start_from_an_independent_draft_reproduces_it_then_reads_features():
    """A feature draft seeded from a Llama draft predicts exactly what that draft predicts."""
    from dynatree_core.drafters.draft_model import build_draft_from_target
    from dynatree_core.drafters.feature_draft import feature_draft_from_model_draft

    target = cached_target("llama", "sdpa")
    draft = build_draft_from_target(target, torch.arange(VOCAB_SIZE), num_layers=2, device="cpu")
    fd = feature_draft_from_model_draft(draft, target)
    assert fd.config.num_layers == 2
    x = torch.tensor([[3, 14, 15, 9, 26, 5, 35]])
    with torch.no_grad():
        f = target.base_model(input_ids=x).last_hidden_state
        # the feature draft's sequence starts at x_1 (x_0 has no previous feature)
        ref = draft(input_ids=x[:, 1:], position_ids=torch.arange(1, 7)[None]).logits[0]
        pred, _ = fd(x[:, 1:], f[:, :-1], torch.arange(1, 7)[None])
        torch.testing.assert_close(fd.logits(pred)[0], ref, atol=1e-4, rtol=1e-4)
        # and it is exact as a drafter, with any feature weights
        fd.fc_feat.weight += 0.1
    pair = ModelPair(target=target, draft=fd)
    res = generate(pair, [5, 9, 2, 33, 7], "dynatree", DynaTreeConfig(), max_new_tokens=20, ignore_eos=True)
    assert res.tokens == reference_greedy("llama", "sdpa", (5, 9, 2, 33, 7), 20)

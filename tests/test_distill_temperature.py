"""``dynatree distill --temperature T``: the soft loss is KL(p_T || q_T) over the draft's head, for the
independent and the feature draft; 1 keeps today's loss; bad values fail naming the option before any
model work; a tiny run records the temperature in the exported draft's metadata (issue 39, part 3)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest
import torch

from dynatree_core.distill.config import DistillConfig
from dynatree_core.distill.training import tempered_kl
from dynatree_core.pairs.tiny import VOCAB_SIZE, tiny_model


def _hand_kl(teacher_logits, student_logits, T):
    """KL(p_T || q_T) written out with math, one row."""
    def softmax(xs):
        e = [math.exp(x / T) for x in xs]
        return [v / sum(e) for v in e]

    p, q = softmax(teacher_logits), softmax(student_logits)
    return sum(a * math.log(a / b) for a, b in zip(p, q))


def test_the_soft_loss_at_t_is_the_kl_between_both_distributions_at_t():
    t, s = [2.0, 1.0, 0.0, -1.5], [0.5, 0.2, -1.0, 0.3]
    for T in (0.7, 1.0, 1.6):
        p = torch.softmax(torch.tensor([t]) / T, dim=-1)
        got = float(tempered_kl(p, torch.tensor([s]), T))
        assert got == pytest.approx(_hand_kl(t, s, T), rel=1e-5)
    # 0.7 by hand: p = (0.7514, 0.1806, 0.0434, 0.0051) ..., the KL is a small positive number
    assert float(tempered_kl(torch.softmax(torch.tensor([t]) / 0.7, -1), torch.tensor([t]), 0.7)) == pytest.approx(
        0.0, abs=1e-6)  # q = p: nothing to learn


def test_at_temperature_1_the_gradient_is_the_old_soft_cross_entropys_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(5, 11, generator=g), -1)
    a = torch.randn(5, 11, generator=g, requires_grad=True)
    b = a.detach().clone().requires_grad_(True)
    tempered_kl(p, a, 1.0).backward()
    (-(p * torch.log_softmax(b, dim=-1)).sum(-1).mean()).backward()
    assert torch.equal(a.grad, b.grad)


def test_the_model_draft_loss_at_alpha_1_is_the_kl_at_t():
    from dynatree_core.distill.training import _distill_loss, _draft_head_logits, _teacher_targets
    from dynatree_core.distill.runtime import head_lut
    from dynatree_core.drafters.draft_model import build_draft_from_target

    target = tiny_model("llama", hidden=64)
    head = torch.arange(2, VOCAB_SIZE, 3)
    draft = build_draft_from_target(target, head, num_layers=1)
    x = torch.tensor([[3, 14, 15, 9, 26, 5], [2, 7, 18, 28, 1, 8]])
    m = torch.ones_like(x, dtype=torch.bool)
    m[1, 4:] = False
    lut = head_lut(head, VOCAB_SIZE, "cpu")
    greedy, probs = _teacher_targets(target, x, m, head, temperature=0.7)
    loss, _ = _distill_loss(draft, x, m, greedy, probs, lut, alpha=1.0, temperature=0.7)
    with torch.no_grad():
        t_logits = target(input_ids=x).logits[m][:, head].tolist()
        d_logits = _draft_head_logits(draft, x, m).tolist()
    want = sum(_hand_kl(t, d, 0.7) for t, d in zip(t_logits, d_logits)) / len(t_logits)
    assert float(loss.detach()) == pytest.approx(want, rel=1e-4)


def test_the_feature_draft_loss_at_alpha_1_is_the_kl_at_t():
    from dynatree_core.distill.feature import feature_loss, step_valid
    from dynatree_core.drafters.feature_draft import build_feature_draft, unrolled_forward

    target = tiny_model("llama", hidden=64)
    head = torch.arange(VOCAB_SIZE)
    model = build_feature_draft(target, head, seed=0)
    x = torch.tensor([[3, 14, 15, 9, 26, 5, 7]])
    with torch.no_grad():
        f = target.base_model(input_ids=x).last_hidden_state
        y = target(input_ids=x).logits.argmax(-1)
    m = torch.ones_like(x, dtype=torch.bool)
    w = target.get_output_embeddings().weight.detach()
    loss, _ = feature_loss(model, x, f, y, m, 1, 1.0, 0.0, w, head, temperature=0.7)
    with torch.no_grad():
        v = step_valid(m, 1)
        d_logits = model.head.forward_compact(unrolled_forward(model, x, f, 1)[0])[v].tolist()
        t_logits = (f[:, 1:] @ w.T)[v].tolist()
    want = sum(_hand_kl(t, d, 0.7) for t, d in zip(t_logits, d_logits)) / len(t_logits)
    assert float(loss.detach()) == pytest.approx(want, rel=1e-4)


@pytest.mark.parametrize("bad", [0, -0.7, float("nan"), float("inf"), True])
def test_a_bad_temperature_fails_naming_the_option(bad):
    with pytest.raises(ValueError, match="--temperature must be a finite number > 0"):
        DistillConfig(temperature=bad)


def test_the_command_line_rejects_a_bad_temperature_before_loading_any_model(monkeypatch):
    from dynatree_core.distill import cli

    def boom(*a, **k):  # pragma: no cover - reached only if validation came too late
        raise AssertionError("a model loaded before the options were checked")

    monkeypatch.setattr("dynatree_core.distill.pipeline.run_distill", boom)
    p = argparse.ArgumentParser()
    cli.add_distill_args(p)
    with pytest.raises(ValueError, match="--temperature"):
        cli._run(p.parse_args(["--temperature", "-1"]))
    args = p.parse_args(["--temperature", "0.7"])
    assert args.temperature == 0.7 and args.gen_temperature == 0.8 and DistillConfig().temperature == 1.0
    with pytest.raises(ValueError, match="--gen-temperature"):
        DistillConfig(gen_temperature=0)


def test_a_tiny_model_draft_run_at_t_completes_and_records_it(tmp_path):
    from dynatree_core.distill.data import _save_seqs
    from dynatree_core.distill.training import train

    target = tiny_model("llama", hidden=64)
    g = torch.Generator().manual_seed(0)
    (tmp_path / "work" / "seqs").mkdir(parents=True)
    rows = [(torch.randint(2, VOCAB_SIZE, (24,), generator=g).tolist(), 8) for _ in range(40)]
    _save_seqs(tmp_path / "work" / "seqs" / "p_00000.pt", rows, "prompt")
    cfg = DistillConfig(work_dir=str(tmp_path / "work"), out_dir=str(tmp_path / "draft"), device="cpu", steps=3,
                        batch_tokens=96, head_size=16, layers=1, warmup=1, val_rows=2, log_every=1, ckpt_every=100,
                        train_bf16=False, temperature=0.7, alpha=1.0, command_line="test --temperature 0.7")
    train(cfg, target=target)
    meta = json.loads((tmp_path / "draft" / "draft_config.json").read_text())["metadata"]
    assert meta["temperature"] == 0.7 and meta["alpha"] == 1.0 and meta["steps_done"] == 3


def test_a_tiny_feature_draft_run_at_t_completes_and_records_it(tmp_path):
    from helpers.features import _feature_args, _seqs_dir, learnable_target

    from dynatree_core.distill.feature import build_features, train_feature
    from dynatree_core.drafters.feature_draft import FEATURE_CONFIG_FILE

    target = learnable_target()
    work, out = tmp_path / "work", tmp_path / "draft"
    _seqs_dir(work, target, n_rows=40)
    args = _feature_args(work, out, steps=3, val_rows=4, temperature=0.7)
    build_features(args, target)
    train_feature(args, target)
    meta = json.loads((out / FEATURE_CONFIG_FILE).read_text())["metadata"]
    assert meta["temperature"] == 0.7 and meta["steps_done"] == 3

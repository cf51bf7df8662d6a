"""Feature-draft test pairs and references: the tiny feature pairs, target greedy decoding, session regrow
checks, distillation arguments."""

from __future__ import annotations

import functools
from argparse import Namespace
from pathlib import Path
import torch
from dynatree_core import generate
from dynatree_core.policy.config import FixedTreeConfig
from dynatree_core.drafters.feature_draft import build_feature_draft
from dynatree_core.pairs.pair import ModelPair
from dynatree_core.pairs.tiny import VOCAB_SIZE, tiny_model
from helpers import cached_target, reference_greedy


@functools.lru_cache(maxsize=None)
def llama_target(attn: str, seed: int) -> torch.nn.Module:
    return cached_target("llama", attn) if seed == 0 else tiny_model("llama", seed=seed, attn=attn, layers=3)


@functools.lru_cache(maxsize=None)
def target_greedy(attn: str, seed: int, prompt: tuple[int, ...], n: int) -> list[int]:
    if seed == 0:
        return reference_greedy("llama", attn, prompt, n)
    return greedy(llama_target(attn, seed), list(prompt), n) if n else []


@functools.lru_cache(maxsize=None)
def feature_pair(attn: str, head_seed: int, target_seed: int = 0) -> ModelPair:
    """A tiny random Llama target with a random feature head (head seed 0: the plain random init)."""
    target = llama_target(attn, target_seed)
    draft = build_feature_draft(target, torch.arange(VOCAB_SIZE), seed=head_seed)
    if head_seed:
        perturb_(draft, head_seed, 0.05 * head_seed, skip=("embed.",))
    return ModelPair(target=target, draft=draft, target_name="tiny-llama", draft_name=f"feature-{head_seed}")


@functools.lru_cache(maxsize=None)
def agreeing_feature_pair(feature_scale: float = 0.02) -> ModelPair:
    """A feature draft that is the tiny Llama target itself (warm-started as an independent draft with a
    full sparse head), its feature path nudged by ``feature_scale`` noise so that what it reads
    matters: paths get accepted, and a tree's scores depend on its features."""
    from dynatree_core.drafters.draft_model import SparseLMHead
    from dynatree_core.drafters.feature_draft import feature_draft_from_model_draft
    from dynatree_core.pairs.tiny_models import noisy_copy

    target = llama_target("sdpa", 0)
    copy = noisy_copy(target, 0.0)
    copy.lm_head = SparseLMHead(target.config.hidden_size, torch.arange(VOCAB_SIZE), VOCAB_SIZE,
                                weight=copy.lm_head.weight.detach())
    draft = feature_draft_from_model_draft(copy, target)
    perturb_(draft.fc_feat, 3, feature_scale)
    return ModelPair(target=target, draft=draft, target_name="tiny-llama", draft_name=f"feature-copy-{feature_scale}")


def perturb_(module: torch.nn.Module, seed: int, scale: float, skip: tuple[str, ...] = ()) -> None:
    """Add ``scale`` * N(0, 1) noise in place to every parameter whose name starts with none of ``skip``.
    The noise comes from a CPU generator seeded with ``seed``, so every device gets the same numbers (a CUDA
    run tests the drafts a CPU run tests), and is moved to each parameter's device and dtype: a CPU tensor
    added to a CUDA parameter is a device error (the H200 run of 2026-11-28, docs/gpu/2026-11-28-h200)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in module.named_parameters():
            if not n.startswith(skip):
                p.add_((scale * torch.randn(p.shape, generator=g)).to(p.device, p.dtype))


@functools.lru_cache(maxsize=None)
def learnable_target() -> torch.nn.Module:
    """A tiny Llama whose greedy behaviour a one-layer draft can learn from a few thousand tokens
    (small init: a smooth function; the default tiny targets are close to random hashes)."""
    return tiny_model("llama", layers=1, init_range=0.05, seed=5)


def greedy(target, prompt: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = target.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=n, min_new_tokens=n,
                              eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def _seqs_dir(tmp: Path, target, n_rows: int = 300, length: int = 40, seed: int = 0) -> Path:
    """Target-written sequences in the data stage's shard format."""
    from dynatree_core.distill.data import _save_seqs

    g = torch.Generator().manual_seed(seed)
    sdir = tmp / "seqs"
    sdir.mkdir(parents=True)
    p = torch.randint(2, VOCAB_SIZE, (n_rows, 8), generator=g)
    with torch.no_grad():  # equal-length prompts: one batched greedy run, no padding
        out = target.generate(p, do_sample=False, max_new_tokens=length - 8, min_new_tokens=length - 8,
                              eos_token_id=None, pad_token_id=0)
    rows = [(r.tolist(), 8) for r in out]
    _save_seqs(sdir / "p_00000.pt", rows, "prompt")
    _save_seqs(sdir / "text_00000.pt", [(torch.randint(2, VOCAB_SIZE, (30,), generator=g).tolist(), 0)], "text")
    return sdir


def _feature_args(work: Path, out: Path, **kw) -> Namespace:
    base = dict(work_dir=str(work), out_dir=str(out), max_len=64, feature_text_tokens=30, seed=0,
                feature_batch_tokens=2048, teacher_dtype="float32", device="cpu", val_rows=16, head_size=VOCAB_SIZE,
                lr=1e-2, weight_decay=0.0, warmup=10, time_limit=0, export_reserve=0, steps=150, min_lr_frac=0.05,
                batch_tokens=1200, micro_tokens=0, layers=1, init_from=None, warm_lr_frac=0.25, train_bf16=False, unroll=3, alpha=0.5, reg_weight=0.5,
                log_every=1000, command_line="test")
    base.update(kw)
    return Namespace(**base)


def check_session_regrow(pair: ModelPair, prompt: list[int], kind: str) -> None:
    """A TreeSession's regrown tree (twice: the drafter is forked each time) equals the first
    iteration of ``generate``: tokens, parents and the target's choices."""
    from dynatree_core.engine.session import TreeSession

    cfg = FixedTreeConfig(d=3, b=2, tau=0.0)
    run = generate(pair, prompt, "fixed_tree", cfg, max_new_tokens=10, ignore_eos=True, trace=True)
    session = TreeSession(pair, prompt)
    assert session.drafter_kind == kind
    for _ in range(2):
        tree, argmax = session.regrow(cfg.growth_rule())
        first = run.trace[0]
        assert tree.tokens == first.tree.tokens and tree.parents == first.tree.parents
        assert argmax == first.target_argmax

"""``verify="rejection"`` keeps the target's distribution: a chi-square test that can fail.

On a tiny Llama with a 4-token vocabulary the exact distribution of the first three sampled tokens is
enumerated (64 sequences, from the target's warped p at each prefix). 20,000 seeded runs of linear
speculative sampling, a fixed tree and DynaTree, each with a draft that disagrees often (so that
rejections and residual draws happen), must match it: Pearson's chi-square over the sequences
(cells expected fewer than 5 times merged) stays below the critical value at alpha = 1e-4. The
seeds are fixed, so the test is deterministic; the threshold is the statistics, not a tuned number.

The test can fail: with a deliberately wrong residual (after a rejection, draw from p again
instead of from norm((p - q)+)) the same statistic is far above the threshold.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch

from dynatree_core import generate
from dynatree_core.pairs.pair import ModelPair
from dynatree_core.pairs.tiny import noisy_copy, tiny_model
from dynatree_core.policy.config import DynaTreeConfig, FixedTreeConfig, LinearConfig
from dynatree_core.policy.sampling import SamplingConfig, warp_probs
from dynatree_core.runtime import sampling as device_sampling

V = 4
PROMPT = [2]
TOKENS = 3
RUNS = 20_000
CFG = SamplingConfig(temperature=1.0, verify="rejection")
#: alpha of the test and its standard normal quantile (one-sided)
ALPHA, Z = 1e-4, 3.719


def chi2_critical(dof: int) -> float:
    """The chi-square quantile 1 - ALPHA (Wilson-Hilferty: accurate to < 1% from a few degrees of freedom)."""
    return dof * (1 - 2 / (9 * dof) + Z * math.sqrt(2 / (9 * dof))) ** 3


@functools.lru_cache(maxsize=None)
def pair() -> ModelPair:
    target = tiny_model("llama", seed=3, layers=1, hidden=16, vocab_size=V, init_range=0.3)
    return ModelPair(target=target, draft=noisy_copy(target, 0.6, seed=4), target_name="tiny-v4",
                     draft_name="tiny-v4-noisy")


@functools.lru_cache(maxsize=None)
def exact() -> dict[tuple[int, ...], float]:
    """P(first three tokens = s) for every s, from the target's warped p at each prefix."""
    model = pair().target

    @functools.lru_cache(maxsize=None)
    def p_next(prefix: tuple[int, ...]) -> np.ndarray:
        with torch.inference_mode():
            logits = model(torch.tensor([list(prefix)])).logits[0, -1].double().numpy()
        return warp_probs(logits, CFG)

    out = {(): 1.0}
    for _ in range(TOKENS):
        out = {s + (t,): p * p_next(tuple(PROMPT) + s)[t] for s, p in out.items() for t in range(V)}
    return out


def chi2(counts: dict[tuple[int, ...], int], runs: int) -> tuple[float, int]:
    """Pearson's statistic over the sequences (those expected < 5 times pooled into one cell) and its
    degrees of freedom."""
    cells, pooled_obs, pooled_exp = [], 0, 0.0
    for seq, p in exact().items():
        if runs * p >= 5:
            cells.append((counts.get(seq, 0), runs * p))
        else:
            pooled_obs, pooled_exp = pooled_obs + counts.get(seq, 0), pooled_exp + runs * p
    if pooled_exp > 0:
        cells.append((pooled_obs, pooled_exp))
    return sum((o - e) ** 2 / e for o, e in cells), len(cells) - 1


def sample(method: str, config, runs: int) -> dict[tuple[int, ...], int]:
    counts: dict[tuple[int, ...], int] = {}
    for seed in range(runs):
        res = generate(pair(), PROMPT, method, config, max_new_tokens=TOKENS, ignore_eos=True,
                       temperature=CFG.temperature, verify="rejection", seed=seed)
        counts[tuple(res.tokens)] = counts.get(tuple(res.tokens), 0) + 1
    return counts


METHODS = [
    ("linear", LinearConfig(k=2)),  # Leviathan's chain: one sampled draft token per step
    ("fixed_tree", FixedTreeConfig(d=2, b=2, tau=0.0, n_max=6)),  # two candidates per node, without replacement
    # confidence-dependent breadth (1 or 2 of the 2 drawn), depth gated by p(u)
    ("dynatree", DynaTreeConfig(d0=1, d_max=2, b_min=1, b_mid=2, b_max=2, tau_h=0.6, tau_l=0.3, tau=0.0,
                                rho_stop=0.05, rho_deep=0.2, n_max=6)),
]


def test_the_tiny_setting_exercises_rejections():
    """The draft disagrees often enough that residual draws happen (else the test would prove little)."""
    res = generate(pair(), PROMPT, "linear", LinearConfig(k=2), max_new_tokens=60, ignore_eos=True, trace=True,
                   temperature=1.0, verify="rejection", seed=0)
    ranks = [r for rec in res.trace for i, r in enumerate(rec.sampling["accepted_rank"]) if r != -2]
    assert ranks.count(-1) >= 5 and any(r >= 0 for r in ranks)
    assert 0.999 < sum(exact().values()) < 1.001


@pytest.mark.parametrize("method,config", METHODS, ids=[m for m, _ in METHODS])
def test_rejection_sampling_matches_the_targets_distribution(method, config):
    stat, dof = chi2(sample(method, config, RUNS), RUNS)
    assert dof >= 10  # enough distinct sequences for the test to mean something
    assert stat < chi2_critical(dof), f"{method}: chi2 {stat:.1f} with {dof} degrees of freedom"


def test_a_wrong_residual_fails_the_same_test(monkeypatch):
    """After a rejection, drawing from p again (instead of from norm((p - q)+)) over-weights the
    tokens the draft proposes: the statistic must exceed the threshold."""
    monkeypatch.setattr(device_sampling, "residual", lambda p, q: p)
    stat, dof = chi2(sample(*METHODS[0], 5_000), 5_000)
    assert stat > chi2_critical(dof), f"a wrong residual went unnoticed: chi2 {stat:.1f}, {dof} dof"

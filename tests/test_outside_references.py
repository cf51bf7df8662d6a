"""Sampling under ``verify="match"`` against a reference outside the engine: the target's exact distribution.

The engine's other sampling tests compare its decoders with its own seeded AR; if AR drew wrongly (the
warpers in the wrong order, the Gumbel draw on the wrong scores) they would all agree and all pass. Here
the reference is computed from nothing of the engine: a held-out tiny Qwen2 (an architecture the
engine's tiny models do not use; 8 tokens, untied head), its logits from a plain forward of the whole
prefix (no cache, no tree), warped by transformers' own warpers in float64, give the exact probability
of every pair of first two tokens after the prompt.

The warper convention (Hugging Face's ``generate(do_sample=True)``, and the engine's promise): at every
step p = softmax(top_p(top_k(logits / T))), where top_k keeps the k largest scores (-inf elsewhere) and
top_p, on what top_k left, drops the tokens whose cumulative probability in ascending order is at most
1 - P (the most probable token always stays).

Seeded runs (500 per setting for AR, 300 per decoder case) of the engine's AR and of every decoder
(linear, fixed tree, DynaTree, EAGLE-2) under ``match``, with the drafts ranked with the target's noise
(``draft_noise="shared"``) and without it (``"none"``), under temperature alone, top-k and top-p, must
match that distribution: Pearson's chi-square over the 64 sequences (cells expected fewer than 5 times
pooled) below its critical value at alpha = 1e-4 (seeds fixed: deterministic). The draft is a noisy
copy of the target, so trees are accepted in part and rejected in part. DynaTree under
``verify="rejection"`` (exact in distribution only) passes the same test.

The test can fail: the same statistic is far above the threshold for AR with temperature applied after
top-p, for AR drawing by Gumbel-max on the unwarped logits, and for a tree decoder whose nodes all read
the noise of the root's position (one Gumbel vector for two tokens: AR never sees it, one node a step),
and for rejection sampling with a wrong residual (p again after a rejection).
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter

import pytest
import torch
from transformers import (LogitsProcessorList, Qwen2Config, Qwen2ForCausalLM, TemperatureLogitsWarper,
                          TopKLogitsWarper, TopPLogitsWarper)

from dynatree_core import generate
from dynatree_core.pairs.pair import ModelPair
from dynatree_core.pairs.tiny import noisy_copy
from dynatree_core.policy.config import DynaTreeConfig, Eagle2Config, FixedTreeConfig, LinearConfig
from dynatree_core.policy.sampling import SamplingConfig
from dynatree_core.runtime import sampling as device_sampling

from helpers.stats import chi2, chi2_critical

V, PROMPT, TOKENS = 8, (3, 1), 2
#: seeded runs of AR per setting, of each decoder case, and of the subtlest wrong variant (the others: 300)
RUNS_AR, RUNS_DECODER, RUNS_WRONG = 500, 300, 600
SETTINGS = {
    "temperature": SamplingConfig(temperature=2.0),
    "top_k": SamplingConfig(temperature=0.8, top_k=4),
    "top_p": SamplingConfig(temperature=0.7, top_p=0.9),
}
DYNATREE = DynaTreeConfig(d0=1, d_max=2, b_min=1, b_mid=2, b_max=3, tau_h=0.6, tau_l=0.3, tau=0.0, rho_stop=0.05,
                          rho_deep=0.2, n_max=9)
#: (id, method, config, setting, draft noise): every decoder with both draft noises, the settings in turn
DECODERS = [(f"{m}-{noise}-{setting}", m, c, setting, noise) for (m, c), setting, noise in [
    (("linear", LinearConfig(k=2)), "temperature", "shared"), (("linear", LinearConfig(k=2)), "top_p", "none"),
    (("fixed_tree", FixedTreeConfig(d=2, b=2, tau=0.0, n_max=6)), "top_k", "shared"),
    (("fixed_tree", FixedTreeConfig(d=2, b=2, tau=0.0, n_max=6)), "temperature", "none"),
    (("dynatree", DYNATREE), "top_p", "shared"), (("dynatree", DYNATREE), "top_k", "none"),
    (("eagle2", Eagle2Config(k=3, depth=2, n_total=7)), "temperature", "shared"),
    (("eagle2", Eagle2Config(k=3, depth=2, n_total=7)), "top_p", "none")]]


@functools.lru_cache(maxsize=None)
def pair() -> ModelPair:
    """The held-out target (random weights, seed 7; scores spread enough that many sequences are
    likely) and a noisy copy as its draft."""
    config = Qwen2Config(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, max_position_embeddings=64, initializer_range=0.35,
                         tie_word_embeddings=False, attn_implementation="sdpa")
    with torch.random.fork_rng():  # the weights from seed 7, the other tests' random state untouched
        torch.manual_seed(7)
        target = Qwen2ForCausalLM(config).eval()
    return ModelPair(target=target, draft=noisy_copy(target, 0.5, seed=4), target_name="held-out-qwen2",
                     draft_name="held-out-qwen2-noisy")


def hf_warp(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """transformers' warpers in generate's order (temperature, top-k, top-p), float64; -inf outside."""
    warpers = LogitsProcessorList([TemperatureLogitsWarper(cfg.temperature)]
                                  + ([TopKLogitsWarper(cfg.top_k)] if cfg.top_k else [])
                                  + ([TopPLogitsWarper(cfg.top_p)] if cfg.top_p < 1 else []))
    return warpers(None, logits.double()[None])[0]


@functools.lru_cache(maxsize=None)
def next_logits(prefix: tuple[int, ...]) -> torch.Tensor:
    """The target's logits after ``prefix``: one plain forward of the whole prefix."""
    with torch.inference_mode():
        return pair().target(torch.tensor([list(prefix)])).logits[0, -1].double()


@functools.lru_cache(maxsize=None)
def exact(setting: str) -> dict[tuple[int, ...], float]:
    """P(first two tokens = s) for all 64 sequences s, from the warped p after each prefix."""
    cfg = SETTINGS[setting]
    out = {(): 1.0}
    for _ in range(TOKENS):
        out = {s + (t,): q * float(p_t) for s, q in out.items()
               for t, p_t in enumerate(torch.softmax(hf_warp(next_logits(PROMPT + s), cfg), -1))}
    return out


def sample(method: str, config, cfg: SamplingConfig, runs: int, iterations: Counter | None = None
           ) -> dict[tuple[int, ...], int]:
    """How often each pair of first tokens came out of ``runs`` runs with seeds 0 .. runs - 1;
    ``iterations`` counts the runs by how many iterations they took (one: the first iteration accepted
    a drafted token, so it committed both; two: its drafts were rejected at the root)."""
    counts: dict[tuple[int, ...], int] = {}
    for seed in range(runs):
        res = generate(pair(), list(PROMPT), method, config, max_new_tokens=TOKENS, ignore_eos=True,
                       sampling=dataclasses.replace(cfg, seed=seed))
        counts[tuple(res.tokens)] = counts.get(tuple(res.tokens), 0) + 1
        if iterations is not None:
            iterations[res.metrics.iterations] += 1
    return counts


def check(counts: dict[tuple[int, ...], int], runs: int, setting: str) -> tuple[float, int, float]:
    stat, dof = chi2(counts, runs, exact(setting))
    return stat, dof, chi2_critical(dof)


def test_the_reference_is_sound_and_the_settings_cut():
    """The exact distributions sum to 1; top-k and top-p remove tokens at every prefix (else they
    would not be tested), and no cumulative probability lies within 1e-3 of the top-p boundary and no
    two scores tie at the k-th (so the engine's float32 and this float64 keep the same tokens)."""
    for setting, cfg in SETTINGS.items():
        assert 0.999999 < sum(exact(setting).values()) < 1.000001
        for prefix in [PROMPT] + [PROMPT + (t,) for t in range(V)]:
            x = next_logits(prefix) / cfg.temperature
            kept = int(torch.isfinite(hf_warp(next_logits(prefix), cfg)).sum())
            if cfg.top_k:
                top = torch.sort(x, descending=True).values
                assert kept == cfg.top_k and top[cfg.top_k - 1] - top[cfg.top_k] > 1e-4
            if cfg.top_p < 1:
                cum = torch.sort(torch.softmax(x, -1)).values.cumsum(-1)
                assert 1 <= kept < V and float((cum - (1 - cfg.top_p)).abs().min()) > 1e-3
    likely = sum(p >= 5 / RUNS_DECODER for p in exact("temperature").values())
    assert likely >= 20  # enough cells for the decoders' runs to mean something


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_seeded_ar_draws_the_targets_exact_distribution(setting):
    stat, dof, critical = check(sample("ar", None, SETTINGS[setting], RUNS_AR), RUNS_AR, setting)
    print(f"ar {setting}: chi2 {stat:.1f}, {dof} dof, threshold {critical:.1f}")
    assert dof >= 10 and stat < critical, f"ar {setting}: chi2 {stat:.1f} with {dof} degrees of freedom"


@pytest.mark.parametrize("case", DECODERS, ids=[c[0] for c in DECODERS])
def test_every_decoder_under_match_draws_the_targets_exact_distribution(case):
    name, method, config, setting, noise = case
    cfg = dataclasses.replace(SETTINGS[setting], draft_noise=noise)
    iterations: Counter = Counter()
    stat, dof, critical = check(sample(method, config, cfg, RUNS_DECODER, iterations), RUNS_DECODER, setting)
    print(f"{name}: chi2 {stat:.1f}, {dof} dof, threshold {critical:.1f}; runs by iterations {dict(iterations)}")
    # verification at work: one run in twenty or more accepted a drafted token, and as many had it rejected
    assert min(iterations[1], iterations[2]) >= RUNS_DECODER // 20, iterations
    assert dof >= 8 and stat < critical, f"{name}: chi2 {stat:.1f} with {dof} degrees of freedom"


#: verify="rejection" against the same reference: DynaTree (up to three candidates per node) under top-k
REJECTION = ("dynatree", DYNATREE, "top_k")


def rejection_counts(runs: int) -> dict[tuple[int, ...], int]:
    method, config, setting = REJECTION
    return sample(method, config, dataclasses.replace(SETTINGS[setting], verify="rejection"), runs)


def test_rejection_sampling_draws_the_targets_exact_distribution():
    """Exact in distribution, not token for token: the same chi-square."""
    stat, dof, critical = check(rejection_counts(RUNS_DECODER), RUNS_DECODER, REJECTION[2])
    print(f"rejection {REJECTION[0]}: chi2 {stat:.1f}, {dof} dof, threshold {critical:.1f}")
    assert dof >= 8 and stat < critical, f"rejection: chi2 {stat:.1f} with {dof} degrees of freedom"


def test_a_wrong_residual_fails_the_rejection_test(monkeypatch):
    """After a rejection, p again instead of norm((p - q)+): the statistic exceeds twice its threshold."""
    monkeypatch.setattr(device_sampling, "residual", lambda p, q: p)
    stat, dof, critical = check(rejection_counts(RUNS_DECODER), RUNS_DECODER, REJECTION[2])
    print(f"wrong residual: chi2 {stat:.1f}, {dof} dof, threshold {critical:.1f}")
    assert stat > 2 * critical, f"a wrong residual went unnoticed: chi2 {stat:.1f}, {dof} dof"


# --- wrong variants -------------------------------------------------------------------------------------
#: the engine's warpers (the wrong variants below replace them)
ENGINE_WARP = device_sampling.warp


def temperature_last(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """The warpers with temperature applied after top-k and top-p (which then cut the untempered p)."""
    untempered = ENGINE_WARP(logits, dataclasses.replace(cfg, temperature=1.0))
    return untempered / cfg.temperature


def unwarped(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """No warper at all: the Gumbel-max draw on the raw logits."""
    return logits.float()


@pytest.mark.parametrize("variant,setting,runs", [(temperature_last, "top_p", RUNS_DECODER),
                                                  (unwarped, "top_k", RUNS_DECODER),
                                                  (unwarped, "temperature", RUNS_WRONG)],
                         ids=["temperature_after_top_p", "unwarped-top_k", "unwarped-temperature"])
def test_wrong_warpers_fail_the_same_test(variant, setting, runs, monkeypatch):
    """AR drawing from a wrongly warped p: the statistic exceeds its threshold twice over or more (a
    draw outside top-k or top-p makes it infinite)."""
    monkeypatch.setattr(device_sampling, "warp", variant)
    stat, dof, critical = check(sample("ar", None, SETTINGS[setting], runs), runs, setting)
    print(f"{variant.__name__} {setting}: chi2 {stat:.1f}, {dof} dof, threshold {critical:.1f}")
    assert stat > 2 * critical, f"{variant.__name__} went unnoticed: chi2 {stat:.1f}, {dof} dof"


def one_noise_row(self, first: int, count: int) -> torch.Tensor:
    """NoiseStream.rows with every depth given the noise of the first position (the root's child)."""
    return self.row(first).expand(count, -1)


def test_a_tree_whose_nodes_share_one_noise_row_fails_the_same_test(monkeypatch):
    """Each node's token must be drawn with the noise of the position it fills: with the root's row at
    every depth the second token reuses the first token's Gumbel vector whenever a drafted child is
    accepted. AR, one node per step, cannot see this mistake (its runs stay seeded AR's); a tree can."""
    name, method, config, setting, noise = DECODERS[2]  # the fixed tree, shared draft noise, top-k
    ar = sample("ar", None, SETTINGS[setting], 30)
    monkeypatch.setattr(device_sampling.NoiseStream, "rows", one_noise_row)
    assert sample("ar", None, SETTINGS[setting], 30) == ar  # AR's draws are untouched by the mistake
    cfg = dataclasses.replace(SETTINGS[setting], draft_noise=noise)
    stat, dof, critical = check(sample(method, config, cfg, RUNS_DECODER), RUNS_DECODER, setting)
    print(f"one noise row, {name}: chi2 {stat:.1f}, {dof} dof, threshold {critical:.1f}")
    assert stat > 5 * critical, f"one noise row went unnoticed in {name}: chi2 {stat:.1f}, {dof} dof"


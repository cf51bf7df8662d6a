"""Speculative *sampling*, torch-free: the settings (:class:`SamplingConfig`), the target's warped
distribution, the counter-based Gumbel noise, and the two verification rules (``match``: the
target's seeded Gumbel-max draw, optionally shared with the drafts; ``rejection``: recursive rejection
sampling) as the numpy reference that :mod:`dynatree_core.runtime.sampling` is tested against.
Each rule's argument sits with its code (:class:`SamplingConfig`, :func:`gumbel_max`,
:func:`coupled_scores`, :func:`recursive_rejection`); docs/engine.md ("Speculative sampling") has it all.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

#: the verification rules under sampling
VERIFY_RULES: tuple[str, ...] = ("match", "rejection")
#: how drafts are ranked under ``match`` (:attr:`SamplingConfig.draft_noise`)
DRAFT_NOISE: tuple[str, ...] = ("shared", "none")
#: the smallest temperature > 0 (below it float32 logits / T overflow; 0 is greedy)
MIN_TEMPERATURE = 1e-6


@dataclass(frozen=True)
class SamplingConfig:
    """How the target's tokens are chosen: greedy (``temperature=0``) or sampled from the warped
    distribution p (temperature T, then top-k K, then top-p P, as Hugging Face orders them), with a
    ``seed`` and a ``verify`` rule.

    ``verify="match"`` (the default when sampling): at every verified node the target's token is its
    seeded Gumbel-max draw from that node's p with the noise of the position it fills (:func:`gumbel_max`);
    the walk follows the child carrying it, else it is the bonus. Along the accepted path the contexts
    are AR's, so a run emits exactly seeded AR's tokens. With deterministic drafts no lossless rule can
    accept more than p(children) at a node, and this accepts exactly when the draw is a child.
    ``verify="rejection"``: sampled drafts and :func:`recursive_rejection`, exact in distribution.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    #: None: 0 when sampling; must stay None at temperature 0, where nothing is drawn
    seed: int | None = None
    #: None: ``"match"`` when sampling; must stay None at temperature 0, where it means nothing
    verify: str | None = None
    #: how drafts are ranked under ``match``: ``"shared"`` (the default there), by the draft's warped
    #: log q plus the Gumbel noise seeded AR uses at the position (:func:`coupled_scores`), or ``"none"``,
    #: by log q alone (the top-B); None elsewhere (rejection samples its drafts; greedy has no noise)
    draft_noise: str | None = None

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {t!r}")
        p = self.top_p
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1] (1: off), got {p!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0: off), got {self.top_k!r}")
        if 0 < t < MIN_TEMPERATURE:
            raise ValueError(f"temperature must be 0 (greedy) or >= {MIN_TEMPERATURE:g}, got {t!r}: below it "
                             "float32 logits / T overflow and the draw is the argmax anyway; pass 0 for greedy")
        s = self.seed
        if s is not None and (isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < 2 ** 63):
            raise ValueError(f"seed must be an integer in [0, 2**63), got {s!r}")
        if self.verify is not None and self.verify not in VERIFY_RULES:
            raise ValueError(f"verify must be one of {VERIFY_RULES}, got {self.verify!r}")
        if self.draft_noise is not None and self.draft_noise not in DRAFT_NOISE:
            raise ValueError(f"draft_noise must be one of {DRAFT_NOISE}, got {self.draft_noise!r}")
        if t == 0:
            for name in ("verify", "seed", "draft_noise"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name}={getattr(self, name)!r} applies only when sampling (temperature > 0); "
                                     "at temperature 0 every decoder is greedy and emits the target's tokens exactly")
        if t == 0 and (self.top_p != 1.0 or self.top_k != 0):
            raise ValueError("top_p and top_k apply only when sampling (temperature > 0); at temperature 0 "
                             "decoding is greedy")
        if self.draft_noise is not None and self.verify == "rejection":
            raise ValueError(f"draft_noise={self.draft_noise!r} applies only under verify='match': rejection "
                             "sampling draws its drafts from q with noise of its own (the coins must be "
                             "independent of the candidates)")
        object.__setattr__(self, "temperature", float(t))
        object.__setattr__(self, "top_p", float(p))
        if t > 0 and s is None:
            object.__setattr__(self, "seed", 0)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def rule(self) -> str | None:
        """The verification rule in force: None when greedy, else ``verify`` (default ``"match"``)."""
        return None if self.greedy else (self.verify or "match")

    @property
    def noise(self) -> str | None:
        """How the drafts are ranked in force: ``"shared"`` or ``"none"`` under ``match`` (default
        ``"shared"``), None when greedy or under ``rejection``."""
        return (self.draft_noise or "shared") if self.rule == "match" else None

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "verify": self.rule, "draft_noise": self.noise}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "SamplingConfig":
        if not d:
            return cls()
        d = dict(d)
        if float(d.get("temperature", 0.0)) == 0.0:
            d.update(verify=None, seed=None, draft_noise=None)
        elif "draft_noise" not in d and (d.get("verify") or "match") == "match":
            d["draft_noise"] = "none"  # written before shared noise existed: the drafts were the top-B
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})

    def label(self) -> str:
        """A short description for tables and titles."""
        if self.greedy:
            return "greedy"
        parts = [f"T={self.temperature:g}"] + ([f"top-p={self.top_p:g}"] if self.top_p < 1 else []) + (
            [f"top-k={self.top_k}"] if self.top_k else [])
        return ", ".join(parts) + f", {self.rule}" + (", independent drafts" if self.noise == "none" else "")


GREEDY = SamplingConfig()


def sampling_config(sampling: SamplingConfig | None = None, **settings: Any) -> SamplingConfig:
    """A :class:`SamplingConfig` from an object or keyword settings (``temperature``, ``top_p``,
    ``top_k``, ``seed``, ``verify``, ``draft_noise``; None values are left at their defaults), not both."""
    given = {k: v for k, v in settings.items() if v is not None}
    if sampling is not None:
        if given:
            raise ValueError(f"pass sampling= or {sorted(given)}, not both")
        if not isinstance(sampling, SamplingConfig):
            raise TypeError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
        return sampling
    return SamplingConfig(**given) if given else GREEDY


# --- the seeded stream ----------------------------------------------------------------------------
M32 = 0xFFFFFFFF
#: constants of the 32-bit mixer (Wellons' "lowbias32") and of the stream's second round
MIX_A, MIX_B, ROUND = 0x7FEB352D, 0x846CA68B, 0x68E31DA4


def mul32(x: Any, c: int) -> Any:
    """(x * c) mod 2^32 for x in [0, 2^32), in halves, so that no 64-bit product overflows (the device
    code computes it the same way in int64: the reference and the device agree to the bit)."""
    return ((x & 0xFFFF) * c + ((((x >> 16) * c) & 0xFFFF) << 16)) & M32


def mix32(x: Any) -> Any:
    """A 32-bit integer mixer (works on Python ints and integer arrays alike)."""
    x = x ^ (x >> 16)
    x = mul32(x, MIX_A)
    x = x ^ (x >> 15)
    x = mul32(x, MIX_B)
    return x ^ (x >> 16)


def position_key(seed: int, position: int) -> int:
    """The stream's key for absolute ``position`` under ``seed`` (both seed halves mixed in)."""
    return mix32(mix32((seed & M32) ^ mix32(seed >> 32)) ^ (position & M32))


def gumbel_noise(seed: int, position: int, vocab: int) -> np.ndarray:
    """g(seed, position, x) for x = 0 .. vocab - 1: Gumbel noise from a 53-bit uniform per token
    (float64). :class:`dynatree_core.runtime.sampling.NoiseStream` computes the same on the device."""
    x = np.arange(vocab, dtype=np.int64)
    h1 = mix32(position_key(seed, position) ^ mix32(x))
    h2 = mix32(h1 ^ ROUND)
    u = ((h1 << 21) ^ (h2 >> 11)).astype(np.float64) + 0.5
    return -np.log(-np.log(u / float(1 << 53)))


# --- the reference (numpy) -----------------------------------------------------------------------
def warp_logits(logits: Sequence[float], cfg: SamplingConfig) -> np.ndarray:
    """Temperature, top-k, top-p on one logit vector, -inf outside: Hugging Face's
    ``generate(do_sample=True, temperature=T, top_k=K, top_p=P)`` order
    (``transformers.generation.utils._get_logits_processor``).

    1. logits / T; 2. top-k (``top_k`` > 0): below the k-th largest -> -inf (ties at the k-th kept);
    3. top-p (``top_p`` < 1): sort ascending, softmax, cumulative sum, tokens whose cumulative
    probability is <= 1 - P -> -inf (the most probable always stays). ``top_k=0`` and ``top_p=1``
    switch a step off (HF's generation config defaults ``top_k`` to 50: pass it when comparing).
    """
    x = np.asarray(logits, dtype=np.float64) / cfg.temperature
    if cfg.top_k:
        kth = np.sort(x)[-min(cfg.top_k, x.size)]
        x = np.where(x < kth, -np.inf, x)
    if cfg.top_p < 1.0:
        order = np.argsort(x, kind="stable")
        probs = np.exp(x[order] - x.max())
        cum = np.cumsum(probs / probs.sum())
        drop = cum <= 1.0 - cfg.top_p
        drop[-1] = False
        x = x.copy()
        x[order[drop]] = -np.inf
    return x


def warp_probs(logits: Sequence[float], cfg: SamplingConfig) -> np.ndarray:
    """p: the softmax of :func:`warp_logits`."""
    x = warp_logits(logits, cfg)
    e = np.exp(x - x.max())
    return e / e.sum()


def gumbel_max(logits: Sequence[float], cfg: SamplingConfig, position: int) -> int:
    """Seeded AR's token at ``position``: argmax of the warped logits (log p up to a constant) plus
    the position's Gumbel noise g(seed, position, .) (:func:`gumbel_noise`: counter-based, no state).

    The largest of log p + Gumbel noise is a draw from p, and the token depends on the seed, the
    position and p alone, whatever ran before. Not inverse CDF with one uniform per position: a tree's
    verify forward and AR's one-token forward give logits that differ in the last bits, and an inverse
    CDF over a large vocabulary sums those differences over every token before the drawn one (on the
    default pair about one draw in twenty flipped at temperature 1); Gumbel-max flips only if the two
    largest perturbed scores are within those last bits of each other.
    """
    x = warp_logits(logits, cfg)
    return int(np.argmax(x + gumbel_noise(cfg.seed, position, x.size)))


def inverse_cdf(p: Sequence[float], u: float) -> int:
    """The token whose cumulative-probability interval holds ``u`` (token-id order)."""
    cum = np.cumsum(np.asarray(p, dtype=np.float64))
    return int(min(np.searchsorted(cum, u * cum[-1], side="right"), len(cum) - 1))


@dataclass
class RejectionStep:
    """One candidate of :func:`recursive_rejection`: its token, p_i(x) and q_i(x) at its turn, the
    coin, and whether it was accepted."""

    token: int
    p: float
    q: float
    coin: float
    accepted: bool


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """norm((p - q)+), or p itself where p <= q everywhere (then no rejection could have happened)."""
    r = np.maximum(p - q, 0.0)
    s = r.sum()
    return r / s if s > 0 else p


def recursive_rejection(p: Sequence[float], q: Sequence[float], candidates: Sequence[int], coins: Sequence[float],
                        u: float) -> tuple[int, list[RejectionStep], np.ndarray]:
    """Recursive rejection sampling without replacement at one node: the emitted token, the steps
    taken, and the residual the last step left (the token was drawn from it by ``u`` if no candidate
    was accepted). ``candidates`` are a draw without replacement from ``q`` in draw order.

    Jeon et al. 2024 (the without-replacement form of SpecInfer's multi-step speculative sampling):
    candidate x_i is accepted with probability min(1, p_i(x_i) / q_i(x_i)); on rejection
    p_{i+1} = norm((p_i - q_i)+) and q_{i+1} = q_i without x_i, renormalised; if every candidate is
    rejected the token is drawn from the last residual. Each step emits a token distributed as p_i
    whatever q_i is (Leviathan et al.'s lemma) and the next candidate is a draw from q_{i+1} given the
    rejected ones, so the token is distributed exactly as p. Without replacement because siblings must
    carry distinct tokens, and it accepts more than the with-replacement form; one candidate is
    Leviathan et al.'s rule.
    """
    p_i, q_i = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    steps: list[RejectionStep] = []
    for x, c in zip(candidates, coins):
        px, qx = float(p_i[x]), float(q_i[x])
        if qx <= 0:  # not a draw from q (a list padded past q's support): it cannot be accepted
            continue
        ok = c * qx < px
        steps.append(RejectionStep(int(x), px, qx, float(c), ok))
        if ok:
            return int(x), steps, p_i
        p_i = residual(p_i, q_i)
        q_i = q_i.copy()
        q_i[x] = 0.0
        total = q_i.sum()
        q_i = q_i / total if total > 0 else q_i
    return inverse_cdf(p_i, u), steps, p_i


# --- shared draft noise (the reference) -------------------------------------------------------------
#: beta_0 of :func:`coupling_scale`: the draft's logits modelled as the target's plus Gumbel noise of this
#: scale. Fitted on training text with the default pair (docs/bench/2026-11-28-shared-noise/fit.json:
#: the best single beta was about 1.2 at temperature 0.7 and 1.0 at 1.0; beta_0 / T puts the two within
#: 0.06 of their observed agreement)
COUPLING_SCALE = 1.0


def coupling_scale(temperature: float) -> float:
    """beta at ``temperature`` T: a mismatch of the logits of scale beta_0 is one of beta_0 / T in the warped
    log-probabilities (logits / T)."""
    return COUPLING_SCALE / temperature


def coupled_scores(log_q: Sequence[float], seed: int, position: int) -> np.ndarray:
    """The draft's perturbed scores at ``position``: its warped log q plus the Gumbel noise seeded AR
    adds to log p there (-inf stays -inf). Their argmax is the draft's coupled sample.

    Shared draft noise (``draft_noise="shared"``): the target's token at t is argmax(log p + g(seed, t, .))
    and anyone holding the seed can compute g, so drafts ranked by these scores put the draft's
    Gumbel-max sample *coupled* to the target's draw first, the siblings in perturbed order. The two
    argmaxes coincide with probability :func:`coupled_agreement` >= (1 - TV) / (1 + TV) (Daliri, Musco
    and Suresh 2024), where the top-B of log q alone reaches p(children) at best; the output is
    untouched (the seed fixes the target's draw). The tree then reads :func:`coupled_confidence`, not q.
    """
    x = np.asarray(log_q, dtype=np.float64)
    return x + gumbel_noise(seed, position, x.size)


def coupled_agreement(p: Sequence[float], q: Sequence[float]) -> float:
    """P(argmax(log p + g) = argmax(log q + g)) for one Gumbel vector g shared by both: the sum over
    tokens x in both supports of 1 / sum_y max(p_y / p_x, q_y / q_x)."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    both = np.flatnonzero((p > 0) & (q > 0))
    ratio = np.maximum(p[None, :] / p[both, None], q[None, :] / q[both, None])
    return float((1.0 / ratio.sum(-1)).sum())


def total_variation(p: Sequence[float], q: Sequence[float]) -> float:
    """TV(p, q) = sum |p - q| / 2."""
    return float(np.abs(np.asarray(p, dtype=np.float64) - np.asarray(q, dtype=np.float64)).sum() / 2)


def coupled_confidence(scores: Sequence[float], scale: float) -> np.ndarray:
    """The probability that the target's perturbed argmax lands on each token, from the draft's
    perturbed ``scores``: softmax(scores / scale) (if log p = log q + Gumbel noise of that scale,
    exactly so; at scale -> 0 the draft is trusted to be the target). The engine's scale is
    :func:`coupling_scale` of the temperature."""
    x = np.asarray(scores, dtype=np.float64) / scale
    e = np.exp(x - x.max())
    return e / e.sum()

"""Shared draft noise's coupling: two Gumbel-max draws with one noise vector agree as the closed form says.

For p and q over a small vocabulary, argmax(log p + g) and argmax(log q + g) with the same Gumbel
vector g (the seeded stream's row of a position, :func:`gumbel_noise`) coincide with probability
``coupled_agreement(p, q)`` = sum over x of 1 / sum over y of max(p_y / p_x, q_y / q_x) (Daliri,
Musco and Suresh 2024), which lies in [(1 - TV) / (1 + TV), 1 - TV]. Over N positions' noise the
empirical agreement is a binomial mean: it must lie within the two-sided normal band of
family-wise alpha = 1e-4 (Bonferroni over the cases) around the closed form, or equal it exactly
where the closed form is 0 or 1. The band can fail: independent noise for p and q (agreement
sum_x p_x q_x) and the maximal coupling's 1 - TV in place of the closed form both fall outside it.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from dynatree_core.policy.sampling import (coupled_agreement, coupled_scores, gumbel_noise, total_variation)

#: positions of noise per case, the family-wise alpha and the seed of the stream
N, ALPHA, SEED = 200_000, 1e-4, 11


def _norm(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / x.sum()


_rng = np.random.default_rng(5)
CASES: dict[str, tuple[np.ndarray, np.ndarray]] = {
    "dirichlet-v2": (_rng.dirichlet([1.0] * 2), _rng.dirichlet([1.0] * 2)),
    "dirichlet-v3": (_rng.dirichlet([1.0] * 3), _rng.dirichlet([1.0] * 3)),
    "dirichlet-v5": (_rng.dirichlet([0.5] * 5), _rng.dirichlet([0.5] * 5)),
    "dirichlet-v8": (_rng.dirichlet([1.0] * 8), _rng.dirichlet([1.0] * 8)),
    "peaked-vs-flat": (_norm([20, 1, 1, 1, 1]), _norm([1, 1, 1, 1, 1])),
    "a-permutation": (_norm([5, 3, 1, 0.5]), _norm([0.5, 1, 3, 5])),
    "disjoint-ish": (_norm([6, 3, 1, 0, 0]), _norm([0, 0, 1, 3, 6])),  # they share token 2 only
    "zeros-in-p": (_norm([4, 0, 2, 0, 1, 1]), _norm([1, 1, 1, 1, 1, 1])),
    "equal": (_norm([3, 2, 1, 1]), _norm([3, 2, 1, 1])),
    "disjoint": (_norm([1, 2, 0, 0]), _norm([0, 0, 2, 1])),
}
#: the two-sided normal quantile of the band, Bonferroni over the cases
Z = NormalDist().inv_cdf(1 - ALPHA / (2 * len(CASES)))


def noise(vocab: int, first: int = 0) -> np.ndarray:
    """[N, vocab]: the stream's rows of positions first .. first + N - 1 (one vectorised call)."""
    return gumbel_noise(SEED, np.arange(first, first + N)[:, None], vocab)


def agreement(p: np.ndarray, q: np.ndarray, g_p: np.ndarray, g_q: np.ndarray) -> float:
    """The empirical P(argmax(log p + g_p) = argmax(log q + g_q)) over the rows."""
    with np.errstate(divide="ignore"):
        lp, lq = np.log(p), np.log(q)
    return float(np.mean(np.argmax(lp + g_p, -1) == np.argmax(lq + g_q, -1)))


def in_band(observed: float, expected: float) -> bool:
    """Whether ``observed`` (a mean of N Bernoulli(expected)) is within the test's band: exactly
    ``expected`` where that is 0 or 1, else |observed - expected| <= Z * sd (+ a continuity term)."""
    if expected in (0.0, 1.0):
        return observed == expected
    return abs(observed - expected) <= Z * math.sqrt(expected * (1 - expected) / N) + 0.5 / N


def test_the_vectorised_noise_is_the_streams_rows():
    g = noise(7, first=40)
    for t in (0, 1, 123, N - 1):
        assert np.array_equal(g[t], gumbel_noise(SEED, 40 + t, 7))


@pytest.mark.parametrize("name", list(CASES))
def test_shared_noise_agreement_matches_the_closed_form(name):
    p, q = CASES[name]
    expected = coupled_agreement(p, q)
    if expected not in (0.0, 1.0):  # the normal band is accurate: many expected agreements and disagreements
        assert N * expected * (1 - expected) > 1000
    g = noise(p.size)
    observed = agreement(p, q, g, g)
    assert in_band(observed, expected), f"{name}: empirical {observed:.5f}, closed form {expected:.5f}"
    # the draft's coupled sample is the argmax of coupled_scores (log q + the position's noise)
    with np.errstate(divide="ignore"):
        lq = np.log(q)
    assert all(np.argmax(coupled_scores(lq, SEED, t)) == np.argmax(lq + g[t]) for t in range(50))


@pytest.mark.parametrize("name", list(CASES))
def test_independent_noise_or_the_maximal_coupling_falls_outside_the_band(name):
    """The band has power: the same statistic rejects a wrong noise and a wrong closed form."""
    p, q = CASES[name]
    expected, tv = coupled_agreement(p, q), total_variation(p, q)
    g = noise(p.size)
    independent = agreement(p, q, g, noise(q.size, first=N))  # the draft's noise from other positions
    assert abs(independent - float(p @ q)) < 0.01  # what independent draws agree on
    if abs(float(p @ q) - expected) > 0.02:  # wherever the two differ (not for disjoint supports, say)
        assert not in_band(independent, expected), f"{name}: independent noise {independent:.5f} went unnoticed"
    observed = agreement(p, q, g, g)
    if 1 - tv - expected > 0.01:  # the maximal coupling reaches 1 - TV; Gumbel coupling does not
        assert not in_band(observed, 1 - tv), f"{name}: 1 - TV = {1 - tv:.5f} fits {observed:.5f}"


def test_the_closed_form_lies_between_its_bounds():
    """(1 - TV) / (1 + TV) <= agreement <= 1 - TV over many random pairs (supports with zeros too),
    with equality at p == q (1) and at disjoint supports (0)."""
    rng = np.random.default_rng(0)
    gaps = []
    for trial in range(2000):
        v = int(rng.integers(2, 12))
        p, q = rng.dirichlet([0.3 + trial % 3] * v), rng.dirichlet([0.3 + trial % 5] * v)
        if trial % 4 == 0:  # some zeros, never all
            p = _norm(p * (rng.random(v) > 0.3) + np.eye(v)[0] * 1e-3)
            q = _norm(q * (rng.random(v) > 0.3) + np.eye(v)[-1] * 1e-3)
        a, tv = coupled_agreement(p, q), total_variation(p, q)
        assert (1 - tv) / (1 + tv) - 1e-12 <= a <= 1 - tv + 1e-12, (p, q, a, tv)
        gaps.append((1 - tv) - a)
    assert max(gaps) > 0.05  # the upper bound is not reached in general
    p = rng.dirichlet([1.0] * 6)
    assert coupled_agreement(p, p) == pytest.approx(1.0) and total_variation(p, p) == 0.0
    assert coupled_agreement([0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5]) == 0.0


def test_the_closed_form_by_hand():
    """Two tokens, p = (a, 1 - a), q = (b, 1 - b), b <= a: the sum of 1 / (1 + max(p_y / p_x, q_y / q_x))
    is b + (1 - a) = 1 - TV (with two tokens the Gumbel coupling is a maximal one)."""
    for a, b in [(0.7, 0.4), (0.5, 0.5), (0.9, 0.1), (0.3, 0.6)]:
        p, q = np.array([a, 1 - a]), np.array([b, 1 - b])
        want = sum(1 / (1 + max(p[1 - x] / p[x], q[1 - x] / q[x])) for x in (0, 1))
        assert coupled_agreement(p, q) == pytest.approx(want, rel=1e-12)
        assert want == pytest.approx(1 - abs(a - b), rel=1e-12)
